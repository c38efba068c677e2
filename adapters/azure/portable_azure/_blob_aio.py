"""The Azure Blob (adlfs) engine's async face: the ``azure.storage.blob.aio`` client, on fsspec's loop.

:class:`BlobAsyncStorage` is what ``BlobStorage.async_driver()`` returns. The
sync driver already holds an ``azure.storage.blob.aio`` container client (the
one adlfs and the batch methods use), bound to fsspec's IO loop with the SDK's
retries off; the async face awaits its coroutines there through
:func:`portable.driver.threads.run_on_loop`: no thread per call, one
connection pool and one credential for both faces, cancellation carried to
the request.

Why fsspec's loop and not an ``aio`` client per caller loop: the client, its
aiohttp session and (for ``auth=identity``) its async credential exist
already and are closed with the sync driver; a second client per running
loop would double the connection pools and need a close per loop, for one
cross-thread hop saved per call (about the cost of a small request's
parsing; the S3 figures in bench/results/aio.md show the same trade).

Streams (``open_read``, ``open_write``), ``signed_url`` and
``abort_incomplete`` stay thread-adapted: the block-list commit's error
mapping and the etag-pinned reader live in the sync driver, and a
thread-adapted block stream still shows nothing before its commit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from portable.driver.aio_storage import AsyncStorageDriver
from portable.driver.storage import ListPage, ObjectInfo, WriteOptions
from portable.driver.threads import run_on_loop
from portable.errors import PreconditionFailed

if TYPE_CHECKING:
    from .blob import BlobStorage

__all__ = ["BlobAsyncStorage", "blob_info", "listed_info"]


def blob_info(key: str, props: Any) -> ObjectInfo:
    """The ObjectInfo of a blob's properties (``get_blob_properties``), metadata names decoded."""
    from .blob import _decode_metadata

    settings = props.content_settings
    return ObjectInfo(
        key=key,
        size=props.size,
        etag=props.etag,
        modified=props.last_modified,
        content_type=settings.content_type,
        metadata=_decode_metadata(props.metadata),
        cache_control=settings.cache_control,
        content_encoding=settings.content_encoding,
        content_disposition=settings.content_disposition,
    )


def listed_info(key: str, item: Any) -> ObjectInfo:
    """The ObjectInfo of a listed blob (listings report etags bare: they are quoted here)."""
    from .blob import _quoted

    return ObjectInfo(
        key=key,
        size=item.size,
        etag=_quoted(item.etag),
        modified=item.last_modified,
        content_type=item.content_settings.content_type,
    )


