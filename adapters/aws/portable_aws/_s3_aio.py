"""The fsspec S3 engine's async face: its aiobotocore coroutines, awaited on the caller's loop.

:class:`S3AsyncStorage` is what ``S3Storage.async_driver()`` returns. The sync
driver runs every S3 request as an aiobotocore coroutine (``_get``, ``_put``,
...) on s3fs's loop thread, to which its client is bound. The async face runs
those same coroutines on a *view* of the sync driver per calling event loop: a
shallow copy whose s3fs filesystem and aiobotocore client were made on that
loop, with the sync driver's client and configuration arguments (endpoint,
credentials, timeouts, pool size, retries off, addressing, the listing
encoding fix), so the same requests, responses and errors. A single call is
one await where it is made: no thread hop, cancellation direct (cancelling the
caller cancels the request).

Why not hop to s3fs's loop (the first design, still in git history and in
bench/aio_bench.py as a contestant): each call and each outcome crossed two
threads. Batching the wake-ups brought its CPU to aiobotocore's, but not its
latency: a gather of single 1 KiB puts ran at 0.84-0.87 of aiobotocore's rate
(bench/results/aio.md, December 2026, load 1.9). On the caller's loop a put is
4.60M instructions against aiobotocore's 4.63M and the hop's 4.78M (callgrind,
300 puts, the kernel's wake-ups not counted).

Clients: one per loop that calls (:class:`~portable.driver.threads.PerLoop`),
made on its first call (concurrent first calls share one making) and closed by
``aclose`` (this loop's, and those of other loops still running), or, for a
loop that ends without it, by that loop's ``shutdown_asyncgens`` (what
``asyncio.run`` runs last). A call made on s3fs's own loop uses the sync
driver's client. The sync face keeps its own client on s3fs's loop, so a sync
:class:`~portable.storage.Bucket` and its async twin used at once never share
a connection across loops.

Batches hop once per batch (the sync driver's bounded ``_gather`` runs on
s3fs's loop, on its client) and yield their results when the batch is done;
``signed_url`` and ``abort_incomplete`` hop too. Streamed writes follow the
sync ``_S3Write``'s rules on s3fs's loop (one PutObject within the first part,
else a multipart upload; a failed or cancelled part poisons the stream; abort
aborts the upload). ``open_read`` stays thread-adapted (s3fs's file object is
synchronous).
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from portable.driver.aio_storage import AsyncStorageDriver, AsyncWriteStream
from portable.driver.storage import ListPage, ObjectInfo, WriteOptions
from portable.driver.threads import PerLoop, run_on_loop

if TYPE_CHECKING:
    from .s3 import S3Storage, _S3Write

__all__ = ["S3AsyncStorage"]

T = TypeVar("T")


class S3AsyncStorage(AsyncStorageDriver):
    """The async twin of :class:`~portable_aws.s3.S3Storage`: the same coroutines, on the caller's loop.

    Single-object calls run the sync driver's coroutines on a *view* of it
    (a shallow copy whose s3fs filesystem and aiobotocore client were made on
    the calling loop, :class:`~portable.driver.threads.PerLoop`): one await, no
    hop. Batches, streamed writes, ``signed_url`` and ``abort_incomplete`` hop
    to s3fs's loop (``run_on_loop``) and share the sync driver's client.
    """

    native = True
    sync: S3Storage

    def __init__(self, sync: S3Storage) -> None:
        super().__init__(sync)
        self._loop = sync._loop
        self._views: PerLoop[S3Storage] = PerLoop(self._new_view, _close_view)
        self._ready = self._views.ready

    # -- the calling loop's view of the sync driver ---------------------------------
    async def _new_view(self) -> S3Storage:
        """A shallow copy of the sync driver with an s3fs filesystem and client of the running loop.

        The same client and configuration arguments as the sync driver's
        (endpoint, credentials, timeouts, pool, retries off, addressing), so
        the same requests and errors; only the loop they belong to differs.
        """
        import s3fs  # type: ignore[import-untyped]

        from .s3 import _list_keys_as_sent

        sync = self.sync
        fs = sync.fs
        own = s3fs.S3FileSystem(
            client_kwargs=fs.client_kwargs, config_kwargs=fs.config_kwargs, skip_instance_cache=True,
            use_listings_cache=False, cache_regions=False, max_concurrency=1, asynchronous=True,
            loop=asyncio.get_running_loop(),
            **({"profile": sync.options.profile} if sync.options.profile else {}),
        )
        own.retries = 1
        client = await own.set_session()
        _list_keys_as_sent(client)
        view = copy.copy(sync)
        view.fs, view._client, view._loop = own, client, asyncio.get_running_loop()
        return view

    async def _view(self) -> S3Storage:
        """The running loop's view (made on its first call); the sync driver itself on s3fs's own loop."""
        if asyncio.get_running_loop() is self._loop:
            return self.sync  # its client belongs to this loop already
        return await self._views.get()

    # get and put return the view's coroutine instead of awaiting it in one of their own: one
    # coroutine less per call on the hottest paths (the caller awaits the same thing)
    def get(self, key: str) -> Coroutine[Any, Any, bytes]:
        view = self._ready()
        if view is not None:
            return view._get(key)
        return self._first("_get", key)

    def put(self, key: str, data: bytes, options: WriteOptions) -> Coroutine[Any, Any, str | None]:
        view = self._ready()
        if view is not None:
            return view._put(key, data, options)
        return self._first("_put", key, data, options)

    async def _first(self, name: str, *args: Any) -> Any:
        """``view.<name>(*args)`` once the running loop's view is made (its first call, or on s3fs's loop)."""
        return await getattr(await self._view(), name)(*args)

    async def get_range(self, key: str, start: int, end: int | None) -> bytes:
        return await (self._ready() or await self._view())._get_range(key, start, end)

    async def head(self, key: str) -> ObjectInfo:
        return await (self._ready() or await self._view())._head(key)

    async def delete(self, key: str) -> None:
        await (self._ready() or await self._view())._delete(key)

    async def copy(self, src: str, dst: str) -> str | None:
        return await (self._ready() or await self._view())._copy(src, dst)

    async def list_page(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        view = self._ready() or await self._view()
        return await view._list_page(prefix, delimiter, start_after, page_size, token)

    async def signed_url(
        self, key: str, method: Literal["GET", "PUT"], expires: dt.timedelta, content_type: str | None
    ) -> str:
        return await run_on_loop(self._loop, self.sync._signed_url, key, method, expires, content_type)

    async def abort_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        return await run_on_loop(self._loop, self.sync._abort_incomplete, prefix, older_than)

    async def aclose(self) -> None:
        """Close the views' clients (this loop's, and those of other loops still running)."""
        await self._views.aclose()

    async def open_write(self, key: str, options: WriteOptions, part_size: int) -> AsyncWriteStream:
        from .s3 import _S3Write

        return _AsyncS3Write(self, _S3Write(self.sync, self.sync._root + key, options, part_size))

    # -- batches: one hop per batch, the sync driver's bounded gather on s3fs's loop ---------
    async def get_many(self, keys: list[str]) -> AsyncIterator[tuple[str, bytes | BaseException]]:
        sync = self.sync
        results = await run_on_loop(self._loop, sync._gather, sync._get, [(k,) for k in keys])
        for pair in zip(keys, results, strict=True):
            yield pair

    async def put_many(
        self, items: list[tuple[str, bytes]], options: WriteOptions
    ) -> AsyncIterator[tuple[str, str | BaseException | None]]:
        sync = self.sync
        results = await run_on_loop(self._loop, sync._gather, sync._put, [(k, d, options) for k, d in items])
        for pair in zip((k for k, _ in items), results, strict=True):
            yield pair

    async def delete_many(self, keys: list[str]) -> AsyncIterator[tuple[str, BaseException | None]]:
        results = await run_on_loop(self._loop, self.sync._delete_batches, keys)
        for pair in zip(keys, results, strict=True):
            yield pair

    async def copy_many(self, pairs: list[tuple[str, str]]) -> AsyncIterator[tuple[str, str | BaseException | None]]:
        sync = self.sync
        results = await run_on_loop(self._loop, sync._gather, sync._copy, pairs)
        for pair in zip((dst for _, dst in pairs), results, strict=True):
            yield pair


async def _close_view(view: S3Storage) -> None:
    """Close a view's connection pool (on its loop: PerLoop calls this there)."""
    creator = getattr(view.fs, "_s3creator", None)
    view._client = None
    if creator is not None:
        await creator.__aexit__(None, None, None)


