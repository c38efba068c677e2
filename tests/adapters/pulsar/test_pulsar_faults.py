"""The fault suite (portable.testing.fault_suite) on pulsar:// (shared subscription): publishes
with lost replies, duplicated and reordered deliveries, leases ending mid-handler; nothing
lost, nothing handled twice (with an idempotency store)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from portable.testing.fault_suite import MessagingFaultSuite
from portable.testing.messaging_suite import temporary_url
from tests.emulators.harness import EmulatorInfo


class TestPulsarFaults(MessagingFaultSuite):
    fault_count = 300

    @pytest.fixture
    def fault_queue_url(self, pulsar_broker: EmulatorInfo, unique_name: str) -> Iterator[str]:
        base = f"{pulsar_broker.endpoints['service_url']}/public/default/faults?subscription=faults"
        yield from temporary_url(f"{base}&admin_url={pulsar_broker.endpoints['admin_url']}", unique_name)
