"""Portable-layer behaviour that the contract suite does not reach: error wrapping in streams."""

import io

import pytest

from portable import NotFound, Unavailable
from portable.driver.storage import WriteOptions
from portable.embedded.memory import MemoryStorage
from portable.resilience import ResiliencePolicy, RetryPolicy
from portable.storage import Bucket


class FlakyStream(io.BytesIO):
    def __init__(self, data: bytes, fail_at: int) -> None:
        super().__init__(data)
        self.fail_at = fail_at

    def read(self, size=-1):
        if self.tell() >= self.fail_at:
            raise ConnectionResetError("peer reset the connection")
        return super().read(size if size is None or size < 0 or self.tell() + size <= self.fail_at else self.fail_at - self.tell())

    def readinto(self, buffer):
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class FlakyReads(MemoryStorage):
    def open_read(self, key):
        return FlakyStream(self.get(key), fail_at=4)


def test_a_read_error_mid_stream_is_a_portable_error_with_its_cause():
    bucket = Bucket(FlakyReads(), policy=ResiliencePolicy(retry=RetryPolicy(max_attempts=1), breaker=None))
    bucket.driver.put("k", b"0123456789", WriteOptions())
    with bucket.open("k") as stream:
        assert stream.read(4) == b"0123"
        with pytest.raises(Unavailable) as info:
            stream.read(4)
    assert isinstance(info.value.__cause__, ConnectionResetError)
    assert "read k" in str(info.value)


def test_reads_seek_and_readline_pass_through():
    bucket = Bucket(MemoryStorage())
    bucket.put("lines", b"one\ntwo\nthree\n")
    with bucket.open("lines") as stream:
        assert stream.readline() == b"one\n"
        stream.seek(8)
        assert stream.read() == b"three\n"
        assert stream.tell() == 14
        assert stream.seekable()
    assert stream.closed
    with pytest.raises(NotFound):
        bucket.open("missing")
