"""Object storage through one API: :class:`Bucket` and :func:`open_bucket`.

>>> import portable.storage
>>> bucket = portable.storage.open_bucket("mem://")
>>> bucket.put("reports/2026-11.json", b"{}", if_none_match="*") is not None
True
>>> bucket.get("reports/2026-11.json")
b'{}'

Every method validates its arguments before a driver sees them, runs the
driver call under the profile's retry policy, circuit breaker and deadline
(:mod:`portable.resilience`), and raises only :mod:`portable.errors` types,
with the provider's error as ``__cause__``.

Keys are portable: a key that one provider accepts, every provider accepts.
A key is a non-empty string of at most ``capabilities.max_key_bytes`` UTF-8
bytes (1,024 on every built-in provider), with no control characters, no
leading or trailing ``/``, and no empty, ``.`` or ``..`` segment.
"""

from __future__ import annotations

import datetime as dt
import io
import re
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import IO, Any, Literal, TypeVar, overload

from . import urls
from ._native import native_object
from .config import Profile, check_requirements, load_profile
from .driver.storage import (
    BAD_KEY_CHARS as _BAD_CHARS,
)
from .driver.storage import (
    ListPage,
    ObjectInfo,
    StorageCapabilities,
    StorageDriver,
    WriteOptions,
    WriteStream,
    check_key,
)
from .errors import InvalidArgument, InvalidKey, NotFound, PortableError, TooLarge, Unsupported
from .resilience import Guard, ResiliencePolicy

__all__ = ["Bucket", "ListPage", "ObjectInfo", "StorageCapabilities", "open_bucket"]

T = TypeVar("T")

_METADATA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
_BATCH_CHUNK = 4096  # keys handed to a driver at once; in-flight drains at each boundary

#: The default part size of streamed writes.
DEFAULT_PART_SIZE = 8 * 1024 * 1024


def _plain_key(key: object) -> bool:
    """A fast yes for the common key (short, printable, no dots or slashes at the edges)."""
    return (
        type(key) is str
        and 0 < len(key) <= 255
        and key.isprintable()
        and key[0] != "/"
        and key[-1] != "/"
        and "." not in key
        and "//" not in key
    )


def _check_prefix(prefix: object) -> str:
    if type(prefix) is not str:
        raise InvalidKey(f"a prefix must be a str, got {type(prefix).__name__}")
    if prefix and (_BAD_CHARS.search(prefix) or prefix[0] == "/"):
        raise InvalidKey(f"prefix {prefix[:60]!r} must not start with '/' or hold control characters")
    return prefix


def _as_bytes(data: object) -> bytes:
    if type(data) is bytes:
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    if isinstance(data, str):
        raise InvalidArgument("data must be bytes, got str; encode it first, e.g. text.encode('utf-8')")
    raise InvalidArgument(f"data must be bytes, bytearray or memoryview, got {type(data).__name__}")


def _write_options(
    content_type: str | None,
    metadata: Mapping[str, str] | None,
    if_none_match: str | None,
    if_match: str | None,
    caps: StorageCapabilities,
    provider: str,
) -> WriteOptions:
    if if_none_match is not None and if_none_match != "*":
        raise InvalidArgument(f"if_none_match takes only '*' (create only), got {if_none_match!r}")
    if if_none_match is not None and if_match is not None:
        raise InvalidArgument("pass if_none_match or if_match, not both")
    if if_match is not None and (type(if_match) is not str or not if_match):
        raise InvalidArgument("if_match must be a non-empty etag string from head() or put()")
    if if_none_match and not caps.conditional_create:
        raise Unsupported(f"{provider}:// does not enforce create-only writes", provider=provider)
    if if_match and not caps.conditional_update:
        raise Unsupported(f"{provider}:// does not enforce etag-conditional writes", provider=provider)
    meta: Mapping[str, str] = {}
    if metadata:
        total = 0
        for name, value in metadata.items():
            if type(name) is not str or not _METADATA_NAME.match(name):
                raise InvalidArgument(
                    f"metadata name {name!r} must be 1-128 ASCII letters, digits, '-' or '_', "
                    "starting with a letter or digit"
                )
            if type(value) is not str or not value.isascii() or _BAD_CHARS.search(value):
                raise InvalidArgument(f"metadata {name!r} must be a printable ASCII str")
            total += len(name) + len(value)
        if caps.max_metadata_bytes is not None and total > caps.max_metadata_bytes:
            raise TooLarge(f"metadata is {total} bytes; {provider}:// allows {caps.max_metadata_bytes}")
        meta = {k.lower(): v for k, v in metadata.items()}
    if content_type is not None and (type(content_type) is not str or _BAD_CHARS.search(content_type)):
        raise InvalidArgument(f"content_type must be a str such as 'application/json', got {content_type!r}")
    if not meta and content_type is None and if_match is None and not if_none_match:
        return _PLAIN
    return WriteOptions(content_type, meta, bool(if_none_match), if_match)


