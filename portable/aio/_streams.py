"""Async streamed reads and writes: ``AsyncBucket.open(key, "rb" | "wb")``.

The twins of :mod:`portable.storage._streams`: the same arguments (checked by
the same functions), the same part sizing and commit settlement (the shared
:class:`~portable.storage._streams.WriteLedger`), and the same rule that
nothing is visible until a write commits. Here the rule holds for cancellation
too: a task cancelled mid-write aborts the upload (shielded, so the abort
finishes) and the CancelledError goes on.

``bucket.open(...)`` returns an opener that is both awaitable and an async
context manager::

    async with bucket.open("big.bin", "wb") as w:   # commits on a clean exit
        await w.write(data)
    async with bucket.open("big.bin") as r:
        head = await r.read(100)
        async for chunk in r:                        # up to 1 MiB per chunk
            ...
    r = await bucket.open("big.bin")                 # the same reader, closed by you
"""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Mapping
from types import TracebackType
from typing import IO, Any, Generic, Literal, TypeVar, overload

from ..driver.aio_storage import AsyncReadStream, AsyncStorageDriver, AsyncWriteStream
from ..driver.storage import ObjectInfo, StorageCapabilities, StorageDriver
from ..driver.threads import run_blocking
from ..errors import InvalidArgument, NotFound, PortableError
from ..resilience import Guard
from ..storage._checks import check_resume_request, check_size_request
from ..storage._requests import open_read_request, open_write_request
from ..storage._streams import (
    DEFAULT_PART_SIZE,
    READ_CHUNK,
    WriteLedger,
    note_failed_abort,
    resume_point,
)

__all__ = ["AsyncBucketReader", "AsyncBucketWriter", "AsyncStreamOperations", "Opener"]

R = TypeVar("R")
S = TypeVar("S", "AsyncBucketReader", "AsyncBucketWriter")


