"""sqlite:// across processes: 2 producers, 3 consumers, one killed with SIGKILL mid-handler."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from portable.messaging import open_subscription

ROOT = Path(__file__).resolve().parents[2]
TOTAL = 5000


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.messaging.sqlite_worker", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _wait_until(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    until = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > until:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow
def test_no_message_is_lost_when_a_consumer_is_killed_mid_handler(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'q.db'}?name=work"
    marker = tmp_path / "hanging"
    outs = [tmp_path / f"consumer-{i}.txt" for i in range(3)]
    started = time.monotonic()
    procs: list[subprocess.Popen[str]] = []
    try:
        consumers = [
            _spawn("consume", url, str(outs[0]), "--hang-after", "300", "--marker", str(marker)),
            _spawn("consume", url, str(outs[1])),
            _spawn("consume", url, str(outs[2])),
        ]
        producers = [_spawn("produce", url, "0", str(TOTAL // 2)), _spawn("produce", url, str(TOTAL // 2), str(TOTAL))]
        procs = consumers + producers

        _wait_until(marker.exists, 45, "consumer 0 to hang inside a handler")
        hung_id = marker.read_text()
        consumers[0].send_signal(signal.SIGKILL)
        assert consumers[0].wait(10) == -signal.SIGKILL

        for p in producers:
            assert p.wait(45) == 0, p.stderr.read() if p.stderr else ""

        sub = open_subscription(url)

        def drained() -> bool:
            s = sub.stats()
            return (s.available, s.in_flight, s.delayed) == (0, 0, 0)

        _wait_until(drained, 45, "the queue to drain")
        assert sub.stats().dead_letters == 0
        for p in consumers[1:]:
            p.send_signal(signal.SIGTERM)
        stats = []
        for p in consumers[1:]:
            out, err = p.communicate(timeout=20)
            assert p.returncode == 0, err
            stats.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)

    handled = [line for path in outs if path.exists() for line in path.read_text().split()]
    assert set(handled) == {str(i) for i in range(TOTAL)}, "some message ids were never handled"
    assert hung_id in set(outs[1].read_text().split()) | set(outs[2].read_text().split())
    assert sum(s["acked"] for s in stats) + len(outs[0].read_text().split()) >= TOTAL
    assert all(s["unfinished"] == 0 for s in stats)
    assert time.monotonic() - started < 60
