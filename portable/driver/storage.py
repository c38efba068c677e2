"""The storage driver protocol: what a blob store adapter implements.

Application code should use :class:`portable.storage.Bucket`. A driver
subclasses :class:`StorageDriver`, implements the abstract methods, and may
override the batch methods to use its library's native concurrency.

Inputs a driver can rely on (the Bucket checks them first):

* keys are non-empty ``str``, valid UTF-8, free of control characters (C0,
  DEL and C1, U+0085 among them) and of the Unicode line and paragraph
  separators (U+2028, U+2029), with
  no leading or trailing ``/``, no empty, ``.`` or ``..`` segment, and no
  longer than ``capabilities.max_key_bytes`` bytes;
* ``data`` is ``bytes``;
* ``WriteOptions.if_match`` and ``if_none_match`` are never both set;
* ranges have ``0 <= start`` and ``end is None or end >= start``;
* ``page_size`` is between 1 and 1,000.

Error contract: methods raise the native error and let :meth:`code_of`
classify it. A missing key is ``NOT_FOUND``; a create-only write that meets
an existing object is ``ALREADY_EXISTS``; a stale ``if_match`` is
``PRECONDITION_FAILED``. ``delete`` of a missing key returns normally.
"""

from __future__ import annotations

import abc
import datetime as dt
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Literal, TypeVar

from ..errors import InvalidKey, Unsupported
from . import Capabilities, Classifier
from .fanout import map_blocking

if TYPE_CHECKING:
    from .aio_storage import AsyncStorageDriver

__all__ = [
    "BAD_KEY_CHARS",
    "bad_char_named",
    "check_key",
    "dot_segment",
    "ListPage",
    "ObjectInfo",
    "PersistedPart",
    "ResumableWriteStream",
    "StorageCapabilities",
    "StorageDriver",
    "WriteOptions",
    "WriteStream",
    "page_of_sorted_keys",
]


#: Characters no portable key or prefix may hold: the C0 controls, DEL, the C1 controls
#: (U+0080-U+009F, NEL U+0085 among them) and the Unicode line and paragraph separators
#: (U+2028, U+2029). Each ends a line somewhere (``str.splitlines``, logs, HTTP headers,
#: XML listings), so a key holding one would be read back as another.
BAD_KEY_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def bad_char_named(text: str) -> str | None:
    """The first character of ``text`` that :data:`BAD_KEY_CHARS` refuses, as ``U+XXXX``, or None."""
    found = BAD_KEY_CHARS.search(text)
    return None if found is None else f"U+{ord(found.group()):04X}"


def dot_segment(key: str) -> bool:
    """Whether ``key`` has a ``.`` or ``..`` segment."""
    return any(seg in (".", "..") for seg in key.split("/"))


