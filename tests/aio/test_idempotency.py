"""portable.aio.AsyncIdempotencyStore and arun_once: the sync stores' errors, and cancels that leave no claim behind.

The store contract itself runs on both faces (tests/idempotency/test_store_contract.py);
these are the async face's own promises, on the real memory, sqlite and file-bucket stores.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import portable.aio
from portable.aio import AsyncIdempotencyStore
from portable.driver.aio_idempotency import AsyncStoreDriver, InlineStoreDriver
from portable.driver.idempotency import Claim, IdempotencyStore
from portable.errors import (
    IdempotencyConflict,
    InProgress,
    InvalidArgument,
    PortableError,
    UnknownScheme,
    Unsupported,
)
from portable.idempotency import (
    BucketStore,
    MemoryStore,
    SqliteStore,
    arun_once,
    fingerprint,
    idempotent,
)
from portable.storage import open_bucket

FP = fingerprint(b"payload")


class Slow:
    """A real store whose claim and complete take ``delay`` seconds in their thread (a slow network)."""

    def __init__(self, inner: IdempotencyStore, delay: float) -> None:
        self.inner = inner
        self.delay = delay
        self.claims = 0

    def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        self.claims += 1
        time.sleep(self.delay)
        return self.inner.claim(key, fingerprint, lease=lease, ttl=ttl)

    def complete(self, key: str, token: str, result: bytes | None) -> None:
        time.sleep(self.delay)
        self.inner.complete(key, token, result)

    def release(self, key: str, token: str) -> None:
        time.sleep(self.delay)
        self.inner.release(key, token)


class Minimal:
    """A store with only the protocol's three methods (no extend, no forget)."""

    def __init__(self) -> None:
        self.inner = MemoryStore()

    def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        return self.inner.claim(key, fingerprint, lease=lease, ttl=ttl)

    def complete(self, key: str, token: str, result: bytes | None) -> None:
        self.inner.complete(key, token, result)

    def release(self, key: str, token: str) -> None:
        self.inner.release(key, token)