_PLAIN = WriteOptions()


class _Writer(io.RawIOBase):
    """The file object returned by ``Bucket.open(key, "wb")``.

    Bytes are buffered into parts and handed to the driver; :meth:`close`
    commits. Leaving a ``with`` block by an exception aborts instead, so a
    failed or interrupted write leaves no object behind.
    """

    def __init__(self, bucket: Bucket, key: str, stream: WriteStream, part_size: int) -> None:
        super().__init__()
        self._bucket = bucket
        self._key = key
        self._stream = stream
        self._part_size = part_size
        self._buffer = bytearray()
        self._written = 0
        self._done = False
        self.etag: str | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self._done:
            raise ValueError("write to a closed portable writer")
        chunk = _as_bytes(data)
        self._buffer += chunk
        self._written += len(chunk)
        while len(self._buffer) >= self._part_size:
            part = bytes(self._buffer[: self._part_size])
            del self._buffer[: self._part_size]
            self._guarded("write", self._stream.write, part)
        return len(chunk)

    def tell(self) -> int:
        return self._written

    def _guarded(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return self._bucket._guard.call("write", f"{what} {self._key}", fn, *args)
        except BaseException:
            self.abort()
            raise

    def close(self) -> None:
        """Commit the object (with its conditions). Idempotent."""
        if self._done:
            return
        if self._buffer:
            self._guarded("write", self._stream.write, bytes(self._buffer))
            self._buffer.clear()
        self.etag = self._guarded("commit", self._stream.commit)
        self._done = True
        super().close()

    def abort(self) -> None:
        """Discard what was written; nothing becomes visible."""
        if self._done:
            return
        self._done = True
        self._buffer.clear()
        try:
            self._stream.abort()
        finally:
            super().close()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()

    def __del__(self) -> None:
        # Garbage-collected without close(): never commit a possibly truncated object.
        if not self._done:
            try:
                self.abort()
            except Exception:
                pass  # best effort in a finaliser: the object was never visible


class _Reader(io.RawIOBase):
    """The file object returned by ``Bucket.open(key, "rb")``.

    It delegates to the driver's stream and turns each native error into the
    portable error its driver classifies it as (once, with ``__cause__``).
    A read is not retried mid-stream: reopen and seek to resume.
    """

    def __init__(self, bucket: Bucket, key: str, inner: IO[bytes]) -> None:
        super().__init__()
        self._guard = bucket._guard
        self._what = f"read {key}"
        self._inner = inner

    def _fail(self, exc: Exception) -> PortableError:
        return self._guard.wrap(self._what, exc)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        try:
            return bool(self._inner.seekable())
        except Exception as exc:
            raise self._fail(exc) from exc

    def readinto(self, buffer: Any) -> int:
        try:
            readinto = getattr(self._inner, "readinto", None)
            if readinto is not None:
                return int(readinto(buffer))
            data = self._inner.read(len(buffer))
        except Exception as exc:
            raise self._fail(exc) from exc
        buffer[: len(data)] = data
        return len(data)

    def read(self, size: int | None = -1) -> bytes:
        try:
            return self._inner.read(-1 if size is None else size)
        except Exception as exc:
            raise self._fail(exc) from exc

    def readall(self) -> bytes:
        return self.read(-1)

    def readline(self, size: int | None = -1) -> bytes:
        try:
            return self._inner.readline(-1 if size is None else size)
        except Exception as exc:
            raise self._fail(exc) from exc

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        try:
            return self._inner.seek(offset, whence)
        except Exception as exc:
            raise self._fail(exc) from exc

    def tell(self) -> int:
        try:
            return self._inner.tell()
        except Exception as exc:
            raise self._fail(exc) from exc

    def close(self) -> None:
        if not self.closed:
            try:
                self._inner.close()
            except Exception as exc:
                raise self._fail(exc) from exc
            finally:
                super().close()


class Bucket:
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
        from .driver.redaction import redact

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
        if not _plain_key(key):
            check_key(key, self._max_key)
        return self._guard.call("read", f"get {key}", self._driver.get, key)

    def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        """Return bytes ``[start, end)`` of the object, like a slice.

        ``end`` defaults to the end of the object; a range past the end is
        clipped, and ``start`` at or beyond the size returns ``b""`` on every
        provider (S3 and GCS answer 416 there; the drivers hide that).
        """
        check_key(key, self._max_key)
        if type(start) is not int or start < 0:
            raise InvalidArgument(f"start must be an int >= 0, got {start!r}")
        if end is not None and (type(end) is not int or end < start):
            raise InvalidArgument(f"end must be an int >= start ({start}), got {end!r}")
        if end == start:
            self.head(key)  # a zero-length range still reports a missing key
            return b""
        return self._guard.call("read", f"get_range {key}", self._driver.get_range, key, start, end)

    def head(self, key: str) -> ObjectInfo:
        """Return size, etag, modification time, content type and user metadata.

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
    ) -> str | None:
        """Store ``data`` under ``key`` atomically; return the new etag.

        Readers see the old object or the new one, never a mix.

        Args:
            content_type: stored and returned by ``head``. Defaults to none.
            metadata: user metadata; names are 1-128 of ``[A-Za-z0-9_-]`` and
                are lower-cased (S3 and Azure do); values printable ASCII.
            if_none_match: ``"*"``: create only; fail if the key exists.
            if_match: write only if the current etag equals this one.
            idempotency_key: makes a conditional put safe to repeat: the object
                is tagged (metadata ``portable-idempotency-key`` and
                ``portable-payload``), and a repeat that meets this put's own
                earlier write (one that succeeded but reported a failure)
                returns its etag instead of AlreadyExists/PreconditionFailed.
                See :func:`portable._idempotent_put.idempotent_put`.

        Raises:
            AlreadyExists: ``if_none_match="*"`` and the key exists.
            PreconditionFailed: ``if_match`` is stale (or the key is missing; on
                some providers that is NotFound instead).
            IdempotencyConflict: ``idempotency_key`` wrote this object before
                with a different payload.
            InvalidKey / InvalidArgument / TooLarge: before any request.
        """
        if idempotency_key is not None:
            from ._idempotent_put import idempotent_put

            return idempotent_put(
                self, key, data, content_type=content_type, metadata=metadata,
                if_none_match=if_none_match, if_match=if_match, idempotency_key=idempotency_key,
            )
        if not _plain_key(key):
            check_key(key, self._max_key)
        if type(data) is not bytes:
            data = _as_bytes(data)
        if content_type is None and metadata is None and if_none_match is None and if_match is None:
            options = _PLAIN
        else:
            options = _write_options(content_type, metadata, if_none_match, if_match, self._caps, self.provider)
        limit = self._caps.max_object_bytes
        if limit is not None and len(data) > limit:
            raise TooLarge(f"{len(data)} bytes is over {self.provider}://'s single-put limit of {limit}")
        return self._guard.call("write", f"put {key}", self._driver.put, key, data, options)

    def delete(self, key: str) -> None:
        """Delete the object. Deleting a missing key is not an error."""
        check_key(key, self._max_key)
        self._guard.call("write", f"delete {key}", self._driver.delete, key)

    def copy(self, src: str, dst: str) -> str | None:
        """Copy ``src`` to ``dst`` (server-side where the provider can); return dst's etag.

        Raises:
            NotFound: ``src`` does not exist.
        """
        check_key(src, self._max_key)
        check_key(dst, self._max_key)
        return self._guard.call("write", f"copy {src} -> {dst}", self._driver.copy, src, dst)

    # -- streams --------------------------------------------------------
    @overload
    def open(self, key: str, mode: Literal["rb"] = "rb") -> IO[bytes]: ...
    @overload
    def open(
        self,
        key: str,
        mode: Literal["wb"],
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        if_none_match: Literal["*"] | None = None,
        if_match: str | None = None,
        part_size: int = DEFAULT_PART_SIZE,
    ) -> IO[bytes]: ...
    def open(
        self,
        key: str,
        mode: Literal["rb", "wb"] = "rb",
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        if_none_match: Literal["*"] | None = None,
        if_match: str | None = None,
        part_size: int = DEFAULT_PART_SIZE,
    ) -> IO[bytes]:
        """Open a stream on the object.

        ``"rb"`` reads; ``"wb"`` writes in parts of ``part_size`` bytes
        (multipart upload where the provider has it) and makes the object
        visible only when the stream is closed. Inside a ``with`` block an
        exception aborts the write: no partial object is ever visible. The
        write's conditions are checked at commit; see
        ``capabilities.conditional_streaming_write``.

        Args:
            part_size: bytes per part. Defaults to 8 MiB; at least the
                provider's ``min_part_bytes``.
        """
        check_key(key, self._max_key)
        if mode == "rb":
            if content_type or metadata or if_none_match or if_match:
                raise InvalidArgument("write options apply to mode 'wb' only")
            inner = self._guard.call("read", f"open {key}", self._driver.open_read, key)
            return _Reader(self, key, inner)  # type: ignore[return-value]
        if mode != "wb":
            raise InvalidArgument(f"mode must be 'rb' or 'wb', got {mode!r}")
        if type(part_size) is not int or part_size < self._caps.min_part_bytes:
            raise InvalidArgument(
                f"part_size must be an int >= {self._caps.min_part_bytes} on {self.provider}://, got {part_size!r}"
            )
        options = _write_options(content_type, metadata, if_none_match, if_match, self._caps, self.provider)
        stream = self._guard.call("write", f"open {key}", self._driver.open_write, key, options, part_size)
        return _Writer(self, key, stream, part_size)  # type: ignore[return-value]

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
        _check_prefix(prefix)
        if delimiter is not None and delimiter != "/":
            raise InvalidArgument(f"delimiter must be '/' or None, got {delimiter!r}")
        if start_after is not None and type(start_after) is not str:
            raise InvalidArgument("start_after must be a str key")
        if type(page_size) is not int or not 1 <= page_size <= 1000:
            raise InvalidArgument(f"page_size must be an int from 1 to 1000, got {page_size!r}")
        if token is not None and type(token) is not str:
            raise InvalidArgument("token must be a str from a previous page's next_token")
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
        Each page is fetched under the retry policy.
        """
        token: str | None = None
        while True:
            page = self.list_page(
                prefix, delimiter=delimiter, start_after=start_after, page_size=page_size, token=token
            )
            if page.prefixes:
                entries = [*page.objects, *(ObjectInfo(key=p, is_prefix=True) for p in page.prefixes)]
                entries.sort(key=lambda e: e.key)
                yield from entries
            else:
                yield from page.objects
            if page.next_token is None:
                return
            token = page.next_token

    # -- batches --------------------------------------------------------
    def get_many(self, keys: Iterable[str], *, missing_ok: bool = False) -> dict[str, bytes]:
        """Fetch many objects concurrently (the driver's native concurrency, bounded).

        Each object is retried on its own. A missing key raises NotFound
        naming it, unless ``missing_ok``, when it is left out of the result.
        """
        keys = [check_key(k, self._max_key) for k in keys]
        out: dict[str, bytes] = {}
        for chunk in _chunks(keys):
            for key, result in self._driver.get_many(chunk):
                if isinstance(result, BaseException):
                    data = self._settle("read", f"get {key}", result, self._driver.get, key)
                    if data is None:
                        if missing_ok:
                            continue
                        raise NotFound(f"get {key}: no such object", provider=self.provider)
                    result = data
                out[key] = result
        return out

    def put_many(
        self,
        items: Mapping[str, bytes] | Iterable[tuple[str, bytes]],
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> dict[str, str | None]:
        """Store many objects concurrently; return each key's etag.

        A failed object is retried on its own; the first that still fails raises.
        """
        pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
        checked = [(check_key(k, self._max_key), _as_bytes(v)) for k, v in pairs]
        options = _write_options(content_type, metadata, None, None, self._caps, self.provider)
        out: dict[str, str | None] = {}
        for chunk in _chunks(checked):
            for key, result in self._driver.put_many(chunk, options):
                if isinstance(result, BaseException):
                    data = dict(chunk)[key]
                    result = self._settle("write", f"put {key}", result, self._driver.put, key, data, options)
                out[key] = result
        return out

    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete many objects concurrently; missing keys are not an error."""
        keys = [check_key(k, self._max_key) for k in keys]
        for chunk in _chunks(keys):
            for key, result in self._driver.delete_many(chunk):
                if isinstance(result, BaseException):
                    self._settle("write", f"delete {key}", result, self._driver.delete, key)

    def copy_many(self, pairs: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str | None]:
        """Copy many objects concurrently, server-side where the provider can; return each
        destination key's etag (None where the provider does not say).

        ``pairs`` maps source keys to destination keys (or is ``(source, destination)``
        pairs). Every key is checked before anything is copied, and a destination may
        appear only once. Each copy is retried on its own; a missing source raises
        NotFound naming it. The first copy that still fails raises; copies of earlier
        batches are done by then, and copies of its batch may be.
        """
        items = list(pairs.items()) if isinstance(pairs, Mapping) else list(pairs)
        checked = [(check_key(src, self._max_key), check_key(dst, self._max_key)) for src, dst in items]
        targets = [dst for _, dst in checked]
        if len(set(targets)) != len(targets):
            twice = next(dst for dst in targets if targets.count(dst) > 1)
            raise InvalidArgument(f"copy_many: destination {twice[:200]!r} appears more than once")
        out: dict[str, str | None] = {}
        for chunk in _chunks(checked):
            source_of = {dst: src for src, dst in chunk}
            for dst, result in self._driver.copy_many(chunk):
                if isinstance(result, BaseException):
                    src = source_of[dst]
                    result = self._settle("write", f"copy {src} -> {dst}", result, self._driver.copy, src, dst)
                out[dst] = result
        return out

    def copy_prefix(self, src_prefix: str, dst_prefix: str) -> int:
        """Copy every object under ``src_prefix`` to the same key under ``dst_prefix``; return how many.

        Server-side where the provider can, :meth:`copy_many` a listing page at a
        time (so any number of objects streams through bounded memory). The two
        prefixes must not overlap (one a prefix of the other): the copies would be
        listed again. Not a snapshot: an object written under ``src_prefix`` while
        it runs may or may not be copied.

        Raises:
            InvalidArgument: the prefixes overlap (before any request).
            InvalidKey: a destination key would be invalid (too long); objects of
                earlier pages are copied by then.
        """
        src = _check_prefix(src_prefix)
        dst = _check_prefix(dst_prefix)
        if src.startswith(dst) or dst.startswith(src):
            raise InvalidArgument(
                f"copy_prefix: {src!r} and {dst!r} overlap (one is a prefix of the other); "
                "copy to a prefix outside the source"
            )
        copied = 0
        batch: list[tuple[str, str]] = []
        for info in self.list(src, page_size=1000):
            batch.append((info.key, dst + info.key[len(src) :]))
            if len(batch) >= 1000:
                copied += len(self.copy_many(batch))
                batch = []
        if batch:
            copied += len(self.copy_many(batch))
        return copied

    def _settle(self, op_class: str, what: str, first: BaseException, fn: Any, *args: Any) -> Any:
        """Classify a batch item's failure; retry it alone if retryable. NotFound -> None."""
        err = self._guard.wrap(what, first)
        if isinstance(err, NotFound) and op_class == "read":
            return None
        if not err.retryable:
            raise err from (None if err is first else first)
        try:
            return self._guard.call(op_class, what, fn, *args)
        except NotFound:
            if op_class == "read":
                return None
            raise

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
        check_key(key, self._max_key)
        if method not in ("GET", "PUT"):
            raise InvalidArgument(f"method must be 'GET' or 'PUT', got {method!r}")
        delta = expires if isinstance(expires, dt.timedelta) else dt.timedelta(seconds=expires)
        if not dt.timedelta(seconds=1) <= delta <= dt.timedelta(days=7):
            raise InvalidArgument(f"expires must be between 1 second and 7 days, got {delta}")
        if not self._caps.signed_urls:
            raise Unsupported(f"{self.provider}:// cannot sign URLs", provider=self.provider)
        return self._guard.call(
            "read", f"signed_url {key}", self._driver.signed_url, key, method, delta, content_type
        )

    def as_(self, kind: type[T]) -> T:
        """Return the native object of type ``kind`` under this bucket.

        Each adapter documents what it can return (for example
        ``s3fs.S3FileSystem``). Raises Unsupported for anything else.
        """
        return native_object(self._driver, kind, self.provider)

    def close(self) -> None:
        """Release the driver's connections and threads."""
        self._driver.close()


def _chunks(items: list[T]) -> Iterator[list[T]]:
    for i in range(0, len(items), _BATCH_CHUNK):
        yield items[i : i + _BATCH_CHUNK]


def open_driver(url: str) -> StorageDriver:
    """Open the storage driver for ``url`` (no portable layer around it)."""
    driver = urls.open_driver("storage", url)
    if not isinstance(driver, StorageDriver):
        raise PortableError(f"{urls.parse_url(url)}: the driver is not a StorageDriver")
    return driver


def open_bucket(url: str | None = None, *, profile: str | Profile | None = None) -> Bucket:
    """Open a bucket by URL, or the active profile's ``storage`` URL.

    The profile's resilience policy and ``storage_engine`` apply either way
    (a URL's own ``?engine=`` wins), and its ``requires`` are checked now: a provider that lacks a required capability fails here,
    at start-up, with MissingCapability.

    Raises:
        UnknownScheme / MissingDependency / InvalidURL / ConfigError: before any request.
    """
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    target = url or prof.storage
    if prof.storage_engine is not None:
        target = urls.with_default_engine(target, prof.storage_engine)
    driver = open_driver(target)
    check_requirements(
        "storage", driver.scheme, driver.capabilities.supported(), StorageCapabilities.flag_names(), prof.requires
    )
    return Bucket(driver, url=target, policy=prof.resilience)
