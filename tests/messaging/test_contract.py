"""The messaging contract on the embedded providers: mem:// and sqlite://."""

from __future__ import annotations

import pytest

from portable.testing.messaging_suite import MessagingContract


class TestMemoryQueue(MessagingContract):
    @pytest.fixture
    def queue_url(self, unique_name: str) -> str:
        return f"mem://{unique_name}"
