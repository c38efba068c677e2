"""The storage contract: what every :class:`~portable.storage.Bucket` provider must do.

Use it by subclassing :class:`StorageContract` and providing one fixture::

    class TestMyStore(StorageContract):
        xfail = {"test_key_and_prefix_coexist": "a file system path cannot be a file and a folder"}

        @pytest.fixture
        def bucket_url(self, unique_name):
            return f"mystore://shared-bucket/{unique_name}"

Fixture contract:
    ``bucket_url`` returns the URL of an existing bucket (or a prefix in one)
    that is empty when the test starts and that the test may fill. A fresh
    prefix per test (``unique_name``) keeps tests independent.

Two faces: every test runs twice, ``test_x[sync]`` on :class:`~portable.storage.Bucket`
and ``test_x[async]`` on :class:`portable.aio.AsyncBucket` (through
:func:`portable.testing.faces.blocking`, so one test body serves both). Set
``faces = ("sync",)`` on a subclass to run one face; an ``xfail`` entry applies
to both (it is looked up by the test's name).

The suite opens the URL with a short retry policy and no circuit breaker, so
one flaky response does not hide the behaviour under test. Tests of optional
features (signed URLs, conditional streaming writes) are skipped with the
capability's name when the provider does not claim it; a provider that claims
a capability and fails its test fails the suite.
"""

from __future__ import annotations

import concurrent.futures
import io
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from ..aio._bucket import AsyncBucket
from ..config import Profile
from ..errors import (
    AlreadyExists,
    InvalidArgument,
    InvalidKey,
    NotFound,
    PreconditionFailed,
    Unsupported,
)
from ..resilience import ResiliencePolicy, RetryPolicy
from ..storage import Bucket, open_bucket
from .faces import blocking

__all__ = ["StorageContract", "contract_profile"]

#: the faces a suite runs on: the sync types and their portable.aio twins
FACES = ("sync", "async")

BAD_KEYS = [
    "",
    "/leading",
    "trailing/",
    "a//b",
    "./a",
    "a/../b",
    "..",
    "a/.",
    "nul\x00byte",
    "new\nline",
    "\ud800surrogate",
]


def contract_profile(url: str) -> Profile:
    """A profile for contract tests: a few quick retries, no breaker, no requirements."""
    return Profile(
        name="contract",
        storage=url,
        queue="mem://contract",
        jobs="local://./.portable/jobs",
        resilience=ResiliencePolicy(retry=RetryPolicy(max_attempts=3, initial_backoff=0.05, max_backoff=0.5), breaker=None),
    )


