"""Streamed reads and writes: ``Bucket.open(key, "rb" | "wb")`` and the file objects it returns."""

from __future__ import annotations

import hashlib
import io
import logging
import os
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import IO, Any, Literal, TypeVar, overload

from ..driver.redaction import redact
from ..driver.storage import ObjectInfo, ResumableWriteStream, StorageDriver, WriteStream
from ..errors import ErrorCode, InvalidArgument, NotFound, PortableError
from ..resilience import Guard
from ._checks import check_resume_request, check_size_request, checked_bytes
from ._requests import open_read_request, open_write_request
from ._state import BucketState

log = logging.getLogger("portable.storage")


def note_failed_abort(failure: BaseException, key: str, cleanup: Exception) -> None:
    """The abort after ``failure`` failed with ``cleanup``: log it and note it on ``failure`` (redacted),
    which the caller still raises (the failure is what to fix; the object never became visible)."""
    why = redact(f"{type(cleanup).__name__}: {cleanup}")
    log.warning("could not abort the failed write of %s: %s", key, why)
    failure.add_note(f"portable: aborting the write of {key!r} failed too ({why})")

R = TypeVar("R")

#: The default part size of streamed writes.
DEFAULT_PART_SIZE = 8 * 1024 * 1024

#: How much of an object is read at once when a commit's outcome is checked (and per async chunk).
READ_CHUNK = 1 << 20

#: Errors of a first commit attempt that say the provider refused it, so nothing was written.
_CERTAIN_FAILURES = frozenset({
    ErrorCode.ALREADY_EXISTS,
    ErrorCode.PRECONDITION_FAILED,
    ErrorCode.INVALID_ARGUMENT,
    ErrorCode.PERMISSION_DENIED,
    ErrorCode.UNSUPPORTED,
    ErrorCode.TOO_LARGE,
})


class WriteLedger:
    """What a streamed write has taken, shared by the sync and async writers (no I/O here).

    It cuts the bytes written into parts of ``part_size``, keeps their count
    and SHA-256 (to recognise the writer's own object after a commit whose
    reply was lost) and decides when a failed commit must be settled by
    looking at the store.
    """

    __slots__ = ("_buffer", "_digest", "_part_size", "algorithm", "commit_tried", "written")

    def __init__(self, part_size: int, start: int = 0, prefix_digest: Any = None, algorithm: str = "sha256") -> None:
        self._part_size = part_size
        self._buffer = bytearray()
        #: the hash that recognises the writer's own bytes: SHA-256, or MD5 for a write sent as one
        #: request (S3's etag of it, which a caller verifies: one hash pass serves both)
        self.algorithm = algorithm
        #: None for a resumed write whose first ``start`` bytes were not seen here (no source
        #: given): its own object cannot be recognised by content then
        self._digest: Any = self.new_hash() if start == 0 else prefix_digest
        self.written = start
        #: a commit attempt failed: any later failure is checked too
        self.commit_tried = False

    def take(self, data: object) -> tuple[int, list[bytes]]:
        """Accept ``data`` (bytes-like, else InvalidArgument); return its length and the parts now full."""
        chunk = checked_bytes(data)
        self._buffer += chunk
        self.written += len(chunk)
        if self._digest is not None:
            self._digest.update(chunk)
        parts: list[bytes] = []
        size = self._part_size
        while len(self._buffer) >= size:
            parts.append(bytes(self._buffer[:size]))
            del self._buffer[:size]
        return len(chunk), parts

    def take_whole(self, data: object) -> bytes:
        """Accept ``data`` as one piece (immutable ``bytes``: a bytearray or memoryview is copied, since
        the caller may reuse it while the driver still holds it); count and hash it, buffer nothing."""
        chunk = checked_bytes(data)
        self.written += len(chunk)
        if self._digest is not None:
            self._digest.update(chunk)
        return chunk

    def overrun(self, key: str, size: int, data: object) -> InvalidArgument | None:
        """The error if writing ``data`` would pass the ``size`` the stream was opened with, else None."""
        length = len(memoryview(data)) if isinstance(data, bytes | bytearray | memoryview) else 0
        if self.written + length <= size:
            return None
        return InvalidArgument(
            f"{key!r}: the stream was opened with size={size} but {self.written + length} bytes "
            "were written; the write was aborted (nothing stored)"
        )

    def short(self, key: str, size: int) -> InvalidArgument | None:
        """The error if the stream ends short of the ``size`` it was opened with, else None."""
        if self.written == size:
            return None
        return InvalidArgument(
            f"{key!r}: the stream was opened with size={size} but closed after {self.written} bytes; "
            "the write was aborted (nothing stored)"
        )

    def new_hash(self) -> Any:
        """A fresh hash of :attr:`algorithm`."""
        return hashlib.md5(usedforsecurity=False) if self.algorithm == "md5" else hashlib.sha256()

    def digest(self) -> bytes | None:
        """The hash of every byte taken so far (None for a resumed write without its source)."""
        return None if self._digest is None else bytes(self._digest.digest())

    def rest(self) -> bytes:
        """The bytes not yet handed over as a part (the last part), removed from the buffer."""
        last = bytes(self._buffer)
        self._buffer.clear()
        return last

    def clear(self) -> None:
        self._buffer.clear()

    def must_look(self, code: ErrorCode) -> bool:
        """After a commit failed with ``code``: whether its outcome is unknown (look at the store).

        False only for a first attempt that the provider refused outright: nothing was written.
        """
        if code in _CERTAIN_FAILURES and not self.commit_tried:
            return False
        self.commit_tried = True
        return True

    def is_mine(self, info: ObjectInfo, digest: bytes | None) -> bool:
        """Whether the stored object ``info`` (with SHA-256 ``digest``) holds exactly the bytes streamed."""
        return info.size == self.written and self._digest is not None and digest == self._digest.digest()

    def unknown(self, guard: Guard, key: str, commit_error: Exception, check_error: PortableError) -> PortableError:
        """The error of a commit whose outcome could not be read back: not retryable, saying so."""
        err = guard.wrap(f"commit {key}", commit_error)
        return type(err)(
            f"{err.message}; whether the object was written is unknown: reading it back failed: "
            f"{check_error.message}",
            provider=err.provider,
            retryable=False,
        )


