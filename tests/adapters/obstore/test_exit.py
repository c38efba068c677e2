"""The obstore engine's exit handler: the interpreter does not finalize under a thread it did not start.

``portable rm -r s3://...?engine=obstore`` exited with SIGABRT or SIGBUS in 5 of 60 runs on a
loaded machine (and once in a fresh-clone CI run): an obstore Tokio thread that had just handed a
bulk delete's result to the private event loop was still inside ``call_soon_threadsafe`` when the
interpreter finalized, and CPython's ``pthread_exit`` of that thread unwound through Rust frames
(gdb of the core: ``set_result`` -> ``sock_send`` -> ``take_gil`` -> ``pthread_exit`` -> ``abort``).
After the fix: 60 of 60 runs exited 0 under the same load. The handler waits until no thread
Python did not start is running Python code; a ``_thread`` thread is one such (``threading`` does
not know it), as a Tokio thread holding the GIL is.
"""

from __future__ import annotations

import _thread
import threading
import time

from portable_obstore._common import _let_native_threads_leave


def test_exit_waits_for_a_thread_python_did_not_start_to_leave_python_code() -> None:
    done = threading.Event()
    started = threading.Event()

    def foreign() -> None:  # runs Python code for 0.3 s, like a Tokio thread in set_result
        started.set()
        until = time.monotonic() + 0.3
        while time.monotonic() < until:
            time.sleep(0.01)
        done.set()

    _thread.start_new_thread(foreign, ())
    assert started.wait(5)
    _let_native_threads_leave(limit=5)
    assert done.is_set(), "the handler returned while the foreign thread still ran Python code"


def test_exit_does_not_wait_for_the_threads_python_started() -> None:
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, daemon=True)
    worker.start()
    try:
        t0 = time.monotonic()
        _let_native_threads_leave(limit=5)
        assert time.monotonic() - t0 < 1
    finally:
        stop.set()
        worker.join()
