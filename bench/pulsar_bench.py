"""pulsar:// against raw pulsar-client (the client it wraps), side by side, on Pulsar 4.0.7 standalone.

    .venv/bin/pip install -r bench/requirements-pulsar.txt
    .venv/bin/python bench/pulsar_bench.py [--messages 50000] [--size 200] [--rounds 3]
        [--service-url pulsar://HOST:PORT --admin-url http://HOST:PORT]

Without ``--service-url`` it starts a Pulsar standalone with the test harness
(``tests/emulators``, jars from ``bash scripts/install-emulators.sh``) and stops it afterwards.

1. Publish: N messages of SIZE bytes through one ``Topic.publish_batch`` call (portable sends
   them in chunks of ``capabilities.max_batch``, 1,000, waiting for each chunk's receipts),
   against the documented raw idiom: ``Producer.send_async`` in a loop, one ``flush``, then
   wait for every callback. Same producer settings on both: batching on, 1,000 messages or
   128 KiB or 10 ms a batch, key-based batching, 1,000 pending, block when full, no compression.
2. Receive + ack: the N messages of one topic read by each contestant through a fresh
   subscription (Shared, from the earliest message, receiver queue 1,000; subscribing is
   inside the timing): portable ``Subscription.receive(1000, wait=...)`` + ``ack_many``, raw
   ``Consumer.receive()`` + ``acknowledge`` per message.

Contestants alternate within a round (A, B, A, B, ...); medians, min-max and the paired
ratio per round (portable / raw of the same round) are reported, wall clock and CPU seconds
of this process, and written to bench/results/pulsar_bench.{json,md} with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "adapters" / "pulsar"))

import pulsar  # noqa: E402

import portable.messaging as pm  # noqa: E402
from portable.resilience import ResiliencePolicy, RetryPolicy  # noqa: E402

RESULTS = Path(__file__).parent / "results"
POLICY = ResiliencePolicy(retry=RetryPolicy(max_attempts=3, initial_backoff=0.05, max_backoff=0.5), breaker=None)
PRODUCER = {
    "batching_enabled": True,
    "batching_max_messages": 1000,
    "batching_max_allowed_size_in_bytes": 128 * 1024,
    "batching_max_publish_delay_ms": 10,
    "batching_type": pulsar.BatchingType.KeyBased,
    "max_pending_messages": 1000,
    "block_if_queue_full": True,
    "send_timeout_millis": 30000,
}


class Bench:
    def __init__(self, service_url: str, admin_url: str, messages: int, size: int) -> None:
        self.service_url, self.admin_url = service_url, admin_url
        self.n, self.size = messages, size
        self.bodies = [os.urandom(size) for _ in range(messages)]
        self.client = pulsar.Client(service_url, io_threads=1, message_listener_threads=1,
                                    logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))  # fmt: skip

    def url(self, topic: str, subscription: str | None = None) -> str:
        sub = f"subscription={subscription}&" if subscription else ""
        return f"{self.service_url}/public/default/{topic}?{sub}admin_url={self.admin_url}&dead_letter_topic=none"

    # -- publish -----------------------------------------------------------------
    def raw_publish(self) -> int:
        producer = self.client.create_producer(f"persistent://public/default/b-{uuid.uuid4().hex[:10]}", **PRODUCER)
        left = [self.n]
        done = threading.Event()
        lock = threading.Lock()

        def sent(result: Any, mid: Any) -> None:
            assert result == pulsar.Result.Ok, result
            with lock:
                left[0] -= 1
                if not left[0]:
                    done.set()

        for body in self.bodies:
            producer.send_async(body, sent)
        producer.flush()
        done.wait()
        producer.close()
        return self.n

    def portable_publish(self) -> int:
        with pm.open_topic(self.url(f"b-{uuid.uuid4().hex[:10]}"), policy=POLICY) as topic:
            ids = topic.publish_batch(self.bodies)
        assert len(ids) == self.n
        return self.n

    # -- receive + ack -----------------------------------------------------------
    def fill(self) -> str:
        topic = f"c-{uuid.uuid4().hex[:10]}"
        # a subscription must exist before the messages, or the broker may trim them
        self.client.subscribe(f"persistent://public/default/{topic}", "keeper").close()
        producer = self.client.create_producer(f"persistent://public/default/{topic}", **PRODUCER)
        for body in self.bodies:
            producer.send_async(body, lambda r, m: None)
        producer.flush()
        producer.close()
        return topic

    def raw_consume(self, topic: str) -> int:
        consumer = self.client.subscribe(
            f"persistent://public/default/{topic}", f"raw-{uuid.uuid4().hex[:8]}",
            consumer_type=pulsar.ConsumerType.Shared, initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=1000, batch_index_ack_enabled=True,
        )  # fmt: skip
        got = 0
        while got < self.n:
            message = consumer.receive(10_000)
            consumer.acknowledge(message)
            got += 1
        consumer.close()
        return got

    def portable_consume(self, topic: str) -> int:
        got = 0
        with pm.open_subscription(self.url(topic, f"pt-{uuid.uuid4().hex[:8]}"), policy=POLICY, lease=300) as sub:
            while got < self.n:
                batch = sub.receive(1000, wait=10)
                sub.ack_many(batch)
                got += len(batch)
        return got


def timed(fn: Callable[[], int]) -> tuple[float, float]:
    """(ops per wall second, ops per CPU second of this process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    ops = fn()
    return ops / (time.perf_counter() - wall), ops / (time.process_time() - cpu)


def summary(rates: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for index, unit in ((0, "wall"), (1, "cpu")):
        for name, values in rates.items():
            column = [v[index] for v in values]
            out[f"{name}_{unit}"] = {"median": round(statistics.median(column)), "min": round(min(column)),
                                     "max": round(max(column))}  # fmt: skip
        paired = [p[index] / r[index] for p, r in zip(rates["portable"], rates["raw"], strict=True)]
        out[f"ratio_{unit}"] = {"median": round(statistics.median(paired), 3), "min": round(min(paired), 3),
                                "max": round(max(paired), 3), "rounds": [round(x, 3) for x in paired]}  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--service-url")
    parser.add_argument("--admin-url")
    parser.add_argument("--quick", action="store_true", help="5,000 messages, 2 rounds")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.rounds = 5000, 2
    emulator = None
    if args.service_url is None:
        from tests.emulators.pulsar import PulsarStandalone

        emulator = PulsarStandalone()
        info = emulator.start()
        args.service_url, args.admin_url = info.endpoints["service_url"], info.endpoints["admin_url"]
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    try:
        bench = Bench(args.service_url, args.admin_url, args.messages, args.size)
        bench.raw_publish()  # warm up: connections, topic creation paths, JIT of the broker
        bench.portable_publish()
        publish: dict[str, list[tuple[float, float]]] = {"raw": [], "portable": []}
        consume: dict[str, list[tuple[float, float]]] = {"raw": [], "portable": []}
        for r in range(args.rounds):
            order = [("raw", bench.raw_publish), ("portable", bench.portable_publish)]
            for name, fn in order if r % 2 == 0 else order[::-1]:
                publish[name].append(timed(fn))
            pairs = [("raw", bench.raw_consume), ("portable", bench.portable_consume)]
            for name, fn in pairs if r % 2 == 0 else pairs[::-1]:
                topic = bench.fill()
                consume[name].append(timed(lambda fn=fn, topic=topic: fn(topic)))
            print(f"round {r + 1}: publish {publish['portable'][-1][0] / publish['raw'][-1][0]:.3f}, "
                  f"receive+ack {consume['portable'][-1][0] / consume['raw'][-1][0]:.3f}", flush=True)  # fmt: skip
        bench.client.close()
    finally:
        if emulator is not None:
            emulator.stop()
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "messages": args.messages, "size": args.size, "rounds": args.rounds,
        "loadavg_before": load_before, "loadavg_after": load_after, "cpus": os.cpu_count(),
        "publish_batch": summary(publish), "receive_ack": summary(consume),
    }  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pulsar_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# pulsar_bench", "",
        f"{result['when']}: {args.messages:,} x {args.size} B, {args.rounds} interleaved rounds, Pulsar 4.0.7 "
        f"standalone on the same machine; load average {' '.join(load_before)} before, "
        f"{' '.join(load_after)} after ({os.cpu_count()} CPUs). Messages per second; ratio = portable / raw "
        "of the same round (median, min-max).", "",
        "| section | raw wall | portable wall | ratio wall | raw CPU | portable CPU | ratio CPU |",
        "|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for section in ("publish_batch", "receive_ack"):
        s = result[section]

        def cell(key: str, s: dict[str, Any] = s) -> str:
            v = s[key]
            return f"{v['median']:,} ({v['min']:,}-{v['max']:,})"

        lines.append(f"| {section} | {cell('raw_wall')} | {cell('portable_wall')} | {cell('ratio_wall')} | "
                     f"{cell('raw_cpu')} | {cell('portable_cpu')} | {cell('ratio_cpu')} |")  # fmt: skip
    text = "\n".join(lines) + "\n"
    (RESULTS / "pulsar_bench.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
