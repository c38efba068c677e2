"""The messaging contract on Apache Kafka 4 (KRaft, the reference) and on Tansu (no Java).

Each test gets a fresh topic and consumer group (``unique_name``), with three
partitions so that keys spread. Both brokers run with
``session_timeout_ms=6000``: Tansu forms a group half a session timeout after
the first join, so that is 3 s per new group there.
"""

from __future__ import annotations

import pytest

from portable.testing.messaging_suite import MessagingContract
from tests.emulators.harness import EmulatorInfo

#: options every test URL carries: a short session (Tansu's join wait) and three partitions
TEST_OPTIONS = "session_timeout_ms=6000&partitions=3"


def kafka_url(broker: EmulatorInfo, name: str, **options: str) -> str:
    extra = "".join(f"&{k}={v}" for k, v in options.items())
    return f"kafka://{broker.endpoints['bootstrap']}/{name}?group={name}&{TEST_OPTIONS}{extra}"


class TestApacheKafka(MessagingContract):
    @pytest.fixture
    def queue_url(self, kafka_broker: EmulatorInfo, unique_name: str) -> str:
        return kafka_url(kafka_broker, unique_name)


class TestTansu(MessagingContract):
    # Tansu completes a group join only after half the session timeout, and under a loaded CI run (both
    # engines' suites on one broker) it drops and re-accepts connections at join: the first delivery
    # can take longer than the suite's default 10 s wait. A wait, not an assertion on speed.
    delivery_timeout = 30.0

    @pytest.fixture
    def queue_url(self, tansu_broker: EmulatorInfo, unique_name: str) -> str:
        return kafka_url(tansu_broker, unique_name)


class TestApacheKafkaConfluent(MessagingContract):
    """The same contract on the confluent-kafka (librdkafka) engine."""

    @pytest.fixture
    def queue_url(self, kafka_broker: EmulatorInfo, unique_name: str) -> str:
        pytest.importorskip("confluent_kafka", reason="engine=confluent needs confluent-kafka")
        return kafka_url(kafka_broker, unique_name, engine="confluent")


class TestTansuConfluent(MessagingContract):
    # Tansu completes a group join only after half the session timeout, and under a loaded CI run (both
    # engines' suites on one broker) it drops and re-accepts connections at join: the first delivery
    # can take longer than the suite's default 10 s wait. A wait, not an assertion on speed.
    delivery_timeout = 30.0

    @pytest.fixture
    def queue_url(self, tansu_broker: EmulatorInfo, unique_name: str) -> str:
        pytest.importorskip("confluent_kafka", reason="engine=confluent needs confluent-kafka")
        return kafka_url(tansu_broker, unique_name, engine="confluent")
