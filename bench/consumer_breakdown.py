"""Where `Subscription.run` + SqliteStore loses against the raw loop with a plain dedup table (sqlite://).

    .venv/bin/python bench/consumer_breakdown.py [--messages 20000] [--rounds 8] [--dir /dev/shm]

Issue 22, Done-when 2, taken apart. On the sqlite:// queue of bench/consumer_bench.py (same
messages, same raw loop as the baseline), loops that add portable's pieces one at a time, each
round run side by side with the raw loop (paired per-round ratios, their median and range):

1. the raw loop calling ``SqliteStore.claim_many`` / ``complete_many`` itself, in windows of 256,
   with the body's fingerprint (what the store and the fingerprint cost);
2. the same loop through portable's pieces: ``Subscription.receive`` and the batched ack
   (``Subscription._ack_each``), ``RunClaims.claim_window``, ``hold_window``, ``complete_batch``
   (what the claim bookkeeping costs);
3. loop 2 on a thread of its own, the caller waiting (what the batch worker's thread costs);
4. ``Subscription.run`` itself (the rest: holding, stop checks, batches that grow from 8).

``--dir /dev/shm`` keeps the queue and the tables off the disk, so that a WAL checkpoint's fsync
does not land in one contestant's round (the durability settings are unchanged). Results go to
bench/results/consumer_breakdown.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import consumer_bench as cb
from _common import summarise, write

import portable.messaging as pm
from portable.idempotency import SqliteStore
from portable.messaging._claims import RunClaims, SharedClaim, default_idempotency_key
from portable.messaging._consumer import CLAIM_WINDOW
from portable.messaging._window import hold_window

RAW = "raw driver loop + dedup table"
NAMES = (
    "1. raw loop + SqliteStore's batch calls + fingerprint",
    "2. + portable's receive, ack and claim bookkeeping",
    "3. + its own thread",
    "4. portable Subscription.run + SqliteStore",
)


def store_loop(bench: cb.SqliteQueueBench, pieces: bool) -> float:
    """Loop 1 (``pieces`` False) or loop 2: messages per second."""
    url = bench.fill()
    sub = pm.open_subscription(url)
    side = sub._driver_sub  # type: ignore[attr-defined]
    store = SqliteStore(f"{bench.dir}/idem-b{int(pieces)}-{bench.round}.db")
    claims = RunClaims(store, default_idempotency_key, lease=cb.LEASE, ttl=86400.0)
    held = types.SimpleNamespace(completes=[], acks=[], stats=types.SimpleNamespace(acked=0))
    got = 0
    t0 = time.perf_counter()
    while got < bench.n:
        batch = sub.receive(1000, 0.05, lease=cb.LEASE) if pieces else side.receive(1000, 0.05, cb.LEASE)
        for start in range(0, len(batch), CLAIM_WINDOW):
            window = batch[start : start + CLAIM_WINDOW]
            if pieces:
                assert isinstance(claims.claim_window(window), SharedClaim)
                for message in window:
                    got += cb.handler(message)
                hold_window(held, claims, window, {})
                claims.complete_batch(held.completes)
                held.completes = []
            else:
                got += cb.store_window(store, window)
        if not batch:
            continue
        if pieces:
            assert not any(sub._ack_each(batch))
        else:
            side.ack_many([m.handle for m in batch])
    spent = time.perf_counter() - t0
    sub.close()
    return bench.n / spent


def on_a_thread(fn: Callable[[], float]) -> float:
    """``fn`` on a thread of its own while this one waits, as ``Subscription.run``'s caller does."""
    out: list[float] = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    wake = threading.Event()
    while worker.is_alive():
        wake.wait(0.1)
    return out[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--dir", help="where the queue and the tables go (default: the system's temporary folder)")
    args = parser.parse_args()
    if args.dir:
        tempfile.tempdir = args.dir
    bench = cb.SqliteQueueBench(args.messages)
    contestants: dict[str, Callable[[], float]] = {
        RAW: bench.raw,
        NAMES[0]: lambda: store_loop(bench, False),
        NAMES[1]: lambda: store_loop(bench, True),
        NAMES[2]: lambda: on_a_thread(lambda: store_loop(bench, True)),
        NAMES[3]: bench.portable,
    }
    for fn in contestants.values():  # warm: imports, first files
        fn()
    load_before = os.getloadavg()
    rates = cb.interleaved(contestants, args.rounds)
    section = f"sqlite:// queue, {args.messages} messages, messages per second ({args.dir or 'temporary folder'})"
    write("consumer_breakdown", {section: summarise(rates, RAW, paired=True)}, {
        "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    })  # fmt: skip


if __name__ == "__main__":
    main()
