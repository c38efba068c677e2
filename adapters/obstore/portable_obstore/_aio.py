"""The obstore engines' async face: obstore's ``*_async`` functions on the caller's event loop.

:class:`ObstoreAsyncStorage` is what ``ObstoreStorage.async_driver()`` returns
for the S3, GCS and Azure engines. Every request is one of obstore's
coroutines awaited on the running loop, on the *same store object* the sync
driver uses (one connection pool, one set of credentials): no thread per call,
no hop to the private loop the sync batches use. obstore's futures are
cancellable: cancelling the awaiting task drops the request.

Requests in flight: at most :data:`MAX_IN_FLIGHT` single-object calls per
driver and event loop are handed to obstore at once; the rest wait on the
loop, so 10,000 concurrent ``get`` calls hold 64 connections and their
buffers, not 10,000 (memory stays bounded, as the thread-adapted face's pool
bounds it).

Single calls: a whole-object ``get`` or plain ``put`` (no header, metadata or
condition) of a small body (at most
``BLOCKING_READ_LIMIT``, 64 KiB: a put's body, or a get while the driver's
recent reads were small) with no deadline in force is obstore's *blocking*
call on a relay worker thread (:func:`portable.driver.fanout.relay_blocking`):
no task or obstore future per call, and the outcomes that finish together
reach the loop in one wake-up. On the bench S3 server that cost a few percent
less client CPU than ``obstore.put_async`` (docs/async.md). A task cancelled
then drops the outcome, but a request already running runs to its end (a whole
object or nothing, as for every put). Larger bodies, and every call under a
deadline (which must be able to cut a request short), await obstore's
coroutine on the loop.

Batches (``get_many``, ``put_many``, ``delete_many``, ``copy_many``) run
obstore's blocking calls on ``batch_concurrency`` worker threads
(:func:`portable.driver.fanout.amap_blocking`: no task, future or hop per
object), about half the client CPU of its coroutines for small objects. Batch
reads of large bodies, and every batch under a deadline, run a fixed pool of
``batch_concurrency`` worker tasks on the loop instead and yield each result
as it finishes (see ``get_many``).

Streams: ``open_read`` is obstore's ``AsyncReadableFile``; ``open_write`` is
obstore's async multipart writer, or, for a conditional write (which a
multipart upload cannot carry) and for what the sync driver sends whole, a
spool sent as one ``put`` at commit. The contract is the sync one: nothing is
visible before commit, abort (or a cancelled commit) leaves no object.

S3 over ``http://`` with static credentials: ``get`` and ``get_many`` of small bodies send GETs
the S3 driver signs itself, on kept-alive connections of *this* loop (one pool per loop; at most
:data:`MAX_IN_FLIGHT` single gets, ``batch_concurrency`` per batch, yielded as each finishes),
with no thread at all (:mod:`portable_obstore._s3_reads`; an answer it does not read is read
again through obstore's coroutine). Cancelling the awaiting task closes the request's
connection.

Errors are obstore's own, classified by the sync driver (``code_of``).
"""

from __future__ import annotations

import asyncio
import collections
import io
import tempfile
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import obstore

from portable.driver.aio_storage import AsyncReadStream, AsyncStorageDriver, AsyncWriteStream
from portable.driver.fanout import amap_blocking, relay_blocking
from portable.driver.storage import ListPage, ObjectInfo, WriteOptions
from portable.driver.threads import run_blocking
from portable.resilience import remaining

from ._common import (
    BLOCKING_READ_LIMIT,
    StreamFailed,
    empty_slice,
    read_whole_async,
    small_bodies,
    small_mean,
)

if TYPE_CHECKING:
    from ._common import ObstoreStorage
    from .s3 import ObstoreS3Storage

__all__ = ["MAX_IN_FLIGHT", "ObstoreAsyncStorage", "as_finished"]

#: single-object requests one async driver hands to obstore at once, per event loop
MAX_IN_FLIGHT = 64

#: the options of a plain write (no header, metadata or condition), which a driver's put caches the
#: arguments of
_PLAIN = WriteOptions()

