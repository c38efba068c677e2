"""A batch of blocking calls fanned out over a few worker threads: no task, future or hop per item.

For engines whose library has a blocking call that releases the GIL while it
waits (obstore's sync API runs its request in Rust), a batch is cheapest as
``concurrency`` workers that each take the next item from one shared iterator
and call the blocking function: the per-item cost is the call itself. Measured
on the bench S3 server (2,000 x 1 KiB, 16 in flight): obstore's blocking put
on such workers costs about half the client CPU of ``obstore.put_async`` under
an event loop (138 against 267 us an object), because each awaited obstore
future is a cross-thread wake-up of the loop and a GIL hand-over.

:func:`map_blocking` is the sync face (the calling thread is one of the
workers); :func:`amap_blocking` the async one (the caller's loop waits on one
future per worker, not per item). Both return one outcome per item, in input
order: the function's result, or the ``Exception`` it raised.

Threads: a process-wide pool of at most :data:`MAX_THREADS`, started as
batches need them. A sync batch always makes progress (its calling thread
works through the items even when every pool thread is busy with other
batches); an async batch's workers wait for free threads then. A worker that
starts after the items ran out returns at once.

Cancellation (async): cancelling the awaiting task stops the workers taking
new items; the calls already running finish (a thread cannot be interrupted)
before the cancellation is re-raised, so no request of the batch starts or
ends after the caller has seen it cancelled.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import queue
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import asyncio

__all__ = ["MAX_THREADS", "RELAY_THREADS", "amap_blocking", "map_blocking", "relay_blocking"]

A = TypeVar("A")
R = TypeVar("R")

#: the most worker threads every batch in the process shares
MAX_THREADS = 128

_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _the_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    pool = _pool
    if pool is None:
        with _lock:
            pool = _pool
            if pool is None:
                pool = _pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=MAX_THREADS, thread_name_prefix="portable-batch"
                )
    return pool


class _Batch:
    """The shared state of one batch: the items, the next index, the outcomes and a stop flag."""

    __slots__ = ("fn", "indices", "items", "results", "stopped")

    def __init__(self, fn: Callable[[A], R], items: Sequence[A]) -> None:
        self.fn = fn
        self.items = items
        self.results: list[object] = [None] * len(items)
        self.indices = iter(range(len(items)))  # next() on it is atomic under the GIL
        self.stopped = False

    def drain(self) -> None:
        """Call ``fn`` on items until none is left (or the batch is stopped); outcomes go to ``results``."""
        fn, items, results = self.fn, self.items, self.results
        for i in self.indices:
            if self.stopped:
                return
            try:
                results[i] = fn(items[i])
            except Exception as exc:  # an item's failure is its outcome
                results[i] = exc


def map_blocking(fn: Callable[[A], R], items: Sequence[A], concurrency: int) -> list[R | Exception]:
    """``fn`` over ``items`` with at most ``concurrency`` calls at once; each item's result or error.

    The calling thread is one of the workers, so a batch of one item, or a
    ``concurrency`` of 1, starts no thread. Each worker runs in a copy of the
    caller's :mod:`contextvars` context. A ``BaseException`` that is not an
    ``Exception`` (KeyboardInterrupt) in the caller's thread stops the batch
    and is raised once the other workers' calls have finished.
    """
    batch = _Batch(fn, items)
    helpers = min(concurrency, len(items)) - 1
    futures = []
    if helpers > 0:
        pool = _the_pool()
        context = contextvars.copy_context()
        futures = [pool.submit(context.copy().run, batch.drain) for _ in range(helpers)]
    try:
        batch.drain()
    except BaseException:
        batch.stopped = True
        raise
    finally:
        for future in futures:
            future.cancel()  # one that has not started has nothing left to do
        concurrent.futures.wait(futures)
    return batch.results  # type: ignore[return-value]


async def amap_blocking(
    fn: Callable[[A], R], items: Sequence[A], concurrency: int
) -> list[R | Exception]:
    """:func:`map_blocking` awaited from an event loop: the loop thread makes no call itself.

    Cancelling the awaiting task stops the batch (no further item starts),
    waits for the calls in flight, and re-raises the cancellation.
    """
    import asyncio  # here: importing portable.storage must not load asyncio

    if not items:
        return []
    batch = _Batch(fn, items)
    loop = asyncio.get_running_loop()
    pool = _the_pool()
    context = contextvars.copy_context()
    started = [
        pool.submit(context.copy().run, batch.drain) for _ in range(min(concurrency, len(items)))
    ]
    waiting = asyncio.ensure_future(
        asyncio.wait([asyncio.wrap_future(f, loop=loop) for f in started])
    )
    try:
        await asyncio.shield(waiting)
    except asyncio.CancelledError:
        batch.stopped = True
        for future in started:
            future.cancel()  # a worker that has not started never will
        while not waiting.done():  # the calls in flight end before the cancellation is raised
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(waiting)
        raise
    return batch.results  # type: ignore[return-value]


# ---------------------------------------------------------------- single calls from a loop
#: the most worker threads that serve one event loop's single calls (:func:`relay_blocking`)
RELAY_THREADS = 64
#: seconds a relay worker waits for another call before its thread ends
_RELAY_IDLE = 5.0


class _Call:
    """One relayed call: the function, its argument, the caller's context and the awaited future."""

    __slots__ = ("arg", "ctx", "fn", "future")

    def __init__(self, fn: Callable[[Any], Any], arg: Any, future: asyncio.Future[Any]) -> None:
        self.fn, self.arg, self.future = fn, arg, future
        self.ctx = contextvars.copy_context()


