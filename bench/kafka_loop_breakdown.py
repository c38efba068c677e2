"""Where `Subscription.run` + SqliteStore loses against the raw loop on Kafka, from the first message on.

    .venv/bin/python bench/kafka_loop_breakdown.py [--messages 100000] [--rounds 10] [--bootstrap HOST:PORT] [--dir /dev/shm]

Issue 22, Done-when 2, on Kafka (the confluent engine) taken apart. Each round publishes a
fresh topic of keyed messages (bench/consumer_bench.py's), and each contestant reads all of it
in a consumer group of its own, timed from its first message on (the group join left out),
side by side with the raw loop of bench/consumer_bench.py (confluent ``Consumer.consume(1000)``
and a hand-written sqlite dedup table):

1. the raw loop without the table (what librdkafka's consume and reading the key header cost);
2. the engine's own receive and ``ack_many`` (driver calls, batches of 1,000), no table;
3. loop 2 with the raw loop's plain table;
4. loop 2 with ``SqliteStore.claim_many`` / ``complete_many`` in windows of 256, one fixed
   fingerprint for all (what the store costs);
5. loop 4 with each body's SHA-256 fingerprint (what the fingerprint costs);
6. ``Subscription.run`` as shipped (batches grow to the driver's ``loop_batch``, 256 on Kafka);
7. ``Subscription.run`` with batches of up to 1,000 (``loop_batch`` before it was set).

Beside each: the cycle collector's time a message while it ran (``gc.callbacks``). Results go to
bench/results/kafka_loop_breakdown.{json,md}.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import consumer_bench as cb
from _common import start_broker, summarise, write

import portable.messaging as pm
from portable.driver.messaging import IDEMPOTENCY_ATTRIBUTE
from portable.idempotency import SqliteStore
from portable.messaging._consumer import CLAIM_WINDOW

RAW = "raw confluent Consumer + dedup table"
NAMES = (
    "1. raw loop without the table",
    "2. engine receive + ack_many, no table",
    "3. loop 2 + the plain table",
    "4. loop 2 + SqliteStore windows, one fixed fingerprint",
    "5. loop 4 + SHA-256 fingerprints",
    "6. Subscription.run (batches up to loop_batch, 256)",
    "7. Subscription.run, batches up to 1,000",
)
FIXED = "0123456789abcdef0123456789abcdef"


class Collections:
    """The cycle collector's time while a contestant runs (gc.callbacks)."""

    def __init__(self) -> None:
        self.spent = 0.0
        self._started = 0.0
        gc.callbacks.append(self._on)

    def _on(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.spent += time.perf_counter() - self._started


def raw_without_table(kb: cb.KafkaBench) -> float:
    """Loop 1: bench/consumer_bench.py's raw loop with no dedup table."""
    kb.raw(table=False)
    return kb.steady["raw-none"][-1]


def engine_loop(kb: cb.KafkaBench, table: str | None, fingerprint: bool = True) -> float:
    """Loops 2-5: the engine's receive(1000) and ack_many, with ``table`` None, "plain" or "store"."""
    sub = pm.open_subscription(f"kafka://{kb.bootstrap}/{kb.topic}?engine=confluent&group=g-{uuid.uuid4().hex[:8]}&session_timeout_ms=6000")
    side = sub._driver_sub  # type: ignore[attr-defined]
    store = SqliteStore(f"{kb.dir}/idem-s{uuid.uuid4().hex[:6]}.db") if table == "store" else None
    plain = cb.RawDedup(f"{kb.dir}/idem-t{uuid.uuid4().hex[:6]}.db") if table == "plain" else None
    got, first = 0, 0.0
    while got < kb.n:
        batch = side.receive(1000, 0.5, cb.LEASE)
        if not batch:
            continue
        if not got:
            first = time.perf_counter()
        if store is not None:
            for start in range(0, len(batch), CLAIM_WINDOW):
                got += cb.store_window(store, batch[start : start + CLAIM_WINDOW], None if fingerprint else FIXED)
        elif plain is not None:
            keys = [m._attributes[IDEMPOTENCY_ATTRIBUTE] for m in batch]
            take = plain.claim(keys, [])
            for message, mine in zip(batch, take, strict=True):
                if mine:
                    got += cb.handler(message)
            plain.done([k for k, t in zip(keys, take, strict=True) if t])
        else:
            for message in batch:
                got += cb.handler(message)
        side.ack_many([m._handle for m in batch])
    end = time.perf_counter()
    sub.close()
    return kb.n / (end - first)


def run_loop(kb: cb.KafkaBench, batch: int | None) -> float:
    """Subscription.run from its first message on; ``batch`` sets the engine's loop_batch for the call."""
    from portable_kafka._receive import LocalLeases

    shipped = LocalLeases.loop_batch
    if batch is not None:
        LocalLeases.loop_batch = batch
    try:
        kb.portable()
    finally:
        LocalLeases.loop_batch = shipped
    return kb.steady["portable"][-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--bootstrap", help="a running Kafka (default: start Apache Kafka from tests/emulators)")
    parser.add_argument("--dir", help="where the tables go (default: the system's temporary folder)")
    args = parser.parse_args()
    if args.dir:
        tempfile.tempdir = args.dir
    bootstrap, broker = (args.bootstrap, None) if args.bootstrap else start_broker()
    try:
        kb = cb.KafkaBench(bootstrap, args.messages)

        def raw() -> float:
            kb.raw()
            return kb.steady["raw"][-1]

        contestants: dict[str, Callable[[], float]] = {
            RAW: raw,
            NAMES[0]: lambda: raw_without_table(kb),
            NAMES[1]: lambda: engine_loop(kb, None),
            NAMES[2]: lambda: engine_loop(kb, "plain"),
            NAMES[3]: lambda: engine_loop(kb, "store", fingerprint=False),
            NAMES[4]: lambda: engine_loop(kb, "store"),
            NAMES[5]: lambda: run_loop(kb, None),
            NAMES[6]: lambda: run_loop(kb, 1000),
        }
        collections = Collections()
        load_before = os.getloadavg()
        rates: dict[str, list[float]] = {name: [] for name in contestants}
        gc_us: dict[str, list[float]] = {name: [] for name in contestants}
        for r in range(args.rounds):
            kb.fill()
            for name, fn in contestants.items():
                collections.spent = 0.0
                rates[name].append(fn())
                gc_us[name].append(collections.spent / kb.n * 1e6)
            print(f"round {r + 1}: " + ", ".join(f"{name[:2]} {1e6 / v[-1]:.2f} us" for name, v in rates.items()), flush=True)
    finally:
        if broker is not None:
            broker.stop()
    rows = summarise(rates, RAW, paired=True)
    for row in rows:
        row["gc_us_per_msg_median"] = round(statistics.median(gc_us[row["contestant"]]), 2)
    section = f"kafka://?engine=confluent, {args.messages} messages, messages per second from the first message on ({args.dir or 'temporary folder'})"
    write("kafka_loop_breakdown", {section: rows}, {
        "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(), "rounds": args.rounds,
    })  # fmt: skip


if __name__ == "__main__":
    main()