def check_key(key: object, max_bytes: int = 1024) -> str:
    """Return ``key`` if it is a portable key, else raise InvalidKey saying what to fix.

    The Bucket checks every key with this before a driver sees it; a driver that
    takes keys from elsewhere (a listing prefix, a native URL) may use it too.
    """
    if type(key) is not str:
        raise InvalidKey(f"a key must be a str, got {type(key).__name__}")
    if not key:
        raise InvalidKey("a key must not be empty")
    if len(key) * 4 > max_bytes:  # only then can UTF-8 exceed the limit
        try:
            size = len(key.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidKey(f"key {key[:60]!r} is not valid UTF-8 (it holds a lone surrogate)") from None
        if size > max_bytes:
            raise InvalidKey(f"key {key[:60]!r}... is {size} bytes in UTF-8; the limit is {max_bytes}")
    elif not key.isascii():
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidKey(f"key {key[:60]!r} is not valid UTF-8 (it holds a lone surrogate)") from None
    bad = bad_char_named(key)
    if bad is not None:
        raise InvalidKey(
            f"key {key[:60]!r} holds the control or line-separator character {bad} "
            "(no key may hold C0/C1 controls such as NUL, newline or U+0085, nor U+2028/U+2029); remove it"
        )
    if key[0] == "/" or key[-1] == "/":
        raise InvalidKey(f"key {key[:60]!r} must not start or end with '/'; write 'a/b', not '/a/b/'")
    if "//" in key or ("." in key and dot_segment(key)):
        raise InvalidKey(
            f"key {key[:60]!r} has an empty, '.' or '..' segment; portable keys are "
            "'/'-separated names such as 'reports/2026/11.json'"
        )
    return key


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What ``head`` and ``list`` report about an object.

    Attributes:
        key: the key, relative to the bucket's prefix.
        size: size in bytes (0 for a common prefix).
        etag: an opaque version tag that changes whenever the content changes;
            pass it to ``put(..., if_match=etag)``. On GCS it is the generation.
        modified: last modification time (UTC), where the provider reports it.
        content_type: the stored Content-Type, if any.
        metadata: user metadata (``head`` only; ``list`` leaves it empty).
        is_prefix: True for a common prefix returned by a delimited ``list``.
        cache_control, content_encoding, content_disposition: the stored HTTP
            headers (``head`` only), where the provider keeps them.
    """

    key: str
    size: int = 0
    etag: str | None = None
    modified: dt.datetime | None = None
    content_type: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    is_prefix: bool = False
    cache_control: str | None = None
    content_encoding: str | None = None
    content_disposition: str | None = None


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a listing: objects and common prefixes, each in lexical order.

    ``next_token`` is None on the last page.
    """

    objects: list[ObjectInfo]
    prefixes: list[str]
    next_token: str | None


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Options of a write, already validated by the Bucket."""

    content_type: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    if_none_match: bool = False
    if_match: str | None = None
    #: HTTP headers stored with the object where the provider has them (S3, GCS, Azure);
    #: they come only from these named arguments, never from ``metadata``.
    cache_control: str | None = None
    content_encoding: str | None = None
    content_disposition: str | None = None


@dataclass(frozen=True, slots=True)
class StorageCapabilities(Capabilities):
    """What a storage provider can do. A profile's ``requires`` names these fields.

    Attributes:
        conditional_create: ``put(..., if_none_match="*")`` is enforced.
        conditional_update: ``put(..., if_match=etag)`` is enforced.
        conditional_streaming_write: the conditions also hold for ``open(..., "wb")``.
        signed_urls: ``signed_url`` works with the configured credentials.
        server_side_copy: ``copy`` runs in the provider without moving bytes here.
        multipart: large streamed writes are uploaded in parts.
        max_key_bytes: the longest key in UTF-8 bytes, relative to the bucket URL:
            a driver whose URL carries a prefix subtracts the prefix's length.
        max_object_bytes: the largest object, or None if unbounded.
        max_metadata_bytes: the largest total user metadata, or None.
        min_part_bytes: the smallest part of a multipart upload (not the last).
        resumable_writes: ``open(key, "wb", resume=True)`` continues an upload that a
            killed process started, from the parts the provider (or a local record) kept.
    """

    conditional_create: bool = True
    conditional_update: bool = True
    conditional_streaming_write: bool = True
    signed_urls: bool = False
    server_side_copy: bool = True
    multipart: bool = True
    max_key_bytes: int = 1024
    max_object_bytes: int | None = None
    max_metadata_bytes: int | None = 2048
    min_part_bytes: int = 5 * 1024 * 1024
    resumable_writes: bool = False


class WriteStream(abc.ABC):
    """A streamed write. Nothing is visible under the key until :meth:`commit`.

    The Bucket calls :meth:`write` any number of times, then :meth:`commit`
    or :meth:`abort`. A driver uploads parts as they fill (multipart) and
    must leave no object and no orphaned parts after abort.

    Retries: after a retryable error from :meth:`write`, the Bucket calls it
    again with the same bytes, so a failed write must append nothing (or
    forget what it appended). After an error from :meth:`commit`, the Bucket
    first checks what the store holds under the key: if it holds this
    stream's bytes, the commit took effect (its reply was lost) and the
    Bucket never calls :meth:`commit` again; only when the bytes are not
    there and the error is retryable does it call :meth:`commit` once more,
    so a stream whose commit failed with a retryable error must still be
    committable (or raise a non-retryable error saying it is spent).
    """

    @abc.abstractmethod
    def write(self, data: bytes) -> None:
        """Append ``data``; on failure, append none of it."""

    @abc.abstractmethod
    def commit(self) -> str | None:
        """Make the object visible, honouring the write's conditions; return its etag (None where
        the provider does not say)."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Discard everything written. Must not raise if nothing was uploaded."""


