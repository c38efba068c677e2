"""sqs:// against boto3's own SQS client on moto, both directions, standard and FIFO queues.

boto3 -> portable: String, Number and Binary message attributes (and custom types of each)
reach ``Message.headers`` as ``(name, bytes)`` sorted by name, Binary ones as their bytes;
``attributes`` holds the text ones. portable -> boto3: a text body is the SQS body, a body SQS
cannot carry as text is the Binary attribute ``portable.body`` under the body ``.``, attributes
are String attributes, the key is the MessageGroupId and on FIFO the idempotency key the
MessageDeduplicationId (sqs.py's module docstring and docs/native/queues-a.md say the same).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import portable.messaging as pm
from portable.testing.messaging_suite import contract_profile
from tests.interop.conftest import boto3_client

NATIVE_ATTRIBUTES: dict[str, dict[str, Any]] = {
    "s": {"DataType": "String", "StringValue": "naïve"},
    "n": {"DataType": "Number", "StringValue": "42.5"},
    "bin": {"DataType": "Binary", "BinaryValue": b"\x00\xff\x80 bytes"},
    "Trace": {"DataType": "String.w3c", "StringValue": "00-abc-01"},
    "gz": {"DataType": "Binary.gzip", "BinaryValue": b"\x1f\x8b\x08"},
    "count": {"DataType": "Number.int", "StringValue": "7"},
}
#: what portable reports for NATIVE_ATTRIBUTES: sorted by name (code points: upper case first)
EXPECTED_HEADERS = (
    ("Trace", b"00-abc-01"),
    ("bin", b"\x00\xff\x80 bytes"),
    ("count", b"7"),
    ("gz", b"\x1f\x8b\x08"),
    ("n", b"42.5"),
    ("s", "naïve".encode()),
)
EXPECTED_ATTRIBUTES = {"Trace": "00-abc-01", "count": "7", "n": "42.5", "s": "naïve"}


@pytest.fixture(params=[False, True], ids=["standard", "fifo"])
def queue(request: pytest.FixtureRequest, query: str, unique_name: str) -> Iterator[str]:
    """A fresh queue with a dead-letter queue (``NAME-dlq``), as the contract suite gets."""
    driver = pm.open_driver(f"sqs://{'base.fifo' if request.param else 'base'}?{query}")
    try:
        with driver.temporary(unique_name) as url:
            yield url
    finally:
        driver.close()


@pytest.fixture
def sqs(aws: dict[str, str]) -> Any:
    """boto3's own SQS client: the native side."""
    return boto3_client(aws, "sqs")


def queue_name(url: str) -> str:
    return url.split("://", 1)[1].split("?", 1)[0]


def native_url(sqs: Any, url: str) -> str:
    return str(sqs.get_queue_url(QueueName=queue_name(url))["QueueUrl"])


def native_receive(sqs: Any, queue_url: str, count: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    for _ in range(10):
        resp = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
            MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"],
        )  # fmt: skip
        got.extend(resp.get("Messages", ()))
        if len(got) >= count:
            break
    assert len(got) == count, f"boto3 received {len(got)} of {count}"
    return got


def receive(sub: pm.Subscription, count: int) -> list[pm.Message]:
    got: list[pm.Message] = []
    for _ in range(10):
        got.extend(sub.receive(count - len(got), wait=1))
        if len(got) >= count:
            break
    assert len(got) == count, f"portable received {len(got)} of {count}"
    return got


def fifo_args(url: str, group: str, dedup: str) -> dict[str, str]:
    return {"MessageGroupId": group, "MessageDeduplicationId": dedup} if ".fifo" in url else {}


# ---------------------------------------------------------------- boto3 -> portable
def test_every_native_attribute_reaches_headers_and_text_ones_attributes(queue: str, sqs: Any) -> None:
    sqs.send_message(
        QueueUrl=native_url(sqs, queue), MessageBody='{"order": "naïve café"}', MessageAttributes=NATIVE_ATTRIBUTES,
        **fifo_args(queue, "customer-42", "d-1"),
    )  # fmt: skip
    sqs.send_message(QueueUrl=native_url(sqs, queue), MessageBody="plain", **fifo_args(queue, "g-2", "d-2"))
    with pm.open_subscription(queue, profile=contract_profile(queue), lease=30) as sub:
        first, plain = sorted(receive(sub, 2), key=lambda m: m.body == b"plain")
        assert first.body == '{"order": "naïve café"}'.encode()
        assert first.headers == EXPECTED_HEADERS, "Binary attributes as bytes, the rest as UTF-8, by name"
        assert dict(first.attributes) == EXPECTED_ATTRIBUTES, "Binary attributes are not text: headers only"
        assert first.tombstone is False
        if ".fifo" in queue:
            assert (first.key, first.key_bytes) == ("customer-42", b"customer-42")
        else:
            assert (first.key, first.key_bytes) == (None, None)
        assert (plain.body, plain.headers, dict(plain.attributes)) == (b"plain", (), {})
        sub.ack_many([first, plain])


