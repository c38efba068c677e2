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
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["MAX_THREADS", "amap_blocking", "map_blocking"]

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