class BlobAsyncStorage(AsyncStorageDriver):
    """The async twin of :class:`~portable_azure.blob.BlobStorage`: its ``aio`` client, on fsspec's loop."""

    native = True
    sync: BlobStorage

    def __init__(self, sync: BlobStorage) -> None:
        super().__init__(sync)
        self._loop = sync._loop
        self._container = sync._container

    async def get(self, key: str) -> bytes:
        return await run_on_loop(self._loop, self.sync._aget, self.sync._name(key))

    async def get_range(self, key: str, start: int, end: int | None) -> bytes:
        return await run_on_loop(self._loop, self._aget_range, self.sync._name(key), start, end)

    async def _aget_range(self, name: str, start: int, end: int | None) -> bytes:
        from azure.core.exceptions import HttpResponseError

        try:
            stream = await self._container.download_blob(
                name, offset=start, length=None if end is None else end - start,
                max_concurrency=self.sync._max_concurrency, decompress=False, **self.sync._kw(),
            )
            data: bytes = await stream.readall()
        except HttpResponseError as exc:
            if exc.status_code == 416:  # start at or past the end: a slice is empty
                return b""
            raise
        return data

    async def head(self, key: str) -> ObjectInfo:
        async def ahead() -> ObjectInfo:
            props = await self._container.get_blob_client(self.sync._name(key)).get_blob_properties(**self.sync._kw())
            return blob_info(key, props)

        return await run_on_loop(self._loop, ahead)

    async def put(self, key: str, data: bytes, options: WriteOptions) -> str | None:
        return await run_on_loop(self._loop, self.sync._aput, self.sync._name(key), data, options)

    async def delete(self, key: str) -> None:
        await run_on_loop(self._loop, self.sync._adelete, self.sync._name(key))

    async def copy(self, src: str, dst: str) -> str | None:
        return await run_on_loop(self._loop, self._acopy, src, dst)

    async def _acopy(self, src: str, dst: str) -> str | None:
        """Copy Blob, waiting for a pending (background) copy as the sync driver does."""
        sync, kw = self.sync, self.sync._kw()
        source = self._container.get_blob_client(sync._name(src)).url
        if sync.auth.sas_token:
            source = f"{source}?{sync.auth.sas_token}"
        target = self._container.get_blob_client(sync._name(dst))
        result = await target.start_copy_from_url(source, **kw)
        status, etag = result.get("copy_status"), result.get("etag")
        wait, started = 0.05, time.monotonic()
        while status == "pending":  # a large or cross-account copy runs in the background
            await asyncio.sleep(wait)
            wait = min(wait * 2, 2.0)
            props = await target.get_blob_properties(**kw)
            status, etag = props.copy.status, props.etag
        if status != "success":
            raise PreconditionFailed(
                f"server-side copy of {src} ended as {status} after {time.monotonic() - started:.1f}s",
                provider=sync.scheme,
            )
        return etag if isinstance(etag, str) else None

    async def list_page(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        return await run_on_loop(self._loop, self._alist, prefix, delimiter, start_after, page_size, token)

    async def _alist(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        """``BlobStorage.list_page`` on the ``aio`` pager: a page filtered empty by start_after is skipped."""
        full, cut, kw = self.sync._name(prefix), len(self.sync._prefix), self.sync._kw()
        pager: Any
        if delimiter:
            pager = self._container.walk_blobs(name_starts_with=full, delimiter=delimiter, results_per_page=page_size, **kw)
        else:
            pager = self._container.list_blobs(name_starts_with=full, results_per_page=page_size, **kw)
        pages: Any = pager.by_page(continuation_token=token)
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        next_token: str | None = None
        async for page in pages:
            async for item in page:
                key = item.name[cut:]
                if start_after is not None and key <= start_after:
                    continue
                if delimiter and not hasattr(item, "size"):  # a BlobPrefix
                    prefixes.append(key)
                else:
                    objects.append(listed_info(key, item))
            next_token = pages.continuation_token or None
            if objects or prefixes or next_token is None:
                break
        return ListPage(objects, prefixes, next_token)

    # -- batches: one hop per batch, a bounded gather on fsspec's loop -------------
    async def _gather(self, fn: Callable[..., Awaitable[Any]], args: list[tuple[Any, ...]]) -> list[Any]:
        async def all_of() -> list[Any]:
            gate = asyncio.Semaphore(self.batch_concurrency)

            async def one(arg: tuple[Any, ...]) -> Any:
                async with gate:
                    return await fn(*arg)

            return await asyncio.gather(*(one(a) for a in args), return_exceptions=True)

        return await run_on_loop(self._loop, all_of)

    async def get_many(self, keys: list[str]) -> AsyncIterator[tuple[str, bytes | BaseException]]:
        name = self.sync._name
        for pair in zip(keys, await self._gather(self.sync._aget, [(name(k),) for k in keys]), strict=True):
            yield pair

    async def put_many(
        self, items: list[tuple[str, bytes]], options: WriteOptions
    ) -> AsyncIterator[tuple[str, str | BaseException | None]]:
        name = self.sync._name
        results = await self._gather(self.sync._aput, [(name(k), d, options) for k, d in items])
        for pair in zip((k for k, _ in items), results, strict=True):
            yield pair

    async def delete_many(self, keys: list[str]) -> AsyncIterator[tuple[str, BaseException | None]]:
        name = self.sync._name
        for pair in zip(keys, await self._gather(self.sync._adelete, [(name(k),) for k in keys]), strict=True):
            yield pair