class BucketWriter(io.RawIOBase):
    """The file object returned by ``Bucket.open(key, "wb")``.

    Bytes are buffered into parts and handed to the driver; :meth:`close`
    commits. Leaving a ``with`` block by an exception aborts instead, so a
    failed or interrupted write leaves no object behind.

    A commit whose outcome is unknown (its reply was lost: a timeout, a reset
    connection, an error the driver cannot classify) is settled by looking:
    the writer keeps the size and SHA-256 of every byte it streamed, reads
    back what the store holds under the key, and reports success when those
    are its own bytes (the etag is then the stored object's). A commit that
    took effect is never sent again; only when the bytes are not there and
    the error is retryable is the commit retried. When the store cannot be
    read to tell, the commit's error is raised, not retryable, saying the
    outcome is unknown. "Its own bytes" means the same content: another
    writer that stored exactly the same bytes meanwhile cannot be told apart
    (use ``put(..., idempotency_key=...)`` where that matters).

    A resumable writer (``open(key, "wb", resume=True)``) starts at
    :attr:`resumed_from`, the bytes the provider already holds (``tell()``
    says the same before the first write): the caller writes its source from
    there. When it fails or is dropped it keeps its parts for a later resume
    instead of aborting (nothing is visible either way); :meth:`abort`
    discards them, and so does ``Bucket.abort_incomplete`` once they are old.
    """

    def __init__(
        self,
        guard: Guard,
        key: str,
        stream: WriteStream,
        part_size: int,
        driver: StorageDriver,
        *,
        resumed_from: int = 0,
        prefix_digest: Any = None,
        size: int | None = None,
        one_request: bool = False,
    ) -> None:
        super().__init__()
        self._guard = guard
        self._key = key
        self._stream = stream
        self._driver = driver
        self._ledger = WriteLedger(part_size, resumed_from, prefix_digest, "md5" if one_request else "sha256")
        self._done = False
        self.etag: str | None = None
        #: bytes of the object the provider held already when this writer opened (0 unless resumed)
        self.resumed_from = resumed_from
        #: the length the caller promised (``open(..., size=)``), or None
        self.size = size
        #: whether the object is sent as one request of ``size`` bytes (the driver's sized write)
        self.one_request = one_request

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self._done:
            raise ValueError("write to a closed portable writer")
        if self.size is not None and (overrun := self._ledger.overrun(self._key, self.size, data)):
            self._give_up_after(overrun)
            raise overrun
        if self.one_request:
            whole = self._ledger.take_whole(data)
            if whole:
                self._call_or_abort("write", self._stream.write, whole)
            return len(whole)
        taken, parts = self._ledger.take(data)
        for part in parts:
            self._call_or_abort("write", self._stream.write, part)
        return taken

    def tell(self) -> int:
        return self._ledger.written

    @property
    def md5(self) -> bytes | None:
        """For a write sent as one request (:attr:`one_request`): the MD5 of every byte written so far,
        which S3 returns as the etag of such an object; else None."""
        return self._ledger.digest() if self.one_request else None

    @property
    def resumable(self) -> bool:
        """Whether this writer keeps its parts on failure for a later ``resume=True``."""
        return isinstance(self._stream, ResumableWriteStream)

    def _call_or_abort(self, what: str, fn: Callable[..., R], *args: Any) -> R:
        """Run a stream call under the write policy; any failure aborts the whole write
        (suspends it, keeping its parts, when it is resumable)."""
        try:
            return self._guard.call("write", f"{what} {self._key}", fn, *args)
        except BaseException as exc:
            self._give_up_after(exc)
            raise

    def _give_up_after(self, failure: BaseException) -> None:
        """:meth:`_give_up` after ``failure``, which the caller raises next: a cleanup that fails
        too must not take its place (the caller's error is what to fix), so its error is logged
        and noted on ``failure``. The object never became visible either way; an abort that
        failed leaves the upload's parts to the bucket's abort-incomplete rule."""
        try:
            self._give_up()
        except Exception as cleanup:
            note_failed_abort(failure, self._key, cleanup)

    def _give_up(self) -> None:
        """After a failure: abort, or keep the parts of a resumable write for a later resume."""
        if not isinstance(self._stream, ResumableWriteStream):
            self.abort()
            return
        if self._done:
            return
        self._done = True
        self._ledger.clear()
        try:
            self._stream.suspend()
        finally:
            super().close()

    def close(self) -> None:
        """Commit the object (with its conditions). Idempotent."""
        if self._done:
            return
        if self.size is not None and (short := self._ledger.short(self._key, self.size)):
            self._give_up_after(short)
            raise short
        last = self._ledger.rest()
        if last:
            self._call_or_abort("write", self._stream.write, last)
        self.etag = self._call_or_abort("commit", self._commit_once)
        self._done = True
        super().close()

    def _commit_once(self) -> str | None:
        """One commit attempt; after a failure that may hide a success, the store says which it was.

        Returns the etag when the commit took effect (reported or not); re-raises
        the commit's error when it did not, for the guard to retry if retryable.
        """
        try:
            return self._stream.commit()
        except Exception as exc:
            if not self._ledger.must_look(self._driver.code_of(exc)):
                raise  # the provider refused the commit itself: nothing was written
            found = self._stored_if_mine(exc)
            if found is not None:
                return found.etag
            raise

    def _stored_if_mine(self, commit_error: Exception) -> ObjectInfo | None:
        """The stored object under the key if it holds exactly the bytes streamed, else None."""
        try:
            info = self._guard.call("read", f"head {self._key}", self._driver.head, self._key)
            if info.size != self._ledger.written:
                return None
            digest = self._guard.call("read", f"read back {self._key}", self._stored_digest)
        except NotFound:
            return None
        except PortableError as check_error:
            raise self._ledger.unknown(self._guard, self._key, commit_error, check_error) from commit_error
        return info if self._ledger.is_mine(info, digest) else None

    def _stored_digest(self) -> bytes:
        """The hash (the ledger's algorithm) of the object stored under the key, read in parts."""
        digest = self._ledger.new_hash()
        with self._driver.open_read(self._key) as stream:
            while chunk := stream.read(READ_CHUNK):
                digest.update(chunk)
        return bytes(digest.digest())

    def abort(self) -> None:
        """Discard what was written (for a resumed write, the earlier parts too); nothing becomes visible."""
        if self._done:
            return
        self._done = True
        self._ledger.clear()
        try:
            self._stream.abort()
        finally:
            super().close()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc is not None:
            self._give_up_after(exc)  # the with-block's exception propagates, whatever the abort does
        elif exc_type is not None:
            self._give_up()
        else:
            self.close()

    def __del__(self) -> None:
        # Garbage-collected without close(): never commit a possibly truncated object.
        if not self._done:
            try:
                self._give_up()
            except Exception:
                pass  # best effort in a finaliser: the object was never visible


