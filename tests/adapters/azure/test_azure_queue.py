"""azqueue:// on Azurite: the messaging contract, plus what only Azure Storage Queues have."""

from __future__ import annotations

import pytest

from portable.testing.messaging_suite import MessagingContract


class TestStorageQueueContract(MessagingContract):
    xfail: dict[str, str] = {}

    @pytest.fixture
    def queue_url(self, azure: dict[str, str], fresh_queue: str, queue_query: str) -> str:
        return f"azqueue://{azure['account']}/{fresh_queue}?{queue_query}"
