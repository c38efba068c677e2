"""One suite body, two faces: run a sync-written contract test against the async face.

:func:`blocking` wraps an object of :mod:`portable.aio` (an ``AsyncBucket``,
``AsyncTopic``, ...) in a proxy that looks sync: calling a method runs the
coroutine it returns on a private event loop (in its own thread) and returns
the result, an async iterator becomes an iterator, an async context manager a
context manager, and what they yield is wrapped the same way. Every call the
test makes therefore goes through the async face's own code paths (its
validation, ``Guard.acall``, the async driver), not the sync face's.

The test's context variables (``portable.deadline``, attempt limits) are
copied into each call, so a deadline set around a sync-looking call holds for
the coroutine too. Exceptions propagate unchanged.

The contract suites use it through their ``face`` parameter: a suite's fixture
opens the async twin of what it tests and hands the test ``blocking(it)``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["Blocking", "LoopThread", "blocking", "loop_thread", "unwrap"]

T = TypeVar("T")

#: modules whose objects the proxy wraps (what it returns stays async-shaped otherwise)
_ASYNC_MODULES = ("portable.aio", "portable.driver.aio_")


class LoopThread:
    """An event loop running in a daemon thread; :meth:`run` awaits a coroutine on it from any thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="portable-faces-loop", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, aw: Awaitable[T], timeout: float | None = None) -> T:
        """Await ``aw`` on the loop, in a copy of the caller's context; return its result or raise its error."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("LoopThread.run called from its own loop (a sync call inside a coroutine)")
        ctx = contextvars.copy_context()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        async def awaited() -> T:
            return await aw

        def start() -> None:
            task = self.loop.create_task(awaited(), context=ctx)

            def finish(t: asyncio.Task[T]) -> None:
                if t.cancelled():
                    done.cancel()
                elif (exc := t.exception()) is not None:
                    done.set_exception(exc)
                else:
                    done.set_result(t.result())

            task.add_done_callback(finish)

        done.set_running_or_notify_cancel()
        self.loop.call_soon_threadsafe(start)
        try:
            return done.result(timeout)
        except concurrent.futures.CancelledError:
            raise asyncio.CancelledError from None

    def close(self) -> None:
        """Stop the loop and its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self.loop.is_running():
            self.loop.close()


_shared: LoopThread | None = None
_shared_lock = threading.Lock()


def loop_thread() -> LoopThread:
    """The process's shared loop thread for :func:`blocking` (started on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = LoopThread()
        return _shared


def _is_async_object(value: object) -> bool:
    module = type(value).__module__ or ""
    return module.startswith(_ASYNC_MODULES) or hasattr(value, "__aenter__") or hasattr(value, "__aiter__")


def _wrap(value: Any, runner: LoopThread) -> Any:
    if inspect.isawaitable(value):
        value = runner.run(value)
    plain = (str, bytes, int, float, bool, list, dict, tuple)
    if value is not None and not isinstance(value, plain) and _is_async_object(value):
        return Blocking(value, runner)
    return value


class Blocking:
    """A sync-looking proxy over an async object (see the module docstring)."""

    __slots__ = ("_cm", "_obj", "_runner")

    def __init__(self, obj: Any, runner: LoopThread | None = None) -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_runner", runner or loop_thread())
        object.__setattr__(self, "_cm", None)

    def __repr__(self) -> str:
        return f"blocking({self._obj!r})"

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._obj, name)
        if not callable(attr) or isinstance(attr, type):
            return _wrap(attr, self._runner) if _is_async_object(attr) else attr
        runner = self._runner

        def call(*args: Any, **kwargs: Any) -> Any:
            args = tuple(unwrap(a) for a in args)
            kwargs = {k: unwrap(v) for k, v in kwargs.items()}
            return _wrap(attr(*args, **kwargs), runner)

        call.__name__ = name
        call.__doc__ = getattr(attr, "__doc__", None)
        return call

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._obj, name, value)

    # -- protocols looked up on the type, not through __getattr__ ---------
    def __enter__(self) -> Any:
        obj = self._obj
        if hasattr(obj, "__aenter__"):
            return _wrap(obj.__aenter__(), self._runner)
        return _wrap(obj.__enter__(), self._runner)

    def __exit__(self, *exc: Any) -> Any:
        obj = self._obj
        if hasattr(obj, "__aexit__"):
            return self._runner.run(obj.__aexit__(*exc))
        return obj.__exit__(*exc)

    def __iter__(self) -> Iterator[Any]:
        obj = self._obj
        if not hasattr(obj, "__aiter__"):
            for item in obj:
                yield _wrap(item, self._runner)
            return
        it = obj.__aiter__()
        try:
            while True:
                try:
                    item = self._runner.run(it.__anext__())
                except StopAsyncIteration:
                    return
                yield _wrap(item, self._runner)
        finally:
            aclose: Callable[[], Coroutine[Any, Any, None]] | None = getattr(it, "aclose", None)
            if aclose is not None:
                self._runner.run(aclose())

    def __len__(self) -> int:
        return len(self._obj)

    def __bool__(self) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return bool(self._obj == unwrap(other))

    def __hash__(self) -> int:
        return hash(self._obj)


def blocking(obj: Any, runner: LoopThread | None = None) -> Any:
    """``obj`` (an object of :mod:`portable.aio`) behind a sync-looking :class:`Blocking` proxy."""
    return Blocking(obj, runner)


def unwrap(value: Any) -> Any:
    """The async object behind a :class:`Blocking` proxy (``value`` itself otherwise)."""
    return object.__getattribute__(value, "_obj") if isinstance(value, Blocking) else value
