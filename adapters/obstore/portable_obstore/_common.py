"""What the obstore drivers share: the storage operations, batches, streams, listing and errors.

Each provider module (:mod:`.s3`, :mod:`.gcs`, :mod:`.azure`) builds an
obstore store from its URL and subclasses :class:`ObstoreStorage`, which
implements the driver protocol on obstore's functions:

* single-object calls use obstore's synchronous API (the request runs on
  obstore's Tokio runtime; the GIL is released while it waits);
* ``get_many``, ``put_many`` and ``delete_many`` run obstore's async API on one
  private event loop thread shared by every obstore driver in the process, with
  at most ``concurrency`` objects in flight (a fixed pool of worker coroutines:
  no thread and no task per object);
* obstore's own retries are off (``RetryConfig(max_retries=0)``): only
  :mod:`portable.resilience` retries.

Errors stay native (``FileNotFoundError``, ``obstore.exceptions.*``) and
:class:`ObstoreClassifier` classifies them; an error without a dedicated
type (``GenericError``) is classified by the HTTP status in its message.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import re
import tempfile
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping
from typing import IO, TYPE_CHECKING, Any, TypeVar

import obstore
from obstore import exceptions as oe

from portable.driver import Classifier
from portable.driver.fanout import map_blocking
from portable.driver.http import HTTP_STATUS_CODES, code_of_status
from portable.driver.naming import split_obstore_attributes
from portable.driver.storage import (
    ObjectInfo,
    StorageDriver,
    WriteOptions,
    WriteStream,
)
from portable.errors import ErrorCode, PortableError, Unsupported
from portable.resilience import attempt_timeout, remaining

from ._listing import ListingMixin
from ._loop import run_on_loop

if TYPE_CHECKING:
    from portable.driver.aio_storage import AsyncStorageDriver

__all__ = [
    "NO_RETRIES",
    "ObstoreClassifier",
    "ObstoreStorage",
    "StreamFailed",
    "bounded",
    "client_options",
    "empty_slice",
    "header_attributes",
    "header_like_names",
    "http_status",
    "run_batch",
    "run_on_loop",
]

T = TypeVar("T")

#: obstore's retry configuration that turns its own retries off.
NO_RETRIES: dict[str, Any] = {"max_retries": 0}

#: The longest any one request may take, body included (portable's deadlines bound calls).
_WHOLE_REQUEST = dt.timedelta(hours=6)
#: Bodies up to this size are read whole (``bytes()``); larger ones as one stream chunk.
_INLINE_BODY = 64 * 1024
_STATUS = re.compile(r"status(?: code)?:? (\d{3})")
_HTTP_CODES = {
    **HTTP_STATUS_CODES,
    409: ErrorCode.UNAVAILABLE,  # S3 ConditionalRequestConflict, Azure lease/being-deleted: retry
    503: ErrorCode.THROTTLED,  # S3 SlowDown, GCS/Azure "server busy"
}
_HTTP_KIND = re.compile(r"HttpError \{\s*kind: (\w+)")
_TIMEOUT_WORDS = ("timed out", "timeout", "deadline")
_TRANSPORT_WORDS = (
    "error sending request",
    "connection",
    "connect error",
    "http error",
    "error decoding response body",
    "broken pipe",
    "reset by peer",
    "incomplete",
    "dns error",
    "unexpected eof",
)


def client_options(timeout: float, endpoint: str | None) -> dict[str, Any]:
    """obstore client options: per-request timeouts, and plain HTTP for an ``http://`` endpoint."""
    options: dict[str, Any] = {
        # object_store's ``timeout`` bounds a whole request, body included (30 s by default),
        # which would fail any transfer that takes longer: ours bounds each read instead.
        "read_timeout": dt.timedelta(seconds=timeout),
        "connect_timeout": dt.timedelta(seconds=min(timeout, 10.0)),
        "timeout": _WHOLE_REQUEST,
    }
    if endpoint and endpoint.startswith("http://"):
        options["allow_http"] = True
    return options


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an obstore error reports in its message, if any."""
    found = _STATUS.search(str(exc))
    return int(found.group(1)) if found else None


class StreamFailed(Exception):
    """A streamed write failed part-way; the stream is unusable and is aborted (not retryable)."""


# ---------------------------------------------------------------- reading bodies
def _range_refused(exc: BaseException) -> bool:
    """Whether obstore refused a ranged read as a range (an empty object answers 416 to ``bytes=0-``)."""
    text = str(exc).lower()
    return http_status(exc) == 416 or "range" in text or "partial" in text


#: The end of a range that reads a whole object: past any size, so the server clips it (RFC 9110).
_WHOLE = 2**62


def empty_slice(exc: BaseException) -> bool:
    """Whether a ranged read failed because its start is at or past the size (the slice is empty)."""
    return http_status(exc) == 416 or "StartTooLarge" in str(exc)


def read_whole(store: Any, path: str) -> bytes:
    """The whole object at ``path``: one plain GET, its body read by :func:`read_body`.

    A blocking call, so ``get`` then ``bytes()`` costs no loop wake-up; the
    ranged request of :func:`read_whole_async` (``bytes=0-``, which saves the
    async face a second await) cost the client as much here and the server
    more: on s3s-fs, 1 KiB reads on 16 worker threads took 198-218 us of
    client CPU each as ranged requests against 188-211 plain, and 305-365 us
    of server CPU against 285-312 (four interleaved runs, December 2026).
    """
    return read_body(obstore.get(store, path))


async def read_whole_async(store: Any, path: str) -> bytes:
    """:func:`read_whole` for the async API."""
    try:
        return bytes(await obstore.get_range_async(store, path, start=0, end=_WHOLE))
    except oe.BaseError as exc:
        if not _range_refused(exc):
            raise
    return await read_body_async(await obstore.get_async(store, path))


def read_body(result: Any) -> bytes:
    """The whole body of an obstore GetResult as ``bytes``, with as few copies as obstore allows.

    ``GetResult.bytes()`` returns ``obstore.Bytes``, which ``bytes()`` would
    copy a second time; a stream whose minimum chunk is the whole size yields
    one Python ``bytes`` built straight from the response.
    """
    start, stop = result.range
    size = stop - start
    if size <= _INLINE_BODY:
        return bytes(result.bytes())
    parts = list(result.stream(min_chunk_size=size))
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def read_body_async(result: Any) -> bytes:
    """:func:`read_body` for the async API.

    Measured on s3s-fs: a small body costs least through ``bytes_async()``
    (reading it synchronously on the loop thread stalls the other requests in
    flight), a large one through the one-chunk stream (one copy fewer).
    """
    start, stop = result.range
    size = stop - start
    if size <= _INLINE_BODY:
        return bytes(await result.bytes_async())
    parts = [chunk async for chunk in result.stream(min_chunk_size=size)]
    return parts[0] if len(parts) == 1 else b"".join(parts)


#: The mean body size up to which a batch read runs obstore's blocking calls (above it, its
#: coroutines). A blocking read wakes its thread for every chunk that arrives: on s3s-fs, 16 KiB
#: bodies cost 162 us of client CPU blocking against 218 as coroutines, 64 KiB break even, 1 MiB
#: cost 3.96 ms against 2.90.
BLOCKING_READ_LIMIT = 64 * 1024


def small_bodies(results: Iterable[object]) -> bool:
    """Whether the bodies a batch read (its ``bytes`` outcomes) average at most :data:`BLOCKING_READ_LIMIT`.

    The next batch read of the driver takes the blocking path if so (a batch
    of no body keeps that path).
    """
    count = total = 0
    for result in results:
        if isinstance(result, bytes):
            count += 1
            total += len(result)
    return small_mean(count, total)


def small_mean(count: int, total: int) -> bool:
    """Whether ``count`` bodies of ``total`` bytes average at most :data:`BLOCKING_READ_LIMIT` (none: True)."""
    return total <= BLOCKING_READ_LIMIT * count or count == 0


async def bounded(
    fn: Callable[[Any], Awaitable[T]], items: list[Any], concurrency: int
) -> list[T | BaseException]:
    """Apply ``fn`` to every item with at most ``concurrency`` in flight; errors are returned."""
    results: list[T | BaseException] = [None] * len(items)  # type: ignore[list-item]
    position = iter(range(len(items)))

    async def worker() -> None:
        for i in position:
            try:
                results[i] = await fn(items[i])
            except Exception as exc:
                results[i] = exc

    workers = min(concurrency, len(items))
    if workers == 1:
        await worker()
    else:
        await asyncio.gather(*(worker() for _ in range(workers)))
    return results


def run_batch(
    coro: Coroutine[Any, Any, list[T | BaseException]], count: int, deadline: float | None
) -> list[T | BaseException]:
    """The outcomes of a batch of ``count`` items run on the private loop under ``deadline``.

    When the deadline passes, the batch is cancelled and each item's outcome is the
    ``TimeoutError``, so the Bucket reports DeadlineExceeded for it (a failed item is retried
    alone, under the same spent deadline), rather than a bare TimeoutError escaping the batch.
    """
    try:
        return run_on_loop(coro, deadline)
    except TimeoutError as exc:
        return [exc] * count


# ---------------------------------------------------------------- streams
class _Reader(io.RawIOBase):
    """A binary, seekable reader over obstore's ReadableFile (which returns ``obstore.Bytes``)."""

    def __init__(self, native: Any) -> None:
        super().__init__()
        self._native = native

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._native.read(len(view))
        n = len(data)
        view[:n] = memoryview(data)
        return n

    def read(self, size: int = -1) -> bytes:
        data = self._native.read(None if size is None or size < 0 else size)
        return bytes(data)

    def readall(self) -> bytes:
        return bytes(self._native.read())

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return int(self._native.seek(offset, whence))

    def tell(self) -> int:
        return int(self._native.tell())

    @property
    def size(self) -> int:
        return int(self._native.size)

    def close(self) -> None:
        if not self.closed:
            self._native.close()
        super().close()


