"""The one place a blocking call becomes awaitable: a bounded, process-wide thread pool.

Every async driver method that a driver does not implement natively runs its
sync twin through :func:`run_blocking`. The pool is bounded
(``PORTABLE_AIO_THREADS``, default 32), so 10,000 concurrent awaits queue
10,000 small work items, not 10,000 threads. Each call runs in a copy of the
caller's :mod:`contextvars` context, so the attempt timeout and deadline the
portable layer set (``portable.resilience``) reach the sync driver as they
would on the sync face.

Cancellation: cancelling the awaiting task stops the wait at once, but a call
already running in a thread runs to its end (a thread cannot be interrupted);
its result is dropped. A call still queued when cancelled never starts.
Callers that must know the outcome of a write after a cancellation (streamed
writes, settlements) shield the call and decide themselves.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

from ..errors import ConfigError, Unavailable

__all__ = ["PerLoop", "Pinned", "pool_size", "run_blocking", "run_on_loop", "shutdown_pool"]

R = TypeVar("R")
C = TypeVar("C")

_DEFAULT_THREADS = 32
_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None


def pool_size() -> int:
    """How many threads the pool may start: ``PORTABLE_AIO_THREADS`` (an int from 1 to 1024), else 32.

    Raises:
        ConfigError: ``PORTABLE_AIO_THREADS`` is set to something else (a setting
            that does not parse is an error, never a silent default).
    """
    raw = os.environ.get("PORTABLE_AIO_THREADS")
    if raw is None or not raw.strip():
        return _DEFAULT_THREADS
    try:
        size = int(raw)
    except ValueError:
        size = 0
    if not 1 <= size <= 1024:
        raise ConfigError(f"PORTABLE_AIO_THREADS must be an int from 1 to 1024, got {raw!r}")
    return size


def _the_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    pool = _pool
    if pool is None:
        with _lock:
            pool = _pool
            if pool is None:
                pool = _pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=pool_size(), thread_name_prefix="portable-aio"
                )
    return pool


async def run_blocking(fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """Run ``fn(*args, **kwargs)`` in the bounded pool and await its result.

    The call sees the caller's context variables (a copy). Exceptions are
    raised as ``fn`` raised them, unwrapped.
    """
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()
    call = functools.partial(ctx.run, fn, *args, **kwargs) if kwargs or args else functools.partial(ctx.run, fn)
    return await loop.run_in_executor(_the_pool(), call)


class Pinned:
    """One thread of its own for a caller whose blocking calls come one at a time and share state
    kept per thread (a sqlite connection, with its page and statement caches, is one per thread):
    the process-wide pool hands successive calls to whichever of its threads is idle, each with a
    cold connection of its own, which here costs about 40% more per store call. Calls see the
    caller's context variables (a copy), as :func:`run_blocking`'s do; a call still queued when
    :meth:`close` is called still runs."""

    def __init__(self, name: str) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def run(self, fn: Callable[..., R], /, *args: Any) -> R:
        """:func:`run_blocking` on this thread."""
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def close(self) -> None:
        """Let the thread end once what was handed to it has run (does not wait)."""
        self._executor.shutdown(wait=False)


class _Lane:
    """Callbacks handed to one event loop from other threads, in batches: one wake-up per batch.

    ``loop.call_soon_threadsafe`` wakes the loop (a write to its self-pipe)
    for every callback. A lane queues the callback and wakes the loop only if
    no wake-up is pending already; the loop then runs everything queued since,
    in order, in one callback. Under load (the loop busy, many calls in
    flight) one wake-up carries many calls; idle, it is one wake-up per call,
    as before.
    """

    __slots__ = ("__weakref__", "_loop", "armed", "arming", "items", "lock")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # weak: the lanes' WeakKeyDictionary must not keep its keys alive
        self.lock = threading.Lock()
        self.items: list[tuple[Callable[[Any], object], Any]] = []
        self.armed = False
        self.arming: set[asyncio.AbstractEventLoop] = set()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The lane's loop. Raises RuntimeError once it is gone (closed and collected)."""
        loop = self._loop()
        if loop is None:
            raise RuntimeError("Event loop is closed")
        return loop

    def closed(self) -> bool:
        """Whether the lane's loop is closed (or gone)."""
        loop = self._loop()
        return loop is None or loop.is_closed()

    def push(self, callback: Callable[[Any], object], arg: Any) -> None:
        """Run ``callback(arg)`` on the lane's loop soon. Raises RuntimeError if that loop is closed."""
        if self.closed():  # a wake-up still pending on a closed loop would never come
            raise RuntimeError("Event loop is closed")
        with self.lock:
            self.items.append((callback, arg))
            if self.armed:
                return
            self.armed = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except BaseException:
            with self.lock:
                self.armed = False
                with contextlib.suppress(ValueError):
                    self.items.remove((callback, arg))
            raise

    def push_from(self, here: asyncio.AbstractEventLoop, callback: Callable[[Any], object], arg: Any) -> None:
        """:meth:`push` from a callback running on loop ``here``, waking the lane's loop at the end of
        ``here``'s current iteration: what else finishes in that iteration goes in the same wake-up."""
        with self.lock:
            self.items.append((callback, arg))
            if self.armed or here in self.arming:
                return
            self.arming.add(here)
        here.call_soon(self._arm, here)

    def _arm(self, here: asyncio.AbstractEventLoop) -> None:
        with self.lock:
            self.arming.discard(here)
            if self.armed or not self.items:
                return
            self.armed = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the lane's loop is closed: nobody waits for what it holds
            with self.lock:
                self.items.clear()

    def _drain(self) -> None:
        with self.lock:
            items, self.items, self.armed = self.items, [], False
        for callback, arg in items:
            try:
                callback(arg)
            except Exception as exc:  # one failing callback must not drop the others
                self.loop.call_exception_handler(
                    {"message": f"exception in callback {callback!r}", "exception": exc}
                )


