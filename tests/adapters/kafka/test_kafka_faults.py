"""The fault suite (portable.testing.fault_suite) on kafka://, kafka-python engine, on Apache
Kafka 4 (test_kafka_faults_confluent has the other engine, in its own file for xdist):
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
