"""The sync face's private event loop, where obstore's coroutines run (deadlines, large batch reads,
bulk deletes, listings), and what the interpreter's exit must wait for.

One loop thread serves every obstore bucket of the process. At exit it is stopped
(:func:`_stop_loop`), and the exit then waits for obstore's Tokio threads still handing a
result to an event loop (:func:`_let_native_threads_leave`): a thread Python did not start
that is ended mid-way through Python code aborts the process.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import sys
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_on_loop"]

T = TypeVar("T")

_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _loop() -> asyncio.AbstractEventLoop:
    global _LOOP
    loop = _LOOP
    if loop is not None:
        return loop
    with _LOOP_LOCK:
        if _LOOP is None:
            new = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(new)
                new.call_soon(ready.set)
                new.run_forever()

            thread = threading.Thread(target=run, name="portable-obstore-loop", daemon=True)
            thread.start()
            ready.wait()
            _LOOP = new
            atexit.register(_stop_loop, new, thread)
        return _LOOP


def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    """At interpreter exit: stop the shared loop and wait for its thread (a few seconds at most).

    Left running, the daemon thread is frozen wherever it is when the interpreter tears
    down, sometimes inside obstore's Rust code, which then aborts the process (SIGABRT,
    exit 134) after a program that succeeded.
    """
    global _LOOP
    _LOOP = None
    if not loop.is_closed():
        loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5.0)


def _handing_a_result_to_a_loop() -> bool:
    """Whether a thread that Python did not start is inside ``call_soon_threadsafe`` (of any loop)."""
    ours = {thread.ident for thread in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        if ident in ours:
            continue
        at: Any = frame
        while at is not None:
            if at.f_code.co_name == "call_soon_threadsafe":
                return True
            at = at.f_back
    return False


def _let_native_threads_leave(limit: float = 2.0) -> None:
    """At interpreter exit: wait (``limit`` seconds at most) until no obstore thread is handing a
    result to an event loop.

    obstore completes each coroutine on one of its Tokio threads, which takes the GIL to
    hand the result to the loop (pyo3-async-runtimes' ``set_result`` calls
    ``loop.call_soon_threadsafe``). The loop can run that callback, and the program can
    finish, while the Tokio thread is still inside ``call_soon_threadsafe``, writing the
    loop's wake-up byte with the GIL released. If the interpreter is finalizing when it
    wants the GIL back, CPython ends the thread with ``pthread_exit``, whose unwinding
    through obstore's Rust frames aborts the process: SIGABRT (or SIGBUS) after a program
    that succeeded, seen in 5 of 60 runs of ``portable rm -r s3://...`` (a bulk delete
    through this loop) on a loaded machine (gdb: ``set_result`` -> ``sock_send`` ->
    ``take_gil`` -> ``pthread_exit`` -> ``abort``). Registered when this module is
    imported, so it runs after :func:`_stop_loop` (atexit runs last-in first-out): it
    sleeps, letting such a thread take the GIL, finish its call and go back to Rust.
    Other threads Python did not start (an execnet worker's, a C library's) are not
    waited for. tests/adapters/obstore/test_exit.py holds it to both.
    """
    until = time.monotonic() + limit
    while _handing_a_result_to_a_loop() and time.monotonic() < until:
        time.sleep(0.002)


atexit.register(_let_native_threads_leave)


def run_on_loop(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the shared obstore event loop thread and wait for its result.

    With a ``timeout`` the coroutine is cancelled when it passes and
    ``TimeoutError`` is raised.
    """
    future = asyncio.run_coroutine_threadsafe(coro, _loop())
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"no answer within {timeout:.3g}s") from None
