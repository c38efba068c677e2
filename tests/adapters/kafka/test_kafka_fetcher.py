"""kafka-python 3.0.12's fetcher and a paused-then-resumed partition, step by step, on Apache Kafka.

When a partition is paused while the fetcher holds parsed records of it that it has not returned,
the fetcher parks them, hands them back after ``resume`` only in a poll that finds its in-line slot
None (a drained slot keeps its empty object, so it rarely is), and never fetches that partition
while they are parked: the partition's records are stranded. The driver's ``_unpark_resumed``
drops the parked records of resumed partitions, and the fetcher reads them again from the position.

The first half of the test pins kafka-python's behaviour (if a release fixes it, that half fails:
then the workaround can go); the second half is the driver's fix.
"""

from __future__ import annotations

import time
from typing import Any

from tests.emulators.harness import EmulatorInfo

RECORDS = 50  # per partition; one fetch response carries them all


def poll_records(consumer: Any, polls: int, max_records: int = 5) -> dict[Any, list[int]]:
    """Offsets by partition from ``polls`` polls of 100 ms at most."""
    got: dict[Any, list[int]] = {}
    for _ in range(polls):
        for tp, records in consumer.poll(timeout_ms=100, max_records=max_records).items():
            got.setdefault(tp, []).extend(r.offset for r in records)
    return got


def test_a_resumed_partitions_parked_records_are_stranded_by_kafka_python_and_unparked_by_the_driver(
    kafka_broker: EmulatorInfo, unique_name: str
) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient
    from portable_kafka._receive import _unpark_resumed

    bootstrap = kafka_broker.endpoints["bootstrap"]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics({unique_name: {"num_partitions": 2}})
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for partition in (0, 1):
            for _ in range(RECORDS):
                producer.send(unique_name, b"x", partition=partition)
        producer.flush()
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        tps = [TopicPartition(unique_name, 0), TopicPartition(unique_name, 1)]
        consumer.assign(tps)
        first: dict[Any, list[int]] = {}
        until = time.monotonic() + 20
        while not first and time.monotonic() < until:
            first = poll_records(consumer, 1)
        [(paused, offsets)] = first.items()  # the fetcher's slot holds the rest of this partition's fetch
        other = next(tp for tp in tps if tp != paused)
        assert offsets == [0, 1, 2, 3, 4]
        fetcher = consumer._fetcher
        consumer.pause(paused)
        got = poll_records(consumer, 1)  # parks the paused partition's records; the other takes the slot
        until = time.monotonic() + 20
        while other not in got and time.monotonic() < until:
            got = poll_records(consumer, 1)
        assert paused in fetcher._paused_partition_records
        assert fetcher._next_partition_records, "the other partition's records should fill the slot"
        consumer.resume(paused)

        # kafka-python alone: the other partition drains, the resumed one never comes again
        later = poll_records(consumer, 30)
        assert len(got.get(other, [])) + len(later.get(other, [])) == RECORDS
        assert paused not in later, "kafka-python returned the parked records: the workaround may go"
        assert paused in fetcher._paused_partition_records

        # the driver's fix: the parked records go, the fetcher reads them again from the position
        _unpark_resumed(consumer)
        assert not fetcher._paused_partition_records
        rest: list[int] = []
        until = time.monotonic() + 20
        while len(rest) < RECORDS - 5 and time.monotonic() < until:
            rest.extend(poll_records(consumer, 1, max_records=100).get(paused, []))
        assert rest == list(range(5, RECORDS))
    finally:
        consumer.close()


def test_unparking_keeps_the_parked_records_of_a_partition_still_paused(
    kafka_broker: EmulatorInfo, unique_name: str
) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from portable_kafka._receive import _unpark_resumed

    bootstrap = kafka_broker.endpoints["bootstrap"]
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for _ in range(RECORDS):
            producer.send(unique_name, b"x", partition=0)
        producer.flush()
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        tp = TopicPartition(unique_name, 0)
        consumer.assign([tp])
        first: dict[Any, list[int]] = {}
        until = time.monotonic() + 20
        while not first and time.monotonic() < until:
            first = poll_records(consumer, 1)
        assert first == {tp: [0, 1, 2, 3, 4]}
        consumer.pause(tp)
        assert poll_records(consumer, 2) == {}
        parked = consumer._fetcher._paused_partition_records
        assert tp in parked
        _unpark_resumed(consumer)
        assert tp in parked, "a partition still paused keeps its parked records"
        consumer.resume(tp)
        rest: list[int] = []
        until = time.monotonic() + 20
        while len(rest) < RECORDS - 5 and time.monotonic() < until:
            _unpark_resumed(consumer)
            rest.extend(poll_records(consumer, 1, max_records=100).get(tp, []))
        assert rest == list(range(5, RECORDS))
    finally:
        consumer.close()