A = TypeVar("A")
R = TypeVar("R")


async def as_finished(
    fn: Callable[[A], Awaitable[R]], items: list[A], concurrency: int
) -> AsyncIterator[tuple[A, R | BaseException]]:
    """Apply ``fn`` to every item with at most ``concurrency`` in flight; yield ``(item, result or error)``
    as each finishes.

    A fixed pool of worker tasks takes the items in order (no task per item).
    Closing the iterator early, or cancelling its consumer, cancels the
    requests still in flight.
    """
    if not items:
        return
    done: collections.deque[tuple[A, R | BaseException]] = collections.deque()
    wake = asyncio.Event()
    position = iter(items)

    async def worker() -> None:
        for item in position:
            try:
                result: R | BaseException = await fn(item)
            except Exception as exc:
                result = exc
            done.append((item, result))
            wake.set()

    workers = [asyncio.ensure_future(worker()) for _ in range(min(concurrency, len(items)))]
    try:
        left = len(items)
        while left:
            if not done:
                wake.clear()
                await wake.wait()
            while done:
                left -= 1
                yield done.popleft()
    finally:
        for task in workers:
            task.cancel()


class _Gate:
    """At most ``size`` requests in flight on one event loop: an ``asyncio.Semaphore`` without its cost.

    ``async with semaphore`` runs two coroutines (``__aenter__``, ``__aexit__``)
    per request even when a slot is free; a request here takes a free slot with
    one comparison (``if gate.free: gate.free -= 1``) and awaits :meth:`wait`
    only when every slot is taken. A freed slot is handed to the oldest waiter
    directly (first come, first served); a waiter cancelled after it was handed
    one passes it on, so a cancel never leaks a slot. One loop's tasks only
    (no lock: the loop runs one callback at a time). ``async with gate``
    takes and gives back a slot too (the calls less hot than get and put).
    """

    __slots__ = ("free", "waiters")

    def __init__(self, size: int) -> None:
        self.free = size
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def wait(self) -> None:
        """Wait for a slot (when ``free`` is 0); the slot is the caller's when this returns."""
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot as it was cancelled: the next waiter has it
            raise

    async def __aenter__(self) -> None:
        if self.free:
            self.free -= 1
        else:
            await self.wait()

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        """Give a slot back: to the oldest waiter still waiting, else to ``free``."""
        waiters = self.waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1


def _no_loop() -> None:
    """The "last loop" of a driver no loop has called yet."""
    return None


