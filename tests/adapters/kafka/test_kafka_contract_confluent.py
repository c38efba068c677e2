"""The messaging contract on Apache Kafka 4, confluent-kafka (librdkafka) engine."""

from __future__ import annotations

import pytest
from test_kafka_contract import kafka_url

from portable.testing.messaging_suite import MessagingContract
from tests.emulators.harness import EmulatorInfo

pytest.importorskip("confluent_kafka", reason="engine=confluent needs confluent-kafka (the [confluent] extra)")


class TestApacheKafkaConfluent(MessagingContract):
    @pytest.fixture
    def queue_url(self, kafka_broker: EmulatorInfo, unique_name: str) -> str:
        return kafka_url(kafka_broker, unique_name, "confluent")
