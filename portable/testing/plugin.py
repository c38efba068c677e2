"""The pytest plugin (entry point ``pytest11: portable``).

It gives every suite a ``unique_name`` fixture (a fresh, provider-legal name
per test, so suites never touch existing data), runs each test of a suite
class that declares ``faces`` once per face (the ``face`` fixture, ids
``[sync]`` / ``[async]``), and applies each suite subclass's ``xfail`` table
(by the test's name, so an entry holds for every face).
"""

from __future__ import annotations

import os
import uuid

import pytest


@pytest.fixture
def unique_name() -> str:
    """A fresh lower-case name, valid as a bucket, queue, topic or key prefix everywhere."""
    return f"pt-{uuid.uuid4().hex[:16]}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``face`` with the suite class's ``faces`` (``("sync", "async")`` on the shipped suites).

    ``PORTABLE_CONTRACT_FACES`` (comma-separated, e.g. ``async``) narrows it for a run
    (``portable contract --face``); a face it names that the class lacks is an error.
    """
    cls = metafunc.cls
    faces = getattr(cls, "faces", None) if cls is not None else None
    if not faces or "face" not in metafunc.fixturenames:
        return
    wanted = os.environ.get("PORTABLE_CONTRACT_FACES", "").strip()
    if wanted:
        chosen = tuple(f.strip() for f in wanted.split(",") if f.strip())
        unknown = [f for f in chosen if f not in faces]
        if unknown:
            raise pytest.UsageError(
                f"PORTABLE_CONTRACT_FACES names {', '.join(unknown)}; {cls.__name__} has the faces {', '.join(faces)}"
            )
        faces = chosen
    metafunc.parametrize("face", list(faces), indirect=True, ids=list(faces))


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