class _Aborted(Exception):
    """Passed to obstore's writer ``__exit__`` so that it aborts the multipart upload."""


class _MultipartWrite(WriteStream):
    """An unconditional streamed write on obstore's writer.

    Nothing is sent until ``part_size`` bytes are buffered; a stream that ends
    within its first part is one PUT at commit, a longer one a multipart
    upload whose parts go up as they fill. Abort aborts the upload.
    """

    def __init__(self, driver: ObstoreStorage, path: str, options: WriteOptions, part_size: int) -> None:
        self._driver = driver
        self._writer = obstore.open_writer(
            driver.store,
            path,
            attributes=driver.attributes(options),
            buffer_size=part_size,
            max_concurrency=4,
        )
        self._failed: BaseException | None = None

    def _check(self) -> None:
        if self._failed is not None:
            raise StreamFailed("an earlier part of this stream failed; it was aborted") from self._failed

    def write(self, data: bytes) -> None:
        self._check()
        try:
            self._writer.write(data)
        except Exception as exc:
            self._failed = exc
            raise StreamFailed(f"writing a part failed: {exc}") from exc

    def commit(self) -> str | None:
        self._check()
        try:
            self._writer.close()
        except Exception as exc:
            self._failed = exc
            raise StreamFailed(f"completing the upload failed: {exc}") from exc
        return None

    def abort(self) -> None:
        if self._writer.closed():
            return
        self._writer.__exit__(_Aborted, _Aborted("aborted by portable"), None)


