"""The async idempotency store driver: what :class:`portable.aio.AsyncIdempotencyStore` awaits.

As in :mod:`portable.driver.aio_storage`, one class serves every store:
:class:`AsyncStoreDriver` wraps a sync
:class:`~portable.driver.idempotency.IdempotencyStore` and, by default, runs
each method in the bounded pool of :mod:`portable.driver.threads` (the one
place sync becomes async). That covers every store of portable (memory,
sqlite, bucket, DynamoDB, Firestore, Redis) with no code of theirs. A store
whose calls never block (:class:`~portable.idempotency.MemoryStore`) declares
``never_blocks = True`` (as a storage driver does, see
:mod:`portable.driver.aio_storage`) and is called on the loop by an
:class:`InlineStoreDriver`; a store with a natively async client subclasses
:class:`AsyncStoreDriver` (set ``native = True``) and returns it from an
``async_driver()`` method.

:func:`async_store_driver` picks a store's driver: its ``async_driver()``
when it has one, an :class:`InlineStoreDriver` when it never blocks, else
the thread-adapted default.

Error contract: the sync store's, unchanged (IdempotencyConflict,
PreconditionFailed, TooLarge, InvalidArgument). ``extend`` and ``forget`` are
optional in the protocol; on a store without them they raise
:class:`~portable.errors.Unsupported` naming the store and the method.

Cancellation: :func:`settle` waits for an awaitable to finish whatever
cancels arrive meanwhile, and says whether one did; the run-once helpers use
it so that a claim made, or a release begun, when the caller was cancelled
still lands (then the cancel goes on).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..errors import Unsupported
from .idempotency import Claim, IdempotencyStore
from .threads import run_blocking

__all__ = [
    "AsyncStore",
    "AsyncStoreDriver",
    "InlineStoreDriver",
    "as_async_store",
    "async_store_driver",
    "settle",
]

T = TypeVar("T")


@runtime_checkable
class AsyncStore(Protocol):
    """What the async run-once helpers need of a store: the protocol's three methods, awaited."""

    async def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim: ...
    async def complete(self, key: str, token: str, result: bytes | None) -> None: ...
    async def release(self, key: str, token: str) -> None: ...


class AsyncStoreDriver:
    """Async face of one idempotency store. The default runs the sync store in the bounded pool.

    Attributes:
        sync: the sync store (every method not overridden here).
    """

    #: whether this class serves calls on the event loop without the pool
    native: bool = False

    def __init__(self, sync: IdempotencyStore) -> None:
        self.sync = sync

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.sync!r})"

    async def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        """:meth:`IdempotencyStore.claim`, awaited."""
        return await run_blocking(self.sync.claim, key, fingerprint, lease=lease, ttl=ttl)

    async def complete(self, key: str, token: str, result: bytes | None) -> None:
        """:meth:`IdempotencyStore.complete`, awaited."""
        await run_blocking(self.sync.complete, key, token, result)

    async def release(self, key: str, token: str) -> None:
        """:meth:`IdempotencyStore.release`, awaited."""
        await run_blocking(self.sync.release, key, token)

    async def extend(self, key: str, token: str, lease: float) -> None:
        """The store's ``extend(key, token, lease)``, awaited.

        Raises:
            Unsupported: the store has no ``extend``.
        """
        await run_blocking(self.optional("extend"), key, token, lease)

    async def forget(self, key: str, token: str) -> None:
        """The store's ``forget(key, token)``, awaited.

        Raises:
            Unsupported: the store has no ``forget``.
        """
        await run_blocking(self.optional("forget"), key, token)

    def optional(self, name: str) -> Any:
        """The sync store's optional method ``name``; Unsupported, naming both, when it lacks it."""
        method = getattr(self.sync, name, None)
        if not callable(method):
            raise Unsupported(
                f"{type(self.sync).__name__} has no {name}(): the store cannot {name} a claim "
                "(the memory, sqlite, bucket, DynamoDB, Firestore and Redis stores can)"
            )
        return method

    async def aclose(self) -> None:
        """Release the async side's own connections (native drivers); the sync store is closed by its owner."""


class InlineStoreDriver(AsyncStoreDriver):
    """Calls the sync store on the loop: for stores whose calls never block (an in-memory dict under a lock)."""

    native = True

    async def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        return self.sync.claim(key, fingerprint, lease=lease, ttl=ttl)

    async def complete(self, key: str, token: str, result: bytes | None) -> None:
        self.sync.complete(key, token, result)

    async def release(self, key: str, token: str) -> None:
        self.sync.release(key, token)

    async def extend(self, key: str, token: str, lease: float) -> None:
        self.optional("extend")(key, token, lease)

    async def forget(self, key: str, token: str) -> None:
        self.optional("forget")(key, token)


def async_store_driver(store: IdempotencyStore) -> AsyncStoreDriver:
    """The async driver of ``store``: its ``async_driver()`` if it has one, an
    :class:`InlineStoreDriver` if it declares ``never_blocks = True``, else :class:`AsyncStoreDriver`."""
    hook = getattr(store, "async_driver", None)
    if callable(hook):
        driver = hook()
        if not isinstance(driver, AsyncStoreDriver):
            raise TypeError(f"{type(store).__name__}.async_driver() returned {type(driver).__name__}, not an AsyncStoreDriver")
        return driver
    if getattr(store, "never_blocks", False) is True:
        return InlineStoreDriver(store)
    return AsyncStoreDriver(store)


def as_async_store(store: IdempotencyStore | AsyncStore) -> AsyncStore:
    """``store`` itself if its methods are coroutines (an async store), else its :func:`async_store_driver`."""
    if inspect.iscoroutinefunction(getattr(store, "claim", None)):
        return store  # type: ignore[return-value]
    return async_store_driver(store)  # type: ignore[arg-type]


async def settle(aw: Awaitable[T]) -> tuple[asyncio.Future[T], bool]:
    """Await ``aw`` to its end even if the caller is cancelled meanwhile.

    Returns:
        The finished future (its result or exception is the caller's to read)
        and whether the caller was cancelled while it ran; a caller told True
        must finish its own clean-up and raise CancelledError.
    """
    future = asyncio.ensure_future(aw)
    interrupted = False
    while not future.done():
        try:
            await asyncio.wait((future,))
        except asyncio.CancelledError:
            interrupted = True  # asyncio.wait leaves the future running: wait on
    return future, interrupted
