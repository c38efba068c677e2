"""A streamed write whose cleanup abort fails too still raises the caller's own error.

Seen on moto: obstore's writer sent AbortMultipartUpload while a part was still in
flight and moto answered 500; the with-block's own exception was then replaced by
the abort's error. The abort is cleanup after a failure: when it fails, the failure
the caller must fix is still the first one, and the abort's error is logged and
noted on it (redacted), never raised in its place.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from portable.driver.storage import WriteOptions, WriteStream
from portable.embedded.memory import MemoryStorage
from portable.errors import InvalidArgument, NotFound, PortableError
from portable.resilience import ResiliencePolicy, RetryPolicy
from portable.storage import Bucket

POLICY = ResiliencePolicy(retry=RetryPolicy(max_attempts=2, initial_backoff=0, max_backoff=0), breaker=None)
SECRET = "s3cr3t-abort-token"


class _Write(WriteStream):
    """mem:// parts kept in memory until commit; ``abort`` fails, and so may ``write``."""

    def __init__(self, driver: FailingAborts, key: str, options: WriteOptions) -> None:
        self.driver, self.key, self.options, self.parts = driver, key, options, []

    def write(self, data: bytes) -> None:
        if self.driver.write_fails:
            raise PermissionError("part refused")
        self.parts.append(data)

    def commit(self) -> str | None:
        return self.driver.put(self.key, b"".join(self.parts), self.options)

    def abort(self) -> None:
        self.driver.aborts += 1
        raise ConnectionResetError(f"abort refused: https://example.invalid/u?X-Amz-Signature={SECRET}")


class FailingAborts(MemoryStorage):
    """mem:// whose streamed writes cannot be aborted (as moto's 500 on an abort racing a part)."""

    def __init__(self, *, write_fails: bool = False) -> None:
        super().__init__()
        self.write_fails = write_fails
        self.aborts = 0

    def open_write(self, key: str, options: WriteOptions, part_size: int) -> WriteStream:
        return _Write(self, key, options)


def _notes(exc: BaseException) -> str:
    return "\n".join(getattr(exc, "__notes__", []))


def test_the_with_blocks_error_survives_a_failed_abort(caplog: pytest.LogCaptureFixture) -> None:
    driver = FailingAborts()
    bucket = Bucket(driver, policy=POLICY)
    with (
        caplog.at_level(logging.WARNING, logger="portable.storage"),
        pytest.raises(RuntimeError, match="interrupted") as caught,
        bucket.open("k", "wb", part_size=4096) as out,
    ):
        out.write(b"a" * 10_000)
        raise RuntimeError("interrupted")
    assert driver.aborts == 1
    assert "aborting the write of 'k' failed too" in _notes(caught.value)
    assert "ConnectionResetError" in _notes(caught.value)
    assert "could not abort the failed write of k" in caplog.text
    assert SECRET not in _notes(caught.value) and SECRET not in caplog.text
    with pytest.raises(NotFound):
        bucket.head("k")


def test_a_failed_part_write_is_the_error_raised_not_the_failed_abort() -> None:
    driver = FailingAborts(write_fails=True)
    bucket = Bucket(driver, policy=POLICY)
    with pytest.raises(PortableError) as caught, bucket.open("k", "wb", part_size=4096) as out:
        out.write(b"a" * 10_000)
    assert "part refused" in str(caught.value), caught.value
    assert driver.aborts == 1
    assert "failed too" in _notes(caught.value)
    with pytest.raises(NotFound):
        bucket.head("k")


def test_an_overrun_of_the_declared_size_is_raised_though_the_abort_fails() -> None:
    driver = FailingAborts()
    bucket = Bucket(driver, policy=POLICY)
    out: Any = bucket.open("k", "wb", size=10, part_size=4096)
    with pytest.raises(InvalidArgument, match="10"):
        out.write(b"x" * 11)
    assert driver.aborts == 1
    with pytest.raises(NotFound):
        bucket.head("k")


def test_an_abort_the_caller_asks_for_raises_its_own_failure() -> None:
    """Asked for directly, the abort is the operation: its failure is the caller's to see."""
    bucket = Bucket(FailingAborts(), policy=POLICY)
    out: Any = bucket.open("k", "wb", part_size=4096)
    out.write(b"a" * 10)
    with pytest.raises(ConnectionResetError):
        out.abort()


def test_the_async_face_keeps_the_with_blocks_error_and_a_cancel_alike(caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    from portable.aio import AsyncBucket

    driver = FailingAborts()
    bucket = AsyncBucket.from_sync(Bucket(driver, policy=POLICY))

    async def interrupted(failure: BaseException) -> None:
        async with bucket.open("k", "wb", part_size=4096) as out:
            await out.write(b"a" * 10_000)
            raise failure

    with caplog.at_level(logging.WARNING, logger="portable.storage"):
        with pytest.raises(RuntimeError, match="interrupted") as caught:
            asyncio.run(interrupted(RuntimeError("interrupted")))
        assert "failed too" in _notes(caught.value) and SECRET not in _notes(caught.value)
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(interrupted(asyncio.CancelledError()))
    assert driver.aborts == 2
    assert caplog.text.count("could not abort the failed write of k") == 2 and SECRET not in caplog.text
    with pytest.raises(NotFound):
        Bucket(driver).head("k")


def test_an_exit_with_an_exception_type_and_no_instance_aborts() -> None:
    """``__exit__(type, None, tb)`` (a manual call may pass no instance) gives up the write, as
    an exception does: a possibly truncated object is never committed."""
    bucket = Bucket(MemoryStorage(), policy=POLICY)
    out: Any = bucket.open("k", "wb", part_size=4096)
    out.write(b"a" * 10)
    out.__exit__(RuntimeError, None, None)
    with pytest.raises(NotFound):
        bucket.head("k")
