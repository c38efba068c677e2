"""portable.transfer between the embedded buckets (file://, mem://): every rule that needs no cloud."""

from __future__ import annotations

import hashlib
import io
import os
import time
import uuid
from pathlib import Path
from typing import IO, Any

import pytest

from portable.driver.storage import WriteOptions, WriteStream
from portable.embedded.file import FileStorage
from portable.errors import InvalidArgument, NotFound, Unavailable
from portable.storage import Bucket, open_bucket
from portable.transfer import ChecksumMismatch, Progress, copy, sync

SIZES = (0, 1024, 70_000, 3 * 1024 * 1024 + 17)


def body(i: int, size: int) -> bytes:
    seed = hashlib.sha256(f"{i}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def fill(bucket: Bucket, n: int = 8, prefix: str = "d/") -> dict[str, bytes]:
    out = {}
    for i in range(n):
        key = f"{prefix}{i:03d}.bin"
        data = body(i, SIZES[i % len(SIZES)])
        bucket.put(key, data, content_type="application/x-test", metadata={"n": str(i)},
                   cache_control="max-age=60", content_disposition=f'attachment; filename="{i}.bin"')
        out[key] = data
    return out


@pytest.fixture
def src(tmp_path: Path) -> Bucket:
    return open_bucket(f"file://{tmp_path / 'src'}")


@pytest.fixture
def dst(tmp_path: Path) -> Bucket:
    return open_bucket(f"file://{tmp_path / 'dst'}")


def test_sync_copies_everything_with_headers_and_metadata_then_skips_it(src: Bucket, dst: Bucket) -> None:
    data = fill(src)
    report = sync(src, dst)
    assert (report.copied, report.skipped, report.failed) == (len(data), 0, 0), report.failures()
    assert report.bytes_copied == sum(map(len, data.values()))
    for key, value in data.items():
        assert dst.get(key) == value
        info, want = dst.head(key), src.head(key)
        assert (info.content_type, dict(info.metadata), info.cache_control, info.content_disposition) == (
            want.content_type, dict(want.metadata), want.cache_control, want.content_disposition)
    assert {r.verified for r in report.results} == {"read-back"}  # file:// keeps no checksum
    again = sync(src, dst)
    assert (again.copied, again.skipped) == (0, len(data))
    assert {r.reason for r in again.results} == {"same size, destination not older"}


def test_a_changed_source_is_copied_again(src: Bucket, dst: Bucket) -> None:
    fill(src, 3)
    sync(src, dst)
    time.sleep(1.1)  # past the second of slack given to providers' whole-second times
    src.put("d/001.bin", b"other size")
    src.put("d/002.bin", body(2, 70_000)[::-1])  # same size, newer
    report = sync(src, dst)
    by = report.by_key()
    assert by["d/001.bin"].reason == "size differs" and by["d/001.bin"].status == "copied"
    assert by["d/002.bin"].reason == "source newer" and by["d/002.bin"].status == "copied"
    assert by["d/000.bin"].status == "skipped"
    assert dst.get("d/002.bin") == src.get("d/002.bin")


def test_full_checksum_reads_both_sides_and_size_only_does_not(src: Bucket, dst: Bucket) -> None:
    fill(src, 2)
    sync(src, dst)
    dst.put("d/001.bin", body(99, 1024))  # same size, other bytes, newer: only "full" sees it
    assert sync(src, dst, checksum="size").copied == 0
    assert sync(src, dst).copied == 0
    report = sync(src, dst, checksum="full")
    assert report.by_key()["d/001.bin"].reason == "sha256 differs"
    assert report.by_key()["d/000.bin"].reason == "sha256 equal"
    assert dst.get("d/001.bin") == src.get("d/001.bin")


def test_dry_run_writes_nothing_and_says_what_it_would_do(src: Bucket, dst: Bucket) -> None:
    data = fill(src, 4)
    dst.put("d/extra", b"x")
    report = sync(src, dst, delete=True, dry_run=True)
    assert report.dry_run and (report.copied, report.deleted) == (4, 1)
    assert [i.key for i in dst.list()] == ["d/extra"]
    assert "would copy 4" in report.summary() and "would delete 1" in report.summary()
    sync(src, dst, delete=True)
    assert sorted(i.key for i in dst.list()) == sorted(data)


def test_delete_removes_only_what_the_source_lacks_under_the_prefix(src: Bucket, dst: Bucket) -> None:
    fill(src, 2)
    dst.put("d/gone", b"x")
    dst.put("other/kept", b"y")
    report = sync(src, dst, prefix="d/", delete=True)
    assert report.by_key()["d/gone"].status == "deleted"
    assert not dst.exists("d/gone") and dst.exists("other/kept")
    plain = sync(src, dst, prefix="d/")
    assert plain.deleted == 0


def test_copy_named_keys_reports_a_missing_one_as_failed_with_not_found(src: Bucket, dst: Bucket) -> None:
    fill(src, 3)
    report = copy(src, dst, keys=["d/000.bin", "d/nope", "d/000.bin"])
    assert len(report.results) == 2
    by = report.by_key()
    assert by["d/000.bin"].status == "copied"
    assert by["d/nope"].status == "failed" and isinstance(by["d/nope"].error, NotFound)
    assert not dst.exists("d/001.bin") and not report.ok


class CorruptingFile(FileStorage):
    """A file driver whose writes (single puts, and the first part of streamed ones) flip one bit: a store
    that corrupts."""

    def put(self, key: str, data: bytes, options: WriteOptions) -> str | None:
        return super().put(key, bytes([data[0] ^ 1]) + data[1:] if data else data, options)

    def open_write(self, key: str, options: WriteOptions, part_size: int) -> WriteStream:
        inner = super().open_write(key, options, part_size)

        class Flip(WriteStream):
            first = True

            def write(self, data: bytes) -> None:
                if self.first and data:
                    data = bytes([data[0] ^ 1]) + data[1:]
                    self.first = False
                inner.write(data)

            def commit(self) -> str | None:
                return inner.commit()

            def abort(self) -> None:
                inner.abort()

        return Flip()


def test_a_checksum_mismatch_is_a_failed_result_and_leaves_no_bad_copy(src: Bucket, tmp_path: Path) -> None:
    data = fill(src, 3)
    bad = Bucket(CorruptingFile(tmp_path / "bad"), url="file://bad")
    report = sync(src, bad)
    sized = [k for k, v in data.items() if v]
    for key in sized:
        result = report.by_key()[key]
        assert result.status == "failed" and isinstance(result.error, ChecksumMismatch), result
        assert "differ" in result.reason and result.error.retryable
        assert not bad.exists(key)  # a rerun must not skip a bad copy
    assert report.failed == len(sized)


def test_progress_ticks_add_up_and_end_with_each_result(src: Bucket, dst: Bucket) -> None:
    data = fill(src, 5)
    ticks: list[Progress] = []
    report = sync(src, dst, progress=ticks.append, concurrency=3)
    assert sum(t.bytes_delta for t in ticks) == report.bytes_copied == ticks[-1].bytes_done
    finished = [t for t in ticks if t.result is not None]
    assert sorted(t.key for t in finished) == sorted(data)
    assert [t.objects_done for t in finished] == list(range(1, len(data) + 1))


def test_urls_work_as_well_as_buckets(tmp_path: Path) -> None:
    name = uuid.uuid4().hex
    src = open_bucket(f"mem://{name}")
    src.put("k", b"v", metadata={"a": "b"})
    report = copy(f"mem://{name}", f"file://{tmp_path / 'out'}")
    assert report.copied == 1
    assert open_bucket(f"file://{tmp_path / 'out'}").head("k").metadata == {"a": "b"}
    assert os.path.exists(tmp_path / "out" / "k")


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"checksum": "md5"}, "checksum must be one of"),
        ({"concurrency": 0}, "concurrency must be"),
        ({"part_size": 0}, "part_size must be"),
        ({"dry_run": "yes"}, "dry_run must be"),
        ({"keys": "d/000.bin"}, "keys must be an iterable"),
        ({"keys": ["a"], "prefix": "d/"}, "not both"),
        ({"progress": 3}, "progress must be"),
        ({"keys": ["ok", "bad//key"]}, "empty, '.' or '..' segment"),
    ],
)
def test_bad_arguments_are_refused_before_any_request(src: Bucket, dst: Bucket, kwargs: dict[str, object], says: str) -> None:
    with pytest.raises(InvalidArgument, match=says):
        copy(src, dst, **kwargs)  # type: ignore[arg-type]