class _AsyncS3Write(AsyncWriteStream):
    """An async streamed write on the sync stream's state and coroutines (``_S3Write``).

    Each request runs on s3fs's loop one at a time (the base class's
    ``_serial``): a cancel stops the caller's wait, not the request, and the
    abort that follows waits for it, so an upload created while the caller was
    being cancelled is still aborted (no orphaned parts).
    """

    def __init__(self, driver: S3AsyncStorage, raw: _S3Write) -> None:
        super().__init__(raw, functools.partial(run_on_loop, driver._loop))
        self._w = raw

    async def _on_loop(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        """``fn(*args)`` on the driver's loop, one request at a time (the runner awaits its coroutine there)."""
        return cast(T, await self._serial(fn, *args))

    async def write(self, data: bytes) -> None:
        raw = self._w
        mark = raw._take(data)
        flushed = 0
        try:
            for part in raw._full_parts():
                await self._on_loop(raw._upload_part, part)
                flushed += 1
        except asyncio.CancelledError as exc:
            raw._broken = exc  # the part may still go out: the stream cannot be made whole
            raise
        except Exception as exc:
            raw._write_failed(exc, mark, flushed)

    async def commit(self) -> str | None:
        try:
            return await self._on_loop(self._w._commit)
        except asyncio.CancelledError as exc:
            self._w._broken = exc
            raise

    async def abort(self) -> None:
        self._w._pending.clear()
        await self._on_loop(self._w._abort)  # after the request in flight, if any: it may have made the upload
