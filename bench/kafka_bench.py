"""kafka:// on both engines against the raw clients they wrap, side by side, on Apache Kafka.

    .venv/bin/pip install -r bench/requirements-kafka.txt
    .venv/bin/python bench/kafka_bench.py [--messages 200000] [--size 200] [--rounds 3] [--bootstrap HOST:PORT]

Four contestants a section: raw kafka-python and portable's ``engine=kafka-python``,
raw confluent-kafka and portable's ``engine=confluent`` (the default where installed; issue 22: target >= 0.9x raw
confluent-kafka on both sections, and >= 5x portable's kafka-python engine). The confluent pair
uses the same settings as the kafka-python pair (idempotent, acks=all, linger.ms=5,
batch.size=64 KiB, murmur2 partitioning); the raw confluent producer is the documented idiom
(``produce`` in a loop, ``poll`` when librdkafka's queue is full, one ``flush``), the raw
confluent consumer ``consume(1000)`` in a loop that reads each message's value, key and headers
(as any real consumer does, and as portable hands them out) with an asynchronous ``commit`` of
the batch's offsets after each, and the two fetch settings portable's engine changes from
librdkafka's defaults (``fetch.queue.backoff.ms=20``, ``fetch.wait.max.ms=100``: without them
the raw consumer stands still 1 s whenever its local queue fills, and waits 0.5 s more at a join). Commit mode: **both asynchronous** (portable's ``ack_many``
commits the contiguous acked offsets asynchronously, at most every 0.2 s while records are
buffered), so that pair is like for like. The raw producer asks for no delivery reports;
portable's ``publish_batch`` needs one per record (its id), so the produce section also runs
the raw producer as confluent-kafka's README writes it, with a delivery report callback on every
``produce`` (one shared function), and states portable's ratio to both.

Without ``--bootstrap`` it starts a single-node Apache Kafka 4 (KRaft) with the
test harness (``tests/emulators``, jars from ``bash scripts/install-emulators.sh``)
and stops it afterwards.

1. Produce: N messages of SIZE bytes through one ``Topic.publish_batch`` call
   (which portable sends in chunks of ``capabilities.max_batch``, 10,000 on Kafka,
   waiting for each chunk's acknowledgements) against a raw ``KafkaProducer.send``
   loop and one ``flush``. Both use the same producer settings (idempotent, acks=all,
   linger_ms=5, batch_size=64 KiB). Target: portable >= 0.9x raw.
2. Consume + ack: the N messages of one topic read, in each round, by both
   contestants, each in a fresh consumer group: portable through
   ``Subscription.receive(1000)`` + ``ack_many`` (which commits the contiguous acked
   offsets, asynchronously) against a raw ``KafkaConsumer.poll(max_records=1000)``
   loop that commits after each batch (``commit()``, synchronous, manual). Group
   joins are inside both timings. Target: portable >= 0.9x raw.

   The two do not commit alike: the raw loop waits for each commit's round
   trip, portable does not, so the wall-clock consume ratio flatters portable
   by the raw peer's commit waits. **The fair consume figure is the CPU
   ratio** (messages per CPU second of this process), which a commit's wait
   does not enter; quote that one, and the wall-clock ratio only with this
   caveat. (Like for like would be the raw loop calling ``commit_async()``;
   this bench does not measure that variant.)

Each produce round gives every contestant a fresh topic of three partitions; contestants
run round-robin in one process; medians, min-max and ratios are reported and
written to bench/results/kafka_bench.{json,md}, both per second of wall clock
and per second of this process's CPU time (all threads): on a shared machine the
CPU figure is the steadier measure of what each client costs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _common import start_broker, summarise, write  # noqa: E402
from confluent_kafka import Consumer as CkConsumer  # noqa: E402
from confluent_kafka import Producer as CkProducer  # noqa: E402
from confluent_kafka import TopicPartition as CkTopicPartition  # noqa: E402
from kafka import KafkaConsumer, KafkaProducer  # noqa: E402
from kafka.admin import KafkaAdminClient  # noqa: E402

import portable.messaging as pm  # noqa: E402

PRODUCER = {"enable_idempotence": True, "acks": "all", "linger_ms": 5, "batch_size": 65536}
#: The same settings in librdkafka's names (portable's engine=confluent sets these).
CK_PRODUCER = {"enable.idempotence": True, "acks": "all", "linger.ms": 5, "batch.size": 65536,
               "partitioner": "murmur2_random"}  # fmt: skip
PARTITIONS = 3


def fresh(prefix: str) -> str:
    return f"bench-{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, name: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics({name: {"num_partitions": PARTITIONS}}, wait_for_metadata=True)
    finally:
        admin.close()


class Bench:
    def __init__(self, bootstrap: str, messages: int, size: int) -> None:
        self.bootstrap = bootstrap
        self.n = messages
        self.body = os.urandom(size)
        self.filled: list[str] = []  # topics the produce rounds wrote, raw and portable in turn
        self.reading: str | None = None  # the topic both consumers read this round
        self.wall = self.cpu = 0.0

    def start(self) -> None:
        self._t0, self._c0 = time.perf_counter(), time.process_time()

    def stop(self) -> None:
        self.wall = time.perf_counter() - self._t0
        self.cpu = time.process_time() - self._c0

    def url(self, topic: str, group: str | None = None, engine: str | None = None) -> str:
        options = ([f"group={group}", "session_timeout_ms=6000"] if group else []) + (
            [f"engine={engine}"] if engine else []
        )
        return f"kafka://{self.bootstrap}/{topic}" + ("?" + "&".join(options) if options else "")

    # -- produce -------------------------------------------------------------
    def produce_raw(self) -> int:
        topic = fresh("raw")
        create_topic(self.bootstrap, topic)
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, **PRODUCER)
        try:
            self.start()
            send, body = producer.send, self.body
            for _ in range(self.n):
                send(topic, body)
            producer.flush()
            self.stop()
        finally:
            producer.close()
        self.filled.append(topic)
        return self.n

    def produce_raw_confluent(self) -> int:
        topic = fresh("rawck")
        create_topic(self.bootstrap, topic)
        producer = CkProducer({"bootstrap.servers": self.bootstrap, **CK_PRODUCER})
        self.start()
        produce, poll, body = producer.produce, producer.poll, self.body
        for _ in range(self.n):
            while True:
                try:
                    produce(topic, body)
                    break
                except BufferError:  # librdkafka's queue is full: serve delivery reports, then again
                    poll(0.05)
        producer.flush()
        self.stop()
        self.filled.append(topic)
        return self.n

    def produce_raw_confluent_reports(self) -> int:
        """The raw producer as confluent-kafka's README writes it: a delivery report callback on
        every ``produce`` (one shared function), so each record's outcome is known, as
        ``publish_batch`` knows it (its id or its error)."""
        topic = fresh("rawckdr")
        create_topic(self.bootstrap, topic)
        producer = CkProducer({"bootstrap.servers": self.bootstrap, **CK_PRODUCER})
        failed: list[Any] = []

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                failed.append(err)

        self.start()
        produce, poll, body = producer.produce, producer.poll, self.body
        for _ in range(self.n):
            while True:
                try:
                    produce(topic, body, callback=report)
                    break
                except BufferError:
                    poll(0.05)
        producer.flush()
        self.stop()
        assert not failed, failed[:3]
        self.filled.append(topic)
        return self.n

    def produce_portable_confluent(self) -> int:
        return self.produce_portable(engine="confluent")

    def produce_portable(self, engine: str = "kafka-python") -> int:
        topic = fresh("portable")
        create_topic(self.bootstrap, topic)
        with pm.open_topic(self.url(topic, engine=engine)) as t:
            bodies = [self.body] * self.n
            self.start()
            t.publish_batch(bodies)  # portable sends it in chunks of capabilities.max_batch
            self.stop()
        self.filled.append(topic)
        return self.n

    # -- consume -------------------------------------------------------------
    def next_topic(self) -> str:
        """Both consumers of a round read the same topic (each in a fresh group): the same
        record batches, so neither pays for how the other's producer happened to batch."""
        self.reading = self.filled.pop(0)
        return self.reading

    def consume_raw(self) -> int:
        topic = self.next_topic()
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=fresh("g"), enable_auto_commit=False,
            auto_offset_reset="earliest", session_timeout_ms=6000, max_poll_records=1000,
        )  # fmt: skip
        try:
            self.start()
            consumer.subscribe([topic])
            got = 0
            while got < self.n:
                batches = consumer.poll(timeout_ms=1000, max_records=1000)
                for records in batches.values():
                    got += len(records)
                if batches:
                    consumer.commit()
            self.stop()
        finally:
            consumer.close(autocommit=False)
        return got

    def consume_raw_confluent(self) -> int:
        topic = self.reading
        assert topic is not None, "consume_raw picks the round's topic"
        consumer = CkConsumer({
            "bootstrap.servers": self.bootstrap, "group.id": fresh("g"), "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            # the two fetch settings portable's engine changes (_confluent_config.py): same settings
            "fetch.queue.backoff.ms": 20, "fetch.wait.max.ms": 100,
        })  # fmt: skip
        try:
            self.start()
            consumer.subscribe([topic])
            got = 0
            while got < self.n:
                messages = consumer.consume(1000, 1.0)
                if not messages:
                    continue
                last: dict[int, int] = {}
                for m in messages:
                    if m.error() is None:
                        # what any real consumer reads of each message (portable hands all of it out)
                        m.value(), m.key(), m.headers()
                        last[m.partition()] = m.offset()
                        got += 1
                consumer.commit(offsets=[CkTopicPartition(topic, p, o + 1) for p, o in last.items()],
                                asynchronous=True)  # fmt: skip
            self.stop()
        finally:
            consumer.close()
        return got

    def consume_portable_confluent(self) -> int:
        return self.consume_portable(engine="confluent")

    def consume_portable(self, engine: str = "kafka-python") -> int:
        topic = self.reading
        assert topic is not None, "consume_raw picks the round's topic"
        sub = pm.open_subscription(self.url(topic, fresh("g"), engine))
        try:
            self.start()
            got = 0
            while got < self.n:
                messages = sub.receive(1000, wait=1.0)
                sub.ack_many(messages)
                got += len(messages)
            self.stop()
        finally:
            sub.close()
        return got


