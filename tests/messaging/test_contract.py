"""The messaging contract on the embedded providers: mem:// and sqlite://."""

from __future__ import annotations

from pathlib import Path

import pytest

from portable.testing.messaging_suite import MessagingContract


class TestMemoryQueue(MessagingContract):
    @pytest.fixture
    def queue_url(self, unique_name: str) -> str:
        return f"mem://{unique_name}"


class TestSqliteQueue(MessagingContract):
    @pytest.fixture
    def queue_url(self, tmp_path: Path, unique_name: str) -> str:
        return f"sqlite://{tmp_path / 'queue.db'}?name={unique_name}"
