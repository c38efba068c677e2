"""The messaging contract on Apache Pulsar 4.0.7 standalone, for each subscription type a
portable Subscription can be: shared (competing consumers) and key_shared (a key to one
consumer at a time). Each test gets a fresh topic and subscription (a unique name; the
subscription is created when the suite opens it, before anything is published, and the
dead-letter subscription before the first message is moved). They are not deleted: the broker
is one per pytest worker with a throwaway data directory, and deleting two topics per test
took a second or more each on a loaded machine. ``temporary()`` itself is exercised by the
fault and interop tests. The Key_Shared class runs the sync face only (the async face is the
same driver through the thread-pool adapter, covered by the Shared class) to keep the CI time."""

from __future__ import annotations

import pytest

from portable.testing.messaging_suite import MessagingContract
from tests.emulators.harness import EmulatorInfo


def pulsar_url(broker: EmulatorInfo, topic: str, subscription: str | None = None, **options: str) -> str:
    query = {"admin_url": broker.endpoints["admin_url"], **options}
    if subscription is not None:
        query = {"subscription": subscription, **query}
    tail = "&".join(f"{k}={v}" for k, v in query.items())
    return f"{broker.endpoints['service_url']}/public/default/{topic}?{tail}"


class TestPulsarShared(MessagingContract):
    @pytest.fixture
    def queue_url(self, pulsar_broker: EmulatorInfo, unique_name: str) -> str:
        return pulsar_url(pulsar_broker, unique_name, unique_name)


class TestPulsarKeyShared(MessagingContract):
    faces = ("sync",)

    @pytest.fixture
    def queue_url(self, pulsar_broker: EmulatorInfo, unique_name: str) -> str:
        return pulsar_url(pulsar_broker, unique_name, unique_name, type="key_shared")
