"""Bucket.put(..., idempotency_key=): a conditional put that is safe to repeat."""

from __future__ import annotations

from pathlib import Path

import pytest

from portable.errors import AlreadyExists, IdempotencyConflict, PreconditionFailed
from portable.storage import Bucket, open_bucket
from portable.testing.chaos import chaos_of
from portable.testing.fault_suite import fault_profile


@pytest.fixture(params=["mem", "file"])
def bucket(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> Bucket:
    url = f"mem://{unique_name}" if request.param == "mem" else f"file://{tmp_path}"
    return open_bucket(url)


def test_a_repeated_create_only_put_returns_its_own_etag(bucket: Bucket) -> None:
    etag = bucket.put("a/b.json", b"{}", if_none_match="*", idempotency_key="req-1")
    assert bucket.put("a/b.json", b"{}", if_none_match="*", idempotency_key="req-1") == etag
    assert bucket.get("a/b.json") == b"{}"


def test_the_same_key_with_another_payload_is_a_conflict(bucket: Bucket) -> None:
    bucket.put("k", b"one", if_none_match="*", idempotency_key="req-1")
    with pytest.raises(IdempotencyConflict, match="different payload"):
        bucket.put("k", b"two", if_none_match="*", idempotency_key="req-1")


def test_another_writers_object_still_raises_already_exists(bucket: Bucket) -> None:
    bucket.put("k", b"theirs")
    with pytest.raises(AlreadyExists):
        bucket.put("k", b"mine", if_none_match="*", idempotency_key="req-1")
    bucket.put("j", b"theirs", if_none_match="*", idempotency_key="req-other")
    with pytest.raises(AlreadyExists):
        bucket.put("j", b"mine", if_none_match="*", idempotency_key="req-1")


def test_a_repeated_compare_and_swap_returns_its_own_etag(bucket: Bucket) -> None:
    v1 = bucket.put("doc", b"v1")
    assert v1 is not None
    v2 = bucket.put("doc", b"v2", if_match=v1, idempotency_key="update-1")
    assert bucket.put("doc", b"v2", if_match=v1, idempotency_key="update-1") == v2
    with pytest.raises(PreconditionFailed):
        bucket.put("doc", b"v3", if_match=v1, idempotency_key="update-2")


def test_user_metadata_is_kept_beside_the_tags(bucket: Bucket) -> None:
    bucket.put("k", b"x", metadata={"Owner": "ann"}, if_none_match="*", idempotency_key="r")
    meta = bucket.head("k").metadata
    assert meta["owner"] == "ann"
    assert set(meta) == {"owner", "portable-idempotency-key", "portable-payload"}


def test_a_write_that_succeeded_but_reported_a_failure_is_recognised(unique_name: str) -> None:
    bucket = open_bucket(f"chaos+mem://{unique_name}?faults=lost_reply&error_rate=1&retry_after=0", profile=fault_profile())
    chaos = chaos_of(bucket)
    # Without a key the guard's retry meets the caller's own write and reports a false AlreadyExists.
    with pytest.raises(AlreadyExists):
        bucket.put("plain", b"x", if_none_match="*")
    chaos.error_rate = 0.5
    for i in range(50):
        bucket.put(f"k{i}", b"x", if_none_match="*", idempotency_key=f"r{i}")
    assert chaos.stats.injected["lost_reply"] > 0
    assert all(chaos.stats.applied[f"k{i}"] == 1 for i in range(50))
