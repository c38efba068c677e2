"""The sqlite queue against persist-queue's SQLiteAckQueue, and the portable layer's cost per publish.

    .venv/bin/pip install -r bench/requirements-queue.txt     # persist-queue
    .venv/bin/python bench/queue_bench.py [--messages 2000] [--rounds 7] [--calls 20000]

1. Publish throughput: ``Topic.publish_batch`` (batches of 100) on ``sqlite://``
   against ``SQLiteAckQueue.put`` (it has no batch put), plus portable's one-by-one
   ``publish``, each also at ``synchronous=full`` (persist-queue's durability: WAL
   with SQLite's default FULL sync, an fsync per commit; portable's default is
   NORMAL, which survives a killed process but not a power cut).
2. Receive + ack throughput: ``receive(100)`` + ``ack_many`` against
   ``SQLiteAckQueue.get`` + ``ack`` per message (it has no batch get), plus
   portable's one-by-one ``receive(1)`` + ``ack()`` (a lease write and a delete per message),
   also at ``synchronous=full``.
3. Overhead of the portable layer per publish: ``Topic.publish`` on ``mem://``
   against the raw driver's ``publish(OutgoingMessage(...))`` (target <= 5 us),
   timed in alternating 500-call chunks; the overhead is the median of the paired
   differences, so that a busy shared machine slows both sides alike.

Each queue lives on the same local disk, in a fresh folder; every round
publishes N messages of 256 bytes and then drains them, so queues stay small.
Contestants run round-robin in one process; medians and ratios are reported.
Target: the sqlite queue at >= 1.0x persist-queue.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

from _common import summarise, write

from portable.driver.messaging import OutgoingMessage
from portable.embedded.memqueue import MemoryMessaging
from portable.messaging import Subscription, Topic, open_subscription, open_topic

ROOT = Path(__file__).resolve().parents[1]


class PortableSqlite:
    def __init__(self, folder: Path, name: str, *, synchronous: str = "normal") -> None:
        url = f"sqlite://{folder / 'portable.db'}?name={name}&synchronous={synchronous}"
        self.topic: Topic = open_topic(url)
        self.sub: Subscription = open_subscription(url, lease=60)

    def publish_batch(self, bodies: list[bytes]) -> None:
        for i in range(0, len(bodies), 100):
            self.topic.publish_batch(bodies[i : i + 100])

    def publish_each(self, bodies: list[bytes]) -> None:
        for body in bodies:
            self.topic.publish(body)

    def drain_batch(self, n: int) -> int:
        got = 0
        while got < n:
            messages = self.sub.receive(100, wait=0.0)
            if not messages:
                break
            self.sub.ack_many(messages)
            got += len(messages)
        return got

    def drain_each(self, n: int) -> int:
        got = 0
        while got < n:
            messages = self.sub.receive(1, wait=0.0)
            if not messages:
                break
            messages[0].ack()
            got += 1
        return got


class PersistQueue:
    def __init__(self, folder: Path) -> None:
        from persistqueue import SQLiteAckQueue

        self.q = SQLiteAckQueue(str(folder / "persist-queue"), multithreading=True, auto_resume=False)

    def publish_each(self, bodies: list[bytes]) -> None:
        for body in bodies:
            self.q.put(body)

    def drain_each(self, n: int) -> int:
        from persistqueue import Empty

        got = 0
        while got < n:
            try:
                item = self.q.get(block=False, raw=True)
            except Empty:
                break
            self.q.ack(id=item["pqid"])
            got += 1
        self.q.clear_acked_data(keep_latest=0)  # it marks acked rows; deleting them is part of the job
        return got


def throughput(folder: Path, messages: int, rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    bodies = [os.urandom(128).hex().encode() for _ in range(messages)]
    batch = PortableSqlite(folder, "batch")
    each = PortableSqlite(folder, "each")
    full = PortableSqlite(folder / "full", "batch_full", synchronous="full")
    each_full = PortableSqlite(folder / "full", "each_full", synchronous="full")
    peer = PersistQueue(folder)

    publishers: dict[str, Callable[[], None]] = {
        "persist-queue put": lambda: peer.publish_each(bodies),
        "portable sqlite publish_batch(100)": lambda: batch.publish_batch(bodies),
        "portable sqlite publish_batch(100), synchronous=full": lambda: full.publish_batch(bodies),
        "portable sqlite publish, one by one": lambda: each.publish_each(bodies),
        "portable sqlite publish, one by one, synchronous=full": lambda: each_full.publish_each(bodies),
    }
    drainers: dict[str, Callable[[], int]] = {
        "persist-queue get + ack": lambda: peer.drain_each(messages),
        "portable sqlite receive(100) + ack_many": lambda: batch.drain_batch(messages),
        "portable sqlite receive(100) + ack_many, synchronous=full": lambda: full.drain_batch(messages),
        "portable sqlite receive(1) + ack, one by one": lambda: each.drain_each(messages),
        "portable sqlite receive(1) + ack, one by one, synchronous=full": lambda: each_full.drain_each(messages),
    }
    publish_rates: dict[str, list[float]] = {name: [] for name in publishers}
    drain_rates: dict[str, list[float]] = {name: [] for name in drainers}
    for _ in range(rounds):
        for (p_name, publish), (d_name, drain) in zip(publishers.items(), drainers.items(), strict=True):
            t0 = time.perf_counter()
            publish()
            publish_rates[p_name].append(messages / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            drained = drain()
            drain_rates[d_name].append(drained / (time.perf_counter() - t0))
            assert drained == messages, f"{d_name} drained {drained} of {messages}"
    return publish_rates, drain_rates


def _drain(sub: Subscription, n: int) -> None:
    left = n
    while left > 0:
        got = sub.receive(min(left, 1000), lease=60)
        if not got:
            return
        sub.ack_many(got)
        left -= len(got)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20000)
    args = ap.parse_args()
    (ROOT / ".cache").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="queue-bench-", dir=ROOT / ".cache") as tmp:
        publish_rates, drain_rates = throughput(Path(tmp), args.messages, args.rounds)
    plain, keyed, paired = overhead_rates(args.calls, args.rounds)
    base_p, base_d = "persist-queue put", "persist-queue get + ack"
    ratios = {
        "publish_batch_vs_persist_queue": round(
            statistics.median(publish_rates["portable sqlite publish_batch(100)"]) / statistics.median(publish_rates[base_p]), 2
        ),
        "receive_ack_batch_vs_persist_queue": round(
            statistics.median(drain_rates["portable sqlite receive(100) + ack_many"]) / statistics.median(drain_rates[base_d]), 2
        ),
        "target": 1.0,
    }
    us = {
        "publish_us_per_call": paired["plain"],
        "publish_with_key_and_attributes_us_per_call": paired["keyed"],
        "method": "median of paired 500-call chunk differences (raw vs portable, alternating order)",
        "target_us": 5.0,
    }
    write(
        "queue_bench",
        {
            f"publish {args.messages} x 256 B on sqlite:// (msgs/s)": summarise(publish_rates, base_p),
            f"receive + ack {args.messages} on sqlite:// (msgs/s)": summarise(drain_rates, base_d),
            f"portable layer per publish on mem:// ({args.calls} calls)": summarise(plain, "raw driver publish"),
            "portable layer per publish with key and attributes": summarise(
                keyed, "raw driver publish (key + 2 attributes)"
            ),
        },
        {"ratios": ratios, "overhead": us},
    )
    print("ratios vs persist-queue:", ratios)
    print("portable layer overhead per publish (us):", us)


def overhead_rates(calls: int, rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, float]]:
    """Publish loops in paired chunks (raw, portable, alternating order), drained untimed.

    The overhead is the median of the paired per-chunk differences, which cancels
    the load of a shared machine better than the difference of two medians.
    """
    body = b"x" * 256
    attrs = {"kind": "order", "tenant": "t1"}
    raw = MemoryMessaging("bench-raw")
    topic = open_topic("mem://bench-portable")
    sub = open_subscription("mem://bench-portable")
    chunk = 500
    reps = max(1, calls * rounds // chunk)

    def raw_drain() -> None:
        while got := raw.receive(1000, 0.0, 60.0):
            raw.ack_many([m.handle for m in got])

    def timed(loop: Callable[[], None]) -> float:
        t0 = time.perf_counter()
        loop()
        return time.perf_counter() - t0

    def plain_raw() -> None:
        for _ in range(chunk):
            raw.publish(OutgoingMessage(body))

    def plain_portable() -> None:
        for _ in range(chunk):
            topic.publish(body)

    def keyed_raw() -> None:
        for i in range(chunk):
            raw.publish(OutgoingMessage(body, attrs, f"k{i}"))

    def keyed_portable() -> None:
        for i in range(chunk):
            topic.publish(body, key=f"k{i}", attributes=attrs)

    pairs = {
        "plain": ("raw driver publish", plain_raw, "Topic.publish", plain_portable),
        "keyed": ("raw driver publish (key + 2 attributes)", keyed_raw,
                  "Topic.publish (key + 2 attributes)", keyed_portable),
    }
    rates: dict[str, dict[str, list[float]]] = {k: {v[0]: [], v[2]: []} for k, v in pairs.items()}
    diffs: dict[str, list[float]] = {k: [] for k in pairs}
    for rep in range(reps):
        for kind, (raw_name, raw_loop, port_name, port_loop) in pairs.items():
            if rep % 2:
                t_port, t_raw = timed(port_loop), timed(raw_loop)
            else:
                t_raw, t_port = timed(raw_loop), timed(port_loop)
            rates[kind][raw_name].append(chunk / t_raw)
            rates[kind][port_name].append(chunk / t_port)
            diffs[kind].append((t_port - t_raw) / chunk * 1e6)
        if rep % 8 == 7:
            raw_drain()
            _drain(sub, 10**9)
    overhead = {kind: round(statistics.median(values), 3) for kind, values in diffs.items()}
    return rates["plain"], rates["keyed"], overhead


if __name__ == "__main__":
    main()