def resume_point(guard: Guard, key: str, stream: ResumableWriteStream, source: IO[bytes] | None) -> tuple[int, Any]:
    """Settle where a resumable write continues: check the parts held against ``source``, keep the
    longest head that matches, and return its length and the SHA-256 of its bytes (None without a
    source). ``source`` is left at that offset.

    A part matches when the source has all its bytes and, where the part's MD5 is known, the
    same MD5: a source that changed since the earlier attempt is uploaded again from the first
    part that differs, so a changed source never yields a mixed object.
    """
    parts = list(stream.persisted)
    if source is None:
        guard.call("write", f"resume {key}", stream.keep, len(parts))
        return sum(p.size for p in stream.persisted), None
    digest = hashlib.sha256()
    heads = [digest.copy()]
    for part in parts:
        source.seek(part.offset)
        md5 = hashlib.md5(usedforsecurity=False)
        left = part.size
        while left:
            chunk = source.read(min(left, READ_CHUNK))
            if not chunk:
                break
            left -= len(chunk)
            md5.update(chunk)
            digest.update(chunk)
        if left or (part.md5 is not None and md5.digest() != part.md5):
            break
        heads.append(digest.copy())
    guard.call("write", f"resume {key}", stream.keep, len(heads) - 1)
    kept = stream.persisted
    start = sum(p.size for p in kept)
    source.seek(start)
    return start, heads[len(kept)]


