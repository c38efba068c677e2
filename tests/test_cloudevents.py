"""CloudEvents at the boundary (issue 15, item 5): exact data bytes, each provider's binding,
events without a content-type attribute, and attribute limits said up front.

Unit tests first, then the embedded queues (mem://, sqlite://), then the emulators where the
provider matters: Google's Pub/Sub emulator (its binding's ``ce-`` names, read by the native
client) and SQS on moto (the 10-attribute limit; a native producer that sets no content-type).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from portable.cloudevents import (
    STRUCTURED_CONTENT_TYPE,
    CloudEvent,
    binary_prefix,
    dedup_key_of,
    from_message,
    to_message,
)
from portable.errors import InvalidArgument
from portable.messaging import Topic, open_driver, open_subscription, open_topic
from portable.testing.messaging_suite import poll

SPACED = b'{"order": 42, "items": [1, 2]}'  # a producer's own spacing, which must survive


def event(**fields: Any) -> CloudEvent:
    base: dict[str, Any] = {"id": "e-1", "source": "/orders", "type": "order.created"}
    return CloudEvent(**{**base, **fields})


def full_event() -> CloudEvent:
    """An event with all four optional context attributes and one extension: 4 + 5 binary attributes."""
    return event(
        data=SPACED,
        datacontenttype="application/json",
        dataschema="https://example.com/order.json",
        subject="o-42",
        time=dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        extensions={"tenant": "t1"},
    )


# ---------------------------------------------------------------- structured mode keeps data's bytes
@pytest.mark.parametrize(
    "data",
    [SPACED, b'{"order":42}', b"[1, 2,  3]", b'"a string"', b"42", b'{"u": "\xc3\xa9", "e": "\\u00e9"}', b"null"],
)
def test_structured_json_data_comes_back_byte_for_byte(data: bytes) -> None:
    original = event(data=data, datacontenttype="application/json")
    body, attributes = to_message(original, mode="structured")
    assert data in body  # embedded as its own text, not re-serialised
    assert from_message(body, attributes).data == data
    assert from_message(body, attributes) == original


@pytest.mark.parametrize("data", [b" {} ", b"{\"a\": NaN}", b"\xff{}", b"{} trailing"])
def test_json_data_that_cannot_embed_as_itself_travels_as_base64(data: bytes) -> None:
    original = event(data=data, datacontenttype="application/json")
    body, attributes = to_message(original, mode="structured")
    assert "data_base64" in json.loads(body)
    assert from_message(body, attributes).data == data


def test_another_producers_spacing_inside_a_structured_event_is_kept() -> None:
    body = b'{ "specversion" : "1.0", "id":"1", "source":"/s", "type":"t",\n  "data" :  {"order": 42} }'
    got = from_message(body, {"content-type": "application/cloudevents+json"})
    assert got.data == b'{"order": 42}'
    assert got.datacontenttype is None  # JSON is the format's default


def test_a_structured_body_that_is_not_one_json_object_is_refused() -> None:
    for body in (b'{"specversion":"1.0"} {}', b'{"a":1,}', b"{'a': 1}"):
        with pytest.raises(InvalidArgument, match="JSON object"):
            from_message(body, {"content-type": STRUCTURED_CONTENT_TYPE})


# ---------------------------------------------------------------- binary mode: each provider's binding
def test_pubsub_gets_its_bindings_ce_dash_names_and_others_keep_ce_underscore() -> None:
    assert binary_prefix("pubsub") == "ce-"
    assert binary_prefix("chaos+pubsub") == "ce-"
    for provider in ("kafka", "sqs", "azqueue", "mem", "sqlite", None):
        assert binary_prefix(provider) == "ce_"
    body, attributes = to_message(full_event(), provider="pubsub")
    assert sorted(attributes) == [
        "ce-dataschema", "ce-id", "ce-source", "ce-specversion", "ce-subject", "ce-tenant", "ce-time", "ce-type",
        "content-type",
    ]
    assert body == SPACED
    assert from_message(body, attributes) == full_event()


def test_the_content_type_attribute_is_read_in_any_case() -> None:
    body, attributes = to_message(full_event(), provider="pubsub")
    attributes["Content-Type"] = attributes.pop("content-type")
    assert from_message(body, attributes).datacontenttype == "application/json"
    structured, _ = to_message(full_event(), mode="structured")
    assert from_message(structured, {"Content-Type": STRUCTURED_CONTENT_TYPE}) == full_event()


def test_a_binary_event_over_the_attribute_limit_is_refused_up_front_with_the_fix() -> None:
    with pytest.raises(InvalidArgument, match=r"needs 9 attributes.*sqs:// carries 8.*mode='structured'"):
        to_message(full_event(), provider="sqs", max_attributes=8)
    body, attributes = to_message(full_event(), mode="structured", provider="sqs", max_attributes=8)
    assert len(attributes) == 1 and from_message(body, attributes) == full_event()


# ---------------------------------------------------------------- no content-type attribute
def test_a_structured_event_without_a_content_type_attribute_still_parses() -> None:
    body, _ = to_message(full_event(), mode="structured")
    assert from_message(body, {}) == full_event()
    assert from_message(body, {"other": "x"}) == full_event()
    assert dedup_key_of(body, {}) == full_event().dedup_key()


@pytest.mark.parametrize(
    "body",
    [
        b'{"order": 42}',
        b'{"specversion": "1.0", "id": "1", "source": "/s"}',  # no type
        b'{"specversion": "0.3", "id": "1", "source": "/s", "type": "t"}',
        b'{"specversion": 1.0, "id": "1", "source": "/s", "type": "t"}',
        b'[{"specversion": "1.0"}]',
        b"\xff\xfe",
    ],
)
def test_a_body_is_an_event_only_by_a_cloudevents_shape(body: bytes) -> None:
    with pytest.raises(InvalidArgument, match="not a CloudEvent"):
        from_message(body, {})
    assert dedup_key_of(body, {}) is None


# ---------------------------------------------------------------- the embedded queues
@pytest.fixture(params=["mem", "sqlite"])
def queue_url(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> str:
    if request.param == "mem":
        return f"mem://{unique_name}"
    return f"sqlite://{tmp_path}/queue.db?name={unique_name}"


def publish_as_topic_would(topic: Topic, ev: CloudEvent, mode: str) -> str:
    """What Topic.publish_event sends: the topic's binding, its attribute budget less the idempotency key."""
    body, attributes = to_message(
        ev, mode=mode, provider=topic.provider, max_attributes=topic.capabilities.max_attributes - 1  # type: ignore[arg-type]
    )
    return topic.publish(body, attributes=attributes, idempotency_key=ev.dedup_key())


