"""RetryPolicy with tenacity's wait, stop and retry strategies, on Guard.call and Guard.acall.

Time is fake throughout: the guard's clock is a Clock that each driver call and
each wait advances, and the waits are recorded instead of slept, so every
assertion is about attempts and waits, never about how long a test took.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from portable.errors import (
    ConfigError,
    DeadlineExceeded,
    NotFound,
    PortableError,
    Throttled,
    Unavailable,
)
from portable.resilience import Guard, ResiliencePolicy, RetryPolicy, deadline

from .helpers import Ceiling, Clock, Driver, Script, SlowDown

tenacity = pytest.importorskip("tenacity")

FACES = ["call", "acall"]


class Waits(list[float]):
    """Records each wait and moves the fake clock past it, for both faces."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock

    def __call__(self, seconds: float) -> None:
        self.append(seconds)
        self.clock.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        self(seconds)


class Slow(Script):
    """A scripted driver call whose every attempt takes ``took`` seconds of the fake clock."""

    def __init__(self, clock: Clock, *errors: BaseException, took: float = 1.0, value: Any = "ok") -> None:
        super().__init__(*errors, value=value)
        self.clock = clock
        self.took = took

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.clock.advance(self.took)
        return super().__call__(*args, **kwargs)


def make(clock: Clock, waits: Waits, **retry: Any) -> Guard:
    policy = ResiliencePolicy(retry=RetryPolicy(**retry), breaker=None)
    return Guard("fake", "tenacity", Driver(), policy, clock=clock, sleep=waits, asleep=waits.asleep, rng=Ceiling())


def run(guard: Guard, face: str, fn: Callable[[], Any]) -> Any:
    """``guard.call(fn)``, or ``guard.acall`` of a coroutine function doing the same."""
    if face == "call":
        return guard.call("read", "get k", fn)

    async def afn() -> Any:
        return fn()

    return asyncio.run(guard.acall("read", "get k", afn))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def waits(clock: Clock) -> Waits:
    return Waits(clock)


@pytest.fixture
def top_of_the_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """tenacity's random waits draw from the ``random`` module: make them pick the top of their range."""
    monkeypatch.setattr(tenacity.wait.random, "uniform", lambda a, b: b)


@pytest.mark.parametrize("face", FACES)
def test_stop_after_attempt_and_wait_fixed(face: str, clock: Clock, waits: Waits) -> None:
    fn = Script(*[ConnectionResetError("reset by peer")] * 10)
    g = make(clock, waits, max_attempts=10, wait=tenacity.wait_fixed(0.5), stop=tenacity.stop_after_attempt(3))
    with pytest.raises(Unavailable) as info:
        run(g, face, fn)
    assert fn.calls == 3 and waits == [0.5, 0.5]
    assert isinstance(info.value.__cause__, ConnectionResetError)


@pytest.mark.parametrize("face", FACES)
def test_max_attempts_still_bounds_a_stop_strategy(face: str, clock: Clock, waits: Waits) -> None:
    fn = Script(*[ConnectionError("refused")] * 10)
    g = make(clock, waits, max_attempts=2, wait=tenacity.wait_fixed(0.5), stop=tenacity.stop_after_attempt(5))
    with pytest.raises(Unavailable):
        run(g, face, fn)
    assert fn.calls == 2 and waits == [0.5]


@pytest.mark.parametrize("face", FACES)
def test_wait_random_exponential_widens_per_attempt(
    face: str, clock: Clock, waits: Waits, top_of_the_range: None
) -> None:
    fn = Script(*[ConnectionError("refused")] * 5, value="data")
    g = make(clock, waits, max_attempts=10, wait=tenacity.wait_random_exponential(multiplier=0.1, max=0.5))
    assert run(g, face, fn) == "data"
    assert fn.calls == 6 and waits == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])


@pytest.mark.parametrize("face", FACES)
def test_wait_random_exponential_stays_within_its_window(face: str, clock: Clock, waits: Waits) -> None:
    fn = Script(*[ConnectionError("refused")] * 7, value="data")
    g = make(clock, waits, max_attempts=8, wait=tenacity.wait_random_exponential(multiplier=0.1, max=5))
    assert run(g, face, fn) == "data"
    assert len(waits) == 7
    for attempt, wait in enumerate(waits, start=1):
        assert 0 <= wait <= min(5, 0.1 * 2 ** (attempt - 1)), attempt


@pytest.mark.parametrize("face", FACES)
def test_stop_after_delay_counts_the_guards_clock_from_the_calls_start(face: str, clock: Clock, waits: Waits) -> None:
    # each attempt takes 1 s and each wait 3 s: failures at 1, 5, 9 and 13 s after the start
    fn = Slow(clock, *[ConnectionError("refused")] * 10, took=1.0)
    g = make(clock, waits, max_attempts=100, wait=tenacity.wait_fixed(3), stop=tenacity.stop_after_delay(10))
    with pytest.raises(Unavailable):
        run(g, face, fn)
    assert fn.calls == 4 and waits == [3, 3, 3]


@pytest.mark.parametrize("face", FACES)
def test_stop_before_delay_sees_the_upcoming_wait(face: str, clock: Clock, waits: Waits) -> None:
    fn = Slow(clock, *[ConnectionError("refused")] * 10, took=1.0)
    g = make(clock, waits, max_attempts=100, wait=tenacity.wait_fixed(3), stop=tenacity.stop_before_delay(10))
    with pytest.raises(Unavailable):
        run(g, face, fn)
    assert fn.calls == 3 and waits == [3, 3]  # the third failure, at 9 s, would wait until 12 s