class _SpooledWrite(WriteStream):
    """A streamed write sent as one PUT (the driver's ``put``) at commit.

    obstore's multipart writer cannot carry a condition, so a conditional
    stream is spooled (in memory up to ``part_size``, then to a temporary
    file) and sent whole with its ``If-None-Match`` / ``If-Match`` at commit:
    the object appears only if the condition holds. A driver may spool other
    writes its ``put`` sends another way (:meth:`ObstoreStorage.sent_whole`).
    Limited to the provider's single-put size (``capabilities.max_object_bytes``).
    """

    def __init__(self, driver: ObstoreStorage, key: str, options: WriteOptions, part_size: int) -> None:
        self._driver = driver
        self._key = key
        self._options = options
        self._spool: Any = tempfile.SpooledTemporaryFile(max_size=part_size, prefix="portable-obstore-")  # noqa: SIM115 (closed at commit or abort)

    def write(self, data: bytes) -> None:
        self._spool.write(data)

    def commit(self) -> str | None:
        self._spool.seek(0)
        etag = self._driver.put(self._key, self._spool.read(), self._options)
        self._spool.close()  # kept open until then: a failed commit is retried by the Bucket
        return etag

    def abort(self) -> None:
        self._spool.close()


# ---------------------------------------------------------------- errors
class ObstoreClassifier(Classifier):
    """Classifies obstore's errors by type, else by what their message reports.

    An error without a dedicated type (``GenericError``) carries only a
    message: the HTTP status in it, else object_store's HTTP error kind, else
    words that name a timeout or a transport failure.
    """

    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, PortableError):
            return exc.code
        if isinstance(exc, StreamFailed) and exc.__cause__ is not None:
            return self.code_of(exc.__cause__)
        if isinstance(exc, FileNotFoundError | oe.NotFoundError):
            return ErrorCode.NOT_FOUND
        if isinstance(exc, oe.AlreadyExistsError):
            return ErrorCode.ALREADY_EXISTS
        if isinstance(exc, oe.PreconditionError | oe.NotModifiedError):
            return ErrorCode.PRECONDITION_FAILED
        if isinstance(exc, oe.PermissionDeniedError | oe.UnauthenticatedError):
            return ErrorCode.PERMISSION_DENIED
        if isinstance(exc, oe.NotSupportedError):
            return ErrorCode.UNSUPPORTED
        if isinstance(exc, oe.InvalidPathError | oe.UnknownConfigurationKeyError):
            return ErrorCode.INVALID_ARGUMENT
        if isinstance(exc, TimeoutError):
            return ErrorCode.DEADLINE_EXCEEDED
        if isinstance(exc, oe.BaseError | OSError):
            status = http_status(exc)
            if status is not None and (status in _HTTP_CODES or status >= 400):
                return code_of_status(status, _HTTP_CODES)
            full = str(exc)
            kind = _HTTP_KIND.search(full)
            if kind is not None:  # object_store's HttpErrorKind: Connect, Request, Timeout, ...
                return ErrorCode.DEADLINE_EXCEEDED if kind.group(1) == "Timeout" else ErrorCode.UNAVAILABLE
            head = full.split("Debug source:", 1)[0].lower()
            if any(word in head for word in _TIMEOUT_WORDS):
                return ErrorCode.DEADLINE_EXCEEDED
            if isinstance(exc, oe.JoinError) or any(word in head for word in _TRANSPORT_WORDS):
                return ErrorCode.UNAVAILABLE
        return super().code_of(exc)

    def is_retryable(self, exc: BaseException) -> bool:
        if isinstance(exc, StreamFailed):
            return False  # the writer is poisoned: the Bucket aborts and the caller writes again
        return super().is_retryable(exc)


