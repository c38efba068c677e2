"""pulsar:// against pulsar-client's own Producer and Consumer, both directions, on Pulsar 4.0.7.

What portable writes is a plain Pulsar message: the body is the payload, the key the
message's partition key (``partition_key()``; Key_Shared routes by it), each attribute a
message property, ``portable.idempotency_key`` one more property; nothing else. What a
native producer writes reaches ``Message``: payload, partition key, properties (as
``attributes``, and as ``headers`` sorted by name, Pulsar keeps no order). A dead-lettered
copy keeps body, key and properties and adds portable's dead-letter properties plus
Pulsar's own ``REAL_TOPIC`` and ``ORIGIN_MESSAGE_ID``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import portable.messaging as pm
from portable.resilience import ResiliencePolicy, RetryPolicy
from portable.testing.messaging_suite import temporary_url
from tests.emulators.harness import EmulatorInfo

pulsar = pytest.importorskip("pulsar", reason="pulsar:// needs pulsar-client")

QUICK = ResiliencePolicy(retry=RetryPolicy(max_attempts=3, initial_backoff=0.05, max_backoff=0.5), breaker=None)


@pytest.fixture
def url(pulsar_broker: EmulatorInfo, unique_name: str) -> Iterator[str]:
    base = f"{pulsar_broker.endpoints['service_url']}/public/default/interop?subscription=interop"
    yield from temporary_url(f"{base}&admin_url={pulsar_broker.endpoints['admin_url']}", unique_name)


@pytest.fixture
def client(pulsar_broker: EmulatorInfo) -> Iterator[Any]:
    native = pulsar.Client(pulsar_broker.endpoints["service_url"])
    try:
        yield native
    finally:
        native.close()


def topic_of(url: str) -> str:
    return "persistent://public/default/" + url.split("?")[0].rsplit("/", 1)[1]


def test_portable_to_native(url: str, client: Any) -> None:
    name = topic_of(url)
    # the temporary topic's subscription is portable's; the native side has a subscription of its own
    native = client.subscribe(name, "native", initial_position=pulsar.InitialPosition.Earliest)
    topic = pm.open_topic(url, policy=QUICK)
    try:
        mid = topic.publish(b"\x00body\xff", key="order-7", attributes={"kind": "order", "lang": "\u00e9t\u00e9"},
                            idempotency_key="idem-1")  # fmt: skip
        ids = topic.publish_batch([b"b0", b"b1", b"b2"])
        got = native.receive(10_000)
        assert got.data() == b"\x00body\xff"
        assert got.partition_key() == "order-7"
        assert got.properties() == {"kind": "order", "lang": "\u00e9t\u00e9", "portable.idempotency_key": "idem-1"}
        mid_native = got.message_id()
        assert mid == f"{mid_native.ledger_id()}:{mid_native.entry_id()}:{mid_native.partition()}:{mid_native.batch_index()}"
        native.acknowledge(got)
        rest = [native.receive(10_000) for _ in range(3)]
        assert [m.data() for m in rest] == [b"b0", b"b1", b"b2"]
        assert all(m.properties() == {} and m.partition_key() == "" for m in rest)
        assert len(set(ids)) == 3
        for m in rest:
            native.acknowledge(m)
    finally:
        topic.close()
        native.close()


def test_native_to_portable(url: str, client: Any) -> None:
    producer = client.create_producer(topic_of(url))
    producer.send(b"native \x01", properties={"b": "2", "a": "1"}, partition_key="pk-1")
    producer.send(b"bare")
    producer.close()
    sub = pm.open_subscription(url, policy=QUICK)
    try:
        got: list[pm.Message] = []
        for _ in range(20):
            got += sub.receive(10, wait=1.0)
            if len(got) >= 2:
                break
        first, second = got
        assert first.body == b"native \x01"
        assert first.key == "pk-1" and first.key_bytes == b"pk-1"
        assert dict(first.attributes) == {"a": "1", "b": "2"}
        assert first.headers == (("a", b"1"), ("b", b"2"))
        assert first.idempotency_key is None
        assert first.delivery_attempt == 1
        assert second.body == b"bare" and second.key is None and second.headers == ()
        for m in got:
            m.ack()
        assert sub.receive(10, wait=0.5) == []
    finally:
        sub.close()


def test_dead_letter_copy_is_plain_for_native_consumers(url: str, client: Any) -> None:
    sub = pm.open_subscription(url, policy=QUICK)
    topic = pm.open_topic(url, policy=QUICK)
    try:
        dlq_url = sub.dead_letter_url
        assert dlq_url is not None
        dlq_topic = topic_of(dlq_url)
        mid = topic.publish(b"poison", key="k", attributes={"origin": "interop"})
        [m] = sub.receive(1, wait=10.0)
        m.dead_letter("bad input")
        native = client.subscribe(dlq_topic, dlq_url.split("subscription=")[1].split("&")[0])
        try:
            dead = native.receive(10_000)
            props = dead.properties()
            assert dead.data() == b"poison" and dead.partition_key() == "k"
            assert props["origin"] == "interop"
            assert props["portable.dead_letter_reason"] == "bad input"
            assert props["portable.original_id"] == mid == props["ORIGIN_MESSAGE_ID"]
            assert props["REAL_TOPIC"] == topic_of(url)
            assert props["portable.delivery_attempts"] == "1"
            native.acknowledge(dead)
        finally:
            native.close()
        assert sub.receive(10, wait=0.5) == []
    finally:
        topic.close()
        sub.close()