@pytest.mark.parametrize("mode", ["binary", "structured"])
def test_events_keep_their_exact_data_on_the_embedded_queues(queue_url: str, mode: str) -> None:
    with open_topic(queue_url) as topic, open_subscription(queue_url) as sub:
        topic.publish_event(full_event(), mode=mode)  # type: ignore[arg-type]
        publish_as_topic_would(topic, event(id="e-2", data=SPACED, datacontenttype="application/json"), mode)
        first, second = poll(sub, 2, 10)
        assert first.event() == full_event() and first.event().data == SPACED
        assert second.event().data == SPACED
        sub.ack_many([first, second])


def test_a_structured_event_published_without_attributes_parses_on_the_embedded_queues(queue_url: str) -> None:
    body, _ = to_message(full_event(), mode="structured")
    with open_topic(queue_url) as topic, open_subscription(queue_url) as sub:
        topic.publish(body)  # as a producer that cannot set a content-type would
        [m] = poll(sub, 1, 10)
        assert m.attributes == {}
        assert m.event() == full_event()
        m.ack()


# ---------------------------------------------------------------- Pub/Sub emulator
@pytest.fixture(scope="session")
def pubsub(pubsub_emulator: Any) -> dict[str, str]:
    return {"project": pubsub_emulator.endpoints["project"], "endpoint": pubsub_emulator.endpoints["host_port"]}


@pytest.fixture
def pubsub_url(pubsub: dict[str, str], unique_name: str) -> Iterator[str]:
    driver = open_driver(f"pubsub://{pubsub['project']}/topics/{unique_name}?endpoint={pubsub['endpoint']}")
    try:
        with driver.create_temporary(unique_name, ordering=False) as url:  # type: ignore[attr-defined]
            yield url
    finally:
        driver.close()


@pytest.fixture
def native_pubsub(pubsub: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    """google-cloud-pubsub's own publisher and subscriber on the emulator."""
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub["endpoint"])
    from google.cloud import pubsub_v1

    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    try:
        yield publisher, subscriber
    finally:
        subscriber.close()
        with contextlib.suppress(Exception):
            publisher.stop()


