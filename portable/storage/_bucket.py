"""The portable bucket: :class:`Bucket`, whole-object reads and writes, listing and signed URLs.

Streams (``open``) and batches (``get_many`` and friends) are its two mixins,
:class:`~portable.storage._streams.StreamOperations` and
:class:`~portable.storage._batch.BatchOperations`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Literal, TypeVar

from .._native import native_object
from ..driver.redaction import redact
from ..driver.storage import ListPage, ObjectInfo, StorageCapabilities, StorageDriver, check_key
from ..errors import MissingDependency, NotFound
from ..resilience import Guard, ResiliencePolicy
from ._batch import BatchOperations
from ._checks import check_prefix, is_clearly_valid_key
from ._idempotent_put import idempotent_put
from ._requests import (
    age,
    list_page_request,
    page_entries,
    put_request,
    range_request,
    signed_url_request,
)
from ._streams import StreamOperations

if TYPE_CHECKING:
    from ..fsspec import BucketFileSystem

T = TypeVar("T")


class Bucket(BatchOperations, StreamOperations):
    """A portable bucket: objects under keys, on any provider.

    Open one with :func:`open_bucket`. A Bucket is thread-safe; share one per
    provider in a process. Close it (or use ``with``) to release connections.
    """

    __slots__ = ("_caps", "_driver", "_guard", "_max_key", "provider", "url")

    def __init__(self, driver: StorageDriver, *, url: str = "", policy: ResiliencePolicy | None = None) -> None:
        self._driver = driver
        self.provider = driver.scheme
        self.url = url
        self._caps = driver.capabilities
        self._max_key = driver.capabilities.max_key_bytes
        self._guard = Guard(driver.scheme, driver.endpoint, driver, policy)

    def __repr__(self) -> str:
        return f"Bucket({redact(self.url)!r})"

    def __enter__(self) -> Bucket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- properties -----------------------------------------------------
    @property
    def capabilities(self) -> StorageCapabilities:
        """What this provider supports (see :class:`StorageCapabilities`)."""
        return self._caps

    @property
    def driver(self) -> StorageDriver:
        """The driver underneath (for adapters and tests; application code uses ``as_``)."""
        return self._driver

    # -- whole objects --------------------------------------------------
    def get(self, key: str) -> bytes:
        """Return the object's bytes.

        Raises:
            NotFound: no object under ``key``.
            InvalidKey: ``key`` is not a portable key.
        """
        if not is_clearly_valid_key(key):
            check_key(key, self._max_key)
        return self._guard.call("read", f"get {key}", self._driver.get, key)

    def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        """Return bytes ``[start, end)`` of the object, like a slice.

        ``end`` defaults to the end of the object; a range past the end is
        clipped, and ``start`` at or beyond the size returns ``b""`` on every
        provider (S3 and GCS answer 416 there; the drivers hide that).
        """
        range_request(key, start, end, self._max_key)
        if end == start:
            self.head(key)  # a zero-length range still reports a missing key
            return b""
        return self._guard.call("read", f"get_range {key}", self._driver.get_range, key, start, end)

    def head(self, key: str) -> ObjectInfo:
        """Return size, etag, modification time, content type, user metadata and the
        ``cache_control``, ``content_encoding`` and ``content_disposition`` headers
        (None where not set, or where the provider does not keep them).

        Raises:
            NotFound: no object under ``key``.
        """
        check_key(key, self._max_key)
        return self._guard.call("read", f"head {key}", self._driver.head, key)

    def exists(self, key: str) -> bool:
        """Whether an object is stored under ``key``."""
        try:
            self.head(key)
        except NotFound:
            return False
        return True

    def put(
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
        """Store ``data`` under ``key`` atomically; return the new etag.

        Readers see the old object or the new one, never a mix.

        Args:
            content_type: stored and returned by ``head``. Defaults to none.
            metadata: user metadata; names are 1-128 of ``[A-Za-z0-9_-]`` and
                are lower-cased (S3 and Azure do); values printable ASCII.
                A name that looks like a header (``cache-control``,
                ``content-type``) is user metadata all the same: headers come
                only from the named arguments.
            cache_control, content_encoding, content_disposition: HTTP headers
                stored with the object and returned by ``head`` (and served
                with it by providers that serve objects over HTTP: S3, GCS,
                Azure). 1 to 1,024 printable ASCII characters each. Defaults
                to none. ``content_encoding`` is a label: portable stores the
                bytes as given and never compresses or decompresses them.
            if_none_match: ``"*"``: create only; fail if the key exists.
            if_match: write only if the current etag equals this one.
            idempotency_key: makes a conditional put safe to repeat: the object
                is tagged (metadata ``portable-idempotency-key`` and
                ``portable-payload``), and a repeat that meets this put's own
                earlier write (one that succeeded but reported a failure)
                returns its etag instead of AlreadyExists/PreconditionFailed.
                See :func:`portable.storage._idempotent_put.idempotent_put`.

        Raises:
            AlreadyExists: ``if_none_match="*"`` and the key exists.
            PreconditionFailed: ``if_match`` is stale (or the key is missing; on
                some providers that is NotFound instead).
            IdempotencyConflict: ``idempotency_key`` wrote this object before
                with a different payload.
            InvalidKey / InvalidArgument / TooLarge: before any request.
        """
        if idempotency_key is not None:
            return idempotent_put(
                self, key, data, content_type=content_type, metadata=metadata,
                if_none_match=if_none_match, if_match=if_match, idempotency_key=idempotency_key,
                cache_control=cache_control, content_encoding=content_encoding,
                content_disposition=content_disposition,
            )
        raw, options = put_request(
            key, data, self._caps, self.provider, content_type, metadata, if_none_match, if_match,
            cache_control, content_encoding, content_disposition,
        )
        return self._guard.call("write", f"put {key}", self._driver.put, key, raw, options)

    def delete(self, key: str) -> None:
        """Delete the object. Deleting a missing key is not an error."""
        check_key(key, self._max_key)
        self._guard.call("write", f"delete {key}", self._driver.delete, key)

    def copy(self, src: str, dst: str) -> str | None:
        """Copy ``src`` to ``dst`` (server-side where the provider can); return dst's etag.

        The copy keeps the source's content type, metadata and headers, where the
        provider keeps them.

        Raises:
            NotFound: ``src`` does not exist.
        """
        check_key(src, self._max_key)
        check_key(dst, self._max_key)
        return self._guard.call("write", f"copy {src} -> {dst}", self._driver.copy, src, dst)

    # -- leftovers ------------------------------------------------------
    def abort_incomplete(self, older_than: float | dt.timedelta, *, prefix: str = "") -> list[str]:
        """Remove what writes that never committed left behind, started more than ``older_than`` ago.

        A writer killed mid-stream leaves a temporary file (``file://``), an
        incomplete multipart upload (S3), uncommitted blocks (Azure): invisible
        to ``get`` and ``list``, but taking space (and, on clouds, billed).
        Nothing that was committed is ever removed.

        Args:
            older_than: seconds or a timedelta, >= 0. Choose it longer than any
                live write takes (or pauses between parts): a live writer's
                leftovers older than this are removed too, and its commit then
                fails. ``0`` removes every leftover now.
            prefix: only leftovers of keys under this prefix. Defaults to all.

        Returns:
            What was removed, sorted: the key, or ``key#id`` where one key may
            have several (an upload id, a temporary file's name); each driver
            documents its form.

        Raises:
            Unsupported: the provider cannot list its incomplete writes.
            InvalidArgument / InvalidKey: before any request.
        """
        delta = age(older_than)
        check_prefix(prefix)
        return self._guard.call(
            "write", f"abort_incomplete {prefix}", self._driver.abort_incomplete, prefix, delta
        )

    def list_incomplete(self, older_than: float | dt.timedelta, *, prefix: str = "") -> list[str]:
        """What :meth:`abort_incomplete` would remove now (same arguments, same form), removing nothing.

        Raises:
            Unsupported: the provider cannot list its incomplete writes.
        """
        delta = age(older_than)
        check_prefix(prefix)
        return self._guard.call("read", f"list_incomplete {prefix}", self._driver.list_incomplete, prefix, delta)

    # -- listing --------------------------------------------------------
    def list_page(
        self,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        start_after: str | None = None,
        page_size: int = 1000,
        token: str | None = None,
    ) -> ListPage:
        """Return one page of a listing; pass its ``next_token`` back for the next.

        Objects and common prefixes are each in lexical (UTF-8 byte) order.
        """
        list_page_request(prefix, delimiter, start_after, page_size, token)
        return self._guard.call(
            "read", f"list {prefix}", self._driver.list_page, prefix, delimiter, start_after, page_size, token
        )

    def list(
        self,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        start_after: str | None = None,
        page_size: int = 1000,
    ) -> Iterator[ObjectInfo]:
        """Yield every object (and, with a delimiter, every common prefix) under ``prefix``.

        Entries come in lexical order, page by page; common prefixes are
        ObjectInfo with ``is_prefix=True`` and a key ending in the delimiter.
        Each page is fetched under the retry policy. One page is held at a
        time (the next is fetched once this one is consumed), so a listing
        of any length costs the memory of one page here; what a page costs
        the provider differs (see docs/storage.md).
        """
        token: str | None = None
        while True:
            page = self.list_page(
                prefix, delimiter=delimiter, start_after=start_after, page_size=page_size, token=token
            )
            token = page.next_token
            entries = page_entries(page)
            del page
            yield from entries
            del entries  # not held while the next page is fetched
            if token is None:
                return

    # -- signed URLs and escape hatches --------------------------------
    def signed_url(
        self,
        key: str,
        *,
        method: Literal["GET", "PUT"] = "GET",
        expires: float | dt.timedelta = 3600,
        content_type: str | None = None,
    ) -> str:
        """Return a URL that allows ``method`` on ``key`` without credentials until it expires.

        Args:
            expires: seconds or a timedelta, from 1 second to 7 days. Defaults to one hour.
            content_type: for PUT, the Content-Type the uploader must send.

        Raises:
            Unsupported: the provider (or its credentials) cannot sign URLs.
        """
        delta = signed_url_request(key, method, expires, self._caps, self.provider)
        return self._guard.call(
            "read", f"signed_url {key}", self._driver.signed_url, key, method, delta, content_type
        )

    def as_(self, kind: type[T]) -> T:
        """Return the native object of type ``kind`` under this bucket.

        Each adapter documents what it can return (for example
        ``s3fs.S3FileSystem``). Raises Unsupported for anything else.
        """
        return native_object(self._driver, kind, self.provider)

    def fs(self) -> BucketFileSystem:
        """Return an fsspec file system over this very bucket, for pandas, pyarrow, Dask, Polars.

        Every call it makes goes through this Bucket (validation, retries, breakers,
        deadlines); prefer it to ``as_()``'s native file systems, which bypass all of that.
        See :mod:`portable.fsspec` and docs/fsspec.md.

        Raises:
            MissingDependency: fsspec is not installed (``pip install 'portable-cloud[fsspec]'``).
        """
        try:
            import fsspec  # type: ignore[import-untyped]
        except ImportError as exc:
            raise MissingDependency("Bucket.fs() needs fsspec: pip install 'portable-cloud[fsspec]'") from exc
        # Found as fsspec.filesystem("portable") finds it, through fsspec's registry (the
        # "fsspec.specs" entry point, or the lazy string below in a source checkout):
        # portable.fsspec imports portable.storage, so this module must not import it back.
        if "portable" not in fsspec.registry and "portable" not in fsspec.available_protocols():
            fsspec.register_implementation("portable", "portable.fsspec.BucketFileSystem")
        cls: type[BucketFileSystem] = fsspec.get_filesystem_class("portable")
        return cls(bucket=self)

    def close(self) -> None:
        """Release the driver's connections and threads."""
        self._driver.close()