# ---------------------------------------------------------------- the driver base
class ObstoreStorage(ObstoreClassifier, ListingMixin, StorageDriver):
    """A bucket (or container) on an obstore store, optionally under a prefix.

    Subclasses build ``store`` and set ``scheme``, ``endpoint`` and
    ``capabilities``; they may override :meth:`attributes`,
    :meth:`put_mode`, :meth:`etag_of`, :meth:`sent_whole` and :meth:`signed_url`.
    """

    #: obstore store this driver runs on (S3Store, GCSStore, AzureStore).
    store: Any

    def __init__(self, store: Any, prefix: str, *, concurrency: int) -> None:
        self.store = store
        self.prefix = prefix.strip("/")
        self._root = f"{self.prefix}/" if self.prefix else ""
        self._cut = len(self._root)
        self.batch_concurrency = concurrency
        #: whether the last batch read's bodies were small enough to read with blocking calls
        self.small_reads = True

    # -- hooks ----------------------------------------------------------
    def attributes(self, options: WriteOptions) -> dict[str, str] | None:
        """obstore attributes of a write: the named headers, then user metadata.

        Headers come only from the named options (``content_type``,
        ``cache_control``, ``content_encoding``, ``content_disposition``).
        obstore reads an attribute *named* like a header as that header, so a
        metadata entry with such a name (:func:`header_like_names`) cannot be
        sent as user metadata through it: the S3 driver sends those writes
        itself, and this base refuses them before any request rather than
        turn metadata into a header.

        Raises:
            Unsupported: a metadata name obstore would send as a header.
        """
        clash = header_like_names(options.metadata)
        if clash:
            option = _OBSTORE_HEADER_NAMES[clash[0].lower()]
            raise Unsupported(
                f"metadata {clash[0]!r} cannot be stored as user metadata on {self.scheme}:// with the obstore "
                "engine, which sends an attribute of that name as the HTTP header: rename the entry"
                + (f", pass {option}= for the header" if option else "")
                + " or use ?engine=fsspec",
                provider=self.scheme,
            )
        attrs = header_attributes(options)
        if not attrs and not options.metadata:
            return None
        attrs.update(options.metadata)
        return attrs

    def put_mode(self, options: WriteOptions) -> Any:
        """obstore's PutMode of a write: ``create``, an ``UpdateVersion`` or None (overwrite)."""
        if options.if_none_match:
            return "create"
        if options.if_match is not None:
            return {"e_tag": options.if_match}
        return None

    def etag_of(self, result: Mapping[str, Any]) -> str | None:
        """The portable etag of a PutResult or ObjectMeta."""
        etag = result.get("e_tag")
        return str(etag) if etag is not None else None

    def list_etag(self, meta: Mapping[str, Any]) -> str | None:
        """The portable etag of a listed object (listings may report it differently)."""
        return self.etag_of(meta)

    # -- plumbing -------------------------------------------------------
    def _call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Run async obstore function ``fn`` on the private loop under the attempt's timeout."""

        async def call() -> T:
            return await fn(*args, **kwargs)

        return run_on_loop(call(), attempt_timeout())

    def _info(self, key: str, meta: Mapping[str, Any], attributes: Mapping[str, str] | None) -> ObjectInfo:
        # obstore names a header attribute exactly "Content-Type", "Cache-Control", ...; a user
        # metadata entry comes back under its stored name, so one named "cache-control" is
        # metadata here, never the header
        headers, metadata = split_obstore_attributes(attributes, self.metadata_name)
        return ObjectInfo(
            key=key,
            size=int(meta.get("size", 0)),
            etag=self.etag_of(meta),
            modified=meta.get("last_modified"),
            content_type=headers.get("content_type"),
            metadata=metadata,
            cache_control=headers.get("cache_control"),
            content_encoding=headers.get("content_encoding"),
            content_disposition=headers.get("content_disposition"),
        )

    def metadata_name(self, stored: str) -> str:
        """The portable metadata name of a stored one."""
        return stored.lower()

    # -- whole objects --------------------------------------------------
    def get(self, key: str) -> bytes:
        if attempt_timeout() is not None:
            return self._call(self._aget, key)
        return read_whole(self.store, self._root + key)

    async def _aget(self, key: str) -> bytes:
        return await read_whole_async(self.store, self._root + key)

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        options: dict[str, Any] = {"range": {"offset": start} if end is None else (start, end)}
        try:
            if attempt_timeout() is not None:
                return self._call(self._aget_options, key, options)
            return read_body(obstore.get(self.store, self._root + key, options=options))  # type: ignore[arg-type]
        except oe.BaseError as exc:
            if empty_slice(exc):
                return b""
            raise

    async def _aget_options(self, key: str, options: dict[str, Any]) -> bytes:
        result = await obstore.get_async(self.store, self._root + key, options=options)  # type: ignore[arg-type]
        return await read_body_async(result)

    def head(self, key: str) -> ObjectInfo:
        if attempt_timeout() is not None:
            return self._call(self._ahead, key)
        result = obstore.get(self.store, self._root + key, options={"head": True})
        return self._info(key, result.meta, result.attributes)

    async def _ahead(self, key: str) -> ObjectInfo:
        result = await obstore.get_async(self.store, self._root + key, options={"head": True})
        return self._info(key, result.meta, result.attributes)

    def _put_arguments(self, options: WriteOptions) -> dict[str, Any]:
        """obstore's ``put`` arguments of a write: one request (a condition cannot ride on a multipart upload)."""
        return {"attributes": self.attributes(options), "mode": self.put_mode(options), "use_multipart": False}

    def put(self, key: str, data: bytes, options: WriteOptions) -> str | None:
        if attempt_timeout() is not None:
            return self._call(self._aput, key, data, options)
        result = obstore.put(self.store, self._root + key, data, **self._put_arguments(options))
        return self.etag_of(result)

    async def _aput(self, key: str, data: bytes, options: WriteOptions) -> str | None:
        result = await obstore.put_async(self.store, self._root + key, data, **self._put_arguments(options))
        return self.etag_of(result)

    def delete(self, key: str) -> None:
        try:
            if attempt_timeout() is not None:
                self._call(obstore.delete_async, self.store, self._root + key)
            else:
                obstore.delete(self.store, self._root + key)
        except FileNotFoundError:
            pass  # Azure answers 404 for a missing blob; S3 and GCS do not

    def copy(self, src: str, dst: str) -> str | None:
        if attempt_timeout() is not None:
            self._call(obstore.copy_async, self.store, self._root + src, self._root + dst)
        else:
            obstore.copy(self.store, self._root + src, self._root + dst)
        return None

    # -- streams --------------------------------------------------------
    def open_read(self, key: str) -> IO[bytes]:
        native = obstore.open_reader(self.store, self._root + key, buffer_size=8 * 1024 * 1024)
        return io.BufferedReader(_Reader(native), buffer_size=1024 * 1024)

    def open_write(self, key: str, options: WriteOptions, part_size: int) -> WriteStream:
        if self.sent_whole(options):
            return _SpooledWrite(self, key, options, part_size)
        return _MultipartWrite(self, self._root + key, options, part_size)

    def sent_whole(self, options: WriteOptions) -> bool:
        """Whether a streamed write with ``options`` is spooled and sent as one ``put`` (a condition)."""
        return options.if_none_match or options.if_match is not None

    def signs_itself(self, options: WriteOptions) -> bool:
        """Whether ``put`` sends a write with ``options`` as a request of its own, not through obstore."""
        return False

    # -- batches: obstore's blocking calls on a few worker threads -------
    def _batch(
        self,
        fn: Callable[[Any], Awaitable[T]],
        items: list[Any],
        blocking: Callable[[Any], T] | None = None,
    ) -> list[T | BaseException]:
        """``blocking`` over ``items`` on ``batch_concurrency`` worker threads (:mod:`portable.driver.fanout`).

        A batch under a deadline runs coroutine function ``fn`` on the private
        loop instead, so the deadline can cancel the requests in flight (a
        blocking call cannot be interrupted).
        """
        deadline = remaining()
        if blocking is not None and deadline is None:
            return list(map_blocking(blocking, items, self.batch_concurrency))
        return run_batch(bounded(fn, items, self.batch_concurrency), len(items), deadline)

    # the blocking call of one batch item (both faces run these on the worker threads)
    def blocking_get(self, key: str) -> bytes:
        return read_whole(self.store, self._root + key)

    def blocking_putter(self, options: WriteOptions) -> Callable[[tuple[str, bytes]], str | None]:
        """The blocking put of one ``(key, data)`` item of a batch written with ``options``."""
        store, root, etag_of = self.store, self._root, self.etag_of
        attributes = self.attributes(options)

        def put(item: tuple[str, bytes]) -> str | None:
            return etag_of(obstore.put(store, root + item[0], item[1], attributes=attributes, use_multipart=False))

        return put

    def blocking_delete(self, key: str) -> None:
        try:
            obstore.delete(self.store, self._root + key)
        except FileNotFoundError:
            pass  # Azure answers 404 for a missing blob; S3 and GCS do not

    def blocking_copy(self, pair: tuple[str, str]) -> None:
        obstore.copy(self.store, self._root + pair[0], self._root + pair[1])

    def get_many(self, keys: list[str]) -> Iterator[tuple[str, bytes | BaseException]]:
        store, root = self.store, self._root

        async def one(key: str) -> bytes:
            return await read_whole_async(store, root + key)

        results = self._batch(one, keys, self.blocking_get if self.small_reads else None)
        self.small_reads = small_bodies(results)
        yield from zip(keys, results, strict=True)

    def put_many(
        self, items: list[tuple[str, bytes]], options: WriteOptions
    ) -> Iterator[tuple[str, str | BaseException | None]]:
        store, root = self.store, self._root
        attributes = self.attributes(options)
        etag_of = self.etag_of

        async def one(item: tuple[str, bytes]) -> str | None:
            result = await obstore.put_async(
                store, root + item[0], item[1], attributes=attributes, use_multipart=False
            )
            return etag_of(result)

        yield from zip((key for key, _ in items), self._batch(one, items, self.blocking_putter(options)), strict=True)

    def delete_many(self, keys: list[str]) -> Iterator[tuple[str, BaseException | None]]:
        store, root = self.store, self._root

        async def one(key: str) -> None:
            try:
                await obstore.delete_async(store, root + key)
            except FileNotFoundError:
                pass

        yield from zip(keys, self._batch(one, keys, self.blocking_delete), strict=True)

    def copy_many(self, pairs: list[tuple[str, str]]) -> Iterator[tuple[str, str | BaseException | None]]:
        store, root = self.store, self._root

        async def one(pair: tuple[str, str]) -> None:
            await obstore.copy_async(store, root + pair[0], root + pair[1])

        yield from zip((dst for _, dst in pairs), self._batch(one, pairs, self.blocking_copy), strict=True)

    def async_driver(self) -> AsyncStorageDriver:
        """obstore's coroutines on the caller's loop, on this driver's store (:mod:`._aio`)."""
        from ._aio import ObstoreAsyncStorage

        return ObstoreAsyncStorage(self)

    def as_(self, kind: type[Any]) -> Any:
        if isinstance(self.store, kind):
            return self.store
        return None

    def close(self) -> None:
        """Nothing to release: obstore's connection pool closes with the store."""