class AsyncBucketReader:
    """What ``AsyncBucket.open(key, "rb")`` gives: ``await read(n)``, ``async for chunk``, ``await seek()``.

    Each native error becomes the portable error its driver classifies it as
    (once, with ``__cause__``). A read is not retried mid-stream: reopen and
    seek to resume, as with the sync reader. ``seek`` works where the sync
    reader's does (``seekable()`` says).
    """

    def __init__(self, guard: Guard, key: str, inner: AsyncReadStream) -> None:
        self._guard = guard
        self._what = f"read {key}"
        self._inner = inner
        self.closed = False

    async def _native(self, fn: Callable[..., Awaitable[R]], *args: Any) -> R:
        try:
            return await fn(*args)
        except Exception as exc:
            raise self._guard.wrap(self._what, exc) from exc

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on a closed portable reader")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        try:
            return bool(self._inner.seekable())
        except Exception as exc:
            raise self._guard.wrap(self._what, exc) from exc

    async def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes (all that is left with ``-1`` or None); ``b""`` at the end."""
        self._check_open()
        return await self._native(self._inner.read, -1 if size is None else size)

    async def readall(self) -> bytes:
        return await self.read(-1)

    async def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        return await self._native(self._inner.seek, offset, whence)

    def tell(self) -> int:
        try:
            return self._inner.tell()
        except Exception as exc:
            raise self._guard.wrap(self._what, exc) from exc

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        while chunk := await self.read(READ_CHUNK):
            yield chunk

    async def aclose(self) -> None:
        """Release the stream. Idempotent."""
        if not self.closed:
            self.closed = True
            await self._native(self._inner.close)

    async def close(self) -> None:
        await self.aclose()

    async def __aenter__(self) -> AsyncBucketReader:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            await asyncio.shield(self.aclose())
        else:
            await self.aclose()


class AsyncBucketWriter:
    """What ``AsyncBucket.open(key, "wb")`` gives: ``await write(b)``, committed by ``await close()``.

    Bytes are buffered into parts and handed to the driver; :meth:`close`
    commits. Leaving an ``async with`` block by an exception, or by
    cancellation, aborts instead (the abort is shielded: it finishes even as
    the CancelledError goes on), so nothing partial is ever visible. A commit
    whose reply was lost is settled by reading back what the store holds, as
    :class:`~portable.storage._streams.BucketWriter` does; a cancel during the
    commit leaves the whole object or none.

    A resumable writer (``resume=True``) starts at :attr:`resumed_from` and, on
    an error or a cancel, keeps its parts for a later resume instead of
    aborting (nothing is visible either way); :meth:`abort` discards them.
    """

    def __init__(
        self, guard: Guard, key: str, stream: AsyncWriteStream, part_size: int,
        driver: StorageDriver, adriver: AsyncStorageDriver,
        *, resumed_from: int = 0, prefix_digest: Any = None, resumable: bool = False,
        size: int | None = None, one_request: bool = False,
    ) -> None:
        self._guard = guard
        self._key = key
        self._stream = stream
        self._driver = driver
        self._adriver = adriver
        self._ledger = WriteLedger(part_size, resumed_from, prefix_digest, "md5" if one_request else "sha256")
        self._done = False
        self._resumable = resumable
        self.etag: str | None = None
        #: bytes of the object the provider held already when this writer opened (0 unless resumed)
        self.resumed_from = resumed_from
        #: the length the caller promised (``open(..., size=)``), or None
        self.size = size
        #: whether the object is sent as one request of ``size`` bytes (the driver's sized write)
        self.one_request = one_request

    @property
    def closed(self) -> bool:
        return self._done

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._ledger.written

    async def write(self, data: Any) -> int:
        """Take ``data`` (bytes-like); hand each full part to the driver. Return ``len(data)``."""
        if self._done:
            raise ValueError("write to a closed portable writer")
        if self.size is not None and (overrun := self._ledger.overrun(self._key, self.size, data)):
            await self._abort_after(overrun)
            raise overrun
        if self.one_request:
            whole = self._ledger.take_whole(data)
            if whole:
                await self._call_or_abort("write", self._stream.write, whole)
            return len(whole)
        taken, parts = self._ledger.take(data)
        for part in parts:
            await self._call_or_abort("write", self._stream.write, part)
        return taken

    @property
    def md5(self) -> bytes | None:
        """For a write sent as one request (:attr:`one_request`): the MD5 of every byte written so far,
        which S3 returns as the etag of such an object; else None."""
        return self._ledger.digest() if self.one_request else None

    async def _call_or_abort(self, what: str, fn: Callable[..., Awaitable[R]], *args: Any) -> R:
        """Await a stream call under the write policy; any failure (a cancel too) aborts the whole write."""
        try:
            return await self._guard.acall("write", f"{what} {self._key}", fn, *args)
        except BaseException as failure:
            await self._abort_after(failure)
            raise

    async def close(self) -> None:
        """Commit the object (with its conditions). Idempotent."""
        if self._done:
            return
        if self.size is not None and (short := self._ledger.short(self._key, self.size)):
            await self._abort_after(short)
            raise short
        last = self._ledger.rest()
        if last:
            await self._call_or_abort("write", self._stream.write, last)
        self.etag = await self._call_or_abort("commit", self._commit_once)
        self._done = True

    async def aclose(self) -> None:
        await self.close()

    async def _commit_once(self) -> str | None:
        try:
            return await self._stream.commit()
        except Exception as exc:
            if not self._ledger.must_look(self._driver.code_of(exc)):
                raise  # the provider refused the commit itself: nothing was written
            found = await self._stored_if_mine(exc)
            if found is not None:
                return found.etag
            raise

    async def _stored_if_mine(self, commit_error: Exception) -> ObjectInfo | None:
        try:
            info = await self._guard.acall("read", f"head {self._key}", self._adriver.head, self._key)
            if info.size != self._ledger.written:
                return None
            digest = await self._guard.acall("read", f"read back {self._key}", self._stored_digest)
        except NotFound:
            return None
        except PortableError as check_error:
            raise self._ledger.unknown(self._guard, self._key, commit_error, check_error) from commit_error
        return info if self._ledger.is_mine(info, digest) else None

    async def _stored_digest(self) -> bytes:
        """The hash (the ledger's algorithm) of the object stored under the key, read in parts."""
        digest = self._ledger.new_hash()
        stream = await self._adriver.open_read(self._key)
        try:
            while chunk := await stream.read(READ_CHUNK):
                digest.update(chunk)
        finally:
            await stream.close()
        return bytes(digest.digest())

    async def _abort_after(self, failure: BaseException) -> None:
        """Abort, shielded, because of ``failure``, which the caller raises next.

        The abort is cleanup: when it fails too, ``failure`` (an error, or a cancel) is still
        what the caller must see, as on the sync face; the abort's error is logged and noted
        on it (redacted), never raised in its place.
        """
        try:
            await asyncio.shield(self._suspend() if self._resumable else self.abort())
        except Exception as cleanup:
            note_failed_abort(failure, self._key, cleanup)

    async def _suspend(self) -> None:
        """Give up a resumable write, keeping its parts for a later ``resume=True``."""
        if self._done:
            return
        self._done = True
        self._ledger.clear()
        await self._stream.suspend()

    async def abort(self) -> None:
        """Discard what was written; nothing becomes visible."""
        if self._done:
            return
        self._done = True
        self._ledger.clear()
        await self._stream.abort()

    async def __aenter__(self) -> AsyncBucketWriter:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None:
            await self._abort_after(exc)
        elif exc_type is not None:
            await asyncio.shield(self._suspend() if self._resumable else self.abort())
        else:
            await self.close()


class Opener(Generic[S]):
    """What ``AsyncBucket.open`` returns: ``await`` it for the stream, or ``async with`` it.

    The stream is opened (the request sent) only when awaited or entered;
    the arguments were checked already, at ``open``.
    """

    __slots__ = ("_open", "_stream")

    def __init__(self, open_: Callable[[], Coroutine[Any, Any, S]]) -> None:
        self._open: Callable[[], Coroutine[Any, Any, S]] = open_
        self._stream: S | None = None

    def __await__(self) -> Generator[Any, None, S]:
        return self._open().__await__()

    async def __aenter__(self) -> S:
        self._stream = await self._open()
        return self._stream

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.__aexit__(exc_type, exc, tb)


class AsyncStreamOperations:
    """``AsyncBucket.open``: the streamed half of :class:`~portable.aio.AsyncBucket`."""

    __slots__ = ()

    _adriver: AsyncStorageDriver
    _caps: StorageCapabilities
    _driver: StorageDriver
    _guard: Guard
    _max_key: int
    provider: str

    @overload
    def open(self, key: str, mode: Literal["rb"] = "rb") -> Opener[AsyncBucketReader]: ...
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
        cache_control: str | None = None,
        content_encoding: str | None = None,
        content_disposition: str | None = None,
        resume: bool = False,
        source: IO[bytes] | None = None,
        size: int | None = None,
    ) -> Opener[AsyncBucketWriter]: ...
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
        cache_control: str | None = None,
        content_encoding: str | None = None,
        content_disposition: str | None = None,
        resume: bool = False,
        source: IO[bytes] | None = None,
        size: int | None = None,
    ) -> Opener[AsyncBucketReader] | Opener[AsyncBucketWriter]:
        """Open a stream on the object; the arguments are :meth:`portable.storage.Bucket.open`'s.

        ``"rb"`` reads; ``"wb"`` writes in parts of ``part_size`` bytes
        (multipart where the provider has it) and makes the object visible only
        when the writer is closed cleanly. An exception or a cancellation
        inside ``async with`` aborts the write. Arguments are checked here,
        before any request (InvalidKey, InvalidArgument, Unsupported).

        ``resume=True`` (with an optional seekable ``source``) continues an
        upload an earlier process left, as on the sync face; the resumable
        stream is the sync driver's, run in the bounded pool. The writer's
        ``resumed_from`` is where to continue.

        ``size=`` (``"wb"`` only) is the stream's exact length, as on the sync
        face: a driver that can sends the object as one request of that length
        (its sized write, the sync driver's stream run in the bounded pool; the
        writer's ``one_request`` says so), and writing more than ``size``
        bytes, or closing after fewer, aborts the write and raises
        InvalidArgument.
        """
        resuming = check_resume_request(
            resume, source, if_none_match, if_match, self._caps, self.provider, self._driver.resume_limitation
        )
        if resuming and mode != "wb":
            raise InvalidArgument(f"resume=True is for mode 'wb', not {mode!r}")
        size = check_size_request(size, mode, resuming)
        if open_read_request(
            key, mode, self._max_key, content_type, metadata, if_none_match, if_match,
            cache_control, content_encoding, content_disposition,
        ):
            return Opener(lambda: self._open_read(key))
        options = open_write_request(
            part_size, self._caps, self.provider, content_type, metadata, if_none_match, if_match,
            cache_control, content_encoding, content_disposition,
        )

        async def open_resumable() -> AsyncBucketWriter:
            async def opened() -> Any:
                return await run_blocking(self._driver.open_resumable, key, options, part_size)

            raw = await self._guard.acall("write", f"open {key}", opened)
            try:
                start, digest = await run_blocking(resume_point, self._guard, key, raw, source)
            except BaseException:
                await run_blocking(raw.suspend)
                raise
            return AsyncBucketWriter(
                self._guard, key, AsyncWriteStream(raw), part_size, self._driver, self._adriver,
                resumed_from=start, prefix_digest=digest, resumable=True,
            )

        if resuming:
            return Opener(open_resumable)

        async def open_write() -> AsyncBucketWriter:
            if size is not None:
                async def opened_sized() -> Any:
                    return await run_blocking(self._driver.open_sized_write, key, options, size)

                sized = await self._guard.acall("write", f"open {key}", opened_sized)
                if sized is not None:
                    return AsyncBucketWriter(
                        self._guard, key, AsyncWriteStream(sized), part_size, self._driver, self._adriver,
                        size=size, one_request=True,
                    )
            stream = await self._guard.acall(
                "write", f"open {key}", self._adriver.open_write, key, options, part_size
            )
            return AsyncBucketWriter(self._guard, key, stream, part_size, self._driver, self._adriver, size=size)

        return Opener(open_write)

    async def upload(
        self,
        key: str,
        source: str | os.PathLike[str] | IO[bytes],
        *,
        resume: bool = False,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        part_size: int = DEFAULT_PART_SIZE,
        cache_control: str | None = None,
        content_encoding: str | None = None,
        content_disposition: str | None = None,
    ) -> str | None:
        """Stream a local file to ``key``; :meth:`portable.storage.Bucket.upload`'s arguments and promises.

        The file is read in the bounded pool, one part at a time.
        """
        if isinstance(source, str | os.PathLike):
            try:
                fh: IO[bytes] = await run_blocking(open, source, "rb")
            except FileNotFoundError:
                raise NotFound(f"upload source {os.fspath(source)!r} does not exist") from None
            try:
                return await self.upload(
                    key, fh, resume=resume, content_type=content_type, metadata=metadata, part_size=part_size,
                    cache_control=cache_control, content_encoding=content_encoding,
                    content_disposition=content_disposition,
                )
            finally:
                await run_blocking(fh.close)
        if not callable(getattr(source, "read", None)):
            raise InvalidArgument(f"source must be a path or a binary file, got {type(source).__name__}")
        writer = await self.open(
            key, "wb", resume=resume, source=source if resume else None, content_type=content_type,
            metadata=metadata, part_size=part_size, cache_control=cache_control,
            content_encoding=content_encoding, content_disposition=content_disposition,
        )
        async with writer:
            while chunk := await run_blocking(source.read, part_size):
                await writer.write(chunk)
        return writer.etag

    async def _open_read(self, key: str) -> AsyncBucketReader:
        inner = await self._guard.acall("read", f"open {key}", self._adriver.open_read, key)
        return AsyncBucketReader(self._guard, key, inner)