def _settle(outcome: tuple[asyncio.Future[Any], bool, Any]) -> None:
    """On the caller's loop: the awaited future takes the call's outcome (unless it was cancelled)."""
    future, ok, value = outcome
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class _Relay:
    """One event loop's single blocking calls, run by worker threads of their own (daemon threads).

    A call is queued (``queue.SimpleQueue``); a new worker starts whenever
    more calls wait than workers are idle to take them, up to
    :data:`RELAY_THREADS` for the loop, so a burst of calls runs at once
    even when a few workers were idle when it came.
    Outcomes go back through the loop's lane (:mod:`portable.driver.threads`):
    one wake-up of the loop carries every outcome that finished since the
    last one. A worker idle for :data:`_RELAY_IDLE` seconds ends.
    """

    __slots__ = ("__weakref__", "idle", "lane", "lock", "waiting", "work", "workers")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        from .threads import lane_of

        self.lane = lane_of(loop)
        self.work: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.idle = 0  # workers waiting for a call
        self.waiting = 0  # calls queued that no worker has taken yet
        self.workers = 0

    def submit(self, call: _Call) -> None:
        self.work.put(call)
        with self.lock:
            self.waiting += 1
            if self.waiting <= self.idle or self.workers >= RELAY_THREADS:
                return  # an idle worker takes it (or every worker the loop may have is busy)
            self.workers += 1
        try:
            # a daemon thread of its own, not the batch pool's: an idle worker waiting for its next
            # call must not hold up the interpreter's exit (which joins the pool's threads)
            threading.Thread(target=self.serve, name="portable-relay", daemon=True).start()
        except BaseException:
            with self.lock:
                self.workers -= 1
            raise

    def serve(self) -> None:
        """A worker: take calls until none comes for a while."""
        try:
            self._serve()
        except BaseException:  # not a call's failure (each is its outcome): the slot is given back
            with self.lock:
                self.workers -= 1
            raise

    def _serve(self) -> None:
        work, lock, push = self.work, self.lock, self.lane.push
        while True:
            with lock:
                self.idle += 1
            try:
                call = work.get(timeout=_RELAY_IDLE)
            except queue.Empty:
                with lock:
                    self.idle -= 1
                    if not self.waiting:  # a call submitted before this lock was taken is counted here
                        self.workers -= 1
                        return
                continue
            with lock:  # both at once: a submit in between sees the same surplus of calls over idle workers
                self.idle -= 1
                self.waiting -= 1
            future = call.future
            if future.done():  # cancelled before it started: it never starts
                continue
            try:
                outcome: tuple[asyncio.Future[Any], bool, Any] = (future, True, call.ctx.run(call.fn, call.arg))
            except BaseException as exc:  # the call's failure is its outcome (the caller raises it)
                outcome = (future, False, exc)
            try:
                push(_settle, outcome)
            except RuntimeError:  # the caller's loop is closed: nobody waits for this outcome
                pass


_relays: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Relay] = weakref.WeakKeyDictionary()


def relay_blocking(fn: Callable[[A], R], arg: A) -> asyncio.Future[R]:
    """A future for ``fn(arg)``, a blocking call that releases the GIL, run by a relay worker thread.

    The cheap way to await one small blocking request from an event loop
    (obstore's blocking calls): no task, no executor future and no
    ``call_soon_threadsafe`` per call; the outcomes of calls that finish
    together reach the loop in one wake-up. The call sees a copy of the
    caller's context variables. Call it from a running loop; await the future.

    Cancelling the awaiting task cancels the future: a call not yet started
    never starts; one already running runs to its end (a thread cannot be
    interrupted) and its outcome is dropped, as for
    :func:`portable.driver.threads.run_blocking`. Use it only for requests
    a dropped outcome cannot harm (a whole-object get or put), without a
    deadline (which must be able to cut a request short).
    """
    import asyncio  # here: importing portable.storage must not load asyncio

    loop = asyncio.get_running_loop()
    relay = _relays.get(loop)
    if relay is None:
        with _lock:
            relay = _relays.setdefault(loop, _Relay(loop))
    future: asyncio.Future[R] = loop.create_future()
    relay.submit(_Call(fn, arg, future))
    return future
