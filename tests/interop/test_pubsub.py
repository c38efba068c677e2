"""pubsub:// against google-cloud-pubsub's own clients on Google's Pub/Sub emulator, both directions.

The native side is ``google.cloud.pubsub_v1.PublisherClient`` (with message
ordering on) and ``SubscriberClient.pull``, found through
``PUBSUB_EMULATOR_HOST`` as a service would find them. What portable adds on
the wire (reserved ``portable.*`` attributes only) is documented in
docs/adapters/gcp.md and docs/native/queues-b.md.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from portable.cloudevents import CloudEvent
from portable.messaging import open_driver, open_subscription, open_topic
from portable.testing.messaging_suite import poll

# receive(wait=0) pulls with return_immediately, which the client calls deprecated (see tests/adapters/gcp)
pytestmark = pytest.mark.filterwarnings("ignore:The return_immediately flag is deprecated:DeprecationWarning")


# -- fixtures (the same emulator as tests/adapters/gcp, through tests/emulators) ---------------
@pytest.fixture(scope="module")
def pubsub(pubsub_emulator: Any) -> Iterator[dict[str, str]]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PUBSUB_EMULATOR_HOST", pubsub_emulator.endpoints["host_port"])  # the native clients' discovery
        yield {"project": pubsub_emulator.endpoints["project"], "endpoint": pubsub_emulator.endpoints["host_port"]}


@pytest.fixture(scope="module")
def native(pubsub: dict[str, str]) -> Iterator[tuple[Any, Any]]:
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient(
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
    )
    subscriber = pubsub_v1.SubscriberClient()
    yield publisher, subscriber
    subscriber.close()
    publisher.transport.close()


@pytest.fixture
def topic_url(pubsub: dict[str, str], native: tuple[Any, Any]) -> Iterator[str]:
    """A topic and an ordered subscription of the same name, made with the native clients."""
    publisher, subscriber = native
    name = f"pt-{uuid.uuid4().hex[:16]}"
    topic = publisher.topic_path(pubsub["project"], name)
    sub = subscriber.subscription_path(pubsub["project"], name)
    publisher.create_topic(name=topic)
    subscriber.create_subscription(request={"name": sub, "topic": topic, "enable_message_ordering": True})
    yield f"pubsub://{pubsub['project']}/topics/{name}?subscription={name}&endpoint={pubsub['endpoint']}"
    subscriber.delete_subscription(subscription=sub)
    publisher.delete_topic(topic=topic)


def paths(url: str) -> tuple[str, str]:
    project, rest = url.removeprefix("pubsub://").split("/topics/")
    name = rest.split("?")[0]
    return f"projects/{project}/topics/{name}", f"projects/{project}/subscriptions/{name}"


def native_pull(subscriber: Any, url: str, count: int) -> list[Any]:
    """Pull ``count`` messages with the native SubscriberClient and ack them."""
    sub = paths(url)[1]
    got: list[Any] = []
    until = time.monotonic() + 20
    while len(got) < count and time.monotonic() < until:
        response = subscriber.pull(request={"subscription": sub, "max_messages": count}, timeout=5)
        if response.received_messages:
            subscriber.acknowledge(request={"subscription": sub, "ack_ids": [r.ack_id for r in response.received_messages]})
            got.extend(r.message for r in response.received_messages)
        else:
            time.sleep(0.1)
    assert len(got) == count
    return got


def native_publish(publisher: Any, url: str, data: bytes, ordering_key: str = "", **attributes: str) -> str:
    return str(publisher.publish(paths(url)[0], data, ordering_key=ordering_key, **attributes).result(timeout=10))


# -- native -> portable --------------------------------------------------------------------
BODIES = [b"plain text", "h\u00e9llo \u2603".encode(), b"\x00\xff" + bytes(range(256)), b'{"order": 42}']


def test_native_data_attributes_and_ordering_key_reach_portable(native: tuple[Any, Any], topic_url: str) -> None:
    publisher, _ = native
    ids = [native_publish(publisher, topic_url, body, "k1", origin="native", n=str(i)) for i, body in enumerate(BODIES)]
    empty_id = native_publish(publisher, topic_url, b"", only="attributes")  # Pub/Sub takes empty data with attributes
    with open_subscription(topic_url) as sub:
        got = poll(sub, len(BODIES) + 1, 10.0)
        sub.ack_many(got)
    by_id = {m.id: m for m in got}
    for i, (mid, body) in enumerate(zip(ids, BODIES, strict=True)):
        m = by_id[mid]
        assert (m.body, dict(m.attributes), m.key) == (body, {"origin": "native", "n": str(i)}, "k1")
    assert [m.id for m in got if m.key == "k1"] == ids  # the ordering key keeps its order
    assert (by_id[empty_id].body, dict(by_id[empty_id].attributes), by_id[empty_id].key) == (b"", {"only": "attributes"}, None)


def test_native_attributes_become_headers_sorted_by_name(native: tuple[Any, Any], topic_url: str) -> None:
    publisher, _ = native
    native_publish(publisher, topic_url, b"h", "k\u00e9", zeta="z", Alpha="\u00e9", mid="m")
    driver = open_driver(topic_url)
    try:
        side = driver.subscription()
        got: list[Any] = []
        until = time.monotonic() + 10
        while not got and time.monotonic() < until:
            got = side.receive(1, 1.0, 30)
        [m] = got
        side.ack(m.handle)
    finally:
        driver.close()
    assert m.headers == (("Alpha", "\u00e9".encode()), ("mid", b"m"), ("zeta", b"z"))
    assert (m.key, m.key_bytes) == ("k\u00e9", None)  # a str key: Message.key_bytes is its UTF-8


def test_a_native_binary_mode_cloudevent_with_ce_dash_attributes_parses(native: tuple[Any, Any], topic_url: str) -> None:
    """The CloudEvents Pub/Sub protocol binding: ``ce-`` context attributes, ``content-type``, data as the body."""
    publisher, _ = native
    native_publish(
        publisher, topic_url, b'{"order": 42}',
        **{
            "ce-specversion": "1.0", "ce-id": "e-1", "ce-source": "//pubsub.googleapis.com/x", "ce-type": "order.created",
            "ce-time": "2026-01-02T03:04:05Z", "ce-subject": "orders/42", "ce-traceparent": "00-abc-def-01",
            "content-type": "application/json",
        },
    )  # fmt: skip
    with open_subscription(topic_url) as sub:
        [m] = poll(sub, 1, 10.0)
        m.ack()
    event = m.event()
    assert (event.id, event.source, event.type, event.subject) == ("e-1", "//pubsub.googleapis.com/x", "order.created", "orders/42")
    assert (event.data, event.datacontenttype) == (b'{"order": 42}', "application/json")
    assert event.extensions == {"traceparent": "00-abc-def-01"}
    assert event.time is not None and event.time.isoformat() == "2026-01-02T03:04:05+00:00"


# -- portable -> native --------------------------------------------------------------------
def test_portable_body_key_and_attributes_reach_a_native_subscriber(native: tuple[Any, Any], topic_url: str) -> None:
    _, subscriber = native
    with open_topic(topic_url) as topic:
        ids = [topic.publish(body, key="k1", attributes={"origin": "portable"}) for body in BODIES]
        plain_id = topic.publish(b"no key, no attributes")
        idem_id = topic.publish(b"once", idempotency_key="i-1")
    got = {m.message_id: m for m in native_pull(subscriber, topic_url, len(BODIES) + 2)}
    for mid, body in zip(ids, BODIES, strict=True):
        m = got[mid]
        assert (m.data, dict(m.attributes), m.ordering_key) == (body, {"origin": "portable"}, "k1")
    assert (got[plain_id].data, dict(got[plain_id].attributes), got[plain_id].ordering_key) == (b"no key, no attributes", {}, "")
    # the one attribute portable adds for an idempotency key: nothing else, no envelope
    assert dict(got[idem_id].attributes) == {"portable.idempotency_key": "i-1"} and got[idem_id].data == b"once"


def test_a_binary_mode_event_reaches_native_subscribers_with_the_pubsub_binding_names(
    native: tuple[Any, Any], topic_url: str
) -> None:
    _, subscriber = native
    event = CloudEvent(id="e-1", source="/orders", type="order.created", data=b'{"order": 42}', datacontenttype="application/json")
    with open_topic(topic_url) as topic:
        topic.publish_event(event)
    [m] = native_pull(subscriber, topic_url, 1)
    assert m.data == b'{"order": 42}'
    ce = {k: v for k, v in m.attributes.items() if k.startswith(("ce-", "ce_"))}
    assert ce == {"ce-id": "e-1", "ce-source": "/orders", "ce-specversion": "1.0", "ce-type": "order.created"}
    assert m.attributes["content-type"] == "application/json"


def test_a_dead_lettered_copy_carries_the_reserved_attributes(pubsub: dict[str, str], native: tuple[Any, Any]) -> None:
    from portable_gcp.pubsub import PubSubMessaging

    _, subscriber = native
    name = f"pt-{uuid.uuid4().hex[:16]}"
    driver = open_driver(f"pubsub://{pubsub['project']}/topics/{name}?endpoint={pubsub['endpoint']}")
    assert isinstance(driver, PubSubMessaging)
    try:
        with driver.create_temporary(name) as url, open_topic(url) as topic, open_subscription(url) as sub:
            topic.publish(b"poison", key="k1", attributes={"origin": "t"})
            [m] = poll(sub, 1, 10.0)
            m.dead_letter("RuntimeError: bad")
            response = subscriber.pull(
                request={"subscription": f"projects/{pubsub['project']}/subscriptions/{name}-dlq", "max_messages": 1},
                timeout=10,
            )
            [dead] = [r.message for r in response.received_messages]
            assert (dead.data, dead.ordering_key) == (b"poison", "k1")
            assert dead.attributes["origin"] == "t" and dead.attributes["portable.dead_letter_reason"] == "RuntimeError: bad"
            assert set(dead.attributes) == {
                "origin", "portable.dead_letter_reason", "portable.dead_letter_source", "portable.delivery_attempts",
                "portable.original_id",
            }  # fmt: skip
            assert dead.attributes["portable.original_id"] == m.id
    finally:
        driver.close()
