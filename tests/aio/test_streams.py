"""AsyncBucket.open: async readers and writers, with nothing visible on error or cancellation (file://, moto)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

import portable.aio
from portable.aio import AsyncBucket
from portable.errors import NotFound, Unsupported
from portable.testing.storage_suite import contract_profile


def opened(url: str) -> AsyncBucket:
    return portable.aio.open_bucket(url, profile=contract_profile(url))


async def leftovers(bucket: AsyncBucket) -> list[str]:
    """What aborted writes left behind: list_incomplete, or S3's multipart uploads where it lacks that."""
    try:
        return await bucket.list_incomplete(0)
    except Unsupported:
        from botocore.client import BaseClient

        driver: Any = bucket.driver
        resp = bucket.as_(BaseClient).list_multipart_uploads(Bucket=driver.bucket, Prefix=driver._root)
        return [u["Key"] for u in resp.get("Uploads", [])]


def part_size(bucket: AsyncBucket) -> int:
    return max(bucket.capabilities.min_part_bytes, 256 * 1024)


def test_an_async_reader_reads_iterates_and_seeks(storage_url: str) -> None:
    data = bytes(range(256)) * 9000  # a little over 2 MiB: three chunks of iteration

    async def main() -> None:
        async with opened(storage_url) as bucket:
            await bucket.put("r.bin", data)
            async with bucket.open("r.bin") as reader:
                assert reader.readable()
                assert await reader.read(5) == data[:5]
                rest = [chunk async for chunk in reader]
                assert b"".join(rest) == data[5:]
                assert all(len(c) <= 1 << 20 for c in rest) and len(rest) >= 3
                assert await reader.read(10) == b""
                if reader.seekable():
                    assert await reader.seek(100) == 100
                    assert await reader.read(3) == data[100:103]
                    assert reader.tell() == 103
            assert reader.closed
            with pytest.raises(ValueError, match="closed"):
                await reader.read()
            plain = await bucket.open("r.bin")  # awaited rather than entered: closed by the caller
            assert await plain.readall() == data
            await plain.close()
            with pytest.raises(NotFound):
                await bucket.open("missing.bin")
            with pytest.raises(NotFound):
                async with bucket.open("missing.bin"):
                    pass

    asyncio.run(main())


def test_an_async_writer_writes_parts_and_commits_on_exit(storage_url: str) -> None:
    async def main() -> None:
        async with opened(storage_url) as bucket:
            size = part_size(bucket)
            data = bytes(range(256)) * ((2 * size + 1000) // 256 + 1)
            async with bucket.open("w.bin", "wb", part_size=size, content_type="application/x-test") as writer:
                assert writer.writable()
                for i in range(0, len(data), 100_000):
                    assert await writer.write(data[i : i + 100_000]) == len(data[i : i + 100_000])
                assert writer.tell() == len(data)
                assert not await bucket.exists("w.bin"), "visible before the commit"
            assert writer.closed and writer.etag
            info = await bucket.head("w.bin")
            assert (info.size, info.content_type) == (len(data), "application/x-test")
            assert await bucket.get("w.bin") == data

    asyncio.run(main())


def test_an_error_inside_the_block_aborts_and_keeps_the_old_object(storage_url: str) -> None:
    async def main() -> None:
        async with opened(storage_url) as bucket:
            await bucket.put("keep.bin", b"old")
            size = part_size(bucket)
            with pytest.raises(RuntimeError, match="interrupted"):
                async with bucket.open("keep.bin", "wb", part_size=size) as writer:
                    await writer.write(b"n" * (size + 10))  # one part already uploaded
                    raise RuntimeError("interrupted")
            assert await bucket.get("keep.bin") == b"old"
            with pytest.raises(ValueError, match="closed"):
                await writer.write(b"more")
            assert await leftovers(bucket) == []

    asyncio.run(main())


@pytest.mark.parametrize("rounds", [200])
def test_a_cancelled_streamed_write_leaves_nothing(storage_url: str, rounds: int) -> None:
    """Cancel at random points (opening, mid-part, between parts, committing): never a partial object."""
    moto = storage_url.startswith("s3://")
    rounds = 6 if moto else rounds  # moto serves ~300 requests/s and closes every connection

    async def main() -> None:
        async with opened(storage_url) as bucket:
            size = part_size(bucket)
            data = bytes(range(256)) * ((2 * size + 4096) // 256)
            rng = random.Random(1216)
            committed: list[str] = []

            async def write(key: str) -> None:
                async with bucket.open(key, "wb", part_size=size) as writer:
                    for i in range(0, len(data), 64 * 1024):
                        await writer.write(data[i : i + 64 * 1024])
                committed.append(key)

            started = asyncio.get_running_loop().time()
            probe = asyncio.ensure_future(write("probe"))
            await probe
            whole = asyncio.get_running_loop().time() - started  # how long one write takes here
            cancelled = 0
            for n in range(rounds):
                task = asyncio.ensure_future(write(f"w/{n}"))
                # every third one at once (still opening), the rest at a random point
                await asyncio.sleep(0 if n % 3 == 0 else rng.random() * whole * 1.2)
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    cancelled += 1
            assert cancelled >= rounds // 3, f"only {cancelled} of {rounds} writes were cancelled"
            await asyncio.sleep(0.5)  # calls already in pool threads end; their aborts run after them
            for info in [e async for e in bucket.list("w/")]:
                # a cancel during the commit may leave the whole object: never a part of it
                assert info.size == len(data), f"{info.key} is partial ({info.size} bytes)"
                assert await bucket.get(info.key) == data
            assert await leftovers(bucket) == [], "an aborted write left parts behind"

    asyncio.run(main())