@dataclass(frozen=True, slots=True)
class PersistedPart:
    """A part of a resumable write that the provider already holds.

    Attributes:
        offset: where the part starts in the object.
        size: its length in bytes.
        md5: the MD5 of its bytes where the provider (or the driver's own record)
            says it, else None: the Bucket then checks only sizes against a source.
    """

    offset: int
    size: int
    md5: bytes | None = None


class ResumableWriteStream(WriteStream):
    """A streamed write that continues one an earlier (perhaps killed) process began.

    :attr:`persisted` lists the parts the provider already holds for the key,
    contiguous from offset 0 and in order (empty for a fresh upload). The
    Bucket checks them against the caller's source, calls :meth:`keep` with
    how many to keep, and then calls :meth:`write` with the bytes that follow
    them. Each :meth:`write` should be persisted when it returns, so a process
    killed after it loses nothing of it; a provider that must hold bytes back
    (a GCS session keeps its last part for the request that carries the total
    size) holds at most one part, and reports only what it holds. As for every
    stream, nothing is visible under the key before :meth:`commit`, and
    :meth:`abort` removes every part (those of the earlier process too).
    """

    persisted: list[PersistedPart]

    @abc.abstractmethod
    def keep(self, count: int) -> None:
        """Keep the first ``count`` persisted parts and continue after them, dropping the rest.

        A provider that cannot drop a tail (a GCS session) starts a fresh upload
        when ``count`` is less than ``len(persisted)``; either way :attr:`persisted`
        says afterwards what is kept.
        """

    def suspend(self) -> None:
        """Release local resources (files, sessions in memory), keeping every persisted part.

        Called instead of :meth:`abort` when a resumable write fails or is
        dropped: a later ``resume=True`` continues it, and ``abort_incomplete``
        removes it if none does. The default does nothing.
        """


