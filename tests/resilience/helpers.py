"""Fakes for the resilience tests: a scripted driver, a fake clock and a recording sleep."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from portable.driver import Classifier, ErrorCode
from portable.resilience import BreakerPolicy, Guard, ResiliencePolicy, RetryBudget, RetryPolicy


class SlowDown(Exception):
    """A provider's throttling answer, with an optional Retry-After."""

    def __init__(self, retry_after: float | None = None) -> None:
        super().__init__("SlowDown: reduce your request rate")
        self.retry_after = retry_after


class Driver(Classifier):
    """Classifies like a provider: SlowDown is THROTTLED; the base class knows the rest."""

    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, SlowDown):
            return ErrorCode.THROTTLED
        return super().code_of(exc)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


class Script:
    """A driver call that raises the queued errors in turn, then returns ``value``."""

    def __init__(self, *errors: BaseException, value: Any = "ok") -> None:
        self.errors = list(errors)
        self.value = value
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.value


class Ceiling(random.Random):
    """Jitter that always picks the top of the range, so backoffs are predictable."""

    def uniform(self, a: float, b: float) -> float:
        return b


def guard(
    *,
    attempts: int = 4,
    breaker: BreakerPolicy | None = None,
    deadline: float | None = None,
    timeout: float | None = None,
    clock: Callable[[], float] | None = None,
    sleeps: Sleeps | None = None,
    rng: random.Random | None = None,
    endpoint: str = "test-endpoint",
    budget: RetryBudget | None = RetryBudget(),
    **retry: Any,
) -> Guard:
    policy = ResiliencePolicy(
        retry=RetryPolicy(max_attempts=attempts, timeout=timeout, **retry), breaker=breaker, deadline=deadline,
        retry_budget=budget,
    )
    return Guard(
        "fake", endpoint, Driver(), policy,
        clock=clock or Clock(), sleep=sleeps if sleeps is not None else Sleeps(), rng=rng or random.Random(1),
    )