#: The names obstore gives the header attributes it reports (``attribute_to_string`` in obstore).
#: The attribute names obstore's parser (``PyAttribute`` in obstore) reads as a header, lower-cased
#: (it matches ``to_ascii_lowercase()``), each with the write option that sets that header.
_HEADER_OPTIONS = (
    ("content-disposition", "content_disposition"),
    ("content-encoding", "content_encoding"),
    ("content-language", ""),
    ("content-type", "content_type"),
    ("cache-control", "cache_control"),
    ("storage-class", ""),
)
_OBSTORE_HEADER_NAMES: Mapping[str, str] = {
    name: option for header, option in _HEADER_OPTIONS for name in (header, header.replace("-", ""))
}


def header_like_names(metadata: Mapping[str, str]) -> list[str]:
    """The metadata names that obstore would send as an HTTP header instead of as user metadata.

    obstore reads an attribute named ``content-type``, ``cache-control``,
    ``content-disposition``, ``content-encoding``, ``content-language`` or
    ``storage-class`` (any case, with or without the dash) as that header;
    every other name is user metadata.
    """
    return [name for name in metadata if name.lower() in _OBSTORE_HEADER_NAMES]


def header_attributes(options: WriteOptions) -> dict[str, str]:
    """The obstore header attributes of a write's named options (``content_type``, ``cache_control``, ...)."""
    attrs: dict[str, str] = {}
    if options.content_type is not None:
        attrs["Content-Type"] = options.content_type
    if options.cache_control is not None:
        attrs["Cache-Control"] = options.cache_control
    if options.content_encoding is not None:
        attrs["Content-Encoding"] = options.content_encoding
    if options.content_disposition is not None:
        attrs["Content-Disposition"] = options.content_disposition
    return attrs


def timedelta_seconds(expires: dt.timedelta) -> int:
    return max(1, int(expires.total_seconds()))
