"""The messaging contract on Apache Pulsar 4.0.7 standalone, for each subscription type a
portable Subscription can be: shared (competing consumers) and key_shared (a key to one
consumer at a time). Each test gets a fresh topic and subscription (a unique name; the
subscription is created when the suite opens it, before anything is published, and the
dead-letter subscription before the first message is moved). They are not deleted: the broker
is one per pytest worker with a throwaway data directory, and deleting two topics per test
took a second or more each on a loaded machine. ``temporary()`` itself is exercised by the
fault and interop tests. The Key_Shared class runs the sync face only (the async face is the
same driver through the thread-pool adapter, covered by the Shared class) to keep the CI time.

Below the suite: what the contract does not cover (the broker listens on loopback only,
failover subscriptions, Pulsar's own DeadLetterPolicy, a lost lease, stats). One module, so
that one pytest worker (``--dist loadfile``) starts one broker for all of it."""

from __future__ import annotations

import time

import pytest

import portable.messaging as pm
from portable.errors import PreconditionFailed
from portable.resilience import ResiliencePolicy, RetryPolicy
from portable.testing.messaging_suite import MessagingContract
from tests.emulators.harness import (
    EmulatorInfo,
    ProcessRecord,
    is_loopback,
    listening_sockets,
    related_processes,
)
from tests.emulators.pulsar import wire_check


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
    @pytest.fixture(autouse=True, params=["sync"])
    def face(self, request: pytest.FixtureRequest) -> str:
        """The sync face only (see the module docstring)."""
        self._face = "sync"
        return "sync"

    @pytest.fixture
    def queue_url(self, pulsar_broker: EmulatorInfo, unique_name: str) -> str:
        return pulsar_url(pulsar_broker, unique_name, unique_name, type="key_shared")


# -- beyond the contract ----------------------------------------------------------------

QUICK = ResiliencePolicy(retry=RetryPolicy(max_attempts=3, initial_backoff=0.05, max_backoff=0.5), breaker=None)


def url(broker: EmulatorInfo, name: str, **options: str) -> str:
    return pulsar_url(broker, name, name, **options)


def receive_one(sub: pm.Subscription, timeout: float = 20.0, lease: float = 30.0) -> pm.Message:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        got = sub.receive(1, wait=1.0, lease=lease)
        if got:
            return got[0]
    raise AssertionError(f"nothing received in {timeout} s")


def test_the_broker_listens_on_loopback_only_and_answers_on_the_wire(pulsar_broker: EmulatorInfo) -> None:
    leader = ProcessRecord.of(pulsar_broker.pid)
    assert leader is not None
    sockets = listening_sockets(related_processes([leader], pulsar_broker.pid))
    assert {port for _, port in sockets} >= set(pulsar_broker.ports)
    assert all(is_loopback(address) for address, _ in sockets), sockets
    wire_check(pulsar_broker)


def test_failover_subscription_receives_acks_and_counts_no_redeliveries(pulsar_broker: EmulatorInfo, unique_name: str) -> None:
    u = url(pulsar_broker, unique_name, type="failover")
    with pm.open_subscription(u, policy=QUICK) as sub, pm.open_topic(u, policy=QUICK) as topic:
        assert not sub.capabilities.delivery_count
        mid = topic.publish(b"one", key="k")
        m = receive_one(sub)
        assert (m.id, m.body, m.key, m.delivery_attempt) == (mid, b"one", "k", 1)
        m.nack()
        again = receive_one(sub)
        assert again.id == mid and again.delivery_attempt >= 1
        again.ack()
        assert sub.receive(10, wait=1.0) == []


def test_max_redeliveries_moves_a_message_with_pulsars_own_policy(pulsar_broker: EmulatorInfo, unique_name: str) -> None:
    u = url(pulsar_broker, unique_name, max_redeliveries="1")
    with pm.open_subscription(u, policy=QUICK) as sub, pm.open_topic(u, policy=QUICK) as topic:
        dlq_url = sub.dead_letter_url
        assert dlq_url is not None
        topic.publish(b"poison", key="pk", attributes={"origin": "policy"})
        first = receive_one(sub)
        first.nack()
        second = receive_one(sub)
        assert second.delivery_attempt == 2
        second.nack()
        # the third delivery would exceed max_redeliveries=1: the client moves it instead
        assert sub.receive(10, wait=3.0) == []
        with pm.open_subscription(dlq_url, policy=QUICK) as dlq:
            dead = receive_one(dlq)
            assert dead.body == b"poison" and dead.key == "pk"
            assert dead.attributes["origin"] == "policy"
            assert dead.attributes["REAL_TOPIC"] == f"persistent://public/default/{unique_name}"
            dead.ack()


def test_ack_after_the_lease_ended_is_precondition_failed_and_the_message_comes_back(
    pulsar_broker: EmulatorInfo, unique_name: str
) -> None:
    u = url(pulsar_broker, unique_name)
    with pm.open_subscription(u, policy=QUICK) as sub, pm.open_topic(u, policy=QUICK) as topic:
        mid = topic.publish(b"slow")
        stale = receive_one(sub, lease=1.0)
        fresh = receive_one(sub, lease=30.0)
        assert fresh.id == mid and fresh.delivery_attempt == 2
        with pytest.raises(PreconditionFailed):
            stale.ack()
        stats = sub.stats()
        assert stats.in_flight == 1 and stats.delayed == 0
        fresh.nack(delay=30.0)
        assert sub.stats().delayed == 1