class StorageDriver(Classifier, abc.ABC):
    """Base class of storage drivers.

    Attributes:
        scheme: the URL scheme this driver serves (``"s3"``).
        endpoint: where requests go, for breaker keys and messages; never a secret.
        capabilities: what the provider supports.
        known_differences: contract tests the provider fails by design, with reasons.
        batch_concurrency: how many objects the default batch methods move at once.
    """

    scheme: str = ""
    endpoint: str = ""
    capabilities: StorageCapabilities = StorageCapabilities()
    batch_concurrency: int = 16
    #: Contract tests this provider fails by its nature, with the reason
    #: (``{"test_key_and_prefix_coexist": "..."}``); ``portable contract`` and
    #: the adapters' test subclasses mark them as expected failures.
    known_differences: Mapping[str, str] = {}
    #: Why this driver cannot resume streamed writes (``capabilities.resumable_writes`` False):
    #: the Bucket puts it in the Unsupported error of ``open(..., resume=True)``.
    resume_limitation: str = "its driver keeps no upload that a later process could find and continue"

    # -- whole objects -------------------------------------------------
    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """Return the whole object. Missing key: NOT_FOUND."""

    @abc.abstractmethod
    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        """Return bytes ``[start, end)`` clipped to the object; ``b""`` if start >= size."""

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """Return the object's info with metadata. Missing key: NOT_FOUND."""

    @abc.abstractmethod
    def put(self, key: str, data: bytes, options: WriteOptions) -> str | None:
        """Store ``data`` atomically under ``key``; return the new etag.

        ``if_none_match`` fails with ALREADY_EXISTS if the key exists;
        ``if_match`` fails with PRECONDITION_FAILED unless the current etag
        equals it (and NOT_FOUND or PRECONDITION_FAILED if the key is missing).
        """

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; a missing key is not an error."""

    @abc.abstractmethod
    def copy(self, src: str, dst: str) -> str | None:
        """Copy ``src`` to ``dst`` (server-side where possible); return dst's etag."""

    # -- streams -------------------------------------------------------
    @abc.abstractmethod
    def open_read(self, key: str) -> IO[bytes]:
        """Return a readable, seekable-if-possible binary stream. Missing key: NOT_FOUND."""

    @abc.abstractmethod
    def open_write(self, key: str, options: WriteOptions, part_size: int) -> WriteStream:
        """Start a streamed write of parts of about ``part_size`` bytes."""

    def open_sized_write(self, key: str, options: WriteOptions, size: int) -> WriteStream | None:
        """Start a streamed write of exactly ``size`` bytes sent as ONE request, or None to decline.

        The Bucket calls this when the caller said the stream's length
        (``open(key, "wb", size=...)``) and falls back to :meth:`open_write`
        on None. The Bucket checks the length itself: it never writes more
        than ``size`` bytes, and it aborts (never commits) a stream that ends
        short. The stream may keep a reference to the bytes of each
        :meth:`write` (immutable ``bytes``) until the next call, and must hold
        back enough that the request cannot complete before :meth:`commit`: an
        :meth:`abort`, or a process killed, before it leaves no object. A
        failed :meth:`write` spoils the stream (raise an error that is not
        retryable): a request's body cannot be rewound. The default declines.
        """
        return None

    def open_resumable(self, key: str, options: WriteOptions, part_size: int) -> ResumableWriteStream:
        """Start, or find and continue, a resumable streamed write of ``key``.

        A driver finds the upload an earlier writer of ``key`` left (the newest
        one, where several are in flight) and reports its parts in
        ``persisted``; else it starts a fresh one. ``options`` carries no
        condition (the Bucket refuses those with ``resume=True``). Where the
        earlier upload already fixed the content type, metadata or headers (S3,
        GCS), that upload's are kept. The default raises Unsupported: a driver
        that declares ``capabilities.resumable_writes`` overrides it.
        """
        raise Unsupported(f"{self.scheme}:// cannot resume streamed writes", provider=self.scheme)

    # -- listing -------------------------------------------------------
    @abc.abstractmethod
    def list_page(
        self,
        prefix: str,
        delimiter: str | None,
        start_after: str | None,
        page_size: int,
        token: str | None,
    ) -> ListPage:
        """Return one page of keys under ``prefix`` greater than ``start_after``.

        ``token`` is None for the first page and a previous page's
        ``next_token`` after that. With a delimiter, keys that contain it
        after the prefix are folded into ``prefixes`` (each ending with the
        delimiter). Objects and prefixes together count towards ``page_size``.
        """

    # -- optional ------------------------------------------------------
    def signed_url(
        self, key: str, method: Literal["GET", "PUT"], expires: dt.timedelta, content_type: str | None
    ) -> str:
        """Return a URL that allows ``method`` on ``key`` without credentials until expiry.

        The default raises Unsupported: a driver that can sign overrides it.
        """
        raise Unsupported(f"{self.scheme}:// cannot sign URLs", provider=self.scheme)

    def get_many(self, keys: list[str]) -> Iterator[tuple[str, bytes | BaseException]]:
        """Fetch many objects concurrently; yield each key with its bytes or its error."""
        yield from zip(keys, _fan_out(self.get, keys, self.batch_concurrency, _never_blocks(self)), strict=True)

    def put_many(
        self, items: list[tuple[str, bytes]], options: WriteOptions
    ) -> Iterator[tuple[str, str | BaseException | None]]:
        """Store many objects concurrently; yield each key with its etag or its error."""

        def one(item: tuple[str, bytes]) -> str | None:
            return self.put(item[0], item[1], options)

        results = _fan_out(one, items, self.batch_concurrency, _never_blocks(self))
        yield from zip((key for key, _ in items), results, strict=True)

    def delete_many(self, keys: list[str]) -> Iterator[tuple[str, BaseException | None]]:
        """Delete many objects concurrently; yield each key with None or its error."""
        yield from zip(keys, _fan_out(self.delete, keys, self.batch_concurrency, _never_blocks(self)), strict=True)

    def copy_many(self, pairs: list[tuple[str, str]]) -> Iterator[tuple[str, str | BaseException | None]]:
        """Copy many objects concurrently; yield each destination key with its etag (None where
        the provider gives none) or its error. Server-side wherever :meth:`copy` is."""

        def one(pair: tuple[str, str]) -> str | None:
            return self.copy(pair[0], pair[1])

        results = _fan_out(one, pairs, self.batch_concurrency, _never_blocks(self))
        yield from zip((dst for _, dst in pairs), results, strict=True)

    def abort_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        """Remove the leftovers of writes that never committed, started more than ``older_than`` ago.

        Leftovers are what a killed writer leaves: temp files (file://), incomplete
        multipart uploads (S3), uncommitted blocks (Azure), resumable sessions
        (GCS, where the API lists them). Returns what was removed, one entry each
        (the key, or ``key#upload-id`` where one key has several). The default
        raises Unsupported: a driver that can leave leftovers overrides it.
        """
        raise Unsupported(f"{self.scheme}:// cannot list incomplete writes", provider=self.scheme)

    def list_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        """What :meth:`abort_incomplete` would remove now, in the same form, removing nothing.

        Behind ``portable abort-incomplete --dry-run``. The default raises
        Unsupported: a driver that implements :meth:`abort_incomplete`
        overrides this too.
        """
        raise Unsupported(f"{self.scheme}:// cannot list incomplete writes", provider=self.scheme)

    def async_driver(self) -> AsyncStorageDriver:
        """This driver's async face, for :mod:`portable.aio`.

        The default adapts every method through the bounded thread pool
        (:class:`~portable.driver.aio_storage.AsyncStorageDriver`); a driver
        whose library is natively async returns its own subclass of it.
        """
        from .aio_storage import AsyncStorageDriver

        return AsyncStorageDriver(self)

    def close(self) -> None:
        """Release connections and threads."""


