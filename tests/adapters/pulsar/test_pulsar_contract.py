"""The messaging contract on Apache Pulsar 4.0.7 standalone, for each subscription type a
portable Subscription can be: shared (competing consumers) and key_shared (a key to one
consumer at a time). Each test gets a fresh topic, subscription and dead-letter topic
through the driver's ``temporary()`` (admin REST), deleted afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from portable.testing.messaging_suite import MessagingContract, temporary_url
from tests.emulators.harness import EmulatorInfo


def pulsar_url(broker: EmulatorInfo, topic: str, subscription: str | None = None, **options: str) -> str:
    query = {"admin_url": broker.endpoints["admin_url"], **options}
    if subscription is not None:
        query = {"subscription": subscription, **query}
    tail = "&".join(f"{k}={v}" for k, v in query.items())
    return f"{broker.endpoints['service_url']}/public/default/{topic}?{tail}"


class TestPulsarShared(MessagingContract):
    @pytest.fixture
    def queue_url(self, pulsar_broker: EmulatorInfo, unique_name: str) -> Iterator[str]:
        yield from temporary_url(pulsar_url(pulsar_broker, "contract", "contract"), unique_name)


class TestPulsarKeyShared(MessagingContract):
    @pytest.fixture
    def queue_url(self, pulsar_broker: EmulatorInfo, unique_name: str) -> Iterator[str]:
        for url in temporary_url(pulsar_url(pulsar_broker, "contract", "contract"), unique_name):
            yield url.replace("type=shared", "type=key_shared")