def rounds_of(
    bench: Bench, contestants: dict[str, Callable[[], int]], rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Run the contestants round-robin; return messages per second of wall time and of this
    process's CPU time (all its threads), timing only the part each contestant measures."""
    wall: dict[str, list[float]] = {name: [] for name in contestants}
    cpu: dict[str, list[float]] = {name: [] for name in contestants}
    for _ in range(rounds):
        for name, fn in contestants.items():
            ops = fn()
            wall[name].append(ops / bench.wall)
            cpu[name].append(ops / bench.cpu)
            print(f"  {name}: {ops / bench.wall:,.0f} msg/s, {1e6 * bench.cpu / ops:.1f} us CPU/msg", flush=True)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bootstrap", help="an Apache Kafka to use instead of starting one")
    parser.add_argument("--name", default="kafka_bench", help="results file name (bench/results/NAME.md)")
    args = parser.parse_args()

    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        bootstrap, broker = start_broker()
    try:
        bench = Bench(bootstrap, args.messages, args.size)
        produce, produce_cpu = rounds_of(
            bench,
            {
                "raw KafkaProducer": bench.produce_raw,
                "portable publish_batch (kafka-python)": bench.produce_portable,
                "raw confluent Producer": bench.produce_raw_confluent,
                "portable publish_batch (confluent)": bench.produce_portable_confluent,
                "raw confluent Producer + delivery reports": bench.produce_raw_confluent_reports,
            },
            args.rounds,
        )
        consume, consume_cpu = rounds_of(
            bench,
            {
                "raw KafkaConsumer + commit": bench.consume_raw,
                "portable receive + ack_many (kafka-python)": bench.consume_portable,
                "raw confluent Consumer + commit": bench.consume_raw_confluent,
                "portable receive + ack_many (confluent)": bench.consume_portable_confluent,
            },
            args.rounds,
        )
    finally:
        if broker is not None:
            broker.stop()
    what = f"{args.messages} x {args.size} B"
    sections = {
        f"produce {what}, messages per second (wall clock)": summarise(produce, "raw confluent Producer"),
        f"produce {what}, messages per CPU second (client process)": summarise(produce_cpu, "raw confluent Producer"),
        f"produce {what}, messages per CPU second, against the raw producer with delivery reports": summarise(
            produce_cpu, "raw confluent Producer + delivery reports"
        ),
        f"consume + ack {what}, messages per second (wall clock)": summarise(
            consume, "raw confluent Consumer + commit"
        ),
        f"consume + ack {what}, messages per CPU second (client process)": summarise(
            consume_cpu, "raw confluent Consumer + commit"
        ),
    }
    import confluent_kafka
    import kafka

    write(
        args.name,
        sections,
        {"broker": "Apache Kafka 4.1.1 (KRaft, one node)", "kafka_python": kafka.__version__,
         "confluent_kafka": confluent_kafka.version()[0], "librdkafka": confluent_kafka.libversion()[0],
         "messages": args.messages, "size": args.size, "rounds": args.rounds, "partitions": PARTITIONS,
         "load_average": os.getloadavg()},
    )
    for title, rows in sections.items():
        by = {r["contestant"]: r["median_ops_per_s"] for r in rows}
        names = [name for name in by if "delivery reports" not in name]
        if "delivery reports" in title:
            print(f"{title}: portable/raw with reports {by[names[3]] / by['raw confluent Producer + delivery reports']:.2f}x")
            continue
        print(
            f"{title}: portable/raw kafka-python {by[names[1]] / by[names[0]]:.2f}x, "
            f"portable/raw confluent {by[names[3]] / by[names[2]]:.2f}x (target >= 0.9x), "
            f"portable confluent/portable kafka-python {by[names[3]] / by[names[1]]:.2f}x (target >= 5x)"
        )

if __name__ == "__main__":
    main()