A = TypeVar("A")
R = TypeVar("R")


def _fan_out(
    fn: Callable[[A], R], args: list[A], concurrency: int, inline: bool = False
) -> list[R | BaseException]:
    """Run ``fn`` over ``args`` on at most ``concurrency`` threads; errors are returned, not raised.

    The threads are :mod:`portable.driver.fanout`'s workers (one shared
    iterator, no future per item, the calling thread one of them), each in a
    copy of the caller's context. ``inline`` (a driver that declares
    ``never_blocks``): one loop on the calling thread, no thread at all.
    """
    if inline:
        return _inline_map(fn, args)
    return list(map_blocking(fn, args, max(1, concurrency)))


def _inline_map(fn: Callable[[A], R], args: list[A]) -> list[R | BaseException]:
    out: list[R | BaseException] = []
    for arg in args:
        try:
            out.append(fn(arg))
        except Exception as exc:  # an item's failure is its outcome
            out.append(exc)
    return out


def _never_blocks(driver: object) -> bool:
    """Whether ``driver`` declares ``never_blocks = True`` (its calls return without waiting)."""
    return getattr(driver, "never_blocks", False) is True


def page_of_sorted_keys(
    keys: Iterable[str],
    info: Callable[[str], ObjectInfo | None],
    prefix: str,
    delimiter: str | None,
    start_after: str | None,
    page_size: int,
    token: str | None,
) -> ListPage:
    """Build one page from keys in lexical order, for drivers that list by themselves.

    ``info(key)`` returns the key's ObjectInfo, or None if it vanished. The
    token is the last key returned, or a folded prefix (ending with the
    delimiter, which no key can) whose keys are all skipped.
    """
    after = max(filter(None, (start_after, token)), default="")
    skip = token if token and delimiter and token.endswith(delimiter) else None
    objects: list[ObjectInfo] = []
    prefixes: list[str] = []
    last: str | None = None
    for key in keys:
        if not key.startswith(prefix) or key <= after:
            continue
        if skip is not None and key.startswith(skip):
            continue
        if delimiter:
            cut = key.find(delimiter, len(prefix))
            if cut >= 0:
                folded = key[: cut + 1]
                if prefixes and prefixes[-1] == folded:
                    continue
                if len(objects) + len(prefixes) >= page_size:
                    return ListPage(objects, prefixes, last)
                prefixes.append(folded)
                last = folded
                continue
        if len(objects) + len(prefixes) >= page_size:
            return ListPage(objects, prefixes, last)
        found = info(key)
        if found is not None:
            objects.append(found)
            last = key
    return ListPage(objects, prefixes, None)
