"""The obstore engine's exit handler: the interpreter does not finalize under a Tokio thread that is
handing a result to an event loop.

``portable rm -r s3://...?engine=obstore`` exited with SIGABRT or SIGBUS in 5 of 60 runs on a
loaded machine (and once in a fresh-clone CI run): an obstore Tokio thread that had just handed a
bulk delete's result to the private event loop was still inside ``call_soon_threadsafe`` when the
interpreter finalized, and CPython's ``pthread_exit`` of that thread unwound through Rust frames
(gdb of the core: ``set_result`` -> ``sock_send`` -> ``take_gil`` -> ``pthread_exit`` -> ``abort``).
After the fix: 60 of 60 runs exited 0 under the same load.

A ``_thread`` thread stands in for the Tokio thread: ``threading`` does not know it, as it does
not know a Tokio thread. The handler must wait for one inside ``call_soon_threadsafe`` and not for
one idling elsewhere in Python code (pytest-xdist's execnet keeps such threads in every worker:
a first version that waited for any of them held each exit for its whole limit).
"""

from __future__ import annotations

import _thread
import asyncio
import threading
import time
from typing import Any

from portable_obstore._loop import _let_native_threads_leave


class _SlowWakeUp(asyncio.SelectorEventLoop):
    """A loop whose wake-up write takes 0.3 s: the window the Tokio thread was caught in."""

    def _write_to_self(self) -> None:
        time.sleep(0.3)
        super()._write_to_self()  # type: ignore[misc]


def _foreign(fn: Any) -> threading.Event:
    """Run ``fn`` on a thread ``threading`` does not know; the event is set when it returns."""
    done = threading.Event()

    def run() -> None:
        try:
            fn()
        finally:
            done.set()

    _thread.start_new_thread(run, ())
    return done


def test_exit_waits_for_a_thread_inside_call_soon_threadsafe() -> None:
    loop = _SlowWakeUp()
    try:
        started = threading.Event()

        def hand_over() -> None:
            started.set()
            loop.call_soon_threadsafe(lambda: None)

        done = _foreign(hand_over)
        assert started.wait(5)
        time.sleep(0.05)  # inside the slow wake-up by now
        _let_native_threads_leave(limit=5)
        assert done.is_set(), "the handler returned while the thread was still in call_soon_threadsafe"
    finally:
        loop.close()


def test_exit_does_not_wait_for_a_foreign_thread_idling_in_python() -> None:
    stop = threading.Event()
    done = _foreign(lambda: stop.wait(30))
    try:
        time.sleep(0.05)
        t0 = time.monotonic()
        _let_native_threads_leave(limit=5)
        assert time.monotonic() - t0 < 1, "the handler waited for a thread that hands nothing to a loop"
    finally:
        stop.set()
        assert done.wait(5)
