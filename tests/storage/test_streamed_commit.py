"""A streamed write whose commit reply is lost reports the success it was, and is never committed twice.

The chaos driver's ``lost_reply`` fault lets a commit take effect, then raises
a timeout as if its reply had been lost. Before the fix, the Bucket retried
the commit on the spent stream: file:// failed with "flush of closed file",
mem:// with AlreadyExists on a create-only write, 4-7% of streamed writes.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from portable.driver.storage import WriteOptions, WriteStream
from portable.embedded.memory import MemoryStorage
from portable.errors import AlreadyExists, DeadlineExceeded, NotFound, PortableError
from portable.resilience import ResiliencePolicy, RetryPolicy
from portable.storage import Bucket, open_bucket
from portable.testing.chaos import chaos_of

POLICY = ResiliencePolicy(retry=RetryPolicy(max_attempts=6, initial_backoff=0, max_backoff=0), breaker=None)
WRITES = 300


def body_of(i: int, size: int) -> bytes:
    seed = hashlib.sha256(str(i).encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def stream_many(bucket: Bucket, n: int, *, if_none_match: str | None, part_size: int, size: int) -> list[str]:
    """Stream ``n`` objects; return the failures (which must be none)."""
    failures = []
    for i in range(n):
        try:
            with bucket.open(f"o/{i}", "wb", if_none_match=if_none_match, part_size=part_size) as out:  # type: ignore[arg-type]
                data = body_of(i, size + i % 7)
                for at in range(0, len(data), 1000):
                    out.write(data[at : at + 1000])
        except PortableError as exc:
            failures.append(f"o/{i}: {type(exc).__name__}: {exc}")
    return failures


def check_stored(bucket: Bucket, n: int, size: int) -> None:
    for i in range(n):
        assert bucket.get(f"o/{i}") == body_of(i, size + i % 7), i


@pytest.fixture(params=["file", "mem"])
def base_url(request: Any, tmp_path: Any, unique_name: str) -> str:
    return f"file://{tmp_path / 'b'}" if request.param == "file" else f"mem://{unique_name}"


@pytest.mark.parametrize("if_none_match", [None, "*"], ids=["plain", "create-only"])
def test_no_false_failures_under_lost_replies(base_url: str, if_none_match: str | None) -> None:
    bucket = open_bucket(f"chaos+{base_url}?seed=11&error_rate=0.3&faults=lost_reply", policy=POLICY)
    failures = stream_many(bucket, WRITES, if_none_match=if_none_match, part_size=4096, size=2500)
    stats = chaos_of(bucket).stats
    assert stats.injected["lost_reply"] > 40  # the faults did happen, at commits
    assert failures == []
    check_stored(open_bucket(base_url), WRITES, 2500)
    # every commit took effect exactly once: none was sent again after its reply was lost
    assert all(stats.applied[f"o/{i}"] == 1 for i in range(WRITES)), stats.applied.most_common(3)


def test_no_false_failures_under_every_fault_with_multipart_streams(base_url: str) -> None:
    bucket = open_bucket(f"chaos+{base_url}?seed=5&error_rate=0.25", policy=POLICY)
    failures = stream_many(bucket, 200, if_none_match="*", part_size=1024, size=3000)
    assert chaos_of(bucket).stats.injected["lost_reply"] > 10
    assert failures == []
    check_stored(open_bucket(base_url), 200, 3000)


# -- what the check concludes, on a driver whose commit misbehaves on purpose ---------
class _Write(WriteStream):
    def __init__(self, driver: ScriptedCommits, key: str, options: WriteOptions) -> None:
        self.driver, self.key, self.options, self.parts = driver, key, options, []

    def write(self, data: bytes) -> None:
        self.parts.append(data)

    def commit(self) -> str | None:
        self.driver.commits += 1
        action = self.driver.script.pop(0)
        if action == "ok":
            return self.driver.put(self.key, b"".join(self.parts), self.options)
        if action == "lost":  # written, reply lost
            self.driver.put(self.key, b"".join(self.parts), self.options)
            raise TimeoutError("read timed out")
        if action == "other":  # someone else's bytes are there, and our reply was lost
            self.driver.put(self.key, b"someone else's", WriteOptions())
            raise TimeoutError("read timed out")
        if action == "timeout":  # not written
            raise TimeoutError("read timed out")
        raise AssertionError(action)

    def abort(self) -> None:
        self.parts.clear()


class ScriptedCommits(MemoryStorage):
    """mem:// whose stream commits follow a script; counts commits and reads."""

    def __init__(self, *script: str, head_fails: bool = False) -> None:
        super().__init__()
        self.script = list(script)
        self.commits = 0
        self.heads = 0
        self.head_fails = head_fails

    def open_write(self, key: str, options: WriteOptions, part_size: int) -> WriteStream:
        return _Write(self, key, options)

    def head(self, key: str) -> Any:
        self.heads += 1
        if self.head_fails:
            raise ConnectionResetError("connection reset by peer")
        return super().head(key)


