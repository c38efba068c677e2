"""Processes sharing a store: a race executes once, a claimer killed -9 is taken over, payloads conflict.

Each test runs on every store that processes can share: sqlite, a file bucket and redis.
(The memory store lives in one process; the contract tests race threads on it and
expire a crashed claimer's lease with a fake clock.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from portable.errors import IdempotencyConflict
from portable.idempotency import fingerprint, open_store

SHARED = ["sqlite", "file-bucket", "redis"]

WORKER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from portable.idempotency import open_store, run_once, fingerprint

    url, key, payload, effects, go, lease, hang = sys.argv[1:8]
    store = open_store(url)
    while not Path(go).exists():          # start together
        time.sleep(0.001)

    def effect():
        with open(effects, "a") as fh:    # O_APPEND: one line per execution
            fh.write(f"{os.getpid()}\\n")
        print("claimed", flush=True)
        if hang == "1":
            time.sleep(3600)              # killed -9 here
        time.sleep(0.2)                   # keep the claim held while the other racer arrives
        return {"by": os.getpid()}

    result = run_once(store, key, fingerprint(payload.encode()), effect, lease=float(lease), ttl=600, wait=30)
    print("result", result["by"], flush=True)
    """
)


def store_url(name: str, tmp_path: Path, request: pytest.FixtureRequest, unique_name: str) -> str:
    if name == "sqlite":
        return f"sqlite://{tmp_path}/idem.db"
    if name == "file-bucket":
        return f"file://{tmp_path}/records"
    info = request.getfixturevalue("redis_server")
    return f"{info.endpoints['url']}?prefix={unique_name}:"


@pytest.fixture(params=SHARED)
def url(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> str:
    return store_url(request.param, tmp_path, request, unique_name)


def spawn(url: str, key: str, payload: str, effects: Path, go: Path, lease: float = 30, hang: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, url, key, payload, str(effects), str(go), str(lease), "1" if hang else "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_two_processes_racing_on_one_key_execute_once(url: str, tmp_path: Path) -> None:
    effects, go = tmp_path / "effects.log", tmp_path / "go"
    procs = [spawn(url, "order-42", "charge 5 EUR", effects, go) for _ in range(2)]
    time.sleep(0.3)  # let both import and wait at the start line; correctness does not depend on it
    go.touch()
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    lines = effects.read_text().splitlines()
    assert len(lines) == 1, f"the effect ran {len(lines)} times"
    results = {line.split()[1] for out, _ in outs for line in out.splitlines() if line.startswith("result")}
    assert results == {lines[0]}, "both callers must return the one execution's result"


def test_a_claimer_killed_with_sigkill_is_taken_over_after_its_lease(url: str, tmp_path: Path) -> None:
    effects, go = tmp_path / "effects.log", tmp_path / "go"
    go.touch()
    lease = 4.0  # long enough that a loaded machine still sees the claim in progress first
    victim = spawn(url, "job-7", "payload", effects, go, lease=lease, hang=True)
    assert victim.stdout is not None
    assert victim.stdout.readline().strip() == "claimed"
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=10)
    store = open_store(url)
    fp = fingerprint(b"payload")
    assert store.claim("job-7", fp, lease=lease, ttl=600).status == "in_progress"
    limit = time.monotonic() + lease + 10
    while (claim := store.claim("job-7", fp, lease=lease, ttl=600)).status != "acquired":
        assert claim.status == "in_progress"
        assert time.monotonic() < limit, "the dead claimer's lease never expired"
        time.sleep(0.05)
    assert claim.token
    store.complete("job-7", claim.token, b"done by the successor")
    assert store.claim("job-7", fp, lease=lease, ttl=600).result == b"done by the successor"


def test_a_different_payload_from_another_process_is_a_conflict(url: str, tmp_path: Path) -> None:
    effects, go = tmp_path / "effects.log", tmp_path / "go"
    go.touch()
    first = spawn(url, "refund-9", "refund 10 EUR", effects, go)
    _out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    with pytest.raises(IdempotencyConflict):
        open_store(url).claim("refund-9", fingerprint(b"refund 99 EUR"), lease=5, ttl=600)
    assert len(effects.read_text().splitlines()) == 1




def test_openers_switching_one_new_sqlite_database_to_wal_together_all_succeed(tmp_path: Path) -> None:
    """Both sqlite stores (idempotency, queue) switch a new database to WAL when they open it.
    SQLite answers 'database is locked' at once, without its busy handler, to a second connection
    changing the journal mode meanwhile (two processes opening a new database; seen in CI). With
    a bare ``PRAGMA journal_mode=WAL`` about one race in five here fails; none may."""
    import sqlite3
    import threading

    from portable._sqlite_tools import enable_wal

    for attempt in range(40):
        path = tmp_path / f"db{attempt}.sqlite"
        conns = [sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False) for _ in range(8)]
        start, errors = threading.Barrier(len(conns)), []

        def switch(conn: sqlite3.Connection, start: threading.Barrier = start, errors: list[BaseException] = errors) -> None:
            start.wait()
            try:
                enable_wal(conn, 30.0)
                conn.execute("CREATE TABLE IF NOT EXISTS t (a)")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=switch, args=(c,)) for c in conns]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], f"attempt {attempt}: {errors!r}"
        assert conns[0].execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        for c in conns:
            c.close()
