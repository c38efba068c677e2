"""Fixtures for the local:// launcher tests: a state folder per test, its supervisor stopped after."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from portable.embedded.localjobs import LocalLauncher


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie still answers kill(0); it is gone for our purpose
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Iterator[Path]:
    """A fresh local:// state folder; whatever supervisor it got is stopped after the test."""
    root = tmp_path / "jobs"
    root.mkdir()
    yield root
    stop_supervisor(root)


def stop_supervisor(root: Path) -> None:
    driver = LocalLauncher(root)
    pid = driver.stop_supervisor(grace=0.2, timeout=30)
    if pid is not None:
        end = time.monotonic() + 10
        while not process_gone(pid) and time.monotonic() < end:
            time.sleep(0.01)
        assert process_gone(pid), f"supervisor {pid} still alive"