class StorageContract:
    """Mix-in with the storage contract tests. Provide the ``bucket_url`` fixture."""

    xfail: dict[str, str] = {}
    #: the faces each test runs on (the ``face`` parameter, applied by portable's pytest plugin)
    faces: tuple[str, ...] = FACES

    @pytest.fixture
    def face(self, request: pytest.FixtureRequest) -> str:
        """``"sync"`` or ``"async"``: which face this run of a test goes through."""
        return str(getattr(request, "param", "sync"))

    @pytest.fixture
    def bucket(self, bucket_url: str, face: str) -> Iterator[Bucket]:
        b = open_bucket(bucket_url, profile=contract_profile(bucket_url))
        if face == "sync":
            try:
                yield b
            finally:
                b.close()
            return
        twin = blocking(AsyncBucket.from_sync(b))
        try:
            yield twin
        finally:
            twin.aclose()

    @staticmethod
    def part_size(bucket: Bucket) -> int:
        return max(bucket.capabilities.min_part_bytes, 256 * 1024)

    # -- whole objects ------------------------------------------------------
    def test_put_then_get_returns_the_bytes(self, bucket: Bucket) -> None:
        bucket.put("hello.txt", b"hello world")
        assert bucket.get("hello.txt") == b"hello world"

    def test_put_returns_the_etag_head_reports(self, bucket: Bucket) -> None:
        etag = bucket.put("e.bin", b"abc")
        assert etag
        assert bucket.head("e.bin").etag == etag

    def test_get_of_a_missing_key_raises_not_found(self, bucket: Bucket) -> None:
        with pytest.raises(NotFound) as info:
            bucket.get("missing/key.txt")
        assert info.value.__cause__ is not None or info.value.provider

    def test_head_of_a_missing_key_raises_not_found(self, bucket: Bucket) -> None:
        with pytest.raises(NotFound):
            bucket.head("missing.txt")

    def test_head_reports_size_type_and_metadata(self, bucket: Bucket) -> None:
        bucket.put("m.json", b"{}" * 10, content_type="application/json", metadata={"Owner": "ops", "run_id": "7"})
        info = bucket.head("m.json")
        assert info.key == "m.json"
        assert info.size == 20
        assert info.content_type == "application/json"
        assert dict(info.metadata) == {"owner": "ops", "run_id": "7"}
        assert info.modified is not None

    def test_overwrite_replaces_content_and_etag(self, bucket: Bucket) -> None:
        first = bucket.put("o.txt", b"one")
        second = bucket.put("o.txt", b"two!")
        assert bucket.get("o.txt") == b"two!"
        assert first != second
        assert bucket.head("o.txt").size == 4

    def test_overwrite_without_metadata_clears_it(self, bucket: Bucket) -> None:
        bucket.put("md.txt", b"1", metadata={"a": "1"}, content_type="text/plain")
        bucket.put("md.txt", b"2")
        assert dict(bucket.head("md.txt").metadata) == {}

    def test_empty_object_round_trips(self, bucket: Bucket) -> None:
        bucket.put("empty", b"")
        assert bucket.get("empty") == b""
        assert bucket.head("empty").size == 0

    def test_every_byte_value_round_trips(self, bucket: Bucket) -> None:
        data = bytes(range(256)) * 64
        bucket.put("bytes.bin", data)
        assert bucket.get("bytes.bin") == data

    def test_bytearray_and_memoryview_are_accepted(self, bucket: Bucket) -> None:
        bucket.put("ba", bytearray(b"xy"))
        bucket.put("mv", memoryview(b"zw"))
        assert bucket.get("ba") + bucket.get("mv") == b"xyzw"

    def test_unicode_and_punctuation_keys_round_trip(self, bucket: Bucket) -> None:
        keys = ["dir/naïve café.txt", "dir/日本語/ファイル", "dir/a+b=c&d@e,f;g", "dir/spaces and %20"]
        for i, key in enumerate(keys):
            bucket.put(key, str(i).encode())
        for i, key in enumerate(keys):
            assert bucket.get(key) == str(i).encode()
        assert sorted(e.key for e in bucket.list("dir/")) == sorted(keys)

    def test_key_and_prefix_coexist(self, bucket: Bucket) -> None:
        bucket.put("node", b"leaf")
        bucket.put("node/child", b"child")
        assert bucket.get("node") == b"leaf"
        assert bucket.get("node/child") == b"child"

    def test_exists(self, bucket: Bucket) -> None:
        assert not bucket.exists("x")
        bucket.put("x", b"1")
        assert bucket.exists("x")

    def test_delete_removes_the_object(self, bucket: Bucket) -> None:
        bucket.put("d.txt", b"1")
        bucket.delete("d.txt")
        assert not bucket.exists("d.txt")
        with pytest.raises(NotFound):
            bucket.get("d.txt")

    def test_delete_of_a_missing_key_is_not_an_error(self, bucket: Bucket) -> None:
        bucket.delete("never/existed")  # raises nothing
        assert not bucket.exists("never/existed")

    def test_copy_copies_content_and_type(self, bucket: Bucket) -> None:
        bucket.put("src.txt", b"payload", content_type="text/plain", metadata={"k": "v"})
        etag = bucket.copy("src.txt", "dst/copy.txt")
        assert bucket.get("dst/copy.txt") == b"payload"
        info = bucket.head("dst/copy.txt")
        assert info.content_type == "text/plain"
        assert dict(info.metadata) == {"k": "v"}
        assert etag is None or etag == info.etag
        assert bucket.get("src.txt") == b"payload"

    def test_copy_of_a_missing_source_raises_not_found(self, bucket: Bucket) -> None:
        with pytest.raises(NotFound):
            bucket.copy("nope", "dst")
        assert not bucket.exists("dst")

    # -- conditional writes ---------------------------------------------------
    def test_create_only_write_succeeds_when_absent(self, bucket: Bucket) -> None:
        assert bucket.put("c.txt", b"first", if_none_match="*")
        assert bucket.get("c.txt") == b"first"

    def test_create_only_write_raises_already_exists(self, bucket: Bucket) -> None:
        bucket.put("c.txt", b"first")
        with pytest.raises(AlreadyExists):
            bucket.put("c.txt", b"second", if_none_match="*")
        assert bucket.get("c.txt") == b"first"

    def test_if_match_with_the_current_etag_writes(self, bucket: Bucket) -> None:
        etag = bucket.put("cas.txt", b"v1")
        new = bucket.put("cas.txt", b"v2", if_match=etag)
        assert bucket.get("cas.txt") == b"v2"
        assert new != etag

    def test_if_match_with_a_stale_etag_raises_precondition_failed(self, bucket: Bucket) -> None:
        stale = bucket.put("cas.txt", b"v1")
        bucket.put("cas.txt", b"v2")
        with pytest.raises(PreconditionFailed):
            bucket.put("cas.txt", b"v3", if_match=stale)
        assert bucket.get("cas.txt") == b"v2"

    def test_if_match_on_a_missing_key_fails(self, bucket: Bucket) -> None:
        with pytest.raises((PreconditionFailed, NotFound)):
            bucket.put("absent.txt", b"v", if_match='"0123456789abcdef"')
        assert not bucket.exists("absent.txt")

    def test_racing_create_only_writes_have_one_winner(self, bucket: Bucket) -> None:
        def attempt(i: int) -> int | None:
            try:
                bucket.put("race.txt", str(i).encode(), if_none_match="*")
                return i
            except AlreadyExists:
                return None

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            winners = [w for w in pool.map(attempt, range(8)) if w is not None]
        assert len(winners) == 1
        assert bucket.get("race.txt") == str(winners[0]).encode()

    def test_racing_compare_and_swap_has_one_winner(self, bucket: Bucket) -> None:
        etag = bucket.put("counter", b"0")

        def attempt(i: int) -> int | None:
            try:
                bucket.put("counter", str(i).encode(), if_match=etag)
                return i
            except PreconditionFailed:
                return None

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            winners = [w for w in pool.map(attempt, range(1, 9)) if w is not None]
        assert len(winners) == 1
        assert bucket.get("counter") == str(winners[0]).encode()

    # -- ranges -----------------------------------------------------------------
    def test_get_range_returns_the_slice(self, bucket: Bucket) -> None:
        bucket.put("r.bin", b"0123456789")
        assert bucket.get_range("r.bin", 2, 5) == b"234"

    def test_get_range_without_end_reads_to_the_end(self, bucket: Bucket) -> None:
        bucket.put("r.bin", b"0123456789")
        assert bucket.get_range("r.bin", 7) == b"789"

    def test_get_range_past_the_end_is_clipped(self, bucket: Bucket) -> None:
        bucket.put("r.bin", b"0123456789")
        assert bucket.get_range("r.bin", 8, 100) == b"89"

    def test_get_range_starting_at_the_size_is_empty(self, bucket: Bucket) -> None:
        bucket.put("r.bin", b"0123456789")
        assert bucket.get_range("r.bin", 10) == b""
        assert bucket.get_range("r.bin", 50, 60) == b""

    def test_get_range_of_a_missing_key_raises_not_found(self, bucket: Bucket) -> None:
        with pytest.raises(NotFound):
            bucket.get_range("missing", 0, 3)

    def test_get_range_rejects_bad_bounds(self, bucket: Bucket) -> None:
        with pytest.raises(InvalidArgument):
            bucket.get_range("r.bin", -1, 3)
        with pytest.raises(InvalidArgument):
            bucket.get_range("r.bin", 5, 3)

    # -- listing --------------------------------------------------------------
    def test_list_of_an_empty_bucket_is_empty(self, bucket: Bucket) -> None:
        assert list(bucket.list()) == []

    def test_list_is_in_lexical_order(self, bucket: Bucket) -> None:
        keys = ["b", "a/2", "a/10", "a-1", "c/d/e", "B", "a/1"]
        bucket.put_many({k: b"x" for k in keys})
        assert [e.key for e in bucket.list()] == sorted(keys)

    def test_list_reports_size_and_etag(self, bucket: Bucket) -> None:
        etag = bucket.put("sized", b"12345")
        (entry,) = list(bucket.list())
        assert (entry.key, entry.size, entry.is_prefix) == ("sized", 5, False)
        assert entry.etag == etag

    def test_list_with_a_prefix(self, bucket: Bucket) -> None:
        bucket.put_many({"logs/1": b"", "logs/2": b"", "logsx": b"", "other": b""})
        assert [e.key for e in bucket.list("logs/")] == ["logs/1", "logs/2"]
        assert [e.key for e in bucket.list("logs")] == ["logs/1", "logs/2", "logsx"]

    def test_list_pages_through_every_key_once(self, bucket: Bucket) -> None:
        keys = [f"p/{i:03d}" for i in range(23)]
        bucket.put_many({k: b"." for k in keys})
        assert [e.key for e in bucket.list("p/", page_size=5)] == keys

    def test_list_page_tokens_resume_where_the_page_ended(self, bucket: Bucket) -> None:
        keys = [f"t/{i:02d}" for i in range(7)]
        bucket.put_many({k: b"." for k in keys})
        first = bucket.list_page("t/", page_size=3)
        assert [o.key for o in first.objects] == keys[:3]
        assert first.next_token is not None
        second = bucket.list_page("t/", page_size=3, token=first.next_token)
        assert [o.key for o in second.objects] == keys[3:6]
        third = bucket.list_page("t/", page_size=3, token=second.next_token)
        assert [o.key for o in third.objects] == keys[6:]
        assert third.next_token is None

    def test_list_start_after(self, bucket: Bucket) -> None:
        bucket.put_many({k: b"" for k in ["a", "b", "c", "d"]})
        assert [e.key for e in bucket.list(start_after="b")] == ["c", "d"]

    def test_list_with_a_delimiter_folds_prefixes(self, bucket: Bucket) -> None:
        bucket.put_many({k: b"" for k in ["top.txt", "dir1/a", "dir1/b", "dir2/sub/c", "zz"]})
        entries = list(bucket.list(delimiter="/"))
        assert [(e.key, e.is_prefix) for e in entries] == [
            ("dir1/", True),
            ("dir2/", True),
            ("top.txt", False),
            ("zz", False),
        ]

    def test_list_with_a_delimiter_under_a_prefix(self, bucket: Bucket) -> None:
        bucket.put_many({k: b"" for k in ["dir2/sub/c", "dir2/sub/d", "dir2/x", "dir3/y"]})
        entries = list(bucket.list("dir2/", delimiter="/"))
        assert [(e.key, e.is_prefix) for e in entries] == [("dir2/sub/", True), ("dir2/x", False)]

    def test_list_with_a_delimiter_pages_prefixes_once(self, bucket: Bucket) -> None:
        bucket.put_many({f"d{i}/f{j}": b"" for i in range(5) for j in range(3)})
        keys = [e.key for e in bucket.list(delimiter="/", page_size=2)]
        assert keys == [f"d{i}/" for i in range(5)]

    def test_list_rejects_bad_arguments(self, bucket: Bucket) -> None:
        with pytest.raises(InvalidArgument):
            bucket.list_page(page_size=0)
        with pytest.raises(InvalidArgument):
            bucket.list_page(page_size=1001)
        with pytest.raises(InvalidArgument):
            bucket.list_page(delimiter="|")

    # -- streams ----------------------------------------------------------------
    def test_open_write_then_read(self, bucket: Bucket) -> None:
        with bucket.open("s.txt", "wb", content_type="text/plain") as out:
            out.write(b"hello ")
            out.write(b"stream")
        assert bucket.get("s.txt") == b"hello stream"
        assert bucket.head("s.txt").content_type == "text/plain"
        with bucket.open("s.txt") as inp:
            assert inp.read(5) == b"hello"
            assert inp.read() == b" stream"

    def test_a_large_streamed_write_is_uploaded_in_parts(self, bucket: Bucket) -> None:
        part = self.part_size(bucket)
        data = bytes(range(256)) * ((2 * part + 1000) // 256 + 1)
        with bucket.open("big.bin", "wb", part_size=part) as out:
            for i in range(0, len(data), 100_000):
                out.write(data[i : i + 100_000])
        assert bucket.head("big.bin").size == len(data)
        assert bucket.get("big.bin") == data
        assert bucket.get_range("big.bin", part - 10, part + 10) == data[part - 10 : part + 10]

    def test_a_failed_streamed_write_leaves_no_object(self, bucket: Bucket) -> None:
        part = self.part_size(bucket)

        class Boom(Exception):
            pass

        with pytest.raises(Boom), bucket.open("partial.bin", "wb", part_size=part) as out:
            out.write(b"x" * (part + 10))
            raise Boom
        assert not bucket.exists("partial.bin")
        assert [e.key for e in bucket.list()] == []

    # -- resumable writes (capabilities.resumable_writes) -------------------------
    def test_a_resumable_write_continues_after_a_failed_attempt(self, bucket: Bucket) -> None:
        if not bucket.capabilities.resumable_writes:
            with pytest.raises(Unsupported, match="resum"):
                bucket.open("resumed.bin", "wb", resume=True)
            return
        part = self.part_size(bucket)
        data = bytes(range(256)) * ((3 * part + 1000) // 256 + 1)
        with pytest.raises(RuntimeError), bucket.open("resumed.bin", "wb", resume=True, part_size=part) as out:
            out.write(data[: 2 * part])
            raise RuntimeError("the writer died")  # a resumable writer keeps its parts
        assert [e.key for e in bucket.list()] == []
        source = io.BytesIO(data)
        with bucket.open("resumed.bin", "wb", resume=True, source=source, part_size=part) as out:
            start = out.tell()  # the writer's resumed_from: where the caller continues
            assert start == getattr(out, "resumed_from", None)
            # GCS holds a session's last part back for the request that carries the size
            assert part <= start <= 2 * part
            assert source.tell() == start
            out.write(source.read())
            assert [e.key for e in bucket.list()] == []
        assert bucket.get("resumed.bin") == data

    def test_a_resumed_write_sends_again_the_parts_its_source_no_longer_has(self, bucket: Bucket) -> None:
        if not bucket.capabilities.resumable_writes:
            pytest.skip("provider lacks resumable_writes")
        part = self.part_size(bucket)
        with pytest.raises(RuntimeError), bucket.open("changed.bin", "wb", resume=True, part_size=part) as out:
            out.write(b"a" * (3 * part))
            raise RuntimeError("the writer died")
        changed = b"a" * part + b"b" * part + b"c" * 10
        source = io.BytesIO(changed)
        with bucket.open("changed.bin", "wb", resume=True, source=source, part_size=part) as out:
            assert out.tell() <= part
            out.write(source.read())
        assert bucket.get("changed.bin") == changed

    def test_abort_discards_a_resumable_write(self, bucket: Bucket) -> None:
        if not bucket.capabilities.resumable_writes:
            pytest.skip("provider lacks resumable_writes")
        part = self.part_size(bucket)
        with pytest.raises(RuntimeError), bucket.open("dropped.bin", "wb", resume=True, part_size=part) as out:
            out.write(b"d" * (3 * part))
            raise RuntimeError("the writer died")
        again: Any = bucket.open("dropped.bin", "wb", resume=True, part_size=part)
        assert again.tell() > 0
        again.abort()  # BucketWriter.abort: the earlier attempt's parts too
        fresh = bucket.open("dropped.bin", "wb", resume=True, part_size=part)
        assert fresh.tell() == 0
        fresh.write(b"fresh")
        fresh.close()
        assert bucket.get("dropped.bin") == b"fresh"

    def test_a_failed_overwrite_keeps_the_old_object(self, bucket: Bucket) -> None:
        bucket.put("keep.txt", b"old")
        with pytest.raises(RuntimeError), bucket.open("keep.txt", "wb", part_size=self.part_size(bucket)) as out:
            out.write(b"new")
            raise RuntimeError("interrupted")
        assert bucket.get("keep.txt") == b"old"

    def test_a_large_create_only_streamed_write_is_refused_when_the_key_exists(self, bucket: Bucket) -> None:
        if not bucket.capabilities.conditional_streaming_write:
            pytest.skip("provider lacks conditional_streaming_write")
        part = self.part_size(bucket)
        bucket.put("cond.bin", b"original")
        with pytest.raises(AlreadyExists), bucket.open("cond.bin", "wb", if_none_match="*", part_size=part) as out:
            out.write(b"y" * (2 * part + 10))
        assert bucket.get("cond.bin") == b"original"

    def test_a_large_streamed_write_with_a_stale_etag_is_refused(self, bucket: Bucket) -> None:
        if not bucket.capabilities.conditional_streaming_write:
            pytest.skip("provider lacks conditional_streaming_write")
        part = self.part_size(bucket)
        stale = bucket.put("cas.bin", b"v1")
        bucket.put("cas.bin", b"v2")
        with pytest.raises(PreconditionFailed), bucket.open("cas.bin", "wb", if_match=stale, part_size=part) as out:
            out.write(b"z" * (2 * part + 10))
        assert bucket.get("cas.bin") == b"v2"

    def test_a_large_create_only_streamed_write_succeeds_when_absent(self, bucket: Bucket) -> None:
        if not bucket.capabilities.conditional_streaming_write:
            pytest.skip("provider lacks conditional_streaming_write")
        part = self.part_size(bucket)
        with bucket.open("fresh.bin", "wb", if_none_match="*", part_size=part) as out:
            out.write(b"q" * (2 * part + 10))
        assert bucket.head("fresh.bin").size == 2 * part + 10

    def test_open_of_a_missing_key_raises_not_found(self, bucket: Bucket) -> None:
        with pytest.raises(NotFound):
            bucket.open("missing.bin").read()

    # -- batches ----------------------------------------------------------------
    def test_batch_put_get_delete(self, bucket: Bucket) -> None:
        items = {f"batch/{i}": f"v{i}".encode() for i in range(40)}
        etags = bucket.put_many(items)
        assert set(etags) == set(items)
        assert bucket.get_many(items) == items
        bucket.delete_many(list(items)[:30])
        assert sorted(e.key for e in bucket.list("batch/")) == sorted(list(items)[30:])

    def test_get_many_of_a_missing_key(self, bucket: Bucket) -> None:
        bucket.put("have", b"1")
        with pytest.raises(NotFound):
            bucket.get_many(["have", "lack"])
        assert bucket.get_many(["have", "lack"], missing_ok=True) == {"have": b"1"}

    def test_iter_many_yields_every_object_once(self, bucket: Bucket) -> None:
        items = {f"im/{i}": f"i{i}".encode() * (i + 1) for i in range(24)}
        bucket.put_many(items)
        seen = [key for key, _ in bucket.iter_many(items, concurrency=4)]
        assert sorted(seen) == sorted(items)
        assert dict(bucket.iter_many(items, concurrency=4)) == items

    def test_iter_many_of_a_missing_key(self, bucket: Bucket) -> None:
        bucket.put("have", b"1")
        with pytest.raises(NotFound, match="lack"):
            list(bucket.iter_many(["have", "lack"]))
        assert list(bucket.iter_many(["have", "lack"], missing_ok=True)) == [("have", b"1")]

    def test_copy_many_copies_each_pair(self, bucket: Bucket) -> None:
        items = {f"cm/src/{i}": f"c{i}".encode() for i in range(12)}
        bucket.put_many(items)
        pairs = {src: src.replace("/src/", "/dst/") for src in items}
        etags = bucket.copy_many(pairs)
        assert set(etags) == set(pairs.values())
        assert bucket.get_many(pairs.values()) == {pairs[k]: v for k, v in items.items()}
        assert bucket.get_many(items) == items, "the sources must stay"

    def test_copy_many_of_a_missing_source_raises_not_found(self, bucket: Bucket) -> None:
        bucket.put("cm/have", b"1")
        with pytest.raises(NotFound, match="cm/lack"):
            bucket.copy_many([("cm/have", "cm/have2"), ("cm/lack", "cm/lack2")])
        assert not bucket.exists("cm/lack2")

    def test_copy_many_refuses_a_destination_twice_before_any_request(self, bucket: Bucket) -> None:
        with pytest.raises(InvalidArgument, match="more than once"):
            bucket.copy_many([("cm/a", "cm/same"), ("cm/b", "cm/same")])

    def test_copy_prefix_copies_every_object_under_it(self, bucket: Bucket) -> None:
        bucket.put_many({"cp/src/1": b"1", "cp/src/2": b"2", "cp/src/deep/3": b"3", "cp/other/4": b"4"})
        assert bucket.copy_prefix("cp/src/", "cp/dst/") == 3
        assert sorted(e.key for e in bucket.list("cp/dst/")) == ["cp/dst/1", "cp/dst/2", "cp/dst/deep/3"]
        assert bucket.get("cp/dst/deep/3") == b"3"
        assert sorted(e.key for e in bucket.list("cp/src/")) == ["cp/src/1", "cp/src/2", "cp/src/deep/3"]
        assert bucket.copy_prefix("cp/none/", "cp/empty/") == 0

    def test_copy_prefix_refuses_overlapping_prefixes(self, bucket: Bucket) -> None:
        for src, dst in (("cp/", "cp/x/"), ("cp/x/", "cp/"), ("cp/", "cp/"), ("", "cp/")):
            with pytest.raises(InvalidArgument, match="overlap"):
                bucket.copy_prefix(src, dst)

    # -- signed URLs --------------------------------------------------------------
    def test_signed_urls_allow_get_and_put(self, bucket: Bucket) -> None:
        if not bucket.capabilities.signed_urls:
            with pytest.raises(Unsupported):
                bucket.signed_url("k")
            pytest.skip("provider lacks signed_urls (and says so with Unsupported)")
        bucket.put("signed.txt", b"secret data")
        url = bucket.signed_url("signed.txt", expires=300)
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.read() == b"secret data"
        put_url = bucket.signed_url("upload.txt", method="PUT", expires=300)
        req = urllib.request.Request(
            put_url, data=b"uploaded", method="PUT", headers={"Content-Type": "application/octet-stream"}
        )
        for name, value in getattr(bucket.driver, "signed_put_headers", {}).items():
            req.add_header(name, value)
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status in (200, 201)
        assert bucket.get("upload.txt") == b"uploaded"

    def test_signed_url_rejects_bad_expiry(self, bucket: Bucket) -> None:
        with pytest.raises(InvalidArgument):
            bucket.signed_url("k", expires=0)
        with pytest.raises(InvalidArgument):
            bucket.signed_url("k", expires=8 * 24 * 3600)

    # -- bad input is refused before any request -----------------------------------
    @pytest.mark.parametrize("key", BAD_KEYS)
    def test_bad_keys_raise_invalid_key(self, bucket: Bucket, key: str) -> None:
        with pytest.raises(InvalidKey):
            bucket.put(key, b"x")
        with pytest.raises(InvalidKey):
            bucket.get(key)

    def test_a_key_over_the_byte_limit_raises_invalid_key(self, bucket: Bucket) -> None:
        limit = bucket.capabilities.max_key_bytes
        with pytest.raises(InvalidKey, match="limit"):
            bucket.put("é" * (limit // 2 + 1), b"x")
        longest = "/".join(["k" * 200] * (limit // 201)).ljust(limit, "k")
        assert len(longest.encode()) == limit
        bucket.put(longest, b"ok")
        assert bucket.get(longest) == b"ok"

    def test_a_non_str_key_raises_invalid_key(self, bucket: Bucket) -> None:
        with pytest.raises(InvalidKey):
            bucket.get(b"bytes-key")  # type: ignore[arg-type]

    def test_str_data_raises_invalid_argument_saying_encode(self, bucket: Bucket) -> None:
        with pytest.raises(InvalidArgument, match="encode"):
            bucket.put("k", "text")  # type: ignore[arg-type]

    def test_bad_conditions_raise_invalid_argument(self, bucket: Bucket) -> None:
        with pytest.raises(InvalidArgument):
            bucket.put("k", b"x", if_none_match="etag")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            bucket.put("k", b"x", if_none_match="*", if_match='"e"')
        assert not bucket.exists("k")

    def test_bad_metadata_raises_invalid_argument(self, bucket: Bucket) -> None:
        with pytest.raises(InvalidArgument):
            bucket.put("k", b"x", metadata={"bad name": "v"})
        with pytest.raises(InvalidArgument):
            bucket.put("k", b"x", metadata={"ok": "naïve"})
        assert not bucket.exists("k")

    def test_as_an_unknown_type_raises_unsupported(self, bucket: Bucket) -> None:
        class NotNative:
            pass

        with pytest.raises(Unsupported):
            bucket.as_(NotNative)

    def test_repr_names_the_provider(self, bucket: Bucket, bucket_url: str) -> None:
        assert bucket.provider in repr(bucket)

