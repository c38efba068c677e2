"""Issue 15.7 on Google's Pub/Sub emulator: a subscription without a dead-letter policy cannot
count deliveries (Pub/Sub reports attempt 1 forever), so ``run(max_deliveries=...)`` refuses
at start unless it is given a store to count the handler's starts in.

Needs the Pub/Sub driver to report ``delivery_count=False`` for such a subscription
(portable_gcp.pubsub, from its subscription's dead-letter policy).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from portable.errors import MissingCapability
from portable.idempotency import MemoryStore
from portable.messaging import open_subscription

pytest.importorskip("google.cloud.pubsub_v1")


@pytest.fixture
def plain_subscription(pubsub_emulator: Any) -> Iterator[str]:
    """A topic and a subscription made with Google's own client, with no dead-letter policy."""
    from google.cloud import pubsub_v1

    project, host = pubsub_emulator.endpoints["project"], pubsub_emulator.endpoints["host_port"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PUBSUB_EMULATOR_HOST", host)
        publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        name = f"plain-{uuid.uuid4().hex[:10]}"
        topic, sub = f"projects/{project}/topics/{name}", f"projects/{project}/subscriptions/{name}"
        publisher.create_topic(name=topic)
        subscriber.create_subscription(name=sub, topic=topic)
        try:
            yield f"pubsub://{project}/subscriptions/{name}?endpoint={host}"
        finally:
            subscriber.delete_subscription(subscription=sub)
            publisher.delete_topic(topic=topic)
            subscriber.close()


def test_max_deliveries_without_a_dead_letter_policy_is_refused_naming_the_fix(
    plain_subscription: str,
) -> None:
    sub = open_subscription(plain_subscription, dead_letter="mem://pubsub-plain-dlq")
    assert sub.capabilities.delivery_count is False
    stop = threading.Event()
    stop.set()  # if it were not refused, it would return at once
    with pytest.raises(MissingCapability, match=r"--dead-letter-topic.*--max-delivery-attempts"):
        sub.run(lambda m: None, max_deliveries=3, stop_event=stop, handle_signals=False)


def test_with_a_store_max_deliveries_is_accepted(plain_subscription: str) -> None:
    sub = open_subscription(plain_subscription, dead_letter="mem://pubsub-plain-dlq")
    stop = threading.Event()
    stop.set()  # runs and stops at once: it was not refused
    stats = sub.run(
        lambda m: None,
        max_deliveries=3,
        idempotency=MemoryStore(),
        stop_event=stop,
        handle_signals=False,
        poll=0.1,
    )
    assert stats.received == 0
