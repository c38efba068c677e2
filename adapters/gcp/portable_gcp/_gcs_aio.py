"""The gcsfs engine's async face: its coroutines, awaited on gcsfs's event loop.

:class:`GCSAsyncStorage` is what ``GCSStorage.async_driver()`` returns. The
sync driver already sends every request as a coroutine (``_aget``, ``_aput``,
...) on gcsfs's aiohttp session, which is bound to gcsfs's loop thread; the
async face awaits the same coroutines there through
:func:`portable.driver.threads.run_on_loop`: no thread per call, one session
for both faces, and cancelling the caller cancels the request's task.

Batches hop once (a bounded gather on gcsfs's loop). Streamed writes are the
sync stream's resumable session (``_ResumableUpload``) driven from here, with
its rules: a simple upload if the stream never fills a part, nothing visible
before commit, abort cancels the session. ``open_read``, ``signed_url`` and
``abort_incomplete`` stay thread-adapted (gcsfs's file and Google's signer
are synchronous).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar, cast

from portable.driver.aio_storage import AsyncStorageDriver, AsyncWriteStream
from portable.driver.storage import ListPage, ObjectInfo, WriteOptions
from portable.driver.threads import run_on_loop

if TYPE_CHECKING:
    from .gcs import GCSStorage, _ResumableUpload

__all__ = ["GCSAsyncStorage"]

T = TypeVar("T")


class GCSAsyncStorage(AsyncStorageDriver):
    """The async twin of :class:`~portable_gcp.gcs.GCSStorage`: the same coroutines, on gcsfs's loop."""

    native = True
    sync: GCSStorage

    def __init__(self, sync: GCSStorage) -> None:
        super().__init__(sync)
        self._loop = sync._loop

    async def _conditional(
        self, options: WriteOptions, key: str, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any
    ) -> T:
        """``GCSStorage._conditional`` awaited: gcsfs's FileExistsError for a 412 becomes the portable error."""
        try:
            return await run_on_loop(self._loop, fn, *args)
        except FileExistsError as exc:
            raise self.sync._refused(exc, options, key) from exc

    async def get(self, key: str) -> bytes:
        return await run_on_loop(self._loop, self.sync._aget, key)

    async def get_range(self, key: str, start: int, end: int | None) -> bytes:
        return await run_on_loop(self._loop, self.sync._aget_range, key, start, end)

    async def head(self, key: str) -> ObjectInfo:
        return await run_on_loop(self._loop, self.sync._ahead, key)

    async def put(self, key: str, data: bytes, options: WriteOptions) -> str | None:
        return await self._conditional(options, key, self.sync._aput, key, data, options)

    async def delete(self, key: str) -> None:
        await run_on_loop(self._loop, self.sync._adelete, key)

    async def copy(self, src: str, dst: str) -> str | None:
        return await run_on_loop(self._loop, self.sync._acopy, src, dst)

    async def list_page(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        return await run_on_loop(self._loop, self.sync._alist, prefix, delimiter, start_after, page_size, token)

    async def open_write(self, key: str, options: WriteOptions, part_size: int) -> AsyncWriteStream:
        from .gcs import _ResumableUpload

        self.sync._conditions(options, key)  # a non-generation etag fails now, not at close
        return _AsyncGCSWrite(self, _ResumableUpload(self.sync, key, options, part_size))

    # -- batches: one hop per batch, a bounded gather on gcsfs's loop --------------
    async def _gather(self, fn: Callable[[Any], Awaitable[Any]], items: list[Any]) -> list[Any]:
        async def run() -> list[Any]:
            gate = asyncio.Semaphore(self.batch_concurrency)

            async def one(item: Any) -> Any:
                async with gate:
                    try:
                        return await fn(item)
                    except Exception as exc:
                        return exc

            return await asyncio.gather(*(one(item) for item in items))

        return await run_on_loop(self._loop, run)

    async def get_many(self, keys: list[str]) -> AsyncIterator[tuple[str, bytes | BaseException]]:
        for pair in zip(keys, await self._gather(self.sync._aget, keys), strict=True):
            yield pair

    async def put_many(
        self, items: list[tuple[str, bytes]], options: WriteOptions
    ) -> AsyncIterator[tuple[str, str | BaseException | None]]:
        aput = self.sync._aput

        async def one(item: tuple[str, bytes]) -> str:
            return await aput(item[0], item[1], options)

        for pair in zip((key for key, _ in items), await self._gather(one, items), strict=True):
            yield pair

    async def delete_many(self, keys: list[str]) -> AsyncIterator[tuple[str, BaseException | None]]:
        for pair in zip(keys, await self._gather(self.sync._adelete, keys), strict=True):
            yield pair

    async def copy_many(self, pairs: list[tuple[str, str]]) -> AsyncIterator[tuple[str, str | BaseException | None]]:
        acopy = self.sync._acopy

        async def one(pair: tuple[str, str]) -> str:
            return await acopy(pair[0], pair[1])

        for pair in zip((dst for _, dst in pairs), await self._gather(one, pairs), strict=True):
            yield pair


class _AsyncGCSWrite(AsyncWriteStream):
    """``open(key, "wb")`` on the async face: ``_GCSWriteStream``'s steps, each awaited on gcsfs's loop.

    A failed write is retried by the Bucket with the very same bytes object:
    it is appended once, and only what the session has not confirmed is resent.
    Requests run one at a time (the base class's ``_serial``): a cancel stops
    the caller's wait, not the request, and the abort that follows waits for
    it, so a session opened while the caller was being cancelled is cancelled.
    """

    def __init__(self, driver: GCSAsyncStorage, upload: _ResumableUpload) -> None:
        # the base's raw stream is only ever handed to _serial's runner here, never called
        super().__init__(upload, functools.partial(run_on_loop, driver._loop))  # type: ignore[arg-type]
        self._driver = driver
        self._upload = upload
        self._failed: bytes | None = None

    async def _on_loop(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        """``fn(*args)`` on the driver's loop, one request at a time (the runner awaits its coroutine there)."""
        return cast(T, await self._serial(fn, *args))

    async def _step(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        try:
            return await self._on_loop(fn, *args)
        except FileExistsError as exc:  # a 412: the portable error, as GCSStorage._conditional makes it
            raise self._driver.sync._refused(exc, self._upload.options, self._upload.key) from exc

    async def write(self, data: bytes) -> None:
        upload = self._upload
        if data is not self._failed:
            upload.append(data)
        self._failed = data
        await self._step(upload.flush)
        self._failed = None

    async def commit(self) -> str | None:
        upload, sync = self._upload, self._driver.sync
        if upload.session is None and len(upload.buffer) <= upload.chunk:
            conditions = sync._conditions(upload.options, upload.key)
            return await self._step(sync._simple_upload, upload.name, bytes(upload.buffer), upload.options, conditions)
        return await self._step(upload.finish)

    async def abort(self) -> None:
        await self._on_loop(self._upload.cancel)
