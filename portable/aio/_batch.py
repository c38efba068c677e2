"""Async batches: ``get_many``, ``iter_many``, ``put_many``, ``delete_many``, ``copy_many``, ``copy_prefix``.

The twins of :mod:`portable.storage._batch`: the same arguments, checks,
result types and errors. The async driver moves a batch with its own bounded
concurrency (the thread-adapted default runs the sync driver's batch path in
the pool; a native engine runs tasks under a semaphore) and reports each
item's outcome; a failed item is settled by the same rule as on the sync
face (:func:`~portable.storage._batch.worth_retrying`) and retried alone.
``iter_many`` runs at most ``concurrency`` guarded ``get`` tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from ..driver.aio_storage import AsyncStorageDriver
from ..driver.storage import ObjectInfo, StorageCapabilities
from ..errors import NotFound
from ..resilience import Guard
from ..storage._batch import (
    COPY_PREFIX_BATCH,
    check_concurrency,
    driver_batches,
    missing,
    worth_retrying,
)
from ..storage._requests import (
    copy_many_request,
    copy_prefix_request,
    keys_request,
    put_many_request,
)

__all__ = ["AsyncBatchOperations"]


class AsyncBatchOperations:
    """The batch half of :class:`~portable.aio.AsyncBucket`."""

    __slots__ = ()

    _adriver: AsyncStorageDriver
    _caps: StorageCapabilities
    _guard: Guard
    _max_key: int
    provider: str
    list: Callable[..., AsyncIterator[ObjectInfo]]

    async def get_many(self, keys: Iterable[str], *, missing_ok: bool = False) -> dict[str, bytes]:
        """Fetch many objects concurrently; see :meth:`portable.storage.Bucket.get_many`.

        Raises:
            InvalidKey / InvalidArgument: before any request.
            NotFound: a key has no object (and not ``missing_ok``).
        """
        checked = keys_request(keys, self._max_key)
        out: dict[str, bytes] = {}
        for batch in driver_batches(checked):
            async for key, result in self._guard.aobserved_batch("read", "get_many", batch, self._adriver.get_many(batch)):
                if isinstance(result, BaseException):
                    data = await self._retry_alone("read", f"get {key}", result, self._adriver.get, key)
                    if data is None:
                        if missing_ok:
                            continue
                        raise missing(key, self.provider)
                    result = data
                out[key] = result
        return out

    def iter_many(
        self, keys: Iterable[str], *, missing_ok: bool = False, concurrency: int | None = None
    ) -> AsyncIterator[tuple[str, bytes]]:
        """Fetch many objects concurrently, yielding ``(key, bytes)`` in completion order: ``async for``.

        The same bound as the sync ``iter_many``: at most ``concurrency`` bodies
        exist at once (in flight, done and not taken, and the one the caller
        holds). Keys and ``concurrency`` are checked at the call. Leaving the
        loop (or ``aclose()``) cancels the fetches in flight and waits for them.

        Raises:
            InvalidKey / InvalidArgument: at the call.
            NotFound: a key has no object (and not ``missing_ok``), when the loop reaches it.
        """
        checked = keys_request(keys, self._max_key)
        limit = check_concurrency(concurrency, self._adriver.batch_concurrency)
        return self._stream(checked, missing_ok, limit)

    async def _stream(self, keys: Sequence[str], missing_ok: bool, limit: int) -> AsyncIterator[tuple[str, bytes]]:
        if not keys:
            return
        call, get = self._guard.acall, self._adriver.get

        async def fetch(key: str) -> tuple[str, bytes | None, NotFound | None]:
            try:
                return key, await call("read", f"get {key}", get, key), None
            except NotFound as exc:
                return key, None, exc

        pending = iter(keys)
        running: set[asyncio.Future[tuple[str, bytes | None, NotFound | None]]] = set()
        try:
            for key in pending:
                running.add(asyncio.ensure_future(fetch(key)))
                if len(running) >= limit:
                    break
            while running:
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                task = done.pop()  # one at a time: each taken result frees one slot
                running.discard(task)
                key, data, error = task.result()  # another error than NotFound raises here
                del task
                if error is not None:
                    if not missing_ok:
                        raise missing(key, self.provider) from error
                else:
                    assert data is not None
                    yield key, data
                    del data  # the caller holds it now; this frame must not keep it alive
                for key in pending:
                    running.add(asyncio.ensure_future(fetch(key)))
                    break
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    async def put_many(
        self,
        items: Mapping[str, bytes] | Iterable[tuple[str, bytes]],
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        cache_control: str | None = None,
        content_encoding: str | None = None,
        content_disposition: str | None = None,
    ) -> dict[str, str | None]:
        """Store many objects concurrently; return each key's etag. See :meth:`portable.storage.Bucket.put_many`."""
        checked, options = put_many_request(
            items, self._caps, self.provider, content_type, metadata, cache_control, content_encoding,
            content_disposition,
        )
        out: dict[str, str | None] = {}
        for batch in driver_batches(checked):
            results = self._adriver.put_many(batch, options)
            async for key, result in self._guard.aobserved_batch("write", "put_many", batch, results):
                if isinstance(result, BaseException):
                    data = dict(batch)[key]
                    result = await self._retry_alone(
                        "write", f"put {key}", result, self._adriver.put, key, data, options
                    )
                out[key] = result
        return out

    async def delete_many(self, keys: Iterable[str]) -> None:
        """Delete many objects concurrently; missing keys are not an error."""
        checked = keys_request(keys, self._max_key)
        for batch in driver_batches(checked):
            results = self._adriver.delete_many(batch)
            async for key, result in self._guard.aobserved_batch("write", "delete_many", batch, results):
                if isinstance(result, BaseException):
                    await self._retry_alone("write", f"delete {key}", result, self._adriver.delete, key)

    async def copy_many(self, pairs: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str | None]:
        """Copy many objects concurrently; return each destination's etag. See :meth:`portable.storage.Bucket.copy_many`."""
        checked = copy_many_request(pairs, self._max_key)
        out: dict[str, str | None] = {}
        for batch in driver_batches(checked):
            source_of = {dst: src for src, dst in batch}
            async for dst, result in self._guard.aobserved_batch("write", "copy_many", batch, self._adriver.copy_many(batch)):
                if isinstance(result, BaseException):
                    src = source_of[dst]
                    result = await self._retry_alone(
                        "write", f"copy {src} -> {dst}", result, self._adriver.copy, src, dst
                    )
                out[dst] = result
        return out

    async def copy_prefix(self, src_prefix: str, dst_prefix: str) -> int:
        """Copy every object under ``src_prefix`` to the same key under ``dst_prefix``; return how many.

        See :meth:`portable.storage.Bucket.copy_prefix`.
        """
        src, dst = copy_prefix_request(src_prefix, dst_prefix)
        copied = 0
        batch: list[tuple[str, str]] = []
        listing = self.list(src, page_size=COPY_PREFIX_BATCH)
        async with contextlib.aclosing(listing):  # type: ignore[type-var]
            async for info in listing:
                batch.append((info.key, dst + info.key[len(src) :]))
                if len(batch) >= COPY_PREFIX_BATCH:
                    copied += len(await self.copy_many(batch))
                    batch = []
        if batch:
            copied += len(await self.copy_many(batch))
        return copied

    async def _retry_alone(
        self,
        op_class: Literal["read", "write"],
        what: str,
        first: BaseException,
        fn: Callable[..., Awaitable[Any]],
        *args: Any,
    ) -> Any:
        """Settle one failed batch item as the sync face does: raise it if final, else retry it alone."""
        if not worth_retrying(self._guard, op_class, what, first):
            return None
        try:
            return await self._guard.acall(op_class, what, fn, *args)
        except NotFound:
            if op_class == "read":
                return None
            raise