def upload_file(
    bucket: StreamOperations,
    key: str,
    source: str | os.PathLike[str] | IO[bytes],
    *,
    resume: bool,
    **options: Any,
) -> str | None:
    """``Bucket.upload``: open ``source`` if it is a path, stream it through ``open(key, "wb")``."""
    if isinstance(source, str | os.PathLike):
        try:
            fh: IO[bytes] = open(source, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            raise NotFound(f"upload source {os.fspath(source)!r} does not exist") from None
        with fh:
            return upload_file(bucket, key, fh, resume=resume, **options)
    writer: BucketWriter
    if resume:
        writer = bucket.open(key, "wb", resume=True, source=source, **options)  # type: ignore[assignment]
    else:
        check_resume_request(False, None, None, None, bucket._caps, bucket.provider)
        if not callable(getattr(source, "read", None)):
            raise InvalidArgument(f"source must be a path or a binary file, got {type(source).__name__}")
        writer = bucket.open(key, "wb", **options)  # type: ignore[assignment]
    with writer:
        size = int(options.get("part_size") or DEFAULT_PART_SIZE)
        while chunk := source.read(size):
            writer.write(chunk)
    return writer.etag


class BucketReader(io.RawIOBase):
    """The file object returned by ``Bucket.open(key, "rb")``.

    It delegates to the driver's stream and turns each native error into the
    portable error its driver classifies it as (once, with ``__cause__``).
    A read is not retried mid-stream: reopen and seek to resume.
    """

    def __init__(self, guard: Guard, key: str, inner: IO[bytes]) -> None:
        super().__init__()
        self._guard = guard
        self._what = f"read {key}"
        self._inner = inner

    def _native(self, fn: Callable[..., R], *args: Any) -> R:
        """Call the driver's stream; its error becomes the portable error it is classified as."""
        try:
            return fn(*args)
        except Exception as exc:
            raise self._wrap(exc) from exc

    def _wrap(self, exc: Exception) -> PortableError:
        return self._guard.wrap(self._what, exc)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return bool(self._native(self._inner.seekable))

    def readinto(self, buffer: Any) -> int:
        readinto = getattr(self._inner, "readinto", None)
        if readinto is not None:
            return int(self._native(readinto, buffer))
        data = self._native(self._inner.read, len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def read(self, size: int | None = -1) -> bytes:
        return self._native(self._inner.read, -1 if size is None else size)

    def readall(self) -> bytes:
        return self.read(-1)

    def readline(self, size: int | None = -1) -> bytes:
        return self._native(self._inner.readline, -1 if size is None else size)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._native(self._inner.seek, offset, whence)

    def tell(self) -> int:
        return self._native(self._inner.tell)

    def close(self) -> None:
        if not self.closed:
            try:
                self._native(self._inner.close)
            finally:
                super().close()


class StreamOperations(BucketState):
    """``Bucket.open``: the streamed half of :class:`~portable.storage.Bucket`."""

    __slots__ = ()

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
        cache_control: str | None = None,
        content_encoding: str | None = None,
        content_disposition: str | None = None,
        resume: bool = False,
        source: IO[bytes] | None = None,
        size: int | None = None,
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
        cache_control: str | None = None,
        content_encoding: str | None = None,
        content_disposition: str | None = None,
        resume: bool = False,
        source: IO[bytes] | None = None,
        size: int | None = None,
    ) -> IO[bytes]:
        """Open a stream on the object.

        ``"rb"`` reads; ``"wb"`` writes in parts of ``part_size`` bytes
        (multipart upload where the provider has it) and makes the object
        visible only when the stream is closed. Inside a ``with`` block an
        exception aborts the write: no partial object is ever visible. The
        write's conditions are checked at commit; see
        ``capabilities.conditional_streaming_write``.

        A commit whose reply is lost is settled by reading back what the store
        holds (see :class:`BucketWriter`): it is reported as the success it
        was, and never committed twice.

        Args:
            content_type, metadata, cache_control, content_encoding,
                content_disposition: as for ``put`` (``"wb"`` only).
            part_size: bytes per part. Defaults to 8 MiB; at least the
                provider's ``min_part_bytes``.
            resume: ``"wb"`` only: continue the upload of ``key`` that an earlier
                (perhaps killed) writer left, from the parts the provider holds
                (see docs/storage.md, "Resumable uploads"). The writer's
                ``resumed_from`` (and ``tell()``) is where to continue: seek the
                source there, or pass ``source``. Without ``source`` the parts
                are taken on trust. Defaults to False.
            source: with ``resume=True``, the seekable file being uploaded: the
                parts already held are checked against it (sizes, and MD5
                where the provider keeps one), a tail that differs is uploaded
                again, and ``source`` is left positioned at ``resumed_from``.
            size: ``"wb"`` only: the exact length of the stream, where the
                caller knows it. A driver that can (S3 on the obstore engine,
                unconditional writes of up to 200 MiB) then sends the object as
                ONE request of that length, streaming each ``write`` into it,
                in place of a multipart upload; the writer's ``one_request``
                says which it did. Either way writing more than ``size`` bytes,
                or closing after fewer, aborts the write (nothing is stored)
                and raises InvalidArgument. Not with ``resume=True``.
                Defaults to None (unknown).

        Raises:
            Unsupported: ``resume=True`` on a provider without
                ``capabilities.resumable_writes``, or with a condition.
            InvalidArgument: a malformed ``resume`` or ``source``.
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
            inner = self._guard.call("read", f"open {key}", self._driver.open_read, key)
            return BucketReader(self._guard, key, inner)  # type: ignore[return-value]
        options = open_write_request(
            part_size, self._caps, self.provider, content_type, metadata, if_none_match, if_match,
            cache_control, content_encoding, content_disposition,
        )
        if resuming:
            resumable = self._guard.call("write", f"open {key}", self._driver.open_resumable, key, options, part_size)
            try:
                start, digest = resume_point(self._guard, key, resumable, source)
            except BaseException:
                resumable.suspend()
                raise
            return BucketWriter(  # type: ignore[return-value]
                self._guard, key, resumable, part_size, self._driver, resumed_from=start, prefix_digest=digest
            )
        if size is not None:
            sized = self._guard.call("write", f"open {key}", self._driver.open_sized_write, key, options, size)
            if sized is not None:
                return BucketWriter(  # type: ignore[return-value]
                    self._guard, key, sized, part_size, self._driver, size=size, one_request=True
                )
        stream = self._guard.call("write", f"open {key}", self._driver.open_write, key, options, part_size)
        return BucketWriter(self._guard, key, stream, part_size, self._driver, size=size)  # type: ignore[return-value]

    def upload(
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
        """Stream a local file (a path, or a seekable binary file) to ``key``; return the etag.

        With ``resume=True`` an upload of ``key`` that an earlier process left
        is continued: the parts already held are checked against ``source``
        (sizes, and MD5 where the provider keeps one) and only the rest is
        sent. Run the same call again after a crash. The options are ``open``'s.

        Raises:
            NotFound: ``source`` is a path that does not exist.
            Unsupported / InvalidArgument: as for ``open(..., resume=True)``, before any request.
        """
        return upload_file(
            self, key, source, resume=resume, content_type=content_type, metadata=metadata,
            part_size=part_size, cache_control=cache_control, content_encoding=content_encoding,
            content_disposition=content_disposition,
        )
