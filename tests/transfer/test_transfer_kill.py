"""``portable sync`` SIGKILLed at random points, 20 times, while it moves 2,000 objects of mixed sizes
(1 KiB to 40 MiB) along a chain of three pairs: file:// -> S3 (moto), S3 -> Azure (Azurite), Azure ->
GCS (fake-gcs-server); each pair's destination is the next pair's source.

For each pair, runs of :data:`SYNC_COMMAND` are killed (SIGKILL) at random moments until the pair's
share of the kills is spent, then one run goes to the end and must exit 0. Meanwhile a lister polls
the destination. At the end of each pair:

* the destination holds every key at its size, and a dry-run sync finds nothing to copy; at the
  end of the chain, every object of the last destination matches the first source by SHA-256
  (read), content type and metadata (so every pair on the way kept them);
* no partial object was ever listed (the lister saw only the source's sizes);
* none was committed twice: an object once listed keeps its etag and modified time through every
  later run (checked by the lister on every listing and after each run); on S3, where a rewrite of
  the same bytes keeps the MD5 etag, the destination bucket is versioned and every key has exactly
  one version.

No exception is allowed: moto runs with its own etag race fixed (``tests/emulators/moto_run.py``;
:func:`test_moto_s_etag_race_is_fixed_in_the_server_the_tests_run`), which made a first copy look
wrong to the copier's check, so that it was copied again.

The command is the only thing the test knows of the process it kills (it reads only its exit code),
which is ``portable sync`` (:data:`SYNC_COMMAND`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from portable.storage import Bucket, open_bucket
from portable.transfer import sync

from .conftest import Place, child_env
from .test_transfer_embedded import body

ROOT = Path(__file__).resolve().parents[2]

#: What is killed: the ``portable sync`` command (the CLI, as a user runs it), with ``SRC`` and ``DST``
#: filled in; it exits 0 when every object is in place. ``--quiet``: no summary line to read.
SYNC_COMMAND = [sys.executable, "-m", "portable", "sync", "{src}", "{dst}", "--quiet"]

N = 2000
#: The kills of each pair of the chain (20 in all).
KILLS = (7, 7, 6)
#: Seconds between two listings of the lister.
PAUSE = 0.1
#: One listing in this many is of the whole destination (the others start at the first key not yet seen).
FULL_EVERY = 25
MiB = 1024 * 1024


def sizes() -> list[int]:
    """2,000 sizes, mostly small, a few large: about 160 MiB, one object of exactly 40 MiB."""
    rng = random.Random(19)
    out = [int(1024 * 64 ** rng.random()) for _ in range(1950)]            # 1 KiB .. 64 KiB
    out += [int(256 * 1024 * 16 ** rng.random()) for _ in range(44)]       # 256 KiB .. 4 MiB
    out += [40 * MiB, 16 * MiB, 10 * MiB + 1, 8 * MiB, 5 * MiB, 5 * MiB + 1]  # across part boundaries
    rng.shuffle(out)
    return out


def key_of(i: int) -> str:
    return f"k/{i:04d}"


def seed(bucket: Bucket) -> dict[str, tuple[int, bytes]]:
    """Fill the first source; return each key's size and SHA-256."""
    want = {}
    for i, size in enumerate(sizes()):
        data = body(i, size)
        bucket.put(key_of(i), data, content_type="application/x-kill", metadata={"n": str(i)})
        want[key_of(i)] = (size, hashlib.sha256(data).digest())
    return want


Stamp = tuple[str | None, dt.datetime | None]
Rewrite = tuple[str, Stamp, Stamp]

class Lister(threading.Thread):
    """Lists the destination over and over: records listed objects whose size is not the source's, and
    objects whose etag or modified time changed after they were first listed (a second commit).

    The sync copies in key order, so what it commits next is at or after the first key not yet seen:
    most listings start there (``start_after``), which keeps up with the copy however many objects
    are already in; every :data:`FULL_EVERY`-th listing, and every :meth:`look`, is of everything.
    """

    def __init__(self, dst: Bucket, want: dict[str, tuple[int, bytes]]) -> None:
        super().__init__(daemon=True)
        self.dst, self.want = dst, want
        self.order = sorted(want)
        self.stop = threading.Event()
        self.partial: list[tuple[str, int]] = []
        self.rewritten: list[tuple[str, Stamp, Stamp]] = []
        self.first: dict[str, Stamp] = {}
        self.frontier = 0  # index in ``order`` of the first key not yet seen
        self.listings = 0
        self._lock = threading.Lock()

    @property
    def committed(self) -> int:
        """How many objects have been listed (none is ever deleted, so: how many are committed)."""
        return len(self.first)

    def look(self, tail: bool = False) -> int:
        """One listing (of everything, or from the frontier on), checked; return :attr:`committed`."""
        start = self.order[self.frontier - 1] if tail and self.frontier else None
        for info in self.dst.list(start_after=start):
            if info.size != self.want.get(info.key, (-1,))[0]:
                self.partial.append((info.key, info.size))
            stamp = (info.etag, info.modified)
            with self._lock:
                seen = self.first.setdefault(info.key, stamp)
            if seen != stamp:
                self.rewritten.append((info.key, seen, stamp))
        with self._lock:
            while self.frontier < len(self.order) and self.order[self.frontier] in self.first:
                self.frontier += 1
        self.listings += 1
        return self.committed

    def run(self) -> None:
        while not self.stop.wait(PAUSE):
            self.look(tail=self.listings % FULL_EVERY != 0)


