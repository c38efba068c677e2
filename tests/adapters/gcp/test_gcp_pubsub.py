"""pubsub:// on Google's Pub/Sub emulator: the messaging contract, and what is particular to Pub/Sub."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from portable_gcp.pubsub import PubSubMessaging

from portable.driver.messaging import OutgoingMessage
from portable.errors import InvalidArgument, InvalidURL, NotFound, TooLarge
from portable.messaging import open_driver, open_subscription, open_topic
from portable.testing.messaging_suite import (
    MessagingContract,
    contract_profile,
    poll,
    temporary_url,
)

# receive(wait=0) pulls with return_immediately, which the client calls deprecated; the
# service still honours it, and it is the only way not to wait on an empty subscription.
pytestmark = pytest.mark.filterwarnings("ignore:The return_immediately flag is deprecated:DeprecationWarning")


@pytest.fixture(scope="session")
def pubsub(pubsub_emulator: Any) -> dict[str, str]:
    return {"project": pubsub_emulator.endpoints["project"], "endpoint": pubsub_emulator.endpoints["host_port"]}


def base_url(pubsub: dict[str, str], name: str) -> str:
    return f"pubsub://{pubsub['project']}/topics/{name}?endpoint={pubsub['endpoint']}"


@contextlib.contextmanager
def temporary(pubsub: dict[str, str], name: str, **settings: Any) -> Iterator[str]:
    driver = open_driver(base_url(pubsub, name))
    assert isinstance(driver, PubSubMessaging)
    try:
        with driver.create_temporary(name, **settings) as url:
            yield url
    finally:
        driver.close()


class TestPubSubContract(MessagingContract):
    """The suite's fixture: a subscription with message ordering and a dead-letter policy (``temporary``)."""

    min_lease = 2.0
    max_deliveries = 5  # the least max_delivery_attempts a dead-letter policy takes

    @pytest.fixture
    def queue_url(self, pubsub: dict[str, str], unique_name: str) -> Iterator[str]:
        yield from temporary_url(base_url(pubsub, unique_name), unique_name)


#: The tests whose outcome exactly-once delivery changes: acks, nacks, leases, the consumer loop.
EXACTLY_ONCE_TESTS = {
    "test_publish_then_receive_carries_body_attributes_and_key",
    "test_every_published_message_is_delivered_at_least_once",
    "test_acked_message_is_not_delivered_again",
    "test_unacked_message_is_delivered_again_after_its_lease",
    "test_extend_lease_prevents_redelivery",
    "test_nack_gives_the_message_back_at_once",
    "test_nack_with_delay_holds_the_message_back",
    "test_ack_after_the_lease_was_lost_fails",
    "test_settling_twice",
    "test_poison_message_goes_to_the_native_dead_letter_queue",
    "test_run_acks_what_succeeds_and_retries_what_fails_once",
    "test_run_stops_gracefully_and_never_acks_unhandled_messages",
}


class TestPubSubExactlyOnceContract(MessagingContract):
    """Those tests again on an exactly-once subscription with a dead-letter policy.

    Without message ordering: the emulator also orders messages that have no
    ordering key on an ordered exactly-once subscription, refusing their
    out-of-order acks (TRANSIENT_FAILURE_UNORDERED_ACK_ID); Pub/Sub orders only
    messages that have a key.
    """

    min_lease = 2.0
    max_deliveries = 5

    @pytest.fixture
    def queue_url(self, pubsub: dict[str, str], unique_name: str) -> Iterator[str]:
        with temporary(pubsub, unique_name, ordering=False, exactly_once=True) as url:
            yield url


for _name in dir(MessagingContract):
    if _name.startswith("test_") and _name not in EXACTLY_ONCE_TESTS:
        setattr(TestPubSubExactlyOnceContract, _name, None)  # not collected: run once, above


@pytest.fixture
def queue_url(pubsub: dict[str, str], unique_name: str) -> Iterator[str]:
    yield from temporary_url(base_url(pubsub, unique_name), unique_name)


def test_subscription_settings_become_capabilities(pubsub: dict[str, str], unique_name: str) -> None:
    with (
        temporary(pubsub, unique_name, ordering=True, exactly_once=True) as url,
        open_subscription(url, profile=contract_profile(url)) as sub,
    ):
        caps = sub.capabilities
        assert caps.ordering and caps.exactly_once and caps.native_dead_letter and caps.delivery_count
        assert (caps.max_lease_seconds, caps.max_batch, caps.max_message_bytes) == (600.0, 1000, 10_000_000)
        assert sub.dead_letter_url == base_url(pubsub, unique_name).replace(
            f"/topics/{unique_name}", f"/subscriptions/{unique_name}-dlq"
        )
    with temporary(pubsub, unique_name + "-plain", ordering=False) as url, open_subscription(url) as sub:
        assert not sub.capabilities.ordering and not sub.capabilities.exactly_once


def test_a_message_of_the_largest_size_is_published(queue_url: str) -> None:
    with open_topic(queue_url) as topic, open_subscription(queue_url) as sub:
        body = b"x" * (topic.capabilities.max_message_bytes - 100)
        mid = topic.publish(body)
        [m] = poll(sub, 1, 10.0)
        assert (m.id, len(m.body)) == (mid, len(body))
        m.ack()


