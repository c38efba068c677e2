"""The messaging contract on Tansu (no Java), kafka-python engine (test_kafka_contract has the others)."""

from __future__ import annotations

import pytest
from test_kafka_contract import kafka_url

from portable.testing.messaging_suite import MessagingContract
from tests.emulators.harness import EmulatorInfo


class TestTansu(MessagingContract):
    # Tansu completes a group join only after half the session timeout, and under a loaded CI run (both
    # engines' suites on one broker) it drops and re-accepts connections at join: the first delivery
    # can take longer than the suite's default 10 s wait. A wait, not an assertion on speed.
    delivery_timeout = 30.0

    @pytest.fixture
    def queue_url(self, tansu_broker: EmulatorInfo, unique_name: str) -> str:
        return kafka_url(tansu_broker, unique_name, "kafka-python")