def test_the_same_bucket_on_both_sides_is_refused(src: Bucket) -> None:
    with pytest.raises(InvalidArgument, match="same"):
        sync(src, src)
    with pytest.raises(InvalidArgument, match="same bucket URL"):
        sync("mem://x", "mem://x")
    with pytest.raises(InvalidArgument, match="must be a Bucket"):
        sync(3, src)  # type: ignore[arg-type]


def test_memory_stays_bounded_whatever_the_object_size(tmp_path: Path) -> None:
    """A 64 MiB object streams through parts of 4 MiB: the copy holds a few parts (two ranges fetched ahead,
    the one being uploaded, the writer's part), never the object."""
    import tracemalloc

    src = open_bucket(f"file://{tmp_path / 'big-src'}")
    size = 64 * 1024 * 1024
    with src.open("big", "wb") as out:
        for i in range(size // (1 << 20)):
            out.write(body(i, 1 << 20))
    dst = open_bucket(f"file://{tmp_path / 'big-dst'}")
    tracemalloc.start()
    try:
        report = copy(src, dst, part_size=4 * 1024 * 1024, concurrency=1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.copied == 1 and report.results[0].verified == "read-back"
    assert peak < 32 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB for a 64 MiB object"


def test_key_filter_sees_keys_relative_to_the_prefix_on_both_sides(src: Bucket, dst: Bucket) -> None:
    src.put("d/keep.txt", b"1")
    src.put("d/skip.log", b"2")
    src.put("d/sub/keep2.txt", b"3")
    dst.put("d/only-dst.log", b"old")    # filtered out: sync(delete=True) must not delete it
    dst.put("d/only-dst.txt", b"old")    # kept by the filter and only in dst: deleted
    seen: list[str] = []

    def txt(key: str) -> bool:
        seen.append(key)
        return key.endswith(".txt")

    report = sync(src, dst, prefix="d/", delete=True, key_filter=txt)
    assert report.failures() == []
    assert {r.key: r.status for r in report.results} == {
        "d/keep.txt": "copied", "d/sub/keep2.txt": "copied", "d/only-dst.txt": "deleted"}
    assert sorted(i.key for i in dst.list("d/")) == ["d/keep.txt", "d/only-dst.log", "d/sub/keep2.txt"]
    assert "skip.log" in seen and "only-dst.log" in seen and not any(k.startswith("d/") for k in seen)
    # copy with keys=: the filter sees the whole key
    again = copy(src, dst, keys=["d/skip.log", "d/keep.txt"], key_filter=lambda k: k == "d/skip.log")
    assert [(r.key, r.status) for r in again.results] == [("d/skip.log", "copied")]


def test_key_filter_must_be_a_callable_returning_a_bool(src: Bucket, dst: Bucket) -> None:
    src.put("a", b"1")
    with pytest.raises(InvalidArgument, match="key_filter must be a callable"):
        sync(src, dst, key_filter="*.txt")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="key_filter must return True or False"):
        sync(src, dst, key_filter=lambda k: "yes")  # type: ignore[arg-type,return-value]
    assert list(dst.list()) == []


class FlakyReads(FileStorage):
    """A file driver whose first streamed read of each key fails after 4 KiB, and whose first pass of ranged
    reads over a key fails after its first range, with a retryable error."""

    failed: set[str]
    passes: dict[str, int]

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        """In the first pass over a key (ranged reads from 0), every range after the first fails."""
        if start == 0:
            self.passes[key] = self.passes.get(key, 0) + 1
        if start > 0 and self.passes[key] == 1:
            self.failed.add(key)
            raise Unavailable("connection reset by peer (a test's cut range)")
        return super().get_range(key, start, end)

    def open_read(self, key: str) -> IO[bytes]:
        inner = super().open_read(key)
        if key in self.failed:
            return inner
        self.failed.add(key)

        class Cut(io.RawIOBase):
            given = 0

            def readable(self) -> bool:
                return True

            def readinto(self, buffer: Any) -> int:
                if self.given >= 4096:  # a few bytes first: the copy is under way when it is cut
                    raise Unavailable("connection reset by peer (a test's cut stream)")
                data = inner.read(min(len(buffer), 4096 - self.given))
                buffer[: len(data)] = data
                self.given += len(data)
                return len(data)

            def close(self) -> None:
                inner.close()
                super().close()

        return Cut()


def test_reads_cut_part_way_are_retried_and_progress_does_not_count_them_twice(tmp_path: Path) -> None:
    flaky_src, flaky_dst = FlakyReads(tmp_path / "fs"), FlakyReads(tmp_path / "fd")
    flaky_src.failed, flaky_dst.failed, flaky_src.passes, flaky_dst.passes = set(), set(), {}, {}
    src, dst = Bucket(flaky_src, url="file://fs"), Bucket(flaky_dst, url="file://fd")
    data = {"big": body(1, 3 * 1024 * 1024 + 5), "small": body(2, 5000)}
    for key, value in data.items():
        src.put(key, value)
    ticks: list[Progress] = []
    report = copy(src, dst, part_size=1024 * 1024, progress=ticks.append)
    assert report.failed == 0 and report.copied == 2, report.failures()
    assert flaky_src.failed == {"big"}      # streamed (over one part): its reads failed, then all were retried
    assert flaky_src.passes == {"big": 2}
    assert flaky_dst.failed == {"big", "small"}  # each read-back (file:// keeps no checksum) cut once too
    assert {r.verified for r in report.results} == {"read-back"}
    assert ticks[-1].bytes_done == sum(map(len, data.values()))  # the cut stream's bytes were taken back
    assert all(dst.get(k) == v for k, v in data.items())
