"""``sync`` killed with SIGKILL at random points, then run again: each rerun copies only the rest,
no object is copied (committed) twice, and no partial object is ever listed at the destination.

Three pairs: file:// -> S3 (moto), S3 -> Azure (Azurite), Azure -> GCS (fake-gcs-server).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from portable.storage import Bucket, open_bucket

from .conftest import Place, child_env
from .test_transfer_embedded import body

ROOT = Path(__file__).resolve().parents[2]
N = 40
KILLS = 3


def sizes() -> list[int]:
    rng = random.Random(19)
    return [rng.choice((1024, 4096, 60_000, 700_000, 3 * 1024 * 1024)) for _ in range(N)]


def seed(bucket: Bucket) -> dict[str, bytes]:
    data = {f"k/{i:03d}": body(i, size) for i, size in enumerate(sizes())}
    for key, value in data.items():
        bucket.put(key, value, content_type="application/x-kill", metadata={"key": key.replace("/", "-")})
    return data


class Watcher(threading.Thread):
    """Lists the destination over and over; records every listed object whose size is not the source's."""

    def __init__(self, dst: Bucket, want: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.dst, self.want = dst, want
        self.stop = threading.Event()
        self.partial: list[tuple[str, int]] = []
        self.listings = 0

    def run(self) -> None:
        while not self.stop.is_set():
            for info in self.dst.list():
                if info.size != self.want.get(info.key, -1):
                    self.partial.append((info.key, info.size))
            self.listings += 1


def run_killed(src_url: str, dst_url: str, env: dict[str, str], rng: random.Random,
               kill_after: int | None, late: float = 0.4) -> list[dict[str, object]]:
    """Run the worker; SIGKILL it a random moment (up to ``late`` s) after its ``kill_after``-th finished
    object. Return its lines."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.transfer.sync_worker", src_url, dst_url],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    lines: list[dict[str, object]] = []
    first = proc.stdout.readline()
    assert first, proc.stderr.read() if proc.stderr else ""
    timer: threading.Timer | None = None

    def arm() -> threading.Timer:
        t = threading.Timer(rng.uniform(0.0, late), proc.send_signal, (signal.SIGKILL,))
        t.start()
        return t

    if kill_after == 0:
        timer = arm()
    for line in proc.stdout:
        lines.append(json.loads(line))
        if kill_after and timer is None and sum(1 for x in lines if "key" in x) >= kill_after:
            timer = arm()
    proc.wait(timeout=300)
    if timer is not None:
        timer.cancel()
    if proc.returncode not in (0, -signal.SIGKILL):
        pytest.fail(f"sync worker exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
    return lines


def kill_and_rerun(src: Bucket, dst: Bucket, src_url: str, dst_url: str, env: dict[str, str]) -> None:
    data = seed(src)
    watcher = Watcher(dst, {k: len(v) for k, v in data.items()})
    watcher.start()
    rng = random.Random(uuid.uuid4().int)
    copied: Counter[str] = Counter()
    killed = 0
    try:
        for attempt in range(KILLS + 1):
            left = N - len(copied)
            kill_after = rng.randint(1 if attempt == 0 else 0, max(1, left // 2)) if attempt < KILLS else None
            # the first kill comes at once: at least half the objects are still to go, so however fast
            # a machine copies, one run is surely killed mid-way; later kills land anywhere
            lines = run_killed(src_url, dst_url, env, rng, kill_after, late=0.0 if attempt == 0 else 0.4)
            copied.update(str(x["key"]) for x in lines if x.get("status") == "copied")
            done = [x for x in lines if x.get("done")]
            if not done:
                killed += 1
            else:
                assert done[0]["failed"] == 0
                if attempt < KILLS:
                    continue
        assert done, "the last run did not finish"
    finally:
        watcher.stop.set()
        watcher.join(timeout=60)
    assert killed >= 1, "no run was killed before it finished: the test proved nothing"
    assert watcher.listings > 0 and watcher.partial == []
    assert max(copied.values(), default=0) == 1, [k for k, c in copied.items() if c > 1]
    assert sorted(i.key for i in dst.list()) == sorted(data)
    for key, value in data.items():
        assert dst.get(key) == value
        assert dst.head(key).metadata == {"key": key.replace("/", "-")}
        assert dst.head(key).content_type == "application/x-kill"


def test_killed_sync_file_to_s3(tmp_path: Path, s3_place: Place) -> None:
    src_url = f"file://{tmp_path / 'src'}"
    dst_url = s3_place.url(uuid.uuid4().hex[:8])
    kill_and_rerun(open_bucket(src_url), open_bucket(dst_url), src_url, dst_url, child_env(s3_place))


def test_killed_sync_s3_to_azure(s3_place: Place, az_place: Place) -> None:
    src_url, dst_url = s3_place.url(uuid.uuid4().hex[:8]), az_place.url(uuid.uuid4().hex[:8])
    kill_and_rerun(open_bucket(src_url), open_bucket(dst_url), src_url, dst_url, child_env(s3_place, az_place))


def test_killed_sync_azure_to_gcs(az_place: Place, gs_place: Place) -> None:
    src_url, dst_url = az_place.url(uuid.uuid4().hex[:8]), gs_place.url(uuid.uuid4().hex[:8])
    kill_and_rerun(open_bucket(src_url), open_bucket(dst_url), src_url, dst_url, child_env(az_place, gs_place))


def test_the_watcher_would_see_a_partial_object(tmp_path: Path) -> None:
    dst = open_bucket(f"file://{tmp_path / 'd'}")
    dst.put("k/000", b"short")
    watcher = Watcher(dst, {"k/000": 100})
    watcher.start()
    time.sleep(0.2)
    watcher.stop.set()
    watcher.join()
    assert ("k/000", 5) in watcher.partial