def test_dead_lettering_keeps_native_binary_attributes(queue: str, sqs: Any) -> None:
    sqs.send_message(
        QueueUrl=native_url(sqs, queue), MessageBody="poison", MessageAttributes=NATIVE_ATTRIBUTES,
        **fifo_args(queue, "g", "d-poison"),
    )  # fmt: skip
    with pm.open_subscription(queue, profile=contract_profile(queue), lease=30) as sub:
        (m,) = receive(sub, 1)
        m.dead_letter("cannot parse")
    dlq = queue_name(queue).replace(".fifo", "") + "-dlq" + (".fifo" if ".fifo" in queue else "")
    (moved,) = native_receive(sqs, sqs.get_queue_url(QueueName=dlq)["QueueUrl"], 1)
    attributes = moved["MessageAttributes"]
    assert moved["Body"] == "poison"
    assert attributes["bin"] == {"DataType": "Binary", "BinaryValue": b"\x00\xff\x80 bytes"}
    assert attributes["gz"]["BinaryValue"] == b"\x1f\x8b\x08"
    assert attributes["s"] == {"DataType": "String", "StringValue": "naïve"}
    assert attributes["portable.dead_letter_reason"]["StringValue"] == "cannot parse"
    assert len(attributes) <= 10


# ---------------------------------------------------------------- portable -> boto3
def test_what_boto3_receives_from_portable_is_what_the_docs_say(queue: str, sqs: Any) -> None:
    fifo = ".fifo" in queue
    with pm.open_topic(queue, profile=contract_profile(queue)) as topic:
        topic.publish("naïve café".encode(), key="customer-42", attributes={"kind": "order", "n": "1"})
        topic.publish(b"\x00\x01\xff binary", key="customer-42", idempotency_key="order-7")
        topic.publish(b"", key="customer-42")
        topic.publish(b"keyless")
    got = native_receive(sqs, native_url(sqs, queue), 4) if not fifo else []
    if fifo:  # one group in flight at a time: receive and delete in turn
        for _ in range(4):
            (m,) = native_receive_one(sqs, native_url(sqs, queue), got)
            sqs.delete_message(QueueUrl=native_url(sqs, queue), ReceiptHandle=m["ReceiptHandle"])
    by_body = {m["Body"] + repr(sorted(m.get("MessageAttributes", {}))): m for m in got}
    assert len(by_body) == 4
    text = next(m for m in got if m["Body"] == "naïve café")
    assert text["MessageAttributes"] == {
        "kind": {"DataType": "String", "StringValue": "order"},
        "n": {"DataType": "String", "StringValue": "1"},
    }, "attributes are String attributes, nothing added"
    assert text["Attributes"]["MessageGroupId"] == "customer-42", "the key is the MessageGroupId"

    binary = next(m for m in got if "portable.idempotency_key" in m.get("MessageAttributes", {}))
    assert binary["Body"] == ".", "a body SQS cannot carry as text travels as an attribute under '.'"
    assert binary["MessageAttributes"] == {
        "portable.body": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff binary"},
        "portable.idempotency_key": {"DataType": "String", "StringValue": "order-7"},
    }
    empty = next(
        m for m in got if m["Body"] == "." and "portable.idempotency_key" not in m.get("MessageAttributes", {})
    )
    assert empty["MessageAttributes"] == {"portable.body": {"DataType": "String", "StringValue": "empty"}}

    keyless = next(m for m in got if m["Body"] == "keyless")
    assert "MessageAttributes" not in keyless or keyless["MessageAttributes"] == {}
    if fifo:
        assert binary["Attributes"]["MessageDeduplicationId"] == "order-7", "the idempotency key dedups on FIFO"
        assert keyless["Attributes"]["MessageGroupId"].startswith("portable.nokey."), "a group of its own"
        assert len(text["Attributes"]["MessageDeduplicationId"]) == 32, "a random id: equal bodies are not dropped"
    else:
        assert "MessageGroupId" not in keyless["Attributes"]


def native_receive_one(sqs: Any, queue_url: str, into: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One message from a FIFO queue (the next group may wait for this one's delete)."""
    for _ in range(10):
        resp = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=1,
            MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"],
        )  # fmt: skip
        if resp.get("Messages"):
            into.extend(resp["Messages"])
            return list(resp["Messages"])
    raise AssertionError("boto3 received nothing from the FIFO queue")


def test_portable_round_trip_reports_its_own_attributes_as_headers(queue: str) -> None:
    with pm.open_topic(queue, profile=contract_profile(queue)) as topic:
        topic.publish(b"\x00 binary", key="k-1", attributes={"b": "2", "a": "1"}, idempotency_key="idem-1")
    with pm.open_subscription(queue, profile=contract_profile(queue), lease=30) as sub:
        (m,) = receive(sub, 1)
        assert m.body == b"\x00 binary"
        assert m.headers == (("a", b"1"), ("b", b"2"), ("portable.idempotency_key", b"idem-1")), (
            "portable.body is the body, not a header"
        )
        assert dict(m.attributes) == {"a": "1", "b": "2", "portable.idempotency_key": "idem-1"}
        assert (m.key, m.key_bytes) == ("k-1", b"k-1")
        m.ack()
