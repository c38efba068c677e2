"""RetryPolicy and Guard.call: one retry layer, only retryable errors, backoff, Retry-After, deadlines."""

from __future__ import annotations

import contextvars
import random
import time
from pathlib import Path

import pytest

from portable.errors import (
    DeadlineExceeded,
    Internal,
    InvalidArgument,
    NotFound,
    PortableError,
    Throttled,
    Unavailable,
)
from portable.resilience import RetryPolicy, attempt_timeout, current_deadline, deadline, remaining
from portable.resilience._deadline import DEADLINE_AT

from .helpers import Ceiling, Script, Sleeps, SlowDown, guard


def test_the_success_path_calls_once_and_never_sleeps() -> None:
    sleeps = Sleeps()
    fn = Script(value=42)
    assert guard(sleeps=sleeps).call("read", "get k", fn) == 42
    assert fn.calls == 1 and sleeps == []


def test_a_retryable_error_is_retried_up_to_max_attempts_then_wrapped_once() -> None:
    sleeps = Sleeps()
    fn = Script(*[ConnectionResetError("reset by peer")] * 10)
    with pytest.raises(Unavailable) as info:
        guard(attempts=4, sleeps=sleeps).call("read", "get k", fn)
    assert fn.calls == 4 and len(sleeps) == 3
    assert isinstance(info.value.__cause__, ConnectionResetError)
    assert str(info.value) == "[fake] get k: reset by peer"


def test_a_transient_failure_then_success_returns_the_result() -> None:
    fn = Script(TimeoutError("read timed out"), ConnectionError("refused"), value="data")
    assert guard().call("read", "get k", fn) == "data"
    assert fn.calls == 3


def test_an_error_that_is_not_retryable_is_raised_at_once() -> None:
    sleeps = Sleeps()
    fn = Script(FileNotFoundError("no such key"))
    with pytest.raises(NotFound, match="get k: no such key") as info:
        guard(sleeps=sleeps).call("read", "get k", fn)
    assert fn.calls == 1 and sleeps == []
    assert isinstance(info.value.__cause__, FileNotFoundError)


def test_a_portable_error_from_the_driver_passes_through_unwrapped() -> None:
    original = NotFound("gone")
    with pytest.raises(NotFound) as info:
        guard().call("read", "get k", Script(original))
    assert info.value is original and info.value.provider == "fake"


def test_a_classifier_bug_does_not_hide_the_real_error() -> None:
    g = guard()

    def broken(exc: BaseException) -> object:
        raise RuntimeError("classifier bug")

    g._classifier.code_of = broken  # type: ignore[method-assign]
    with pytest.raises(Internal, match="the real problem") as info:
        g.call("read", "get k", Script(ValueError("the real problem")))
    assert isinstance(info.value.__cause__, ValueError)


def test_secrets_in_provider_errors_are_masked() -> None:
    with pytest.raises(Unavailable) as info:
        guard(attempts=1).call(
            "read", "get k", Script(ConnectionError("https://admin:hunter2@host/x?sig=abcdef&token=t0ps3cret"))
        )
    text = str(info.value)
    assert "hunter2" not in text and "abcdef" not in text and "t0ps3cret" not in text


def test_backoff_is_full_jitter_under_an_exponential_ceiling() -> None:
    policy = RetryPolicy(initial_backoff=0.1, multiplier=2, max_backoff=1.0)
    rng = random.Random(7)
    for attempt, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (9, 1.0)]:
        delays = [policy.backoff(attempt, None, rng) for _ in range(2000)]
        assert 0 <= min(delays) < 0.05 * ceiling, attempt
        assert 0.95 * ceiling < max(delays) <= ceiling, attempt


def test_retry_after_is_a_floor_on_the_backoff() -> None:
    sleeps = Sleeps()
    fn = Script(SlowDown(retry_after=2.5), value="ok")
    assert guard(sleeps=sleeps, initial_backoff=0.01).call("write", "put k", fn) == "ok"
    assert sleeps == [2.5]


def test_a_throttle_without_retry_after_backs_off_one_step_further() -> None:
    sleeps = Sleeps()
    g = guard(sleeps=sleeps, rng=Ceiling(), initial_backoff=0.1, multiplier=2)
    g.call("write", "put k", Script(SlowDown(), ConnectionError("x"), value=1))
    assert sleeps == pytest.approx([0.2, 0.2])  # throttled: ceiling of attempt 2; then attempt 2's own


