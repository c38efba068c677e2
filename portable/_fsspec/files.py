"""The file objects of :class:`~portable.fsspec.BucketFileSystem`, the read-ahead choices, and
the mapping of portable's errors to the OSErrors fsspec users catch."""

from __future__ import annotations

import errno
import io
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from fsspec.spec import AbstractBufferedFile  # type: ignore[import-untyped]

from ..errors import AlreadyExists, NotFound, PermissionDenied

if TYPE_CHECKING:
    from .filesystem import BucketFileSystem

#: Bytes fetched per ranged read (and buffered per write flush) unless ``block_size`` says otherwise.
#: 8 MiB: a Parquet footer read (the last 64 KiB) is one ranged get, clipped at the end of the
#: object, and a column chunk read ahead in 8 MiB steps costs few round trips while a reader of
#: small random ranges fetches at most 8 MiB too much. s3fs reads ahead 50 MiB, gcsfs 5 MiB.
DEFAULT_BLOCK_SIZE = 8 * 1024 * 1024

#: fsspec's cache of a file opened "rb": "readahead" keeps the last block fetched and fetches
#: ``[start, end + block_size)`` on a miss, clipped to the object: sequential scans and the
#: Parquet pattern (footer, then column chunks in order) cost one request per block.
DEFAULT_CACHE_TYPE = "readahead"

#: A fetch larger than this (a big read, or a read plus its read-ahead) is split into ranged gets
#: of :data:`FETCH_PART_BYTES` that run concurrently; one ranged get at a time leaves most of a
#: fast link idle, and each part is retried on its own.
PARALLEL_FETCH_BYTES = 16 * 1024 * 1024

#: The size of each concurrent ranged get of a large fetch.
FETCH_PART_BYTES = 8 * 1024 * 1024

#: Ranged gets in flight at once in ``cat_ranges`` (and ``cat`` of many files).
DEFAULT_MAX_CONCURRENCY = 16

#: The fsspec protocol of BucketFileSystem.
PROTOCOL = "portable"

#: Keywords ``open`` passes on to a file opened for writing: those of ``Bucket.open(key, "wb")``.
WRITE_OPTIONS = frozenset({
    "content_type", "metadata", "part_size", "cache_control", "content_encoding", "content_disposition",
})

#: Keywords ``open`` accepts for reading besides fsspec's own (block_size, cache_options, ...).
READ_OPTIONS = frozenset({"cache_type", "size"})

@contextmanager
def os_errors(path: str) -> Iterator[None]:
    """Turn portable's errors into the OSError subclasses fsspec users catch (the portable
    error as ``__cause__``); every other error passes unchanged."""
    try:
        yield
    except NotFound as err:
        raise FileNotFoundError(errno.ENOENT, f"no such object: {err}", path) from err
    except AlreadyExists as err:
        raise FileExistsError(errno.EEXIST, f"object exists: {err}", path) from err
    except PermissionDenied as err:
        raise PermissionError(errno.EACCES, f"permission denied: {err}", path) from err


class BucketFile(AbstractBufferedFile):  # type: ignore[misc]
    """A file of a :class:`BucketFileSystem`.

    Read ("rb"): fsspec's cache (``cache_type``, default "readahead") over ``Bucket.get_range``,
    one ranged get per block missed; seekable. Write ("wb", "xb"): buffered and streamed through
    ``Bucket.open(key, "wb")`` (multipart where the provider has it), visible only when closed;
    leaving a ``with`` block by an exception, :meth:`discard`, or being garbage-collected
    unclosed leaves nothing. "xb" fails with FileExistsError at open if the object exists, and
    (where ``capabilities.conditional_streaming_write``) at close if one appeared meanwhile.
    """

    DEFAULT_BLOCK_SIZE = DEFAULT_BLOCK_SIZE

    def __init__(
        self,
        fs: BucketFileSystem,
        key: str,
        mode: str,
        *,
        block_size: int,
        autocommit: bool,
        cache_options: dict[str, Any] | None,
        cache_type: str | None = None,
        size: int | None = None,
        **write_options: Any,
    ) -> None:
        self._writer: io.RawIOBase | None = None
        self._write_options = write_options
        self.bucket = fs.bucket
        if mode == "xb":
            with os_errors(key):
                if fs.bucket.exists(key):
                    raise FileExistsError(errno.EEXIST, "object exists", key)
        if mode != "rb":
            fs.invalidate_cache(key)
        if mode == "rb" and size is None:
            details = fs._from_listing(key)  # FileNotFoundError when its folder's listing lacks it
            if details is None or details["type"] != "file":
                with os_errors(key):
                    details = fs._file_entry(fs.bucket.head(key))
            size = details["size"]
        else:
            details = None
        super().__init__(
            fs, key, mode, block_size=block_size, autocommit=autocommit,
            cache_type=cache_type or fs.default_cache_type, cache_options=cache_options, size=size,
        )
        if details is not None:
            self.details = details

    def _fetch_range(self, start: int, end: int) -> bytes:
        """``[start, end)`` by one ranged get, or, over :data:`PARALLEL_FETCH_BYTES`, by ranged
        gets of :data:`FETCH_PART_BYTES` each, up to the file system's ``max_concurrency`` at once."""
        end = min(end, self.size)
        with os_errors(self.path):
            if end - start <= PARALLEL_FETCH_BYTES or self.fs.max_concurrency == 1:
                return self.bucket.get_range(self.path, start, end)
            parts = [(s, min(s + FETCH_PART_BYTES, end)) for s in range(start, end, FETCH_PART_BYTES)]
            return b"".join(self.fs._map(lambda r: self.bucket.get_range(self.path, r[0], r[1]), parts))

    def _initiate_upload(self) -> None:
        options = dict(self._write_options)
        if self.mode == "xb" and self.bucket.capabilities.conditional_streaming_write:
            options["if_none_match"] = "*"
        with os_errors(self.path):
            self._writer = self.bucket.open(self.path, "wb", **options)  # type: ignore[assignment]

    def _upload_chunk(self, final: bool = False) -> bool:
        assert self._writer is not None
        data = self.buffer.getvalue()
        with os_errors(self.path):
            if data:
                self._writer.write(data)
            if final and self.autocommit:
                self._writer.close()
                self.fs.invalidate_cache(self.path)
        return True

    def commit(self) -> None:
        """Make the written object visible (for ``autocommit=False``, as in a transaction)."""
        if self._writer is not None:
            with os_errors(self.path):
                self._writer.close()
            self.fs.invalidate_cache(self.path)

    def discard(self) -> None:
        """Throw away what was written; nothing becomes visible."""
        writer, self._writer = self._writer, None
        if writer is not None:
            abort = getattr(writer, "abort", None)
            if abort is not None:
                abort()
        self.buffer = io.BytesIO()
        self.closed = True

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None and self.mode != "rb":
            self.discard()
        else:
            self.close()

    def __del__(self) -> None:
        # Unclosed and garbage-collected: never commit a possibly truncated object.
        if not getattr(self, "closed", True) and getattr(self, "mode", "rb") != "rb":
            try:
                self.discard()
            except Exception:  # best effort in a finaliser
                pass
        elif not getattr(self, "closed", True):
            self.close()