_lanes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Lane] = weakref.WeakKeyDictionary()


def lane_of(loop: asyncio.AbstractEventLoop) -> _Lane:
    """The lane of ``loop``: callbacks pushed to it from other threads, many per wake-up."""
    try:
        return _lanes[loop]
    except KeyError:
        with _lock:
            return _lanes.setdefault(loop, _Lane(loop))


class _Hop(Generic[R]):
    """One :func:`run_on_loop` call: started on the driver's loop, its outcome delivered to the caller's.

    It holds both lanes (the driver loop's, which starts it, and the caller
    loop's, which takes its outcome back), found once when it is made: the
    outcome goes back without another lookup.
    """

    __slots__ = ("args", "back", "cancelled", "ctx", "fn", "future", "task")

    def __init__(
        self, fn: Callable[..., Coroutine[Any, Any, R]], args: tuple[Any, ...], future: asyncio.Future[R], back: _Lane
    ) -> None:
        self.fn, self.args, self.future, self.back = fn, args, future, back
        self.ctx = contextvars.copy_context()
        self.task: asyncio.Task[R] | None = None
        self.cancelled = False

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the driver's loop: make the task (unless the caller cancelled first)."""
        if self.cancelled:
            return
        try:
            self.task = task = loop.create_task(self.fn(*self.args), context=self.ctx)
        except BaseException as exc:  # fn(*args) raised before it made a coroutine (a wrong argument)
            self._deliver(loop, _Failed(exc))
            return
        task.add_done_callback(self.finish)

    def finish(self, task: asyncio.Task[R]) -> None:
        """On the driver's loop: hand the task's outcome to the caller's loop."""
        self._deliver(task.get_loop(), task)

    def _deliver(self, here: asyncio.AbstractEventLoop, outcome: asyncio.Task[R] | _Failed) -> None:
        """On the driver's loop ``here``: send ``outcome`` to the caller's loop with the others of this iteration."""
        back = self.back
        if back.closed():
            return  # the caller's loop is gone: nobody waits for this outcome
        back.push_from(here, _settle, (self.future, outcome))

    def cancel(self, _: object = None) -> None:
        """On the driver's loop: the caller was cancelled; cancel the task, or never start it."""
        self.cancelled = True
        if self.task is not None:
            self.task.cancel()


