"""portable.aio.AsyncBucket: the same checks and errors as Bucket, one Guard, bounded threads, safe cancels.

The storage contract itself runs on both faces (portable/testing/storage_suite.py);
these are the async face's own promises.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import portable.aio
from portable.aio import AsyncBucket
from portable.driver.storage import StorageCapabilities
from portable.driver.threads import pool_size
from portable.embedded.memory import MemoryStorage
from portable.errors import (
    AlreadyExists,
    CircuitOpen,
    IdempotencyConflict,
    InvalidArgument,
    InvalidKey,
    InvalidURL,
    NotFound,
    PortableError,
    TooLarge,
    Unavailable,
    Unsupported,
)
from portable.resilience import BreakerPolicy, ResiliencePolicy, RetryPolicy
from portable.storage import Bucket, open_bucket


class CountingMemory(MemoryStorage):
    """The real in-memory driver, counting the calls that reach it (to prove none did)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name in {"get", "get_range", "head", "put", "delete", "copy", "open_read", "open_write", "list_page",
                    "signed_url", "get_many", "put_many", "delete_many", "copy_many", "abort_incomplete",
                    "list_incomplete"}:
            super().__getattribute__("calls").append(name)
        return attr


class SmallMemory(CountingMemory):
    """A provider with tight limits, so the limit checks have something to refuse."""

    @property
    def capabilities(self) -> StorageCapabilities:
        import dataclasses

        return dataclasses.replace(super().capabilities, max_object_bytes=8, signed_urls=False)


# (name, call) pairs: each call takes a bucket of either face and returns what it returns (a
# coroutine on the async face). Every one must fail before any request, with the same error.
BAD_CALLS: list[tuple[str, Callable[[Any], Any]]] = [
    ("get empty key", lambda b: b.get("")),
    ("get non-str key", lambda b: b.get(b"k")),
    ("get dot-dot", lambda b: b.get("a/../b")),
    ("get_range negative", lambda b: b.get_range("k", -1, 3)),
    ("get_range end<start", lambda b: b.get_range("k", 5, 3)),
    ("head leading slash", lambda b: b.head("/k")),
    ("exists control char", lambda b: b.exists("a\x00b")),
    ("put str data", lambda b: b.put("k", "text")),
    ("put too large", lambda b: b.put("k", b"123456789")),
    ("put bad if_none_match", lambda b: b.put("k", b"x", if_none_match="etag")),
    ("put both conditions", lambda b: b.put("k", b"x", if_none_match="*", if_match='"e"')),
    ("put bad metadata name", lambda b: b.put("k", b"x", metadata={"bad name": "v"})),
    ("put non-ascii metadata", lambda b: b.put("k", b"x", metadata={"ok": "naïve"})),
    ("put bad header", lambda b: b.put("k", b"x", cache_control="a\nb")),
    ("put bad idempotency key", lambda b: b.put("k", b"x", idempotency_key="")),
    ("delete trailing slash", lambda b: b.delete("k/")),
    ("copy bad dst", lambda b: b.copy("k", "")),
    ("list_page size 0", lambda b: b.list_page(page_size=0)),
    ("list_page delimiter", lambda b: b.list_page(delimiter="|")),
    ("list_page prefix", lambda b: b.list_page("/p")),
    ("signed_url unsupported", lambda b: b.signed_url("k")),
    ("signed_url method", lambda b: b.signed_url("k", method="POST")),
    ("abort_incomplete negative", lambda b: b.abort_incomplete(-1)),
    ("list_incomplete nan", lambda b: b.list_incomplete(float("nan"))),
    ("get_many one str", lambda b: b.get_many("key")),
    ("get_many bad key", lambda b: b.get_many(["ok", ""])),
    ("delete_many one str", lambda b: b.delete_many("key")),
    ("put_many str data", lambda b: b.put_many({"k": "v"})),
    ("copy_many twice", lambda b: b.copy_many([("a", "same"), ("b", "same")])),
    ("copy_prefix overlap", lambda b: b.copy_prefix("p/", "p/x/")),
    ("iter_many concurrency", lambda b: b.iter_many(["k"], concurrency=0)),
    ("open bad mode", lambda b: b.open("k", "r+")),
    ("open rb with metadata", lambda b: b.open("k", "rb", metadata={"a": "b"})),
    ("open wb small part", lambda b: b.open("k", "wb", part_size="8MiB")),
    ("open bad key", lambda b: b.open("..")),
]


