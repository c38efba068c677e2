"""The fault suite on GCP: nothing lost, nothing applied twice, on gs:// and pubsub:// under injected faults.

Counts are small: the emulators run on the same two cores as the tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from portable_gcp.firestore import FirestoreIdempotencyStore

from portable.testing.fault_suite import MessagingFaultSuite, StorageFaultSuite, messaging_fault_run
from portable.testing.messaging_suite import temporary_url

pytestmark = pytest.mark.filterwarnings("ignore:The return_immediately flag is deprecated:DeprecationWarning")


class TestGCSFaults(StorageFaultSuite):
    fault_count = 500

    @pytest.fixture
    def fault_storage_url(self, gcs: dict[str, str], unique_name: str) -> str:
        return f"gs://{gcs['bucket']}/{unique_name}?engine=fsspec&endpoint_url={gcs['endpoint_url']}"


def _pubsub_url(pubsub_emulator: Any, name: str) -> str:
    info = pubsub_emulator.endpoints
    return f"pubsub://{info['project']}/topics/{name}?endpoint={info['host_port']}"


class TestPubSubFaults(MessagingFaultSuite):
    fault_count = 500

    @pytest.fixture
    def fault_queue_url(self, pubsub_emulator: Any, unique_name: str) -> Iterator[str]:
        yield from temporary_url(_pubsub_url(pubsub_emulator, unique_name), unique_name)


def test_pubsub_with_a_firestore_idempotency_store_under_faults(
    pubsub_emulator: Any, firestore_emulator: Any, unique_name: str
) -> None:
    """All GCP: Pub/Sub delivers, Firestore remembers what was handled."""
    store = FirestoreIdempotencyStore(
        firestore_emulator.endpoints["project"], unique_name, endpoint=firestore_emulator.endpoints["host_port"]
    )
    try:
        for url in temporary_url(_pubsub_url(pubsub_emulator, unique_name), unique_name):
            report = messaging_fault_run(url, count=100, error_rate=0.2, seed=11, concurrency=4, store=store)
            report.check(require_faults=("lost_reply", "duplicate"))
    finally:
        store.close()
