"""The fault suite (portable.testing.fault_suite) on kafka://, both engines, on Apache Kafka 4:
publishes with lost replies, duplicated and reordered deliveries, leases ending mid-handler;
nothing lost, nothing handled twice (with an idempotency store)."""

from __future__ import annotations

import pytest

from portable.testing.fault_suite import MessagingFaultSuite
from tests.emulators.harness import EmulatorInfo


def fault_url(broker: EmulatorInfo, name: str, engine: str) -> str:
    return (
        f"kafka://{broker.endpoints['bootstrap']}/{name}?group={name}&session_timeout_ms=6000"
        f"&partitions=3&engine={engine}"
    )


class TestKafkaPythonFaults(MessagingFaultSuite):
    fault_count = 300

    @pytest.fixture
    def fault_queue_url(self, kafka_broker: EmulatorInfo, unique_name: str) -> str:
        return fault_url(kafka_broker, unique_name, "kafka-python")


class TestConfluentFaults(MessagingFaultSuite):
    fault_count = 300

    @pytest.fixture
    def fault_queue_url(self, kafka_broker: EmulatorInfo, unique_name: str) -> str:
        pytest.importorskip("confluent_kafka", reason="engine=confluent needs confluent-kafka")
        return fault_url(kafka_broker, unique_name, "confluent")
