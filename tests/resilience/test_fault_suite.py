"""The fault suite on the embedded providers: 10,000 puts and 10,000 messages under 20% faults.

Adapters run the same mix-ins with smaller counts against their emulators
(see portable/testing/fault_suite.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from portable.testing.fault_suite import (
    MessagingFaultSuite,
    StorageFaultSuite,
    messaging_fault_run,
    storage_fault_run,
)


@pytest.fixture(autouse=True)
def _quiet_consumer_logs() -> Iterator[None]:
    # The consumer loop logs every lost lease and refused ack; thousands are expected here.
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


class TestMemoryStorage(StorageFaultSuite):
    @pytest.fixture
    def fault_storage_url(self, unique_name: str) -> str:
        return f"mem://{unique_name}"


class TestFileStorage(StorageFaultSuite):
    @pytest.fixture
    def fault_storage_url(self, tmp_path: Path) -> str:
        return f"file://{tmp_path}/objects"


class TestMemoryQueue(MessagingFaultSuite):
    @pytest.fixture
    def fault_queue_url(self, unique_name: str) -> str:
        return f"mem://{unique_name}"


class TestSqliteQueue(MessagingFaultSuite):
    @pytest.fixture
    def fault_queue_url(self, tmp_path: Path, unique_name: str) -> str:
        return f"sqlite://{tmp_path}/queue.db?name={unique_name}"


def test_the_report_names_what_was_lost_or_doubled() -> None:
    from portable.testing.fault_suite import FaultReport

    report = FaultReport("storage", 3, lost=["a"], twice={"b": 2})
    with pytest.raises(AssertionError, match=r"1 lost \(e.g. \['a'\]\); 1 applied more than once .*no lost_reply"):
        report.check()


def test_a_run_with_the_idempotency_store_on_a_faulty_bucket(tmp_path: Path, unique_name: str) -> None:
    """The consumer's own idempotency records live on a bucket that also meets faults."""
    from portable.idempotency import BucketStore
    from portable.storage import open_bucket
    from portable.testing.fault_suite import fault_profile

    store = BucketStore(open_bucket(f"chaos+file://{tmp_path}/idem?seed=5&error_rate=0.2&retry_after=0",
                                    profile=fault_profile()))
    report = messaging_fault_run(f"mem://{unique_name}", count=500, store=store)
    report.check(require_faults=("lost_reply", "duplicate"))


def test_a_small_storage_run_reports_its_faults(unique_name: str) -> None:
    report = storage_fault_run(f"mem://{unique_name}", count=300, error_rate=0.3, seed=1)
    report.check()
    assert sum(report.injected.values()) > 50