class _Failed:
    """An outcome that is an exception raised before any task existed."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def cancelled(self) -> bool:
        return False

    def exception(self) -> BaseException:
        return self.exc


def _settle(pair: tuple[asyncio.Future[Any], asyncio.Task[Any] | _Failed]) -> None:
    """On the caller's loop: the awaited future takes the task's outcome."""
    future, outcome = pair
    if future.done():  # the caller was cancelled meanwhile
        if not outcome.cancelled():
            outcome.exception()  # retrieved: no "exception was never retrieved" warning
        return
    if outcome.cancelled():
        future.cancel()
    elif (exc := outcome.exception()) is not None:
        future.set_exception(exc)
    else:
        future.set_result(outcome.result())  # type: ignore[union-attr]


async def run_on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., Coroutine[Any, Any, R]], /, *args: Any) -> R:
    """Await coroutine function ``fn(*args)`` on another running event loop (a driver's own).

    For engines whose async client is bound to a loop of their own (fsspec's
    s3fs/gcsfs/adlfs loop thread): the request runs natively async there, with
    no thread per call, and the caller awaits it. Cancelling the caller
    cancels the task on ``loop``. On the caller's own loop it simply awaits.
    The caller's context variables are copied into the task.

    The hops both ways are batched (see :class:`_Lane`): calls made on one
    loop while the driver's loop is busy start there in one wake-up, and
    outcomes finished together reach the caller's loop in one wake-up, so
    ``asyncio.gather`` over single calls costs about what one batched call
    costs, not a cross-thread wake-up of each loop per call.

    Raises:
        RuntimeError: ``loop`` is closed.
    """
    here = asyncio.get_running_loop()
    if here is loop:
        return await fn(*args)
    future: asyncio.Future[R] = here.create_future()
    try:
        back, there = _lanes[here], _lanes[loop]
    except KeyError:
        back, there = lane_of(here), lane_of(loop)
    hop = _Hop(fn, args, future, back)
    there.push(hop.start, loop)
    try:
        return await future
    except asyncio.CancelledError:
        if future.cancelled() and (hop.task is None or not hop.task.done()):
            with contextlib.suppress(RuntimeError):  # the driver's loop is closed: nothing runs there
                there.push(hop.cancel, None)
        raise


def shutdown_pool(wait: bool = True) -> None:
    """Stop the pool's threads (tests; a later :func:`run_blocking` starts a new pool)."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=wait)


class PerLoop(Generic[C]):
    """One client per running event loop, made on first use by ``make()`` and closed by ``close(client)``.

    An aiohttp session or a grpc.aio channel belongs to the loop it was made
    on, and a driver may be awaited from several loops (``portable.testing.faces``
    runs each on a private loop thread). Concurrent first calls on one loop
    share one making. :meth:`aclose` closes the calling loop's client and those
    of other loops still running (a stopped loop's cannot be); after it, a call
    raises Unavailable: a closed driver never opens a client again.

    A loop that ends without that ``aclose`` (``asyncio.run`` after
    ``asyncio.run`` with one long-lived driver) still closes its client: the
    making leaves an async generator suspended on the loop, which the loop's
    ``shutdown_asyncgens`` (run by ``asyncio.run``) finishes, closing the
    client there before the loop closes. A loop closed without that step keeps
    its client until the next making on another loop drops it.
    """

    def __init__(self, make: Callable[[], Awaitable[C]], close: Callable[[C], Awaitable[object]]) -> None:
        self._make = make
        self._close = close
        self._tasks: dict[asyncio.AbstractEventLoop, asyncio.Task[C]] = {}
        #: the clients made, by loop: what :meth:`ready` reads without a lock or an await
        self._made: dict[asyncio.AbstractEventLoop, C] = {}
        #: per loop, the async generator its shutdown_asyncgens finishes (closing that loop's client)
        self._watchers: dict[asyncio.AbstractEventLoop, Any] = {}
        self._lock = threading.Lock()
        self._closed = False

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, loop: object) -> bool:
        return loop in self._tasks

    def ready(self) -> C | None:
        """The running loop's client if it is made (and this is not closed), else None: no await, no lock.

        The hot path's check: a call that gets None awaits :meth:`get`.
        """
        return self._made.get(asyncio.get_running_loop())

    async def get(self) -> C:
        """The running loop's client."""
        loop = asyncio.get_running_loop()
        with self._lock:
            task = self._tasks.get(loop)
            if task is None:
                if self._closed:
                    raise Unavailable("this async driver is closed (aclose was called)")
                self._forget_closed_loops()
                task = self._tasks[loop] = loop.create_task(self._new())
        if task.done() and not task.cancelled() and task.exception() is None:
            return task.result()  # the common case: no shield, no new future
        try:
            client = await asyncio.shield(task)
            with self._lock:
                if self._tasks.get(loop) is task:
                    self._made[loop] = client
            return client
        except asyncio.CancelledError:
            raise
        except BaseException:
            with self._lock:
                if self._tasks.get(loop) is task:
                    del self._tasks[loop]  # the next call tries again
            raise

    def _forget_closed_loops(self) -> None:
        """Drop the clients of loops closed without an ``aclose`` (``asyncio.run`` after ``asyncio.run``).

        A closed loop's client cannot be closed any more; dropping it lets the
        collector free it instead of holding one per dead loop. Under the lock.
        """
        for loop in [loop for loop in self._tasks if loop.is_closed()]:
            del self._tasks[loop]
            self._made.pop(loop, None)
            _discard(self._watchers.pop(loop, None))

    async def _new(self) -> C:
        client = await self._make()
        loop = asyncio.get_running_loop()
        watcher = self._until_shutdown(loop)
        await watcher.__anext__()  # first iterated on ``loop``: its shutdown_asyncgens will finish it
        with self._lock:
            self._watchers[loop] = watcher
        return client

    async def _until_shutdown(self, loop: asyncio.AbstractEventLoop) -> Any:
        """Suspended until ``loop`` shuts its async generators down; then closes that loop's client."""
        try:
            yield
        finally:
            if not loop.is_closed():
                with self._lock:
                    task = self._tasks.pop(loop, None)
                    self._made.pop(loop, None)
                    self._watchers.pop(loop, None)
                if task is not None:
                    with contextlib.suppress(Exception):
                        await self._close_one(task)

    async def aclose(self) -> None:
        """Close the calling loop's client and those of other loops still running."""
        with self._lock:
            tasks, self._tasks = self._tasks, {}
            watchers, self._watchers = self._watchers, {}
            self._made = {}
            self._closed = True
        for watcher in watchers.values():
            _discard(watcher)  # it finds no client left to close: it finishes here, awaiting nothing
        here = asyncio.get_running_loop()
        for loop, task in tasks.items():
            if loop is here:
                await self._close_one(task)
            elif loop.is_running():
                with contextlib.suppress(Exception):
                    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._close_one(task), loop))

    async def _close_one(self, task: asyncio.Task[C]) -> None:
        if not task.done():
            task.cancel()  # still connecting: nothing to close yet
            return
        if task.cancelled() or task.exception() is not None:
            return
        await self._close(task.result())


def _discard(watcher: Any) -> None:
    """Finish a suspended :meth:`PerLoop._until_shutdown` here, its loop closed or its client taken (it
    awaits nothing then), so that the collector never hands it to its loop's finalizer."""
    if watcher is None:
        return
    with contextlib.suppress(BaseException):
        watcher.aclose().send(None)
