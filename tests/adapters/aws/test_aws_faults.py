"""The resilience fault suite on s3:// and sqs:// over moto: nothing lost, nothing applied twice.

Counts are small: moto serves a few hundred requests a second.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from portable.messaging import open_driver
from portable.testing.fault_suite import MessagingFaultSuite, StorageFaultSuite


class TestS3Faults(StorageFaultSuite):
    fault_count = 200

    @pytest.fixture
    def fault_storage_url(self, s3_bucket: str, unique_name: str, query: str) -> str:
        return f"s3://{s3_bucket}/{unique_name}?engine=fsspec&{query}"


class TestSQSFaults(MessagingFaultSuite):
    fault_count = 100

    @pytest.fixture
    def fault_queue_url(self, query: str, unique_name: str) -> Iterator[str]:
        driver = open_driver(f"sqs://base?{query}")
        try:
            with driver.temporary(unique_name) as url:
                yield url
        finally:
            driver.close()