class ObstoreAsyncStorage(AsyncStorageDriver):
    """The async twin of an obstore driver: its store, its hooks, obstore's coroutines.

    What it does not override (``signed_url``, ``abort_incomplete``,
    ``list_incomplete``) stays thread-adapted: those build URLs locally or send
    requests obstore has no call for.
    """

    native = True
    sync: ObstoreStorage

    def __init__(self, sync: ObstoreStorage) -> None:
        super().__init__(sync)
        self._store = sync.store
        self._root = sync._root
        #: the S3 driver, where it has a fast read path (portable_obstore._s3_reads)
        self._fast: ObstoreS3Storage | None = sync if getattr(sync, "fast_reads", None) is not None else None  # type: ignore[assignment]
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Gate] = weakref.WeakKeyDictionary()
        #: the last loop that called (a weak reference) and its gate: one call to find it, not a WeakKeyDictionary's
        self._last_gate: tuple[Callable[[], asyncio.AbstractEventLoop | None], _Gate] = (_no_loop, _Gate(0))
        self._etag_of = sync.etag_of
        #: the last plain WriteOptions seen and obstore's put arguments for it (the sync driver's own)
        self._plain: WriteOptions | None = None
        self._plain_arguments: dict[str, Any] = {}

    def _gate(self) -> _Gate:
        """This loop's bound on the requests in flight (:data:`MAX_IN_FLIGHT`)."""
        loop = asyncio.get_running_loop()
        last_loop, gate = self._last_gate
        if last_loop() is not loop:  # another loop than the last call's (the common case is one loop)
            found = self._gates.get(loop)
            if found is None:
                found = self._gates[loop] = _Gate(MAX_IN_FLIGHT)
            gate = found
            self._last_gate = (weakref.ref(loop), gate)
        return gate

    # -- whole objects ----------------------------------------------------
    # get and put take a slot written out (the gate's __aenter__/__aexit__ are two coroutines)
    async def get(self, key: str) -> bytes:
        sync = self.sync
        fast = self._fast
        if fast is not None:
            credentials = fast.fast_credentials()
            if credentials is not None:  # S3 over http://: a GET signed here, on this loop
                async with self._gate():
                    body = await fast.fast_get(key, credentials)
                if len(body) > BLOCKING_READ_LIMIT:
                    sync.small_reads = False
                return body
        if sync.small_reads and remaining() is None:  # the cheap path (see "Single calls" above)
            body = await relay_blocking(sync.blocking_get, key)
            if len(body) > BLOCKING_READ_LIMIT:
                sync.small_reads = False
            return body
        last_loop, gate = self._last_gate
        if last_loop() is not asyncio.get_running_loop():
            gate = self._gate()
        if gate.free:
            gate.free -= 1
        else:
            await gate.wait()
        try:
            body = await read_whole_async(self._store, self._root + key)
        finally:
            if gate.waiters:
                gate.release()
            else:
                gate.free += 1
        if len(body) <= BLOCKING_READ_LIMIT and remaining() is None:
            sync.small_reads = True
        return body

    async def get_range(self, key: str, start: int, end: int | None) -> bytes:
        options: dict[str, Any] = {"range": {"offset": start} if end is None else (start, end)}
        try:
            async with self._gate():
                return await self.sync._aget_options(key, options)
        except obstore.exceptions.BaseError as exc:
            if empty_slice(exc):
                return b""
            raise

    async def head(self, key: str) -> ObjectInfo:
        async with self._gate():
            return await self.sync._ahead(key)

    async def put(self, key: str, data: bytes, options: WriteOptions) -> str | None:
        if options is self._plain:
            arguments = self._plain_arguments
        else:
            if self.sync.signs_itself(options):
                return await run_blocking(self.sync.put, key, data, options)  # a request obstore cannot send
            arguments = self.sync._put_arguments(options)  # what sync.put and sync._aput send
            if options == _PLAIN:  # the common put: its arguments never change, so they are kept,
                # without the ones that are obstore's defaults (None): fewer arguments for it to read
                arguments = {name: value for name, value in arguments.items() if value is not None}
                self._plain, self._plain_arguments = options, arguments
        if options is self._plain and len(data) <= BLOCKING_READ_LIMIT and remaining() is None:
            # the cheap path (see "Single calls" above); a conditional put keeps the coroutine, which a
            # per-attempt timeout cuts short (a relayed one would still land and meet its own retry)
            return self._etag_of(await relay_blocking(self._blocking_put, (key, data, arguments)))
        last_loop, gate = self._last_gate
        if last_loop() is not asyncio.get_running_loop():
            gate = self._gate()
        if gate.free:
            gate.free -= 1
        else:
            await gate.wait()
        try:
            result = await obstore.put_async(self._store, self._root + key, data, **arguments)
        finally:
            if gate.waiters:
                gate.release()
            else:
                gate.free += 1
        return self._etag_of(result)

    def _blocking_put(self, call: tuple[str, bytes, dict[str, Any]]) -> Any:
        key, data, arguments = call
        return obstore.put(self._store, self._root + key, data, **arguments)

    async def delete(self, key: str) -> None:
        try:
            async with self._gate():
                await obstore.delete_async(self._store, self._root + key)
        except FileNotFoundError:
            pass  # Azure answers 404 for a missing blob; S3 and GCS do not

    async def copy(self, src: str, dst: str) -> str | None:
        async with self._gate():
            await obstore.copy_async(self._store, self._root + src, self._root + dst)
        return None

    # -- listing ----------------------------------------------------------
    async def list_page(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        return await self.sync.alist_page(prefix, delimiter, start_after, page_size, token)

    # -- streams ----------------------------------------------------------
    async def open_read(self, key: str) -> AsyncReadStream:
        native = await obstore.open_reader_async(self._store, self._root + key, buffer_size=8 * 1024 * 1024)
        return _AsyncReader(native)

    async def open_write(self, key: str, options: WriteOptions, part_size: int) -> AsyncWriteStream:
        if self.sync.sent_whole(options):
            return _AsyncSpooledWrite(self, key, options, part_size)
        writer = obstore.open_writer_async(
            self._store,
            self._root + key,
            attributes=self.sync.attributes(options),
            buffer_size=part_size,
            max_concurrency=4,
        )
        return _AsyncMultipartWrite(writer)

    # -- batches ----------------------------------------------------------
    # Without a deadline a batch runs obstore's blocking calls on the worker threads of
    # portable.driver.fanout (about half the client CPU of its coroutines for small objects), reads
    # only while the bodies are small (_common.small_mean); otherwise worker tasks on this
    # loop, which a deadline can cancel mid-request.
    async def get_many(self, keys: list[str]) -> AsyncIterator[tuple[str, bytes | BaseException]]:
        sync = self.sync
        fast = self._fast
        credentials = fast.fast_credentials() if fast is not None else None
        if fast is not None and credentials is not None:  # S3 over http://: GETs signed here, on this loop
            fast_get = fast.fast_get
            count = total = 0

            async def fast_one(key: str) -> bytes:
                nonlocal count, total
                body = await fast_get(key, credentials)
                count, total = count + 1, total + len(body)
                return body

            async for outcome in as_finished(fast_one, keys, self.batch_concurrency):
                yield outcome
            sync.small_reads = small_mean(count, total)
            return
        if remaining() is None and sync.small_reads:  # the last batch read small bodies
            got: list[bytes | Exception] = await amap_blocking(sync.blocking_get, keys, self.batch_concurrency)
            sync.small_reads = small_bodies(got)
            for pair in zip(keys, got, strict=True):
                yield pair
            return
        store, root = self._store, self._root
        count = total = 0

        async def one(key: str) -> bytes:
            nonlocal count, total
            body = await read_whole_async(store, root + key)
            count, total = count + 1, total + len(body)
            return body

        async for outcome in as_finished(one, keys, self.batch_concurrency):
            yield outcome
        sync.small_reads = small_mean(count, total)

    async def put_many(
        self, items: list[tuple[str, bytes]], options: WriteOptions
    ) -> AsyncIterator[tuple[str, str | BaseException | None]]:
        if self.sync.signs_itself(options):
            async for pair in super().put_many(items, options):  # threads, each a signed put
                yield pair
            return
        if remaining() is None:
            putter = self.sync.blocking_putter(options)
            for (key, _), etag in zip(items, await amap_blocking(putter, items, self.batch_concurrency), strict=True):
                yield key, etag
            return
        store, root, etag_of = self._store, self._root, self.sync.etag_of
        attributes = self.sync.attributes(options)

        async def one(item: tuple[str, bytes]) -> str | None:
            result = await obstore.put_async(store, root + item[0], item[1], attributes=attributes, use_multipart=False)
            return etag_of(result)

        async for (key, _), result in as_finished(one, items, self.batch_concurrency):
            yield key, result

    async def delete_many(self, keys: list[str]) -> AsyncIterator[tuple[str, BaseException | None]]:
        if remaining() is None:
            gone: list[Exception | None] = await amap_blocking(self.sync.blocking_delete, keys, self.batch_concurrency)
            for pair in zip(keys, gone, strict=True):
                yield pair
            return
        async for key, result in as_finished(self.delete, keys, self.batch_concurrency):
            yield key, result

    async def copy_many(
        self, pairs: list[tuple[str, str]]
    ) -> AsyncIterator[tuple[str, str | BaseException | None]]:
        if remaining() is None:
            copied: list[Exception | None] = await amap_blocking(self.sync.blocking_copy, pairs, self.batch_concurrency)
            for (_, dst), outcome in zip(pairs, copied, strict=True):
                yield dst, outcome
            return

        async def one(pair: tuple[str, str]) -> str | None:
            return await self.copy(*pair)

        async for (_, dst), result in as_finished(one, pairs, self.batch_concurrency):
            yield dst, result


# ---------------------------------------------------------------- streams
class _AsyncReader(AsyncReadStream):
    """A seekable async reader over obstore's AsyncReadableFile (which returns ``obstore.Bytes``)."""

    def __init__(self, native: Any) -> None:  # not the base's: there is no sync stream under it
        self._native = native
        self._pos = 0

    async def read(self, n: int = -1) -> bytes:
        data = bytes(await self._native.read(None if n is None or n < 0 else n))
        self._pos += len(data)
        return data

    def seekable(self) -> bool:
        return True

    async def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._pos = int(await self._native.seek(offset, whence))
        return self._pos

    def tell(self) -> int:
        return self._pos

    @property
    def size(self) -> int:
        return int(self._native.size)

    async def close(self) -> None:
        self._native.close()


class _Aborted(Exception):
    """Passed to obstore's writer ``__aexit__`` so that it aborts the multipart upload."""


async def _awaited(fn: Callable[..., Awaitable[R]], /, *args: Any) -> R:
    """The runner of obstore's writer calls: each awaited in a task of its own (see ``_AsyncMultipartWrite``)."""
    return await fn(*args)


class _AsyncMultipartWrite(AsyncWriteStream):
    """An unconditional streamed write on obstore's async writer: the sync ``_MultipartWrite``'s rules.

    Nothing is sent until a part is buffered; a stream that ends within its
    first part is one PUT at commit, a longer one a multipart upload. A failed
    or cancelled write poisons the stream (StreamFailed, not retryable).
    Writer calls run one at a time (the base class's ``_serial``): a cancel
    stops the caller's wait, not the writer's call, and the abort that follows
    waits for it before it aborts the upload.
    """

    def __init__(self, writer: Any) -> None:
        super().__init__(writer, _awaited)  # type: ignore[arg-type]
        self._writer = writer
        self._failed: BaseException | None = None

    def _check(self) -> None:
        if self._failed is not None:
            raise StreamFailed("an earlier part of this stream failed; it was aborted") from self._failed

    async def write(self, data: bytes) -> None:
        self._check()
        try:
            await self._serial(self._writer.write, data)
        except asyncio.CancelledError:
            self._failed = StreamFailed("a write was cancelled part-way")
            raise
        except Exception as exc:
            self._failed = exc
            raise StreamFailed(f"writing a part failed: {exc}") from exc

    async def commit(self) -> str | None:
        self._check()
        try:
            await self._serial(self._writer.close)
        except asyncio.CancelledError:
            self._failed = StreamFailed("the commit was cancelled")
            raise
        except Exception as exc:
            self._failed = exc
            raise StreamFailed(f"completing the upload failed: {exc}") from exc
        return None

    async def abort(self) -> None:
        await self._serial(self._abort)  # type: ignore[unused-coroutine]  # the runner awaits it

    async def _abort(self) -> None:
        if await self._writer.closed():
            return
        await self._writer.__aexit__(_Aborted, _Aborted("aborted by portable"), None)


class _AsyncSpooledWrite(AsyncWriteStream):
    """A streamed write sent as one ``put`` at commit (the sync ``_SpooledWrite``'s rules).

    Spooled in memory up to ``part_size``, then to a temporary file; the object
    appears only when the one conditional PUT succeeds.
    """

    def __init__(self, driver: ObstoreAsyncStorage, key: str, options: WriteOptions, part_size: int) -> None:
        self._driver = driver
        self._key = key
        self._options = options
        self._spool: Any = tempfile.SpooledTemporaryFile(max_size=part_size, prefix="portable-obstore-")  # noqa: SIM115 (closed at commit or abort)

    async def write(self, data: bytes) -> None:
        self._spool.write(data)

    async def commit(self) -> str | None:
        self._spool.seek(0)
        etag = await self._driver.put(self._key, self._spool.read(), self._options)
        self._spool.close()  # kept open until then: a failed commit is retried by the Bucket
        return etag

    async def abort(self) -> None:
        self._spool.close()