@pytest.fixture(params=["memory", "sqlite", "file-bucket"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[IdempotencyStore]:
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "sqlite":
        s = SqliteStore(tmp_path / "idem.db")
        yield s
        s.close()
    else:
        bucket = open_bucket(f"file://{tmp_path}/records")
        yield BucketStore(bucket)
        bucket.close()


def status_of(store: IdempotencyStore, key: str) -> str:
    """What a fresh claim meets: "acquired" means the key is free (then it is released again)."""
    claim = store.claim(key, FP, lease=30, ttl=300)
    if claim.status == "acquired":
        assert claim.token
        store.release(key, claim.token)
    return claim.status


# ---------------------------------------------------------------- the same errors
@pytest.mark.parametrize(
    ("key", "fp", "lease", "ttl"),
    [("", FP, 1, 10), ("k" * 1025, FP, 1, 10), ("k", "", 1, 10), ("k", FP, 0, 10), ("k", FP, 10, 1)],
)
def test_bad_claims_are_the_sync_stores_errors_before_any_request(key: str, fp: str, lease: float, ttl: float) -> None:
    slow = Slow(MemoryStore(), 0)
    with pytest.raises(InvalidArgument) as sync_err:
        MemoryStore().claim(key, fp, lease=lease, ttl=ttl)
    with pytest.raises(InvalidArgument) as async_err:
        asyncio.run(AsyncIdempotencyStore.from_sync(slow).claim(key, fp, lease=lease, ttl=ttl))  # type: ignore[arg-type]
    assert str(async_err.value) == str(sync_err.value)
    assert slow.claims == 0


def test_a_conflict_is_the_same_error(store: IdempotencyStore) -> None:
    astore = AsyncIdempotencyStore.from_sync(store)

    async def scenario() -> None:
        claim = await astore.claim("k", FP, lease=10, ttl=100)
        assert claim.status == "acquired"
        with pytest.raises(IdempotencyConflict, match="different payload"):
            await astore.claim("k", fingerprint(b"other"), lease=10, ttl=100)

    asyncio.run(scenario())


def test_a_store_without_extend_or_forget_says_so() -> None:
    astore = AsyncIdempotencyStore.from_sync(Minimal())  # type: ignore[arg-type]

    async def scenario() -> None:
        claim = await astore.claim("k", FP, lease=10, ttl=100)
        assert claim.token
        for call in (astore.extend("k", claim.token, 5), astore.forget("k", claim.token)):
            with pytest.raises(Unsupported, match="Minimal has no"):
                await call

    asyncio.run(scenario())


def test_open_store_refuses_what_the_sync_one_refuses(tmp_path: Path) -> None:
    with pytest.raises(UnknownScheme):
        portable.aio.open_store("nosuch://x")
    with pytest.raises(PortableError):
        portable.aio.open_store(f"sqlite://{tmp_path}/x.db?nosuch=1")

    async def use() -> bytes | None:
        async with portable.aio.open_store(f"sqlite://{tmp_path}/ok.db") as astore:
            assert isinstance(astore.sync, SqliteStore)
            claim = await astore.claim("k", FP, lease=10, ttl=100)
            assert claim.token
            await astore.complete("k", claim.token, b"r")
            return (await astore.claim("k", FP, lease=10, ttl=100)).result

    assert asyncio.run(use()) == b"r"


def test_the_memory_store_runs_on_the_loop_and_the_others_in_the_pool(tmp_path: Path) -> None:
    assert type(AsyncIdempotencyStore.from_sync(MemoryStore()).driver) is InlineStoreDriver
    sqlite = SqliteStore(tmp_path / "x.db")
    assert type(AsyncIdempotencyStore.from_sync(sqlite).driver) is AsyncStoreDriver
    sqlite.close()
    with pytest.raises(InvalidArgument):
        AsyncIdempotencyStore.from_sync(AsyncIdempotencyStore.from_sync(MemoryStore()))  # type: ignore[arg-type]


# ---------------------------------------------------------------- running once
def test_run_once_and_the_decorator_run_the_effect_once(store: IdempotencyStore) -> None:
    astore = AsyncIdempotencyStore.from_sync(store)
    runs: list[int] = []

    @astore.idempotent(key="order", namespace="")
    async def charge(order: str, cents: int) -> dict[str, int]:
        runs.append(cents)
        await asyncio.sleep(0.5)  # long enough for the racing call to meet the claim
        return {"charged": cents}

    async def effect() -> str:
        runs.append(0)
        return "done"

    async def scenario() -> list[Any]:
        together = await asyncio.gather(charge("o-1", 5), charge("o-1", 5), return_exceptions=True)
        return [*together, await charge("o-1", 5), await astore.run_once("k", FP, effect), await astore.run_once("k", FP, effect)]

    first, second, third, once, again = asyncio.run(scenario())
    ran, racing = (first, second) if isinstance(second, InProgress) else (second, first)
    assert ran == {"charged": 5} and third == {"charged": 5}
    assert isinstance(racing, InProgress)  # the racing call met the running claim (wait=0)
    assert once == again == "done"
    assert runs == [5, 0]


def test_an_async_store_cannot_decorate_a_plain_function() -> None:
    astore = AsyncIdempotencyStore.from_sync(MemoryStore())
    with pytest.raises(InvalidArgument, match="plain function"):

        @idempotent(astore, key="x")
        def plain(x: str) -> str:
            return x


# ---------------------------------------------------------------- cancelled, the claim goes back
def test_a_cancelled_effect_releases_its_claim(store: IdempotencyStore) -> None:
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    async def scenario() -> None:
        task = asyncio.create_task(arun_once(store, "k", FP, forever))
        while not started.is_set():
            await asyncio.sleep(0.001)
        assert status_of(store, "k") == "in_progress"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    claim = store.claim("k", FP, lease=30, ttl=300)
    assert claim.status == "acquired"
    assert (claim.starts, claim.failures) in ((2, 1), (None, None))


@pytest.mark.parametrize("timed_out", [False, True])
def test_a_cancel_during_the_claim_lets_it_land_then_releases_it(store: IdempotencyStore, timed_out: bool) -> None:
    slow = Slow(store, 0.2)
    ran: list[bool] = []

    async def effect() -> None:
        ran.append(True)

    async def scenario() -> None:
        task = asyncio.create_task(arun_once(slow, "k", FP, effect))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)  # the claim is in its thread now
        if timed_out:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.01):
                    await asyncio.shield(task)
        task.cancel()
        task.cancel()  # a second cancel does not cut the release short
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    time.sleep(slow.delay + 0.1)  # a claim left running in its thread would have landed by now
    assert ran == []
    assert slow.claims == 1
    assert status_of(store, "k") == "acquired", "the cancelled call left its claim IN_PROGRESS"


def test_a_cancel_during_the_completion_lets_it_land(store: IdempotencyStore) -> None:
    slow = Slow(store, 0.2)
    ran: list[bool] = []

    async def effect() -> str:
        ran.append(True)
        return "result"

    async def scenario() -> None:
        task = asyncio.create_task(arun_once(slow, "k", FP, effect))  # type: ignore[arg-type]
        while not ran:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the completion is in its thread now
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    done = store.claim("k", FP, lease=30, ttl=300)
    assert done == Claim("completed", None, b'"result"')


def test_asyncio_timeout_around_run_once_is_a_timeout_and_frees_the_key(store: IdempotencyStore) -> None:
    async def slow_effect() -> None:
        await asyncio.sleep(3600)

    async def scenario() -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await arun_once(store, "k", FP, slow_effect)

    asyncio.run(scenario())
    assert status_of(store, "k") == "acquired"


def test_a_cancel_wins_over_the_error_of_the_claim_it_waited_for(store: IdempotencyStore) -> None:
    taken = store.claim("k", fingerprint(b"another payload"), lease=30, ttl=300)
    assert taken.status == "acquired"
    slow = Slow(store, 0.2)

    async def effect() -> None:
        raise AssertionError("must not run")

    async def scenario() -> None:
        task = asyncio.create_task(arun_once(slow, "k", FP, effect))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)  # the claim (a conflict) is in its thread now
        task.cancel()
        with pytest.raises(asyncio.CancelledError):  # not the IdempotencyConflict: the caller cancelled
            await task

    asyncio.run(scenario())
    with pytest.raises(IdempotencyConflict):
        asyncio.run(arun_once(store, "k", FP, effect))