@pytest.mark.parametrize("face", FACES)
def test_retry_if_exception_type_narrows_what_is_retried(face: str, clock: Clock, waits: Waits) -> None:
    fn = Script(SlowDown(retry_after=0.25), ConnectionError("refused"), value="never")
    g = make(clock, waits, wait=tenacity.wait_fixed(0.1), retry=tenacity.retry_if_exception_type(Throttled))
    with pytest.raises(Unavailable):
        run(g, face, fn)
    assert fn.calls == 2 and waits == [0.25]  # the throttle was retried (after its Retry-After); the reset not


@pytest.mark.parametrize("face", FACES)
def test_a_retry_strategy_cannot_retry_what_the_driver_calls_final(face: str, clock: Clock, waits: Waits) -> None:
    fn = Script(FileNotFoundError("no such key"))
    g = make(clock, waits, retry=tenacity.retry_if_exception_type(Exception))
    with pytest.raises(NotFound):
        run(g, face, fn)
    assert fn.calls == 1 and waits == []


@pytest.mark.parametrize("face", FACES)
def test_retry_after_is_a_floor_under_a_strategys_wait(face: str, clock: Clock, waits: Waits) -> None:
    fn = Script(SlowDown(retry_after=2.0), SlowDown(), value="ok")
    g = make(clock, waits, wait=tenacity.wait_exponential(multiplier=1, max=60))
    assert run(g, face, fn) == "ok"
    # 2 s asked for; then a throttle that names no wait is waited as attempt 3's (4 s), not attempt 2's
    assert waits == [2.0, 4.0]


@pytest.mark.parametrize("face", FACES)
def test_a_retry_after_beyond_max_retry_after_is_raised_not_waited(face: str, clock: Clock, waits: Waits) -> None:
    fn = Script(SlowDown(retry_after=3600))
    g = make(clock, waits, wait=tenacity.wait_fixed(1), max_retry_after=60)
    with pytest.raises(Throttled):
        run(g, face, fn)
    assert fn.calls == 1 and waits == []


@pytest.mark.parametrize("face", FACES)
def test_a_strategys_wait_never_runs_past_the_deadline(face: str, clock: Clock, waits: Waits) -> None:
    fn = Script(*[ConnectionError("refused")] * 3, value="late")
    g = make(clock, waits, wait=tenacity.wait_fixed(3600), stop=tenacity.stop_after_attempt(3))

    def in_deadline() -> Any:
        with deadline(600):
            return run(g, face, fn)

    with pytest.raises(DeadlineExceeded, match="deadline reached after 1 attempt"):
        in_deadline()
    assert fn.calls == 1 and waits == []


@pytest.mark.parametrize("face", FACES)
def test_strategies_see_the_portable_error_and_the_call(face: str, clock: Clock, waits: Waits) -> None:
    seen: list[tuple[int, type[BaseException], float | None, float]] = []

    def note(state: Any) -> bool:
        seen.append((state.attempt_number, type(state.outcome.exception()), state.seconds_since_start, state.idle_for))
        return True

    fn = Slow(clock, ConnectionError("refused"), SlowDown(retry_after=1.5), took=0.5, value="ok")
    g = make(clock, waits, retry=note, wait=tenacity.wait_fixed(2))
    assert run(g, face, fn) == "ok"
    assert seen == [(1, Unavailable, 0.5, 0.0), (2, Throttled, 3.0, 2.0)]


@pytest.mark.parametrize("face", FACES)
def test_a_success_consults_no_strategy(face: str, clock: Clock, waits: Waits) -> None:
    consulted: list[object] = []
    g = make(clock, waits, retry=consulted.append, stop=consulted.append, wait=consulted.append)
    assert run(g, face, Script(value=7)) == 7
    assert consulted == [] and waits == []


def test_the_builtin_backoff_is_tenacitys_full_jitter_drawn_from_the_guards_rng() -> None:
    policy = RetryPolicy(initial_backoff=0.1, max_backoff=5, multiplier=3)
    ceiling = tenacity.wait_exponential(multiplier=0.1, max=5, exp_base=3)
    state = tenacity.RetryCallState(None, None, (), {})
    for attempt in range(1, 12):
        state.attempt_number = attempt
        assert policy.backoff(attempt, rng=Ceiling()) == pytest.approx(ceiling(state)), attempt
    assert policy.backoff(5000, rng=Ceiling()) == 5  # no OverflowError after thousands of attempts


@pytest.mark.parametrize(
    "kwargs",
    [
        {"wait": 3},
        {"stop": "after 3"},
        {"retry": object()},
        {"wait": tenacity.wait_fixed(1), "initial_backoff": -1},
        {"stop": tenacity.stop_after_attempt(3), "max_attempts": 0},
        {"retry": tenacity.retry_if_exception_type(Throttled), "max_retry_after": -1},
    ],
)
def test_bad_values_are_refused_before_any_call(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as info:
        RetryPolicy(**kwargs)
    assert isinstance(info.value, PortableError)


def test_without_tenacity_the_default_policy_retries_as_before() -> None:
    code = (
        "import sys\n"
        "sys.modules['tenacity'] = None  # as if it were not installed: importing it fails\n"
        "from portable.driver import Classifier\n"
        "from portable.resilience import Guard, ResiliencePolicy, RetryPolicy\n"
        "calls = []\n"
        "def flaky():\n"
        "    calls.append(1)\n"
        "    if len(calls) < 3:\n"
        "        raise ConnectionError('refused')\n"
        "    return 'ok'\n"
        "policy = ResiliencePolicy(retry=RetryPolicy(initial_backoff=0, max_backoff=0))\n"
        "assert Guard('fake', 'none', Classifier(), policy).call('read', 'get k', flaky) == 'ok'\n"
        "print(len(calls))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "3"
