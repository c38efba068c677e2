"""The public names of the resilience, idempotency and fault-injection modules."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

MODULES = [
    "portable.resilience",
    "portable.idempotency",
    "portable.testing.chaos",
    "portable.testing.fault_suite",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_is_sorted_and_complete(name: str) -> None:
    module = importlib.import_module(name)
    assert list(module.__all__) == sorted(set(module.__all__))
    for public in module.__all__:
        assert hasattr(module, public), f"{name}.{public}"


def test_the_public_names_the_issue_promised() -> None:
    from portable import idempotency, resilience

    for public in ("RetryPolicy", "BreakerPolicy", "CircuitBreaker", "Guard", "ResiliencePolicy", "deadline",
                   "remaining", "breaker_for", "reset_breakers", "current_deadline", "BreakerState", "RetryBudget",
                   "retry_budget_for", "add_retry_budget_listener", "reset_retry_budgets", "EndpointRetryBudget"):
        assert public in resilience.__all__
    assert callable(resilience.Guard.acall)
    for public in ("IdempotencyStore", "Claim", "fingerprint", "open_store", "idempotent", "MemoryStore",
                   "SqliteStore", "BucketStore"):
        assert public in idempotency.__all__


def test_importing_idempotency_and_chaos_loads_no_client_library() -> None:
    code = (
        "import sys, portable.idempotency, portable.testing.chaos, portable.resilience\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'redis','boto3','botocore','google','azure','kafka','fsspec','tenacity','pybreaker'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
