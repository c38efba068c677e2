"""The messaging contract on Tansu, confluent-kafka (librdkafka) engine."""

from __future__ import annotations

import pytest
from test_kafka_contract import kafka_url

from portable.testing.messaging_suite import MessagingContract
from tests.emulators.harness import EmulatorInfo

pytest.importorskip("confluent_kafka", reason="engine=confluent needs confluent-kafka (the [confluent] extra)")


class TestTansuConfluent(MessagingContract):
    # as TestTansu: Tansu's group join waits half a session timeout, longer under load
    delivery_timeout = 30.0

    @pytest.fixture
    def queue_url(self, tansu_broker: EmulatorInfo, unique_name: str) -> str:
        return kafka_url(tansu_broker, unique_name, "confluent")