def test_messages_over_10_mb_are_refused_before_any_request(pubsub: dict[str, str]) -> None:
    url = f"pubsub://{pubsub['project']}/topics/never-created?endpoint={pubsub['endpoint']}"
    with open_topic(url) as topic, pytest.raises(TooLarge):
        topic.publish(b"x" * 10_000_001)


def test_an_empty_message_is_refused_before_any_request(pubsub: dict[str, str]) -> None:
    url = f"pubsub://{pubsub['project']}/topics/never-created?endpoint={pubsub['endpoint']}"
    with open_topic(url) as topic, pytest.raises(InvalidArgument, match="empty"):
        topic.publish(b"")


def test_a_missing_topic_is_not_found(pubsub: dict[str, str], unique_name: str) -> None:
    with open_topic(base_url(pubsub, unique_name)) as topic, pytest.raises(NotFound):
        topic.publish(b"x")


def test_publish_batch_splits_requests_by_bytes_and_keeps_key_order(
    pubsub: dict[str, str], unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.pubsub_v1 import PublisherClient

    with temporary(pubsub, unique_name) as url:
        small = url + "&batch_max_bytes=2048&batch_max_messages=7"
        with open_topic(small) as topic, open_subscription(url, profile=contract_profile(url)) as sub:
            assert topic.capabilities.max_batch == 7
            client = topic.as_(PublisherClient)
            sizes: list[int] = []
            send = client.publish

            def counted(*args: Any, **kwargs: Any) -> Any:
                sizes.append(len(kwargs["request"].messages))
                return send(*args, **kwargs)

            monkeypatch.setattr(client, "publish", counted)
            items = [OutgoingMessage(f"{k}:{i}".encode() + b"." * 300, key=k) for i in range(12) for k in "ab"]
            ids = topic.publish_batch(items)
            assert len(set(ids)) == 24
            assert sum(sizes) == 24 and max(sizes) <= 5, sizes  # ~370 bytes each, 2,048 a request
            seen: dict[str, list[int]] = {"a": [], "b": []}
            until = time.monotonic() + 20
            while sum(map(len, seen.values())) < 24 and time.monotonic() < until:
                got = sub.receive(24, wait=1.0, lease=30)
                for m in got:
                    key, _, rest = m.body.partition(b":")
                    seen[key.decode()].append(int(rest.rstrip(b".")))
                sub.ack_many(got)
            assert seen == {"a": list(range(12)), "b": list(range(12))}


@pytest.mark.parametrize(
    "url",
    [
        "pubsub://test-project/topics/ab",
        "pubsub://test-project/topics/1starts-with-digit",
        "pubsub://test-project/topics/goog-reserved",
        "pubsub://test-project/topics/has space",
        "pubsub://test-project/subscriptions/x",
        "pubsub://test-project/topics/okay-topic?subscription=ab",
        "pubsub://Bad_Project/topics/okay-topic",
        "pubsub://test-project/queues/okay",
        "pubsub://test-project/topics",
        "pubsub://test-project/topics/okay-topic?batch_max_messages=0",
        "pubsub://test-project/topics/okay-topic?timeout=-1",
        "pubsub://test-project/topics/okay-topic?colour=blue",
    ],
)
def test_bad_urls_fail_before_any_request(url: str) -> None:
    with pytest.raises(InvalidURL):
        open_driver(url + ("&" if "?" in url else "?") + "endpoint=127.0.0.1:9")


def test_a_topic_url_has_no_subscription_side(pubsub: dict[str, str]) -> None:
    with pytest.raises(InvalidURL, match="subscription"):
        open_subscription(base_url(pubsub, "some-topic"))
    with pytest.raises(InvalidURL, match="topic"):
        open_topic(f"pubsub://{pubsub['project']}/subscriptions/some-sub?endpoint={pubsub['endpoint']}")


def test_rpcs_are_not_retried_by_the_client() -> None:
    """A dead endpoint fails once per portable attempt, quickly: google.api_core's Retry is off."""
    from portable.errors import Unavailable
    from portable.resilience import ResiliencePolicy, RetryPolicy

    policy = ResiliencePolicy(retry=RetryPolicy(max_attempts=1), breaker=None)
    url = "pubsub://test-project/topics/unreachable?endpoint=127.0.0.1:9&timeout=5"
    started = time.monotonic()
    with open_topic(url, policy=policy) as topic, pytest.raises(Unavailable):
        topic.publish(b"x")
    assert time.monotonic() - started < 2.5  # api_core's default Retry keeps trying for a minute


# -- issue 15: headers, CloudEvents attribute names, delivery counts --------------------
@contextlib.contextmanager
def plain_subscription(pubsub: dict[str, str], name: str, *, dead_letter: bool = False) -> Iterator[str]:
    """Topic NAME and subscription NAME made with the GAPIC client: no dead-letter policy unless asked."""
    from google.pubsub_v1 import PublisherClient, SubscriberClient

    driver = open_driver(base_url(pubsub, name))
    project = pubsub["project"]
    topic, sub = f"projects/{project}/topics/{name}", f"projects/{project}/subscriptions/{name}"
    dlq = f"projects/{project}/topics/{name}-dlq"
    publisher, subscriber = driver.as_(PublisherClient), driver.as_(SubscriberClient)
    try:
        publisher.create_topic(name=topic)
        request: dict[str, Any] = {"name": sub, "topic": topic, "ack_deadline_seconds": 10}
        if dead_letter:
            publisher.create_topic(name=dlq)
            request["dead_letter_policy"] = {"dead_letter_topic": dlq, "max_delivery_attempts": 5}
        subscriber.create_subscription(request=request)
        yield base_url(pubsub, name) + f"&subscription={name}"
    finally:
        with contextlib.suppress(Exception):
            subscriber.delete_subscription(subscription=sub)
        for path in (topic, dlq):
            with contextlib.suppress(Exception):
                publisher.delete_topic(topic=path)
        driver.close()


def test_headers_are_the_attributes_as_utf8_bytes_sorted_by_name(queue_url: str) -> None:
    attributes = {"zeta": "last", "Alpha": "\u00e9t\u00e9", "ce-type": "t", "m": "1"}
    driver = open_driver(queue_url)
    try:
        driver.topic().publish(OutgoingMessage(b"h", attributes, key="k1"))
        side = driver.subscription()
        got: list[Any] = []
        until = time.monotonic() + 10
        while not got and time.monotonic() < until:
            got = side.receive(1, 1.0, 30)
        [m] = got
        assert m.headers == tuple(sorted((k, v.encode("utf-8")) for k, v in attributes.items()))
        assert [name for name, _ in m.headers] == ["Alpha", "ce-type", "m", "zeta"]
        assert (m.key, m.key_bytes) == ("k1", None)  # the key is a str: Message.key_bytes is its UTF-8
        side.ack(m.handle)
    finally:
        driver.close()


def test_message_headers_reach_users(queue_url: str) -> None:
    with open_topic(queue_url) as topic, open_subscription(queue_url) as sub:
        topic.publish(b"h", key="k1", attributes={"b": "2", "a": "1"})
        [m] = poll(sub, 1, 10.0)
        m.ack()
        assert m.headers == (("a", b"1"), ("b", b"2"))  # type: ignore[attr-defined]
        assert m.key_bytes == b"k1"  # type: ignore[attr-defined]


def test_delivery_count_is_declared_only_with_a_dead_letter_policy(pubsub: dict[str, str], unique_name: str) -> None:
    """Pub/Sub (and its emulator) counts delivery attempts only on a subscription with a dead-letter policy."""
    for dead_letter, name in ((False, unique_name), (True, unique_name + "-dl")):
        with (
            plain_subscription(pubsub, name, dead_letter=dead_letter) as url,
            open_topic(url) as topic,
            open_subscription(url, lease=10) as sub,
        ):
            assert sub.capabilities.delivery_count is dead_letter
            assert sub.capabilities.native_dead_letter is dead_letter
            topic.publish(b"again and again")
            attempts = []
            for _ in range(3):
                [m] = poll(sub, 1, 10.0)
                attempts.append(m.delivery_attempt)
                m.nack()
            assert attempts == ([1, 2, 3] if dead_letter else [1, 1, 1])


def test_run_with_max_deliveries_refuses_where_pubsub_cannot_count(pubsub: dict[str, str], unique_name: str) -> None:
    import threading

    from portable.errors import MissingCapability

    with plain_subscription(pubsub, unique_name) as url, open_topic(url) as topic, open_subscription(url) as sub:
        topic.publish(b"poison")
        stop = threading.Event()
        calls: list[int] = []

        def handler(m: Any) -> None:
            calls.append(m.delivery_attempt)
            if len(calls) >= 6:
                stop.set()  # base: attempt 1 forever, so it is never dead-lettered
            raise RuntimeError("poison")

        timer = threading.Timer(30.0, stop.set)
        timer.start()
        try:
            with pytest.raises(MissingCapability):
                sub.run(
                    handler, max_deliveries=3, dead_letter="mem://pubsub-refusal-dlq", backoff=0.0,
                    poll=0.2, stop_event=stop, handle_signals=False,
                )  # fmt: skip
        finally:
            timer.cancel()
        assert calls == []


def test_cloudevents_attribute_names_pass_through_untouched(queue_url: str) -> None:
    """The Pub/Sub binding's ``ce-`` names (and Kafka's ``ce_``) travel as they are, both ways."""
    attributes = {"ce-id": "1", "ce-source": "/s", "ce-specversion": "1.0", "ce-type": "t", "content-type": "text/plain"}
    with open_topic(queue_url) as topic, open_subscription(queue_url) as sub:
        topic.publish(b"data", attributes=attributes)
        [m] = poll(sub, 1, 10.0)
        assert dict(m.attributes) == attributes
        event = m.event()
        assert (event.id, event.source, event.type, event.data, event.datacontenttype) == ("1", "/s", "t", b"data", "text/plain")
        m.ack()
