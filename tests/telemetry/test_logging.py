"""Logging: one logger per domain; retries at INFO and breaker changes at WARNING, with the
redacted endpoint and the error code; nothing secret."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from portable.driver import Classifier
from portable.errors import CircuitOpen, Unavailable
from portable.messaging import open_topic
from portable.resilience import BreakerPolicy, Guard, ResiliencePolicy, RetryPolicy
from portable.storage import open_bucket
from portable.telemetry import add_observer
from portable.testing.chaos import chaos_of

from .test_spans import EndOutageAfter

POLICY = ResiliencePolicy(
    retry=RetryPolicy(max_attempts=3, initial_backoff=0.001, max_backoff=0.002),
    breaker=BreakerPolicy(window=2, min_calls=2, failure_rate=1.0, open_seconds=60),
    retry_budget=None,
)


def test_a_retry_is_logged_at_info_on_the_storage_logger(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="portable")
    with open_bucket("chaos+mem://log-retry?error_rate=0", policy=POLICY) as bucket:
        bucket.put("reports/k", b"v")
        chaos = chaos_of(bucket)
        chaos.start_outage("unavailable")
        remove = add_observer(EndOutageAfter(chaos, 1))
        try:
            assert bucket.get("reports/k") == b"v"
        finally:
            remove()
    [record] = [r for r in caplog.records if r.name == "portable.storage"]
    assert record.levelno == logging.INFO
    message = record.getMessage()
    assert message.startswith("retrying get reports/k on mem chaos+mem://log-retry in ")
    assert "attempt 1 failed with UNAVAILABLE (Unavailable)" in message
    assert record.portable_error_code == "UNAVAILABLE"  # type: ignore[attr-defined]
    assert record.portable_endpoint == "chaos+mem://log-retry"  # type: ignore[attr-defined]
    assert record.portable_attempt == 1  # type: ignore[attr-defined]


def test_a_publish_retry_is_logged_on_the_messaging_logger(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    caplog.set_level(logging.INFO, logger="portable")
    with open_topic(f"chaos+sqlite://{tmp_path}/q.db?name=log-orders&error_rate=0", policy=POLICY) as topic:
        chaos = chaos_of(topic)
        chaos.start_outage("throttle")
        remove = add_observer(EndOutageAfter(chaos, 1))
        try:
            topic.publish(b"m")
        finally:
            remove()
    [record] = [r for r in caplog.records if r.name == "portable.messaging" and r.getMessage().startswith("retrying")]
    assert "THROTTLED" in record.getMessage() and record.levelno == logging.INFO


def test_a_breaker_change_is_logged_at_warning_with_the_code(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="portable")
    with open_bucket("chaos+mem://log-breaker?error_rate=0", policy=POLICY) as bucket:
        chaos_of(bucket).start_outage("unavailable")
        for _ in range(2):
            with pytest.raises(Unavailable):
                bucket.get("k")
        with pytest.raises(CircuitOpen):
            bucket.get("k")
    [record] = [r for r in caplog.records if r.name == "portable.resilience"]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "circuit breaker mem:chaos+mem://log-breaker:read: closed -> open (last failure: UNAVAILABLE; failure rate 100%)"
    )
    assert record.portable_breaker_state == "open"  # type: ignore[attr-defined]


def test_no_secret_in_a_retry_log_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="portable")

    class Retryable(Classifier):
        def is_retryable(self, exc: BaseException) -> bool:
            return True

    guard = Guard("s3", "https://127.0.0.1:9/acct?sig=SIGSECRET123", Retryable(), POLICY, domain="storage")
    attempts = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("reset: token=TOKSECRET456")
        return "ok"

    from portable.telemetry._observe import OBSERVERS

    remove = add_observer(EndOutageAfter(None, 0))  # any observer: the observed path logs the same
    try:
        assert guard.call("read", "get k", flaky) == "ok"
    finally:
        remove()
    assert not OBSERVERS
    attempts.clear()
    assert guard.call("read", "get k", flaky) == "ok"  # the unobserved path
    lines = [r for r in caplog.records if r.getMessage().startswith("retrying get k on s3 https://127.0.0.1:9/acct?sig=*** in")]
    assert len(lines) == 2
    text = "\n".join(r.getMessage() + repr(r.__dict__) for r in caplog.records)
    assert "SIGSECRET123" not in text and "TOKSECRET456" not in text


def test_each_domain_has_its_logger() -> None:
    from portable._logging import DOMAIN_LOGGERS, domain_logger

    assert DOMAIN_LOGGERS == {
        "storage": "portable.storage",
        "messaging": "portable.messaging",
        "compute": "portable.compute",
        "idempotency": "portable.idempotency",
        "resilience": "portable.resilience",
    }
    assert domain_logger("storage").name == "portable.storage"
    assert domain_logger("").name == "portable.resilience"
