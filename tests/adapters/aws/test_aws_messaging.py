"""sqs:// on moto: the messaging contract on a standard and a FIFO queue, plus what only SQS has."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from portable.driver.messaging import OutgoingMessage
from portable.errors import InvalidURL, NotFound, PreconditionFailed, TooLarge
from portable.messaging import Subscription, Topic, open_driver, open_subscription, open_topic
from portable.testing.messaging_suite import MessagingContract, contract_profile

SAME_ON_BOTH = "queue-type independent input checks: run once, on the FIFO class"


def _temporary_queue(query: str, name: str, fifo: bool) -> Iterator[str]:
    driver = open_driver(f"sqs://{'base.fifo' if fifo else 'base'}?{query}")
    try:
        with driver.temporary(name) as url:
            yield url
    finally:
        driver.close()


class TestSQSFifoContract(MessagingContract):
    @pytest.fixture
    def queue_url(self, query: str, unique_name: str) -> Iterator[str]:
        yield from _temporary_queue(query, unique_name, fifo=True)


class TestSQSStandardContract(MessagingContract):
    @pytest.fixture
    def queue_url(self, query: str, unique_name: str) -> Iterator[str]:
        yield from _temporary_queue(query, unique_name, fifo=False)

    @pytest.mark.skip(reason=SAME_ON_BOTH)
    def test_bad_publish_input_raises_a_typed_error_before_sending(self) -> None: ...

    @pytest.mark.skip(reason=SAME_ON_BOTH)
    def test_bad_input_sends_nothing(self) -> None: ...

    @pytest.mark.skip(reason=SAME_ON_BOTH)
    def test_bad_receive_and_settle_input_raises_typed_errors(self) -> None: ...

    @pytest.mark.skip(reason=SAME_ON_BOTH)
    def test_run_without_any_dead_letter_destination_fails_at_start(self) -> None: ...


# -- what only SQS has ------------------------------------------------------------------------
@pytest.fixture(params=[False, True], ids=["standard", "fifo"])
def queue(request: pytest.FixtureRequest, query: str, unique_name: str) -> Iterator[str]:
    yield from _temporary_queue(query, unique_name, fifo=request.param)


@pytest.fixture
def topic(queue: str) -> Iterator[Topic]:
    with open_topic(queue, profile=contract_profile(queue)) as t:
        yield t


@pytest.fixture
def sub(queue: str) -> Iterator[Subscription]:
    with open_subscription(queue, profile=contract_profile(queue), lease=30) as s:
        yield s


def _calls(handle: Topic | Subscription) -> list[str]:
    from botocore.client import BaseClient

    calls: list[str] = []
    handle.as_(BaseClient).meta.events.register("before-call.sqs", lambda model, **_: calls.append(model.name))
    return calls


def _raw_receive(handle: Topic | Subscription) -> dict[str, Any]:
    from botocore.client import BaseClient

    client = handle.as_(BaseClient)
    driver: Any = handle._driver
    resp = client.receive_message(
        QueueUrl=driver.queue_url,
        WaitTimeSeconds=2,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
    )
    (message,) = resp["Messages"]
    return message  # type: ignore[no-any-return]


def test_text_bodies_are_plain_sqs_bodies(topic: Topic) -> None:
    topic.publish('{"order": "naïve café"}'.encode(), attributes={"kind": "order"})
    raw = _raw_receive(topic)
    assert raw["Body"] == '{"order": "naïve café"}'
    assert raw["MessageAttributes"] == {"kind": {"DataType": "String", "StringValue": "order"}}


@pytest.mark.parametrize("body", [b"\x00\x01\xff binary", b"", b"bell\x07", "é".encode("latin-1")])
def test_bodies_sqs_cannot_carry_as_text_round_trip(topic: Topic, sub: Subscription, body: bytes) -> None:
    topic.publish(body, attributes={"n": "1"})
    [m] = sub.receive(1, wait=5)
    assert m.body == body
    assert dict(m.attributes) == {"n": "1"}  # the body attribute is not shown
    m.ack()


def test_size_counts_attribute_types_as_sqs_does(topic: Topic) -> None:
    limit = topic.capabilities.max_message_bytes
    assert limit == 262144 - 74
    calls = _calls(topic)
    attributes = {f"a{i}": "v" * 100 for i in range(9)}
    room = limit - sum(len(k) + len(v) for k, v in attributes.items())
    topic.publish(b"x" * room, attributes=attributes)  # exactly full: accepted
    with pytest.raises(TooLarge):
        topic.publish(b"x" * (room + 1), attributes=attributes)
    with pytest.raises(TooLarge):
        topic.publish(b"x" * 262145)
    assert calls == ["SendMessage"]


def test_publish_batch_splits_by_total_size(topic: Topic, sub: Subscription) -> None:
    calls = _calls(topic)
    bodies = [bytes([65 + i]) * 60_000 for i in range(10)]
    ids = topic.publish_batch(bodies)
    assert len(set(ids)) == 10
    assert calls.count("SendMessageBatch") == 3  # 256 KiB per batch request: 4 + 4 + 2
    got = []
    while len(got) < 10:
        batch = sub.receive(10, wait=5)
        assert batch
        got.extend(batch)
    assert sorted(m.body for m in got) == sorted(bodies)
    sub.ack_many(got)


def test_fifo_keys_and_idempotency_keys_are_native(query: str, unique_name: str) -> None:
    for url in _temporary_queue(query, unique_name, fifo=True):
        with open_topic(url) as t:
            t.publish(b"a", key="customer-7", idempotency_key="order-1")
            raw = _raw_receive(t)
            assert raw["Attributes"]["MessageGroupId"] == "customer-7"
            assert raw["Attributes"]["MessageDeduplicationId"] == "order-1"


def test_an_invalid_receipt_handle_is_precondition_failed(sub: Subscription) -> None:
    driver: Any = sub._driver
    with pytest.raises(PreconditionFailed):
        sub._guard.call("ack", "ack", driver.ack, "not-a-receipt-handle")


def test_a_missing_queue_is_not_found(query: str, unique_name: str) -> None:
    with pytest.raises(NotFound):
        open_topic(f"sqs://{unique_name}?{query}")


def test_sdk_retries_are_off(topic: Topic) -> None:
    from botocore.client import BaseClient

    assert topic.as_(BaseClient).meta.config.retries["total_max_attempts"] == 1


def test_dead_letter_url_opens_the_redrive_target(sub: Subscription) -> None:
    url = sub.dead_letter_url
    assert url is not None and url.startswith("sqs://") and "-dlq" in url
    with open_subscription(url) as dlq:
        assert dlq.receive(1) == []


def test_stats_count_available_and_in_flight(topic: Topic, sub: Subscription) -> None:
    topic.publish_batch([b"1", b"2", b"3"])
    [m] = sub.receive(1, wait=5)
    stats = sub.stats()
    assert (stats.available, stats.in_flight, stats.dead_letters) == (2, 1, 0)
    m.ack()


@pytest.mark.parametrize(
    "bad",
    [
        "sqs://has space",
        "sqs://" + "q" * 81,
        "sqs://q.fifo.fifo",
        "sqs://q/path",
        "sqs://q?owner=123",
        "sqs://q?max_message_bytes=2000000",
        "sqs://q?visibility=30",
    ],
)
def test_bad_urls_fail_before_any_request(bad: str) -> None:
    with pytest.raises(InvalidURL):
        open_driver(bad)


def test_a_batch_item_too_large_for_sqs_is_reported_alone(topic: Topic) -> None:
    driver: Any = topic._driver
    results = driver.publish_batch([OutgoingMessage(b"ok"), OutgoingMessage(b"x" * 262145)])
    assert isinstance(results[0], str)
    assert isinstance(results[1], TooLarge)
