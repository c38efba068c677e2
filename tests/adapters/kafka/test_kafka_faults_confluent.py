"""The fault suite on kafka://, confluent-kafka (librdkafka) engine, on Apache Kafka 4."""

from __future__ import annotations

import pytest
from test_kafka_faults import fault_url

from portable.testing.fault_suite import MessagingFaultSuite
from tests.emulators.harness import EmulatorInfo

pytest.importorskip("confluent_kafka", reason="engine=confluent needs confluent-kafka (the [confluent] extra)")


class TestConfluentFaults(MessagingFaultSuite):
    fault_count = 300

    @pytest.fixture
    def fault_queue_url(self, kafka_broker: EmulatorInfo, unique_name: str) -> str:
        return fault_url(kafka_broker, unique_name, "confluent")
