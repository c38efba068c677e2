"""The default batch methods of a storage driver: where the per-object calls run.

A driver that does not implement ``get_many`` / ``put_many`` / ``delete_many``
/ ``copy_many`` itself gets the base class's: its single-object calls on a
few worker threads (``portable.driver.fanout``), each in a copy of the
caller's context; on a driver that declares ``never_blocks``, one loop on the
calling thread. The drivers here are the real file:// and mem:// drivers,
recording the thread and deadline of each call.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from portable.embedded.file import FileStorage
from portable.embedded.memory import MemoryStorage
from portable.errors import NotFound
from portable.resilience import deadline, remaining
from portable.storage import Bucket


def recording(base: type[Any]) -> type[Any]:
    class Recording(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.seen: list[tuple[int, float | None]] = []
            self.seen_lock = threading.Lock()

        def get(self, key: str) -> bytes:
            with self.seen_lock:
                self.seen.append((threading.get_ident(), remaining()))
            time.sleep(0.002)
            return super().get(key)

    return Recording


def test_file_batches_run_on_a_few_worker_threads_in_the_callers_context(tmp_path: Path) -> None:
    driver = recording(FileStorage)(str(tmp_path / "b"))
    bucket = Bucket(driver, url=f"file://{tmp_path / 'b'}")
    items = {f"k/{i:03d}": bytes([i]) * 20 for i in range(120)}
    assert set(bucket.put_many(items)) == set(items)
    with deadline(60):
        assert bucket.get_many(items) == items
    threads = {ident for ident, _ in driver.seen}
    assert 2 <= len(threads) <= driver.batch_concurrency
    assert threading.get_ident() in threads  # the calling thread is one of the workers
    assert all(left is not None and 0 < left <= 60 for _, left in driver.seen)  # the deadline reached each get
    bucket.copy_many({"k/000": "c/000", "k/001": "c/001"})
    assert bucket.get("c/001") == items["k/001"]
    bucket.delete_many([*items, "c/000", "c/001"])
    assert list(bucket.list()) == []


def test_a_failed_object_is_its_own_outcome_in_a_default_batch(tmp_path: Path) -> None:
    bucket = Bucket(FileStorage(str(tmp_path / "b")), url=f"file://{tmp_path / 'b'}")
    bucket.put_many({"a": b"1", "c": b"3"})
    assert bucket.get_many(["a", "b", "c"], missing_ok=True) == {"a": b"1", "c": b"3"}
    with pytest.raises(NotFound, match="b"):
        bucket.get_many(["a", "b", "c"])


def test_a_driver_that_never_blocks_runs_its_batches_on_the_calling_thread() -> None:
    driver = recording(MemoryStorage)("fanout-inline")
    bucket = Bucket(driver, url="mem://fanout-inline")
    items = {f"m/{i}": b"x" * i for i in range(50)}
    bucket.put_many(items)
    assert bucket.get_many(items) == items
    assert {ident for ident, _ in driver.seen} == {threading.get_ident()}
