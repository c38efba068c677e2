"""kafka:// against native clients, both directions, on Apache Kafka 4 and on Tansu: each
engine against its own library's clients (engine=kafka-python against kafka-python's
KafkaProducer and KafkaConsumer, engine=confluent against confluent-kafka's Producer and
Consumer).

What portable writes is a plain Kafka record: the body is the value, the key the UTF-8 key,
each attribute a UTF-8 header in order, ``portable.idempotency_key`` last; nothing else. What
a native producer writes reaches ``Message`` losslessly: ``key_bytes`` (any bytes),
``headers`` (record order, duplicates, binary values) and ``tombstone`` (a null value), with
``attributes`` the text view. Retry and dead-letter copies keep the record exactly and add
only the headers docs/adapters/kafka.md lists. The native side never uses a group (it assigns
partitions), so nothing here waits for a native group to form.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

import portable.messaging as pm
from portable.resilience import ResiliencePolicy, RetryPolicy
from tests.emulators.harness import EmulatorInfo

QUICK = ResiliencePolicy(retry=RetryPolicy(max_attempts=3, initial_backoff=0.05, max_backoff=0.5), breaker=None)

RETRY_HEADERS = ["portable.kafka.attempt", "portable.kafka.due_ms", "portable.kafka.id", "portable.kafka.published_ms"]
DEAD_LETTER_HEADERS = [
    "portable.dead_letter_reason",
    "portable.dead_letter_source",
    "portable.delivery_attempts",
    "portable.original_id",
]


@pytest.fixture(params=["kafka", "tansu"], ids=["apache-kafka", "tansu"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    broker: EmulatorInfo = request.getfixturevalue("kafka_broker" if request.param == "kafka" else "tansu_broker")
    return str(broker.endpoints["bootstrap"])


@pytest.fixture(params=["kafka-python", "confluent"])
def engine(request: pytest.FixtureRequest) -> str:
    """portable's engine, and the library of the native clients on the other side."""
    if request.param == "confluent":
        pytest.importorskip("confluent_kafka", reason="engine=confluent needs confluent-kafka")
    return str(request.param)


def url(bootstrap: str, name: str, engine: str, scheme: str = "kafka") -> str:
    """One partition (so the native side reads in publish order) and Tansu's short session."""
    return f"{scheme}://{bootstrap}/{name}?group={name}&session_timeout_ms=6000&partitions=1&engine={engine}"


class Record(NamedTuple):
    """A record as a native consumer read it, whichever library."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int


class _Confluent:
    """confluent-kafka's Producer behind kafka-python's send/flush/close, for :func:`produce`."""

    def __init__(self, bootstrap: str) -> None:
        import confluent_kafka

        self.producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "client.id": "native-producer"})
        self.errors: list[Any] = []

    def send(self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]) -> None:
        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                self.errors.append(err)

        self.producer.produce(topic, value, key, headers=headers or None, on_delivery=delivered)

    def close(self, timeout: float) -> None:
        assert self.producer.flush(timeout) == 0, "the native producer could not deliver every record"
        assert not self.errors, self.errors


@contextlib.contextmanager
def native_producer(bootstrap: str, engine: str) -> Iterator[Any]:
    """The library's own producer, with its defaults (idempotent, acks=all on both)."""
    if engine == "confluent":
        native: Any = _Confluent(bootstrap)
    else:
        from kafka import KafkaProducer

        native = KafkaProducer(bootstrap_servers=[bootstrap], client_id="native-producer")
    try:
        yield native
    finally:
        native.close(timeout=5)


@pytest.fixture
def producer(bootstrap: str, engine: str) -> Iterator[Any]:
    with native_producer(bootstrap, engine) as native:
        yield native


def produce(producer: Any, topic: str, records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]]) -> None:
    """Send (key, value, headers) records natively and wait until every one is acknowledged."""
    if isinstance(producer, _Confluent):
        for key, value, headers in records:
            producer.send(topic, key, value, headers)
        assert producer.producer.flush(30) == 0 and not producer.errors, producer.errors
        return
    futures = [producer.send(topic, key=key, value=value, headers=headers) for key, value, headers in records]
    producer.flush(timeout=30)
    for future in futures:
        future.get(timeout=30)