class Chaos:
    """Runs :data:`SYNC_COMMAND` and SIGKILLs it once the lister has seen ``target`` objects committed,
    after a further random delay (so kills land in listing, mid-stream of small and large objects,
    between a commit and its check)."""

    def __init__(self, src_url: str, dst_url: str, env: dict[str, str], log: Path) -> None:
        self.src_url, self.dst_url, self.env, self.log = src_url, dst_url, env, log

    def run(self, kill_when: Callable[[], bool] | None, delay: float) -> int:
        command = [part.format(src=self.src_url, dst=self.dst_url) for part in SYNC_COMMAND]
        with self.log.open("ab") as out:
            proc = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=out, stderr=out)
            try:
                if kill_when is not None:
                    while proc.poll() is None and not kill_when():
                        time.sleep(0.02)
                    time.sleep(delay)
                    if proc.poll() is None:
                        proc.send_signal(signal.SIGKILL)
                return proc.wait(timeout=600)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


def s3_versions(env: dict[str, str], endpoint: str, bucket: str) -> dict[str, int]:
    """Every key's number of versions in a versioned moto bucket."""
    import boto3  # the test's own view of the emulator, not portable's

    client = boto3.client("s3", endpoint_url=endpoint, region_name=env["AWS_DEFAULT_REGION"],
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    counts: dict[str, int] = {}
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
            counts[v["Key"]] = counts.get(v["Key"], 0) + 1
    return counts


def killed_pair(src_url: str, dst_url: str, env: dict[str, str], want: dict[str, tuple[int, bytes]],
                kills: int, log: Path, rng: random.Random) -> dict[str, Any]:
    """Run one pair of the chain: ``kills`` killed runs, then one to the end; check the destination."""
    dst = open_bucket(dst_url)
    lister = Lister(dst, want)
    lister.start()
    chaos = Chaos(src_url, dst_url, env, log)
    codes: list[int] = []
    left: list[int] = []
    try:
        busy = 0.0  # seconds the pair's runs have taken so far
        for kill in range(kills):
            # where the kill lands: the first 0.3-3 s after the start (while the run starts, lists, copies
            # its first objects); each later one once the lister has seen a random share (up to half) of
            # what is left committed, then a further random 0-0.5 s (mid-stream of small and large
            # objects, between a commit and its check); or, if the lister lags behind (a loaded machine,
            # a slow listing), once a random 20-50% of the time the rest should take (at the pair's rate
            # so far) has gone by: either way the run is killed with work left
            base = lister.look()
            left.append(N - base)
            target = base if kill == 0 else base + rng.randint(1, max(1, (N - base) // 2))
            before = lister.listings
            rate = base / busy if busy and base else 0.0
            deadline = time.monotonic() + (rng.uniform(0.2, 0.5) * (N - base) / rate if rate else 1e9)

            def reached(target: int = target, before: int = before, deadline: float = deadline) -> bool:
                return (lister.listings > before and lister.committed >= target) or time.monotonic() > deadline

            started = time.monotonic()
            codes.append(chaos.run(reached, rng.uniform(0.3, 3.0) if kill == 0 else rng.uniform(0.0, 0.5)))
            busy += time.monotonic() - started
            lister.look()  # after each run: nothing rewritten, nothing partial
            assert lister.partial == [] and lister.rewritten == [], (lister.partial[:3], lister.rewritten[:3])
        left.append(N - lister.look())
        codes.append(chaos.run(None, 0.0))
    finally:
        lister.stop.set()
        lister.join(timeout=120)
    lister.look()
    tail = log.read_text(errors="replace")[-3000:]
    assert codes[-1] == 0, f"the last run did not finish the job (exit {codes[-1]}):\n{tail}"
    assert codes[:-1].count(-signal.SIGKILL) == kills, (codes, tail)
    assert all(n > 0 for n in left[:-1]), f"a run was killed with nothing left to copy: {left}"
    assert lister.listings > kills and lister.partial == [], lister.partial[:5]
    assert lister.rewritten == [], lister.rewritten[:5]
    assert {i.key: i.size for i in dst.list()} == {key: size for key, (size, _) in want.items()}
    again = sync(open_bucket(src_url), dst, dry_run=True)
    assert (again.copied, again.failed, again.skipped) == (0, 0, N), again.summary()
    return {"left before each run": left, "listings": lister.listings}


def check_every_object(dst: Bucket, want: dict[str, tuple[int, bytes]]) -> None:
    """Every object of ``dst`` has the first source's SHA-256 (read), content type and metadata."""

    def check(key: str) -> None:
        info = dst.head(key)
        assert (info.size, info.content_type, dict(info.metadata)) == (
            want[key][0], "application/x-kill", {"n": str(int(key[2:]))}), key
        digest = hashlib.sha256()
        with dst.open(key, "rb") as reader:
            while chunk := reader.read(1 << 20):
                digest.update(chunk)
        assert digest.digest() == want[key][1], key

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(check, sorted(want)))


@pytest.fixture
def versioned_s3(moto_server: Any, s3_place: Place) -> tuple[str, str]:
    """A versioned bucket on moto (its URL template, and its name)."""
    import boto3

    env = s3_place.env
    endpoint = moto_server.endpoints["endpoint_url"]
    client = boto3.client("s3", endpoint_url=endpoint, region_name=env["AWS_DEFAULT_REGION"],
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    name = f"ptrv-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return s3_place.template.replace(s3_place.template.split("/")[2], name, 1), name


@pytest.mark.timeout(1500)  # 6 min on a 2-core machine at load 16; 15 min at load 20-26 beside a benchmark
def test_sync_killed_20_times_along_file_s3_azure_gcs(
    tmp_path: Path, moto_server: Any, s3_place: Place, az_place: Place, gs_place: Place,
    versioned_s3: tuple[str, str],
) -> None:
    rng = random.Random(uuid.uuid4().int)
    file_url = f"file://{tmp_path / 'src'}"
    want = seed(open_bucket(file_url))
    assert sum(size for size, _ in want.values()) > 150 * MiB
    run = uuid.uuid4().hex[:8]
    template, s3_bucket = versioned_s3
    s3_url = template.format(prefix=run)
    az_url, gs_url = az_place.url(run), gs_place.url(run)
    env = child_env(s3_place, az_place, gs_place)
    started = time.monotonic()
    seen = []
    for (src_url, dst_url), kills in zip([(file_url, s3_url), (s3_url, az_url), (az_url, gs_url)], KILLS,
                                         strict=True):
        pair_started = time.monotonic()
        seen.append(killed_pair(src_url, dst_url, env, want, kills, tmp_path / "sync.log", rng))
        seen[-1]["seconds"] = round(time.monotonic() - pair_started)
        if dst_url == s3_url:  # a rewrite of the same bytes keeps S3's etag: its versions tell
            versions = s3_versions(env, moto_server.endpoints["endpoint_url"], s3_bucket)
            assert len(versions) == N and all(c == 1 for c in versions.values()), (
                [(k, c) for k, c in versions.items() if c != 1][:5])
    # each pair copied what its source held, so the last destination holding the first source's bytes
    # and metadata shows that every pair kept them (an object changed on the way would be changed here)
    check_every_object(open_bucket(gs_url), want)
    print(f"kill chain: {seen}, {time.monotonic() - started:.0f} s in all")  # -s shows it


def test_the_lister_would_see_a_partial_object_and_a_rewrite(tmp_path: Path) -> None:
    dst = open_bucket(f"file://{tmp_path / 'd'}")
    dst.put("k/0000", b"short")
    lister = Lister(dst, {"k/0000": (100, b"")})
    lister.look()
    assert lister.partial == [("k/0000", 5)] and lister.rewritten == []
    time.sleep(1.1)  # file:// times have sub-second resolution; this is a margin
    dst.put("k/0000", b"x" * 100)
    lister.look()
    assert [key for key, _, _ in lister.rewritten] == ["k/0000"]


def test_moto_s_etag_race_is_fixed_in_the_server_the_tests_run() -> None:
    """moto's ``FakeKey.etag`` races: two threads asking one new key for its etag at once (a PUT's
    reply and a listing) can get a wrong MD5, and the key caches it. Shown on moto's model class
    itself, no portable code involved; and not with the fix the tests' moto server runs
    (``tests/emulators/moto_run.py``). If a moto release fixes it, the first half fails: drop the fix."""
    from moto.s3.models import FakeKey

    from tests.emulators.moto_run import _etag

    data = body(217, 40 * MiB)
    want = f'"{hashlib.md5(data).hexdigest()}"'

    def wrong_etags(etag_of: Callable[[Any], str]) -> int:
        wrong = 0
        for _ in range(10):
            key = FakeKey("k", data, account_id="123456789012", region_name="us-east-1")
            got: list[str] = []
            threads = [threading.Thread(target=lambda k=key, g=got: g.append(etag_of(k))) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wrong += any(etag != want for etag in got) or etag_of(key) != want
        return wrong

    assert wrong_etags(lambda k: k.etag) > 0, "moto computed every etag right under concurrent asks: its race may be fixed"
    assert wrong_etags(_etag) == 0, "with the key's lock, every etag is the MD5"