def native_pull(subscriber: Any, path: str, count: int) -> list[Any]:
    got: list[Any] = []
    for _ in range(20):  # bounded: the emulator answers within a few pulls
        response = subscriber.pull(request={"subscription": path, "max_messages": count}, timeout=10)
        got += [r.message for r in response.received_messages]
        if response.received_messages:
            subscriber.acknowledge(request={"subscription": path, "ack_ids": [r.ack_id for r in response.received_messages]})
        if len(got) >= count:
            break
    return got


def test_binary_events_on_pubsub_carry_the_bindings_names_to_a_native_subscriber(
    pubsub_url: str, pubsub: dict[str, str], unique_name: str, native_pubsub: tuple[Any, Any]
) -> None:
    _, subscriber = native_pubsub
    with open_topic(pubsub_url) as topic:
        publish_as_topic_would(topic, full_event(), "binary")
    [message] = native_pull(subscriber, f"projects/{pubsub['project']}/subscriptions/{unique_name}", 1)
    assert message.data == SPACED
    assert message.attributes["ce-id"] == "e-1" and message.attributes["ce-specversion"] == "1.0"
    assert message.attributes["ce-tenant"] == "t1" and message.attributes["content-type"] == "application/json"
    assert not any(name.startswith("ce_") for name in message.attributes)


def test_a_native_pubsub_binding_event_reads_as_the_event(
    pubsub_url: str, pubsub: dict[str, str], unique_name: str, native_pubsub: tuple[Any, Any]
) -> None:
    publisher, _ = native_pubsub
    attributes = {"ce-id": "n-1", "ce-source": "//pubsub.googleapis.com/x", "ce-type": "google.cloud.pubsub.topic.v1.messagePublished",
                  "ce-specversion": "1.0", "Content-Type": "application/json"}
    publisher.publish(f"projects/{pubsub['project']}/topics/{unique_name}", SPACED, **attributes).result(timeout=30)
    with open_subscription(pubsub_url) as sub:
        [m] = poll(sub, 1, 20)
        got = m.event()
        assert (got.id, got.datacontenttype, got.data) == ("n-1", "application/json", SPACED)
        m.ack()


# ---------------------------------------------------------------- SQS on moto
@pytest.fixture(scope="session")
def aws(moto_server: Any) -> Iterator[dict[str, str]]:
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
            mp.setenv(name, moto_server.env[name])
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            mp.delenv(name, raising=False)
        yield {"endpoint_url": moto_server.endpoints["endpoint_url"], "region": moto_server.endpoints["region"]}


@pytest.fixture
def sqs_url(aws: dict[str, str], unique_name: str) -> Iterator[str]:
    driver = open_driver(f"sqs://base?region={aws['region']}&endpoint_url={aws['endpoint_url']}")
    try:
        with driver.temporary(unique_name) as url:  # type: ignore[attr-defined]
            yield url
    finally:
        driver.close()


def sqs_client(aws: dict[str, str]) -> Any:
    import boto3

    return boto3.client("sqs", endpoint_url=aws["endpoint_url"], region_name=aws["region"])


def test_sqs_binary_mode_past_its_attribute_limit_is_refused_before_sending_and_structured_goes(
    sqs_url: str, aws: dict[str, str], unique_name: str
) -> None:
    with open_topic(sqs_url) as topic, open_subscription(sqs_url) as sub:
        assert topic.capabilities.max_attributes == 9  # SQS's 10, one kept for portable.body
        with pytest.raises(InvalidArgument, match=r"needs 9 attributes.*sqs:// carries 8.*mode='structured'"):
            publish_as_topic_would(topic, full_event(), "binary")
        assert poll(sub, 1, 1.5) == []  # nothing was sent
        publish_as_topic_would(topic, full_event(), "structured")
        [m] = poll(sub, 1, 10)
        assert m.event() == full_event()
        m.ack()


def test_a_native_sqs_producers_structured_event_without_attributes_parses(
    sqs_url: str, aws: dict[str, str], unique_name: str
) -> None:
    body, _ = to_message(full_event(), mode="structured")
    client = sqs_client(aws)
    queue = client.get_queue_url(QueueName=unique_name)["QueueUrl"]
    client.send_message(QueueUrl=queue, MessageBody=body.decode("utf-8"))  # no MessageAttributes at all
    with open_subscription(sqs_url) as sub:
        [m] = poll(sub, 1, 10)
        assert m.event() == full_event() and m.event().data == SPACED
        m.ack()