def stream(bucket: Bucket, data: bytes = b"mine", **kw: Any) -> Any:
    with bucket.open("k", "wb", **kw) as out:
        out.write(data)
    return out


def test_a_lost_reply_is_a_success_with_the_stored_etag_and_one_commit() -> None:
    driver = ScriptedCommits("lost")
    bucket = Bucket(driver, policy=POLICY)
    out = stream(bucket)
    assert driver.commits == 1
    assert bucket.get("k") == b"mine"
    assert out.etag == bucket.head("k").etag


def test_a_commit_that_did_not_happen_is_retried_after_the_check() -> None:
    driver = ScriptedCommits("timeout", "ok")
    bucket = Bucket(driver, policy=POLICY)
    stream(bucket)
    assert driver.commits == 2
    assert bucket.get("k") == b"mine"


def test_other_bytes_under_the_key_are_a_failure() -> None:
    driver = ScriptedCommits("other", "timeout", "timeout", "timeout", "timeout", "timeout")
    bucket = Bucket(driver, policy=ResiliencePolicy(retry=RetryPolicy(max_attempts=2, initial_backoff=0), breaker=None))
    with pytest.raises(DeadlineExceeded):
        stream(bucket)
    assert bucket.get("k") == b"someone else's"


def test_same_size_other_bytes_are_a_failure_too() -> None:
    driver = ScriptedCommits("other", "timeout")
    bucket = Bucket(driver, policy=ResiliencePolicy(retry=RetryPolicy(max_attempts=2, initial_backoff=0), breaker=None))
    with pytest.raises(DeadlineExceeded):
        stream(bucket, b"x" * len(b"someone else's"))


def test_a_refused_first_commit_is_not_read_back() -> None:
    driver = ScriptedCommits()
    bucket = Bucket(driver, policy=POLICY)
    bucket.put("k", b"there")
    driver.script = ["ok"]
    with pytest.raises(AlreadyExists):
        stream(bucket, if_none_match="*")
    assert driver.heads == 0
    assert bucket.get("k") == b"there"


def test_when_the_store_cannot_be_read_the_outcome_is_reported_unknown_and_not_retried() -> None:
    driver = ScriptedCommits("lost", "ok", head_fails=True)
    bucket = Bucket(driver, policy=POLICY)
    with pytest.raises(DeadlineExceeded) as info:
        stream(bucket)
    assert "unknown" in str(info.value) and "reading it back failed" in str(info.value)
    assert info.value.retryable is False
    assert driver.commits == 1  # never committed twice


def test_a_streamed_write_that_never_committed_leaves_no_object() -> None:
    driver = ScriptedCommits(*["timeout"] * 6)
    bucket = Bucket(driver, policy=POLICY)
    with pytest.raises(DeadlineExceeded):
        stream(bucket)
    with pytest.raises(NotFound):
        bucket.get("k")