def outcome(fn: Callable[[], Any]) -> tuple[type[BaseException], str]:
    try:
        result = fn()
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    except PortableError as exc:
        return type(exc), str(exc)
    raise AssertionError("no error raised")


@pytest.mark.parametrize(("name", "call"), BAD_CALLS, ids=[n for n, _ in BAD_CALLS])
def test_bad_input_raises_the_same_typed_error_on_both_faces_before_any_request(name: str, call: Any) -> None:
    sync_driver, async_driver = SmallMemory(), SmallMemory()
    sync_face = Bucket(sync_driver, url="mem://small")
    async_face = AsyncBucket.from_sync(Bucket(async_driver, url="mem://small"))
    expected = outcome(lambda: call(sync_face))
    assert expected[0] in (InvalidKey, InvalidArgument, TooLarge, Unsupported)
    assert outcome(lambda: call(async_face)) == expected
    assert sync_driver.calls == [] and async_driver.calls == [], "a bad call reached the driver"


def test_open_bucket_validates_as_the_sync_one_does() -> None:
    with pytest.raises(InvalidURL) as sync_error:
        open_bucket("")
    with pytest.raises(InvalidURL) as async_error:
        portable.aio.open_bucket("")
    assert str(async_error.value) == str(sync_error.value)
    with pytest.raises(PortableError, match="nosuchscheme"):
        portable.aio.open_bucket("nosuchscheme://x")


def test_an_async_bucket_round_trips_and_closes_its_drivers(tmp_path: Path) -> None:
    async def main() -> None:
        async with portable.aio.open_bucket(f"file://{tmp_path / 'b'}") as bucket:
            assert isinstance(bucket, AsyncBucket) and "file" in repr(bucket)
            etag = await bucket.put("a/1", b"one", content_type="text/plain", metadata={"K": "v"})
            assert (await bucket.head("a/1")).etag == etag
            assert await bucket.get("a/1") == b"one"
            assert await bucket.get_range("a/1", 1) == b"ne"
            assert await bucket.exists("a/1") and not await bucket.exists("a/2")
            assert await bucket.copy("a/1", "b/1") in (None, (await bucket.head("b/1")).etag)
            assert [e.key async for e in bucket.list()] == ["a/1", "b/1"]
            assert [(e.key, e.is_prefix) async for e in bucket.list(delimiter="/")] == [("a/", True), ("b/", True)]
            assert await bucket.copy_prefix("a/", "c/") == 1
            assert await bucket.get_many(["a/1", "c/1"]) == {"a/1": b"one", "c/1": b"one"}
            await bucket.delete_many(["a/1", "b/1", "c/1"])
            assert [e async for e in bucket.list()] == []
            assert await bucket.list_incomplete(0) == []
            with pytest.raises(Unsupported):
                bucket.as_(int)
            assert bucket.as_(Path) == tmp_path / "b"

    asyncio.run(main())


def test_from_sync_shares_the_driver_and_the_guard() -> None:
    sync = open_bucket("mem://shared-guard")
    twin = AsyncBucket.from_sync(sync)
    assert twin.driver is sync.driver and twin._guard is sync._guard and twin.sync is sync
    asyncio.run(twin.put("k", b"v"))
    assert sync.get("k") == b"v"
    with pytest.raises(InvalidArgument, match=r"portable\.storage\.Bucket"):
        AsyncBucket.from_sync(twin)  # type: ignore[arg-type]


