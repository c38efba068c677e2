"""The pytest plugin (entry point ``pytest11: portable``).

It gives every suite a ``unique_name`` fixture (a fresh, provider-legal name
per test, so suites never touch existing data) and applies each suite
subclass's ``xfail`` table.
"""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def unique_name() -> str:
    """A fresh lower-case name, valid as a bucket, queue, topic or key prefix everywhere."""
    return f"pt-{uuid.uuid4().hex[:16]}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Apply a suite subclass's ``xfail = {"test_name": "provider behaviour"}`` table.

    The marks are strict: when a provider starts to pass, the suite says so.
    """
    for item in items:
        cls = getattr(item, "cls", None)
        table = getattr(cls, "xfail", None) if cls is not None else None
        if not table:
            continue
        name = getattr(item, "originalname", item.name)
        reason = table.get(name)
        if reason:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
