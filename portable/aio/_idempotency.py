"""AsyncIdempotencyStore: the async face of :mod:`portable.idempotency`'s stores.

>>> import asyncio, portable.aio
>>> async def main() -> bytes | None:
...     async with portable.aio.open_store("mem://") as store:
...         claim = await store.claim("order-1", "fp", lease=10, ttl=100)
...         await store.complete("order-1", claim.token, b"done")
...         return (await store.claim("order-1", "fp", lease=10, ttl=100)).result
>>> asyncio.run(main())
b'done'

Same methods, arguments, errors and semantics as the sync stores (the
:class:`~portable.driver.idempotency.IdempotencyStore` protocol), awaited.
Every store works: the calls run on the store's async driver
(:mod:`portable.driver.aio_idempotency`), the bounded thread pool for the
stores with blocking clients (sqlite, bucket, DynamoDB, Firestore, Redis) and
the event loop for the memory store.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from ..config import Profile
from ..driver.aio_idempotency import AsyncStoreDriver, async_store_driver
from ..driver.idempotency import (
    DEFAULT_LEASE,
    DEFAULT_TTL,
    Claim,
    IdempotencyStore,
    check_claim_args,
)
from ..driver.threads import run_blocking
from ..errors import InvalidArgument
from ..idempotency import arun_once, idempotent
from ..idempotency import open_store as _open_sync_store
from ..resilience import ResiliencePolicy
from ..urls import ParsedURL

__all__ = ["AsyncIdempotencyStore", "open_store"]

R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


class AsyncIdempotencyStore:
    """An idempotency store, awaited. Open one with :func:`open_store` or wrap a sync one with :meth:`from_sync`.

    Attributes:
        sync: the sync store underneath (shared with whoever else holds it).
        driver: the async driver the calls go through.
    """

    __slots__ = ("driver", "sync")

    def __init__(self, store: IdempotencyStore, driver: AsyncStoreDriver | None = None) -> None:
        if not isinstance(store, IdempotencyStore) or isinstance(store, AsyncIdempotencyStore):
            raise InvalidArgument(f"AsyncIdempotencyStore wraps an IdempotencyStore, got {type(store).__name__}")
        self.sync = store
        self.driver = driver or async_store_driver(store)

    @classmethod
    def from_sync(cls, store: IdempotencyStore) -> AsyncIdempotencyStore:
        """The async face of ``store``, sharing its records and connections.

        Closing the async face closes ``store`` too (where it has a ``close``).
        """
        return cls(store)

    def __repr__(self) -> str:
        return f"AsyncIdempotencyStore({self.sync!r})"

    async def __aenter__(self) -> AsyncIdempotencyStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def max_result_bytes(self) -> int:
        """The largest result the store keeps, in bytes (the sync store's setting)."""
        limit: int = getattr(self.sync, "max_result_bytes")  # noqa: B009 - optional in the protocol
        return limit

    # -- the protocol -------------------------------------------------------
    async def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        """Claim ``key`` for a payload of ``fingerprint``; see :meth:`IdempotencyStore.claim`.

        Raises:
            InvalidArgument: a bad key, fingerprint, lease or ttl, before any request.
            IdempotencyConflict: the record holds a different fingerprint.
        """
        check_claim_args(key, fingerprint, lease, ttl)
        return await self.driver.claim(key, fingerprint, lease=lease, ttl=ttl)

    async def complete(self, key: str, token: str, result: bytes | None) -> None:
        """Mark the claim done with ``result``; see :meth:`IdempotencyStore.complete`.

        Raises:
            PreconditionFailed: the lease was lost.
            TooLarge: ``result`` is over ``max_result_bytes``; the claim is kept.
        """
        await self.driver.complete(key, token, result)

    async def release(self, key: str, token: str) -> None:
        """Give the claim up; see :meth:`IdempotencyStore.release`.

        Raises:
            PreconditionFailed: the lease was lost.
        """
        await self.driver.release(key, token)

    async def extend(self, key: str, token: str, lease: float) -> None:
        """Push a held claim's lease ``lease`` seconds from now (long effects).

        Raises:
            PreconditionFailed: the lease was lost.
            Unsupported: the store cannot extend a claim.
        """
        await self.driver.extend(key, token, lease)

    async def forget(self, key: str, token: str) -> None:
        """Give a held claim up and start its counts again.

        Raises:
            PreconditionFailed: the lease was lost.
            Unsupported: the store cannot forget a claim.
        """
        await self.driver.forget(key, token)

    # -- running an effect once --------------------------------------------
    async def run_once(
        self,
        key: str,
        payload_fingerprint: str,
        fn: Callable[[], Awaitable[R]],
        *,
        lease: float = DEFAULT_LEASE,
        ttl: float = DEFAULT_TTL,
        wait: float = 0.0,
        **codec: Any,
    ) -> R:
        """:func:`portable.idempotency.arun_once` on this store (``encode=``/``decode=`` as there).

        A cancelled call releases its claim before the cancel goes on.
        """
        return await arun_once(self, key, payload_fingerprint, fn, lease=lease, ttl=ttl, wait=wait, **codec)

    def idempotent(
        self,
        *,
        key: str | Callable[..., str],
        payload: Callable[..., bytes | str | Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> Callable[[F], F]:
        """:func:`portable.idempotency.idempotent` on this store, for ``async def`` functions."""
        return idempotent(self, key=key, payload=payload, **options)  # type: ignore[return-value]

    async def aclose(self) -> None:
        """Close the async driver, then the sync store (where it has a ``close``)."""
        try:
            await self.driver.aclose()
        finally:
            close = getattr(self.sync, "close", None)
            if callable(close):
                await run_blocking(close)

    async def close(self) -> None:
        """The same as :meth:`aclose`."""
        await self.aclose()


def open_store(
    url: str | ParsedURL | None = None,
    *,
    profile: str | Profile | None = None,
    policy: ResiliencePolicy | None = None,
) -> AsyncIdempotencyStore:
    """Open the store named by ``url`` (or the profile's ``idempotency``) as an AsyncIdempotencyStore.

    Same URLs, options and errors as :func:`portable.idempotency.open_store`;
    ``aclose()`` (or ``async with``) closes the store.
    """
    return AsyncIdempotencyStore(_open_sync_store(url, profile=profile, policy=policy))