def read_native(bootstrap: str, topic: str, count: int, engine: str, timeout: float = 30.0) -> list[Record]:
    """The first ``count`` records of every partition of ``topic``, read by the library's own
    consumer (assigned, no group), in partition then offset order."""
    if engine == "confluent":
        return _read_confluent(bootstrap, topic, count, timeout)
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=[bootstrap], client_id="native-consumer", enable_auto_commit=False,
        auto_offset_reset="earliest", group_id=None,
    )  # fmt: skip
    try:
        until = time.monotonic() + timeout
        partitions = None
        while not partitions and time.monotonic() < until:
            partitions = consumer.partitions_for_topic(topic)
            if not partitions:
                time.sleep(0.2)
        assert partitions, f"the native consumer sees no topic {topic!r}"
        consumer.assign([TopicPartition(topic, p) for p in sorted(partitions)])
        consumer.seek_to_beginning()
        got: list[Record] = []
        while len(got) < count and time.monotonic() < until:
            for _tp, records in sorted(consumer.poll(timeout_ms=500).items(), key=lambda kv: kv[0].partition):
                got.extend(Record(r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in records)
        assert len(got) >= count, f"read {len(got)} of {count} records from {topic}"
        return sorted(got)[:count]
    finally:
        consumer.close()


def _read_confluent(bootstrap: str, topic: str, count: int, timeout: float) -> list[Record]:
    """As :func:`read_native`, with confluent-kafka's Consumer: assigned from the beginning, never
    subscribed or committing (its group.id is required by the client, and never joined)."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"native-{topic}", "enable.auto.commit": False,
         "client.id": "native-consumer"}
    )
    try:
        until = time.monotonic() + timeout
        partitions: list[int] = []
        while not partitions and time.monotonic() < until:
            found = consumer.list_topics(topic, timeout=5).topics.get(topic)
            partitions = sorted(found.partitions) if found is not None and found.error is None else []
            if not partitions:
                time.sleep(0.2)
        assert partitions, f"the native consumer sees no topic {topic!r}"
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in partitions])
        got: list[Record] = []
        while len(got) < count and time.monotonic() < until:
            for msg in consumer.consume(num_messages=count, timeout=0.5):
                assert msg.error() is None, msg.error()
                got.append(Record(msg.partition(), msg.offset(), msg.key(), msg.value(), list(msg.headers() or []),
                                  msg.timestamp()[1]))  # fmt: skip
        assert len(got) >= count, f"read {len(got)} of {count} records from {topic}"
        return sorted(got)[:count]
    finally:
        consumer.close()


def receive(sub: pm.Subscription, count: int, timeout: float = 40.0) -> list[pm.Message]:
    got: list[pm.Message] = []
    until = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < until:
        got.extend(sub.receive(count - len(got), wait=1.0))
    assert len(got) == count, f"received {len(got)} of {count}"
    return got


def wire(record: Record) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    return record.key, record.value, list(record.headers)


# ---------------------------------------------------------------- portable -> native
def test_portable_writes_plain_records_that_a_native_consumer_reads_exactly(
    bootstrap: str, unique_name: str, engine: str
) -> None:
    with pm.open_topic(url(bootstrap, unique_name, engine), policy=QUICK) as topic:
        topic.publish("naïve café {\"n\": 1}".encode())
        topic.publish(b"\x00\x01\xfe\xff binary")
        topic.publish(b"")
        topic.publish(b"keyed", key="customer-42")
        topic.publish(
            b"with attributes", key="customer-42", attributes={"kind": "order", "trace-id": "t-1", "note": "é ü"},
            idempotency_key="order-7",
        )  # fmt: skip
        topic.publish_batch(
            [
                pm.OutgoingMessage(b"batch-1", attributes={"a": "1", "b": "2"}),
                pm.OutgoingMessage(b"batch-2", key="k2", idempotency_key="idem-2"),
            ]
        )
    records = read_native(bootstrap, unique_name, 7, engine)
    assert [wire(r) for r in records] == [
        (None, "naïve café {\"n\": 1}".encode(), []),
        (None, b"\x00\x01\xfe\xff binary", []),
        (None, b"", []),  # an empty body is an empty value, never null (a tombstone)
        (b"customer-42", b"keyed", []),
        (
            b"customer-42",
            b"with attributes",
            [("kind", b"order"), ("trace-id", b"t-1"), ("note", "é ü".encode()), ("portable.idempotency_key", b"order-7")],
        ),
        (None, b"batch-1", [("a", b"1"), ("b", b"2")]),
        (b"k2", b"batch-2", [("portable.idempotency_key", b"idem-2")]),
    ]
    assert all(r.timestamp > 0 for r in records), "the producer's CreateTime is set"


# ---------------------------------------------------------------- native -> portable
def test_native_records_reach_portable_losslessly(bootstrap: str, unique_name: str, engine: str, producer: Any) -> None:
    sub = pm.open_subscription(url(bootstrap, unique_name, engine), policy=QUICK, lease=60)
    try:
        produce(
            producer,
            unique_name,
            [
                (b"k-utf8", "text é".encode(), []),
                (b"\xff\xfe\x00key", b"\x00\xff binary", [("dup", b"1"), ("bin", b"\x00\xff\x80"), ("dup", b"2"), ("text", "naïve".encode())]),
                (None, b"", []),
                (b"gone", None, []),
                (None, b"with idempotency", [("portable.idempotency_key", b"idem-1"), ("x", b"")]),
                (b"gone-too", None, [("why", b"deleted")]),
            ],
        )  # fmt: skip
        got = receive(sub, 6)
        text, binary, empty, tombstone, idem, tombstone_with_headers = got

        assert (text.body, text.key, text.key_bytes, text.headers, dict(text.attributes)) == (
            "text é".encode(), "k-utf8", b"k-utf8", (), {}
        )  # fmt: skip
        assert text.tombstone is False

        assert binary.body == b"\x00\xff binary"
        assert binary.key_bytes == b"\xff\xfe\x00key", "a non-UTF-8 key arrives as the bytes sent"
        assert binary.key == "\ufffd\ufffd\x00key", "the text key shows what is not UTF-8 as U+FFFD"
        assert binary.headers == (("dup", b"1"), ("bin", b"\x00\xff\x80"), ("dup", b"2"), ("text", "naïve".encode()))
        assert dict(binary.attributes) == {"dup": "2", "text": "naïve"}, "last value wins; binary only in headers"

        assert (empty.body, empty.tombstone, empty.key, empty.key_bytes, empty.headers) == (b"", False, None, None, ())

        assert (tombstone.body, tombstone.tombstone, tombstone.key_bytes) == (b"", True, b"gone")
        assert "tombstone" in repr(tombstone)
        assert (tombstone_with_headers.tombstone, tombstone_with_headers.headers) == (True, (("why", b"deleted"),))

        assert idem.idempotency_key == "idem-1", "a native producer can set portable's idempotency header"
        assert idem.headers == (("portable.idempotency_key", b"idem-1"), ("x", b""))
        assert dict(idem.attributes) == {"portable.idempotency_key": "idem-1", "x": ""}
        sub.ack_many(got)
    finally:
        sub.close()


def test_retry_and_dead_letter_copies_keep_the_record_exactly(
    bootstrap: str, unique_name: str, engine: str, producer: Any
) -> None:
    headers = [("dup", b"1"), ("bin", b"\x00\xff"), ("dup", b"2")]
    sub = pm.open_subscription(url(bootstrap, unique_name, engine), policy=QUICK, lease=60)
    try:
        produce(producer, unique_name, [(b"\xff-key", b"\x00 payload", headers), (b"\xfe-gone", None, headers)])
        first = receive(sub, 2)
        for m in first:
            m.nack(delay=0)
        retry_topic = f"{unique_name}.{unique_name}.retry"
        copies = read_native(bootstrap, retry_topic, 2, engine)
        for copy, (key, value) in zip(copies, [(b"\xff-key", b"\x00 payload"), (b"\xfe-gone", None)], strict=True):
            assert (copy.key, copy.value) == (key, value), "a retry copy keeps key bytes and value (a tombstone too)"
            assert list(copy.headers[:3]) == headers, "the record's own headers first, exactly"
            assert [name for name, _ in copy.headers[3:]] == RETRY_HEADERS
            assert dict(copy.headers[3:])["portable.kafka.attempt"] == b"2"

        again = receive(sub, 2)
        assert {m.id for m in again} == {m.id for m in first}
        for m in again:
            assert m.delivery_attempt == 2
            assert m.headers == tuple(headers), "portable.kafka.* headers stay out of what the application sees"
            assert dict(m.attributes) == {"dup": "2"}
        assert sorted((m.key_bytes, m.tombstone) for m in again) == [(b"\xfe-gone", True), (b"\xff-key", False)]
        for m in again:
            m.dead_letter("poison")

        dead = read_native(bootstrap, f"{unique_name}.{unique_name}.dlq", 2, engine)
        by_key = {r.key: r for r in dead}
        assert by_key[b"\xff-key"].value == b"\x00 payload" and by_key[b"\xfe-gone"].value is None
        for record in dead:
            assert list(record.headers[:3]) == headers
            added = dict(record.headers[3:])
            assert list(added) == DEAD_LETTER_HEADERS
            assert added["portable.dead_letter_reason"] == b"poison"
            assert added["portable.delivery_attempts"] == b"2"
            assert added["portable.original_id"].startswith(f"{unique_name}/0/".encode())
    finally:
        sub.close()


def test_through_the_chaos_wrapper_the_lossless_fields_survive(
    kafka_broker: EmulatorInfo, unique_name: str, engine: str
) -> None:
    """chaos+kafka:// copies every delivery (ReceivedMessage.like): headers, key bytes and the
    tombstone flag are part of the copy. On Apache Kafka."""
    bootstrap = str(kafka_broker.endpoints["bootstrap"])
    sub = pm.open_subscription(url(bootstrap, unique_name, engine, "chaos+kafka") + "&error_rate=0", policy=QUICK)
    try:
        with native_producer(bootstrap, engine) as producer:
            produce(producer, unique_name, [(b"\xff", None, [("h", b"\x00"), ("h", b"1")])])
        (m,) = receive(sub, 1)
        assert (m.key_bytes, m.tombstone, m.headers) == (b"\xff", True, (("h", b"\x00"), ("h", b"1")))
        m.ack()
    finally:
        sub.close()