def test_a_retry_after_beyond_max_retry_after_is_raised_not_slept() -> None:
    sleeps = Sleeps()
    with pytest.raises(Throttled) as info:
        guard(sleeps=sleeps, max_retry_after=60).call("write", "put k", Script(SlowDown(retry_after=3600)))
    assert sleeps == [] and info.value.retry_after == 3600


def test_retries_never_sleep_past_the_deadline() -> None:
    sleeps = Sleeps()
    fn = Script(SlowDown(retry_after=5.0), value="late")
    with deadline(1.0), pytest.raises(DeadlineExceeded, match="deadline reached after 1 attempt") as info:
        guard(sleeps=sleeps).call("write", "put k", fn)
    assert sleeps == [] and fn.calls == 1
    assert isinstance(info.value.__cause__, SlowDown)
    assert isinstance(info.value, TimeoutError)


def test_a_call_after_the_deadline_passed_is_not_made() -> None:
    fn = Script(value="never")

    def run() -> None:
        DEADLINE_AT.set(time.monotonic() - 1)
        with pytest.raises(DeadlineExceeded, match="before the call was made"):
            guard().call("read", "get k", fn)

    contextvars.copy_context().run(run)
    assert fn.calls == 0


def test_nested_deadlines_keep_the_earlier_one() -> None:
    assert current_deadline() is None and remaining() is None and remaining(3.0) == 3.0
    with deadline(10) as outer:
        with deadline(100) as inner:
            assert current_deadline() == outer and inner > outer
            left = remaining()
            assert left is not None and 9 < left <= 10
        with deadline(1):
            assert current_deadline() is not None and current_deadline() < outer  # type: ignore[operator]
    assert current_deadline() is None
    with pytest.raises(InvalidArgument, match="must be > 0"), deadline(0):
        pass


def test_the_profile_deadline_bounds_each_call() -> None:
    sleeps = Sleeps()
    fn = Script(SlowDown(retry_after=1.0), value="x")
    with pytest.raises(DeadlineExceeded):
        guard(sleeps=sleeps, deadline=0.5).call("write", "put k", fn)
    assert sleeps == [] and current_deadline() is None


def test_drivers_read_the_per_attempt_timeout() -> None:
    seen: list[float | None] = []

    def fn() -> None:
        seen.append(attempt_timeout())

    guard(timeout=2.0).call("read", "get k", fn)
    with deadline(0.5):
        guard(timeout=2.0).call("read", "get k", fn)
    guard().call("read", "get k", fn)
    assert seen[0] == 2.0
    assert seen[1] is not None and seen[1] <= 0.5
    assert seen[2] is None and attempt_timeout(7.0) == 7.0


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"initial_backoff": -1}, {"multiplier": 0.5}, {"timeout": 0}, {"max_retry_after": -1}],
)
def test_bad_retry_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(PortableError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_a_bucket_takes_its_policy_from_the_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unique_name: str) -> None:
    from portable.storage import open_bucket
    from portable.testing.chaos import chaos_of

    config = tmp_path / "portable.toml"
    config.write_text(
        "[profiles.flaky]\n"
        f'storage = "chaos+mem://{unique_name}?faults=unavailable&error_rate=1&retry_after=0"\n'
        "[profiles.flaky.resilience]\n"
        "max_attempts = 3\ninitial_backoff = 0\nmax_backoff = 0\n"
        "breaker = { failure_rate = 0.9, window = 40, min_calls = 30, open_seconds = 5 }\n"
    )
    monkeypatch.setenv("PORTABLE_CONFIG", str(config))
    monkeypatch.setenv("PORTABLE_PROFILE", "flaky")
    bucket = open_bucket()
    breaker = bucket._guard.breaker("read")
    assert bucket._guard.policy.retry.max_attempts == 3
    assert breaker is not None and breaker.policy.window == 40 and breaker.policy.open_seconds == 5
    with pytest.raises(Unavailable):
        bucket.get("k")
    assert chaos_of(bucket).stats.calls["get"] == 3  # one retry layer: exactly max_attempts calls
