"""The async bucket: :class:`AsyncBucket` and :func:`open_bucket`, the twins of :mod:`portable.storage`'s.

>>> import asyncio, portable.aio
>>> async def main() -> bytes:
...     async with portable.aio.open_bucket("mem://") as bucket:
...         await bucket.put("reports/2026-12.json", b"{}", if_none_match="*")
...         return await bucket.get("reports/2026-12.json")
>>> asyncio.run(main())
b'{}'

Every method takes the arguments of the :class:`~portable.storage.Bucket`
method of the same name, checks them with the same functions (so the same
typed error is raised, before any request), and awaits the async driver under
the same :class:`~portable.resilience.Guard`: one breaker and one retry budget
per endpoint, whichever face calls.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Literal, TypeVar

from .._native import native_object
from ..config import Profile
from ..driver.aio_storage import AsyncStorageDriver
from ..driver.redaction import redact
from ..driver.storage import ListPage, ObjectInfo, StorageCapabilities, StorageDriver, check_key
from ..driver.threads import run_blocking
from ..errors import AlreadyExists, InvalidArgument, NotFound, PreconditionFailed
from ..resilience import Guard, ResiliencePolicy
from ..storage import Bucket
from ..storage import open_bucket as open_sync_bucket
from ..storage._checks import check_prefix, is_clearly_valid_key
from ..storage._idempotent_put import idempotent_request, own_earlier_write
from ..storage._requests import (
    age,
    list_page_request,
    page_entries,
    put_request,
    range_request,
    signed_url_request,
)
from ._batch import AsyncBatchOperations
from ._streams import AsyncStreamOperations

__all__ = ["AsyncBucket", "open_bucket"]

T = TypeVar("T")


class AsyncBucket(AsyncBatchOperations, AsyncStreamOperations):
    """A portable bucket for asyncio code: :class:`~portable.storage.Bucket`'s methods, awaited.

    Open one with :func:`open_bucket`, or wrap a sync bucket with
    :meth:`from_sync` (they then share the driver and the Guard). Use
    ``async with`` (or ``await bucket.aclose()``) to release connections.
    Safe to share between the tasks of a loop (and between loops).

    Where a driver is not natively async, each request runs in the one bounded
    pool of :mod:`portable.driver.threads` (``PORTABLE_AIO_THREADS``): any
    number of concurrent awaits, a fixed number of threads.

    Cancelling a task mid-call is safe: a ``put`` either stores the whole
    object or nothing (a request already sent runs to its end), and a streamed
    write is aborted (see :meth:`open`).
    """

    __slots__ = ("_adriver", "_bucket", "_caps", "_driver", "_guard", "_max_key", "provider", "url")

    def __init__(self, bucket: Bucket, driver: AsyncStorageDriver | None = None) -> None:
        self._bucket = bucket
        self._driver: StorageDriver = bucket.driver
        self._adriver = self._driver.async_driver() if driver is None else driver
        self._guard: Guard = bucket._guard
        self._caps = bucket.capabilities
        self._max_key = self._caps.max_key_bytes
        self.provider = bucket.provider
        self.url = bucket.url

    @classmethod
    def from_sync(cls, bucket: Bucket) -> AsyncBucket:
        """The async face of ``bucket``: the same driver, the same Guard (breakers, budget, policy).

        Closing the AsyncBucket closes the driver, so ``bucket`` too.
        """
        if not isinstance(bucket, Bucket):
            raise InvalidArgument(f"AsyncBucket.from_sync takes a portable.storage.Bucket, got {type(bucket).__name__}")
        return cls(bucket)

    def __repr__(self) -> str:
        return f"AsyncBucket({redact(self.url)!r})"

    async def __aenter__(self) -> AsyncBucket:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- properties -----------------------------------------------------
    @property
    def capabilities(self) -> StorageCapabilities:
        """What this provider supports (see :class:`~portable.storage.StorageCapabilities`)."""
        return self._caps

    @property
    def driver(self) -> StorageDriver:
        """The sync driver underneath (classification, capabilities; for adapters and tests)."""
        return self._driver

    @property
    def async_driver(self) -> AsyncStorageDriver:
        """The async driver this bucket awaits (``native`` says whether it serves on the loop)."""
        return self._adriver

    @property
    def sync(self) -> Bucket:
        """The sync :class:`~portable.storage.Bucket` sharing this one's driver and Guard."""
        return self._bucket

    # -- whole objects --------------------------------------------------
    async def get(self, key: str) -> bytes:
        """Return the object's bytes. See :meth:`portable.storage.Bucket.get`.

        Raises:
            NotFound: no object under ``key``.
            InvalidKey: ``key`` is not a portable key.
        """
        if not is_clearly_valid_key(key):
            check_key(key, self._max_key)
        return await self._guard.acall("read", f"get {key}", self._adriver.get, key)

    async def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        """Return bytes ``[start, end)`` of the object. See :meth:`portable.storage.Bucket.get_range`."""
        range_request(key, start, end, self._max_key)
        if end == start:
            await self.head(key)  # a zero-length range still reports a missing key
            return b""
        return await self._guard.acall("read", f"get_range {key}", self._adriver.get_range, key, start, end)

    async def head(self, key: str) -> ObjectInfo:
        """Return the object's size, etag, times, type, metadata and headers. See :meth:`portable.storage.Bucket.head`.

        Raises:
            NotFound: no object under ``key``.
        """
        check_key(key, self._max_key)
        return await self._guard.acall("read", f"head {key}", self._adriver.head, key)

    async def exists(self, key: str) -> bool:
        """Whether an object is stored under ``key``."""
        try:
            await self.head(key)
        except NotFound:
            return False
        return True

    async def put(
        self,
        key: str,
        data: bytes | bytearray | memoryview,
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        if_none_match: Literal["*"] | None = None,
        if_match: str | None = None,
        idempotency_key: str | None = None,
        cache_control: str | None = None,
        content_encoding: str | None = None,
        content_disposition: str | None = None,
    ) -> str | None:
        """Store ``data`` under ``key`` atomically; return the new etag. See :meth:`portable.storage.Bucket.put`.

        Cancelled, it stores the whole object or nothing: a request already
        handed to the provider (or to a pool thread) runs to its end.

        Raises:
            AlreadyExists / PreconditionFailed / IdempotencyConflict: as the sync put.
            InvalidKey / InvalidArgument / TooLarge / Unsupported: before any request.
        """
        if idempotency_key is not None:
            data, tag = idempotent_request(idempotency_key, data, metadata)
            metadata = tag.metadata
        raw, options = put_request(
            key, data, self._caps, self.provider, content_type, metadata, if_none_match, if_match,
            cache_control, content_encoding, content_disposition,
        )
        if idempotency_key is None:
            return await self._guard.acall("write", f"put {key}", self._adriver.put, key, raw, options)
        try:
            return await self._guard.acall("write", f"put {key}", self._adriver.put, key, raw, options)
        except (AlreadyExists, PreconditionFailed) as exc:
            try:
                info = await self.head(key)
            except NotFound:
                raise exc from None
            return own_earlier_write(exc, info, tag, key, self.provider)

    async def delete(self, key: str) -> None:
        """Delete the object. Deleting a missing key is not an error."""
        check_key(key, self._max_key)
        await self._guard.acall("write", f"delete {key}", self._adriver.delete, key)

    async def copy(self, src: str, dst: str) -> str | None:
        """Copy ``src`` to ``dst`` (server-side where the provider can); return dst's etag.

        Raises:
            NotFound: ``src`` does not exist.
        """
        check_key(src, self._max_key)
        check_key(dst, self._max_key)
        return await self._guard.acall("write", f"copy {src} -> {dst}", self._adriver.copy, src, dst)

    # -- leftovers ------------------------------------------------------
    async def abort_incomplete(self, older_than: float | dt.timedelta, *, prefix: str = "") -> list[str]:
        """Remove leftovers of writes that never committed. See :meth:`portable.storage.Bucket.abort_incomplete`.

        Raises:
            Unsupported: the provider cannot list its incomplete writes.
        """
        delta = age(older_than)
        check_prefix(prefix)
        return await self._guard.acall(
            "write", f"abort_incomplete {prefix}", self._adriver.abort_incomplete, prefix, delta
        )

    async def list_incomplete(self, older_than: float | dt.timedelta, *, prefix: str = "") -> list[str]:
        """What :meth:`abort_incomplete` would remove now, removing nothing."""
        delta = age(older_than)
        check_prefix(prefix)
        return await self._guard.acall(
            "read", f"list_incomplete {prefix}", self._adriver.list_incomplete, prefix, delta
        )

    # -- listing --------------------------------------------------------
    async def list_page(
        self,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        start_after: str | None = None,
        page_size: int = 1000,
        token: str | None = None,
    ) -> ListPage:
        """Return one page of a listing; pass its ``next_token`` back for the next."""
        list_page_request(prefix, delimiter, start_after, page_size, token)
        return await self._guard.acall(
            "read", f"list {prefix}", self._adriver.list_page, prefix, delimiter, start_after, page_size, token
        )

    def list(
        self,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        start_after: str | None = None,
        page_size: int = 1000,
    ) -> AsyncIterator[ObjectInfo]:
        """Yield every object (and, with a delimiter, every common prefix) under ``prefix``: ``async for``.

        Lexical order, one page held at a time, each page under the retry
        policy. The arguments are checked at the call, before any request.
        """
        list_page_request(prefix, delimiter, start_after, page_size, None)
        return self._pages(prefix, delimiter, start_after, page_size)

    async def _pages(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int
    ) -> AsyncIterator[ObjectInfo]:
        token: str | None = None
        while True:
            page = await self.list_page(
                prefix, delimiter=delimiter, start_after=start_after, page_size=page_size, token=token
            )
            token = page.next_token
            entries = page_entries(page)
            del page
            for entry in entries:
                yield entry
            del entries  # not held while the next page is fetched
            if token is None:
                return

    # -- signed URLs and escape hatches --------------------------------
    async def signed_url(
        self,
        key: str,
        *,
        method: Literal["GET", "PUT"] = "GET",
        expires: float | dt.timedelta = 3600,
        content_type: str | None = None,
    ) -> str:
        """Return a URL that allows ``method`` on ``key`` without credentials until it expires.

        Raises:
            Unsupported: the provider (or its credentials) cannot sign URLs.
        """
        delta = signed_url_request(key, method, expires, self._caps, self.provider)
        return await self._guard.acall(
            "read", f"signed_url {key}", self._adriver.signed_url, key, method, delta, content_type
        )

    def as_(self, kind: type[T]) -> T:
        """Return the native object of type ``kind`` under this bucket, as :meth:`portable.storage.Bucket.as_` does.

        It bypasses the retry layer. Raises Unsupported for anything else.
        """
        return native_object(self._driver, kind, self.provider)

    async def aclose(self) -> None:
        """Release the async driver's connections, then the sync driver's. Idempotent where the driver is."""
        try:
            await self._adriver.aclose()
        finally:
            await run_blocking(self._driver.close)

    async def close(self) -> None:
        """The same as :meth:`aclose`."""
        await self.aclose()


def open_bucket(
    url: str | None = None,
    *,
    profile: str | Profile | None = None,
    policy: ResiliencePolicy | None = None,
) -> AsyncBucket:
    """Open an :class:`AsyncBucket` by URL, or the active profile's ``storage`` URL.

    The arguments, validation and profile handling are
    :func:`portable.storage.open_bucket`'s (it runs first): the same errors,
    raised here, before any request. Nothing to await: use the result with
    ``async with``.
    """
    return AsyncBucket(open_sync_bucket(url, profile=profile, policy=policy))
