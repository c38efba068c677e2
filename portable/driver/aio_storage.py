"""The async storage driver: what :class:`portable.aio.AsyncBucket` awaits.

One class serves both kinds of engine. :class:`AsyncStorageDriver` wraps a
sync :class:`~portable.driver.storage.StorageDriver` and, by default, runs
each sync method in the bounded pool of :mod:`portable.driver.threads` (the
one place sync becomes async). An engine whose library is natively async
(obstore, aiobotocore, gcsfs, the Azure ``aio`` clients) subclasses it and
overrides the methods it can serve on the event loop; whatever it leaves
alone stays thread-adapted, so a partial native driver is still complete.

A sync driver names its async twin with ``StorageDriver.async_driver()``;
the default returns ``AsyncStorageDriver(self)``. A sync driver whose calls
never block (the in-memory one: dictionary operations under a lock) says so
with a class attribute ``never_blocks = True``; its calls then run inline on
the event loop, with no thread hop (see :func:`runner_for`).

Error contract: the same as the sync driver's. Methods raise the native
library's errors; the portable layer classifies them through the *sync*
driver (``code_of``, ``is_retryable``, ``retry_after``), which a native async
driver must therefore teach about the errors its async client raises.
Capabilities, scheme, endpoint and known differences are the sync driver's.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import IO, TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from .threads import run_blocking

if TYPE_CHECKING:  # names only: driver.storage imports this module in StorageDriver.async_driver
    from .storage import (
        ListPage,
        ObjectInfo,
        StorageCapabilities,
        StorageDriver,
        WriteOptions,
        WriteStream,
    )

__all__ = ["AsyncReadStream", "AsyncStorageDriver", "AsyncWriteStream", "runner_for"]

T = TypeVar("T")

class Runner(Protocol):
    """How an adapted call is awaited: :func:`~portable.driver.threads.run_blocking` (the pool) or inline."""

    def __call__(self, fn: Callable[..., T], /, *args: Any) -> Awaitable[T]: ...


async def _inline(fn: Callable[..., T], /, *args: Any) -> T:
    """Call ``fn(*args)`` on the loop: for drivers whose calls never block."""
    return fn(*args)


def runner_for(sync: object) -> Runner:
    """How to await ``sync``'s methods: inline when it declares ``never_blocks = True``, else in the pool.

    Only ``True`` itself counts: anything else (absent, a truthy non-bool) keeps the pool,
    the safe choice for a driver that may block.
    """
    return _inline if getattr(sync, "never_blocks", False) is True else run_blocking


class AsyncReadStream:
    """An async binary reader over a sync one (the default); native drivers subclass it.

    ``read(n)`` returns up to ``n`` bytes (all that is left with ``-1``),
    ``b""`` at the end. ``seek``/``tell`` exist where the sync stream is
    seekable (``seekable()`` says).
    """

    def __init__(self, raw: IO[bytes], run: Runner = run_blocking) -> None:
        self._raw = raw
        self._run = run

    async def read(self, n: int = -1) -> bytes:
        return await self._run(self._raw.read, n)

    def seekable(self) -> bool:
        return self._raw.seekable()

    async def seek(self, offset: int, whence: int = 0) -> int:
        return await self._run(self._raw.seek, offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    async def close(self) -> None:
        await self._run(self._raw.close)


class AsyncWriteStream:
    """An async streamed write over a sync :class:`WriteStream` (the default).

    Same contract as WriteStream: nothing visible before :meth:`commit`, a
    failed :meth:`write` appends nothing, :meth:`abort` leaves no object and
    no orphaned parts.

    The sync stream sees one call at a time, in order, even when an awaiting
    task is cancelled (or an attempt times out) while its call still runs in
    a pool thread: the next call (the abort that follows a cancel, a retried
    write) waits for that one to end first, so an abort never races a part
    upload.
    """

    def __init__(self, raw: WriteStream, run: Runner = run_blocking) -> None:
        self._raw = raw
        self._run = run
        self._last: asyncio.Future[Any] | None = None

    async def _serial(self, fn: Callable[..., T], *args: Any) -> T:
        last = self._last
        if last is not None and not last.done():
            await asyncio.wait([last])
        call: asyncio.Future[T] = asyncio.ensure_future(self._run(fn, *args))
        self._last = call
        call.add_done_callback(_retrieved)
        # shielded: a cancel stops this wait, not the call, which the next call waits for
        return await asyncio.shield(call)

    async def write(self, data: bytes) -> None:
        await self._serial(self._raw.write, data)

    async def commit(self) -> str | None:
        return await self._serial(self._raw.commit)

    async def abort(self) -> None:
        await self._serial(self._raw.abort)

    async def suspend(self) -> None:
        """Keep a resumable stream's parts for a later resume (see ``ResumableWriteStream.suspend``);
        abort any other stream."""
        raw = self._raw
        await self._serial(getattr(raw, "suspend", raw.abort))


class AsyncStorageDriver:
    """Async face of one storage driver. The default runs the sync driver in the bounded pool.

    Attributes:
        sync: the sync driver (classification, capabilities, and every method
            not overridden here).
    """

    #: whether this class serves requests on the event loop (True in native subclasses)
    native: bool = False

    def __init__(self, sync: StorageDriver) -> None:
        self.sync = sync
        self._run: Runner = runner_for(sync)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.sync!r})"

    # -- what the sync driver says --------------------------------------
    @property
    def scheme(self) -> str:
        return self.sync.scheme

    @property
    def endpoint(self) -> str:
        return self.sync.endpoint

    @property
    def capabilities(self) -> StorageCapabilities:
        return self.sync.capabilities

    @property
    def batch_concurrency(self) -> int:
        return self.sync.batch_concurrency

    # -- whole objects ----------------------------------------------------
    async def get(self, key: str) -> bytes:
        return await self._run(self.sync.get, key)

    async def get_range(self, key: str, start: int, end: int | None) -> bytes:
        return await self._run(self.sync.get_range, key, start, end)

    async def head(self, key: str) -> ObjectInfo:
        return await self._run(self.sync.head, key)

    async def put(self, key: str, data: bytes, options: WriteOptions) -> str | None:
        return await self._run(self.sync.put, key, data, options)

    async def delete(self, key: str) -> None:
        await self._run(self.sync.delete, key)

    async def copy(self, src: str, dst: str) -> str | None:
        return await self._run(self.sync.copy, src, dst)

    # -- streams ------------------------------------------------------------
    async def open_read(self, key: str) -> AsyncReadStream:
        return AsyncReadStream(await self._run(self.sync.open_read, key), self._run)

    async def open_write(self, key: str, options: WriteOptions, part_size: int) -> AsyncWriteStream:
        return AsyncWriteStream(await self._run(self.sync.open_write, key, options, part_size), self._run)

    # -- listing ------------------------------------------------------------
    async def list_page(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        return await self._run(self.sync.list_page, prefix, delimiter, start_after, page_size, token)

    # -- optional -----------------------------------------------------------
    async def signed_url(
        self, key: str, method: Literal["GET", "PUT"], expires: dt.timedelta, content_type: str | None
    ) -> str:
        return await self._run(self.sync.signed_url, key, method, expires, content_type)

    def get_many(self, keys: list[str]) -> AsyncIterator[tuple[str, bytes | BaseException]]:
        """Fetch many objects; yield each key with its bytes or its error, as each finishes.

        The default runs the sync driver's batch path in the pool, a result at a
        time. Native drivers override it with tasks under a semaphore of
        ``batch_concurrency``.
        """
        return _threaded_iter(self._run, self.sync.get_many, keys)

    def put_many(
        self, items: list[tuple[str, bytes]], options: WriteOptions
    ) -> AsyncIterator[tuple[str, str | BaseException | None]]:
        return _threaded_iter(self._run, self.sync.put_many, items, options)

    def delete_many(self, keys: list[str]) -> AsyncIterator[tuple[str, BaseException | None]]:
        return _threaded_iter(self._run, self.sync.delete_many, keys)

    def copy_many(self, pairs: list[tuple[str, str]]) -> AsyncIterator[tuple[str, str | BaseException | None]]:
        return _threaded_iter(self._run, self.sync.copy_many, pairs)

    async def abort_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        return await self._run(self.sync.abort_incomplete, prefix, older_than)

    async def list_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        return await self._run(self.sync.list_incomplete, prefix, older_than)

    async def aclose(self) -> None:
        """Release the async side's own connections (native drivers); the sync driver is closed by its owner."""


def _retrieved(done: asyncio.Future[Any]) -> None:
    """Mark a shielded call's error as seen: its awaiter may be gone (cancelled), the error is raised there or dropped."""
    if not done.cancelled():
        done.exception()


_END = object()


async def _threaded_iter(run: Runner, fn: Callable[..., Iterator[T]], *args: Any) -> AsyncIterator[T]:
    """Iterate the sync iterator ``fn(*args)`` through ``run`` (the pool), one ``next`` per await."""
    it = await run(lambda: iter(fn(*args)))
    try:
        while True:
            item = await run(next, it, _END)
            if item is _END:
                return
            yield item
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            await run(close)