def test_a_breaker_tripped_through_the_async_face_is_open_for_the_sync_face() -> None:
    url = "chaos+mem://breaker-shared?seed=3&error_rate=1.0&faults=unavailable"
    policy = ResiliencePolicy(
        retry=RetryPolicy(max_attempts=1),
        breaker=BreakerPolicy(failure_rate=0.5, window=4, min_calls=4, open_seconds=60),
        retry_budget=None,
    )

    async def trip() -> None:
        async with portable.aio.open_bucket(url, policy=policy) as bucket:
            for i in range(4):
                with pytest.raises(Unavailable) as info:
                    await bucket.get(f"k{i}")
                assert not isinstance(info.value, CircuitOpen)
            with pytest.raises(CircuitOpen):
                await bucket.get("k-next")

    asyncio.run(trip())
    sync = open_bucket(url, policy=policy)  # another Bucket, the same endpoint: the same breaker
    with pytest.raises(CircuitOpen):
        sync.get("k0")
    sync.close()


def test_an_idempotent_put_repeats_safely_and_refuses_another_payload() -> None:
    async def main() -> None:
        async with portable.aio.open_bucket("mem://idem-async") as bucket:
            first = await bucket.put("once", b"v1", if_none_match="*", idempotency_key="job-1")
            assert await bucket.put("once", b"v1", if_none_match="*", idempotency_key="job-1") == first
            with pytest.raises(IdempotencyConflict):
                await bucket.put("once", b"v2", if_none_match="*", idempotency_key="job-1")
            with pytest.raises(AlreadyExists):
                await bucket.put("once", b"v1", if_none_match="*", idempotency_key="job-2")
            assert await bucket.get("once") == b"v1"

    asyncio.run(main())


def test_the_sync_and_async_idempotent_puts_recognise_each_other() -> None:
    sync = open_bucket("mem://idem-both")
    etag = sync.put("k", b"data", if_none_match="*", idempotency_key="key-1")
    twin = AsyncBucket.from_sync(sync)
    assert asyncio.run(twin.put("k", b"data", if_none_match="*", idempotency_key="key-1")) == etag


@pytest.mark.parametrize("scheme", ["mem", "file"])
def test_ten_thousand_concurrent_gets_use_a_bounded_number_of_threads(scheme: str, tmp_path: Path) -> None:
    url = f"mem://many-{random.getrandbits(32)}" if scheme == "mem" else f"file://{tmp_path / 'many'}"
    keys = [f"k/{i:03d}" for i in range(100)]

    async def main() -> tuple[int, int]:
        async with portable.aio.open_bucket(url) as bucket:
            await bucket.put_many({k: k.encode() for k in keys})
            before = threading.active_count()
            peak = before
            stop = asyncio.Event()

            async def watch() -> None:
                nonlocal peak
                while not stop.is_set():
                    peak = max(peak, threading.active_count())
                    await asyncio.sleep(0.001)

            watcher = asyncio.ensure_future(watch())
            results = await asyncio.gather(*(bucket.get(keys[i % 100]) for i in range(10_000)))
            stop.set()
            await watcher
            assert results[:3] == [b"k/000", b"k/001", b"k/002"] and len(results) == 10_000
            assert all(r == keys[i % 100].encode() for i, r in enumerate(results))
            return before, peak

    before, peak = asyncio.run(main())
    assert peak <= before + pool_size() + 2, f"{peak} threads at the peak, {before} before"


