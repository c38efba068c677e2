"""The sqlite queue against persist-queue, like for like, and the portable layer's cost per publish.

    .venv/bin/pip install -r bench/requirements-queue.txt     # persist-queue
    .venv/bin/python bench/queue_bench.py [--messages 2000] [--rounds 7] [--calls 20000]
    .venv/bin/python bench/queue_bench.py --quick               # 300 messages, 2 rounds, 2000 calls

Like for like means the same durability and the same shape of call on both sides:

* durability: **synchronous=FULL on both sides** (an fsync per commit, in WAL
  mode). That is persist-queue's setting (it sets ``journal_mode=WAL`` and
  leaves SQLite's default FULL; its API cannot change it, and the bench reads
  ``PRAGMA synchronous`` off its connection to show it); portable's sqlite://
  is opened with ``synchronous=full``. Portable's default, NORMAL (survives a
  killed process, not a power cut), is measured too, as information only:
  no ratio is taken against it.
* one by one: ``SQLiteAckQueue.put`` against ``Topic.publish``; ``get`` +
  ``ack`` per message against ``receive(1)`` + ``ack()``. Each side commits
  once per call.
* batched: persist-queue's only batched idiom, ``SQLiteQueue(auto_commit=False)``
  (its ack queue refuses ``auto_commit=False``): 100 ``get`` then one
  ``task_done()`` commit (removal is committed once per 100, so a crash before
  it delivers them again: the same promise as ``receive(100)`` + ``ack_many``),
  against ``receive(100)`` + ``ack_many``. persist-queue has no batched put:
  ``put`` commits each message whatever ``auto_commit`` says (its
  ``with_transaction``), so its "batched" publish (100 ``put`` + ``task_done``)
  is its one-by-one put, and the batched publish ratio measures portable's
  ``publish_batch(100)`` against the best persist-queue offers, not two batch
  APIs.

Every round publishes N messages of 256 bytes and drains them, every
contestant once per round (interleaved, on the same disk, each in a fresh
folder). Ratios are paired: per round, portable's rate over persist-queue's in
that round, reported as median (min-max).

The overhead of the portable layer per publish: ``Topic.publish`` on
``mem://`` against the raw driver's ``publish(OutgoingMessage(...))`` (target
<= 5 us), timed in alternating 500-call chunks; the overhead is the median of
the paired differences, so that a busy shared machine slows both sides alike.
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
    """persist-queue's SQLiteAckQueue: one commit per put, per get and per ack."""

    def __init__(self, folder: Path) -> None:
        from persistqueue import SQLiteAckQueue

        self.q = SQLiteAckQueue(str(folder / "persist-queue"), multithreading=True, auto_resume=False)

    def synchronous(self) -> str:
        level = self.q._putter.execute("PRAGMA synchronous").fetchone()[0]
        return {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(level, str(level))

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


class PersistQueueBatched:
    """persist-queue's SQLiteQueue with ``auto_commit=False``: one commit (``task_done``) per 100 calls."""

    def __init__(self, folder: Path) -> None:
        from persistqueue import SQLiteQueue

        self.q = SQLiteQueue(str(folder / "persist-queue-batched"), multithreading=True, auto_commit=False)

    def publish_batch(self, bodies: list[bytes]) -> None:
        for i in range(0, len(bodies), 100):
            for body in bodies[i : i + 100]:
                self.q.put(body)
            self.q.task_done()

    def drain_batch(self, n: int) -> int:
        from persistqueue import Empty

        got = 0
        while got < n:
            taken = 0
            try:
                while taken < 100 and got + taken < n:
                    self.q.get(block=False)
                    taken += 1
            except Empty:
                pass
            self.q.task_done()
            if not taken:
                break
            got += taken
        return got


#: (portable contestant, persist-queue contestant) of each like-for-like ratio, publishing and draining
PUBLISH_PAIRS = {
    "one by one": ("portable publish, one by one, synchronous=full", "persist-queue SQLiteAckQueue.put"),
    "batched": ("portable publish_batch(100), synchronous=full", "persist-queue SQLiteQueue 100 x put + task_done"),
}
DRAIN_PAIRS = {
    "one by one": ("portable receive(1) + ack, one by one, synchronous=full", "persist-queue SQLiteAckQueue get + ack"),
    "batched": ("portable receive(100) + ack_many, synchronous=full", "persist-queue SQLiteQueue 100 x get + task_done"),
}


def throughput(folder: Path, messages: int, rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]], str]:
    bodies = [os.urandom(128).hex().encode() for _ in range(messages)]
    each_full = PortableSqlite(folder / "full", "each_full", synchronous="full")
    batch_full = PortableSqlite(folder / "full", "batch_full", synchronous="full")
    batch_normal = PortableSqlite(folder / "normal", "batch", synchronous="normal")
    peer = PersistQueue(folder)
    peer_batched = PersistQueueBatched(folder)

    publishers: dict[str, Callable[[], None]] = {
        "persist-queue SQLiteAckQueue.put": lambda: peer.publish_each(bodies),
        "portable publish, one by one, synchronous=full": lambda: each_full.publish_each(bodies),
        "persist-queue SQLiteQueue 100 x put + task_done": lambda: peer_batched.publish_batch(bodies),
        "portable publish_batch(100), synchronous=full": lambda: batch_full.publish_batch(bodies),
        "portable publish_batch(100), synchronous=normal (information only)": lambda: batch_normal.publish_batch(bodies),
    }
    drainers: dict[str, Callable[[], int]] = {
        "persist-queue SQLiteAckQueue get + ack": lambda: peer.drain_each(messages),
        "portable receive(1) + ack, one by one, synchronous=full": lambda: each_full.drain_each(messages),
        "persist-queue SQLiteQueue 100 x get + task_done": lambda: peer_batched.drain_batch(messages),
        "portable receive(100) + ack_many, synchronous=full": lambda: batch_full.drain_batch(messages),
        "portable receive(100) + ack_many, synchronous=normal (information only)": lambda: batch_normal.drain_batch(messages),
    }
    publish_rates: dict[str, list[float]] = {name: [] for name in publishers}
    drain_rates: dict[str, list[float]] = {name: [] for name in drainers}
    pairs = list(zip(publishers.items(), drainers.items(), strict=True))
    for r in range(rounds):
        shift = r % len(pairs)  # each round starts one contestant later
        for (p_name, publish), (d_name, drain) in pairs[shift:] + pairs[:shift]:
            t0 = time.perf_counter()
            publish()
            publish_rates[p_name].append(messages / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            drained = drain()
            drain_rates[d_name].append(drained / (time.perf_counter() - t0))
            assert drained == messages, f"{d_name} drained {drained} of {messages}"
    return publish_rates, drain_rates, peer.synchronous()


def paired_ratios(rates: dict[str, list[float]], pairs: dict[str, tuple[str, str]]) -> dict[str, str]:
    """Per pair: per-round portable/persist-queue ratios as 'median (min-max)'."""
    out = {}
    for what, (mine, theirs) in pairs.items():
        ratios = [a / b for a, b in zip(rates[mine], rates[theirs], strict=True)]
        out[what] = f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
    return out


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
    ap.add_argument("--messages", type=int, default=None, help="messages per round (default 2000)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 7)")
    ap.add_argument("--calls", type=int, default=None, help="publishes per side for the overhead (default 20000)")
    ap.add_argument("--quick", action="store_true", help="300 messages, 2 rounds, 2000 calls; writes queue_bench-quick.*")
    args = ap.parse_args()
    messages = args.messages or (300 if args.quick else 2000)
    rounds = args.rounds or (2 if args.quick else 7)
    calls = args.calls or (2000 if args.quick else 20000)
    load_before = _loadavg()
    (ROOT / ".cache").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="queue-bench-", dir=ROOT / ".cache") as tmp:
        publish_rates, drain_rates, peer_sync = throughput(Path(tmp), messages, rounds)
    plain, keyed, paired = overhead_rates(calls, rounds)
    base_p, base_d = "persist-queue SQLiteAckQueue.put", "persist-queue SQLiteAckQueue get + ack"
    ratios = {
        "durability": f"synchronous=FULL on both sides (persist-queue's connection reports {peer_sync})",
        "publish": paired_ratios(publish_rates, PUBLISH_PAIRS),
        "receive_and_ack": paired_ratios(drain_rates, DRAIN_PAIRS),
        "target": 1.0,
    }
    us = {
        "publish_us_per_call": paired["plain"],
        "publish_with_key_and_attributes_us_per_call": paired["keyed"],
        "method": "median of paired 500-call chunk differences (raw vs portable, alternating order)",
        "target_us": 5.0,
    }
    load = f"load average (1 min) {load_before} at the start, {_loadavg()} at the end"
    write(
        "queue_bench-quick" if args.quick else "queue_bench",
        {
            f"publish {messages} x 256 B on sqlite:// (msgs/s)": summarise(publish_rates, base_p),
            f"receive + ack {messages} on sqlite:// (msgs/s)": summarise(drain_rates, base_d),
            f"portable layer per publish on mem:// ({calls} calls)": summarise(plain, "raw driver publish"),
            "portable layer per publish with key and attributes": summarise(
                keyed, "raw driver publish (key + 2 attributes)"
            ),
        },
        {"like_for_like_ratios": ratios, "overhead": us, "load": load},
    )
    print("portable / persist-queue, paired per round, median (min-max):", ratios)
    print("portable layer overhead per publish (us):", us)
    print(load)


def _loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "unknown"


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