def test_a_cancelled_put_stores_the_whole_object_or_nothing(tmp_path: Path) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB

    async def main() -> None:
        async with portable.aio.open_bucket(f"file://{tmp_path / 'c'}") as bucket:
            rng = random.Random(16)
            loop = asyncio.get_running_loop()
            took = []
            for _ in range(3):
                started = loop.time()
                await bucket.put("obj/probe", data)
                took.append(loop.time() - started)
            whole = min(took)  # how long one put takes here, now
            cancelled = 0
            for i in range(200):
                task = asyncio.ensure_future(bucket.put(f"obj/{i}", data))
                # every other one at once (queued or just handed to a thread), the rest at a random
                # point: running in the thread, or done
                await asyncio.sleep(0 if i % 2 else rng.random() * whole * 1.2)
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    cancelled += 1
            assert cancelled >= 100
            await asyncio.sleep(0.3)  # a put already in a pool thread runs to its end
            async for info in bucket.list("obj/"):
                assert await bucket.get(info.key) == data, f"{info.key} is partial"
            assert await bucket.list_incomplete(0) == []

    asyncio.run(main())


def test_signed_url_on_a_provider_without_them_names_the_limitation() -> None:
    async def main() -> None:
        async with portable.aio.open_bucket("mem://no-sign") as bucket:
            with pytest.raises(Unsupported, match="cannot sign URLs"):
                await bucket.signed_url("k", expires=dt.timedelta(minutes=5))

    asyncio.run(main())


def test_leaving_iter_many_early_cancels_the_fetches_in_flight() -> None:
    async def main() -> None:
        async with portable.aio.open_bucket("mem://iter-early") as bucket:
            keys = [f"i/{n:03d}" for n in range(200)]
            await bucket.put_many({k: k.encode() for k in keys})
            seen = []
            stream = bucket.iter_many(keys, concurrency=4)
            async for key, body in stream:
                assert body == key.encode()
                seen.append(key)
                if len(seen) == 3:
                    break
            await stream.aclose()  # type: ignore[attr-defined]
            assert len(seen) == 3
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            assert others == [], f"fetches outlived the loop: {others}"
            with pytest.raises(NotFound, match="i/none"):
                [item async for item in bucket.iter_many(["i/000", "i/none"])]
            assert [k async for k, _ in bucket.iter_many(["i/000", "i/none"], missing_ok=True)] == ["i/000"]

    asyncio.run(main())


def test_a_deadline_set_around_awaits_holds_for_them() -> None:
    from portable.errors import DeadlineExceeded
    from portable.resilience import deadline

    driver = CountingMemory()
    bucket = AsyncBucket.from_sync(Bucket(driver, url="mem://deadline"))

    async def main() -> None:
        await bucket.put("k", b"v")
        with deadline(0.05):
            assert await bucket.get("k") == b"v"
            await asyncio.sleep(0.08)
            driver.calls.clear()
            with pytest.raises(DeadlineExceeded, match="before the call was made"):
                await bucket.get("k")
            with pytest.raises(DeadlineExceeded):
                async with bucket.open("w", "wb"):
                    pass
        assert driver.calls == [], "a call made after the deadline reached the driver"

    asyncio.run(main())


class NonBlockingMemory(MemoryStorage):
    """The in-memory driver declaring what is true of it: its calls never block."""

    never_blocks = True


def test_a_driver_that_never_blocks_is_served_inline_with_no_thread() -> None:
    from portable.driver.threads import shutdown_pool

    shutdown_pool()  # a later pooled call starts a new pool; none must start here
    bucket = AsyncBucket.from_sync(Bucket(NonBlockingMemory(), url="mem://inline"))
    main_thread = threading.get_ident()

    async def main() -> None:
        await bucket.put_many({f"k{i}": b"v" for i in range(50)})
        assert await asyncio.gather(*(bucket.get(f"k{i}") for i in range(50))) == [b"v"] * 50
        async with bucket.open("s", "wb") as writer:
            await writer.write(b"streamed")
        async with bucket.open("s") as reader:
            assert await reader.read() == b"streamed"
        assert [e.key async for e in bucket.list(page_size=7)][:2] == ["k0", "k1"]
        assert threading.get_ident() == main_thread

    asyncio.run(main())
    assert not [t for t in threading.enumerate() if t.name.startswith("portable-aio")], "a pool thread started"
