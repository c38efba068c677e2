"""The policies: plain, frozen records of how a guard retries, breaks and bounds a call."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

#: A tenacity strategy (``tenacity.wait_*``, ``stop_*``, ``retry_*``) or any callable of the same
#: shape: it takes a ``tenacity.RetryCallState`` and returns seconds (wait) or a verdict (stop, retry).
#: Typed loosely on purpose, so that tenacity's types never appear in portable's public API.
Strategy = Callable[[Any], Any]


def shown_value(value: Any) -> str:
    """A setting's value as a reader wrote it: ``-5`` (not ``-5.0``), ``inf``, ``'x'``."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def _check_number(
    name: str,
    value: Any,
    expectation: str,
    *,
    integer: bool = False,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
    optional: bool = False,
) -> None:
    """Refuse ``value`` unless it is a finite number (an int if ``integer``) in range.

    The message is ``NAME = VALUE: EXPECTATION``, so that the configuration
    loader can put the file and the table in front of it
    (``portable.toml: profiles.prod.resilience.deadline = -5: must be ...``).

    Raises:
        ConfigError: a bool, a non-number, NaN, an infinity, or a number out of range.
    """
    if value is None and optional:
        return
    kinds = (int,) if integer else (int, float)
    ok = isinstance(value, kinds) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (
            (minimum is None or value >= minimum)
            and (above is None or value > above)
            and (maximum is None or value <= maximum)
        )
    if not ok:
        raise ConfigError(f"{name} = {shown_value(value)}: {expectation}")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed call is retried.

    The built-in backoff is full jitter under an exponential ceiling. Optional
    tenacity strategies replace or narrow parts of it; they run only after a
    failure, so a policy that names none costs nothing on the success path,
    and tenacity is imported only when a strategy is first consulted.

    Attributes:
        max_attempts: attempts in all, the first included. Defaults to 4; 1 turns retries off.
            It bounds ``stop`` too: give a larger one to let ``stop`` decide alone.
        initial_backoff: the first backoff ceiling in seconds. Defaults to 0.1.
        max_backoff: the largest backoff ceiling in seconds. Defaults to 20.
        multiplier: growth of the ceiling per attempt. Defaults to 2.
        timeout: per-attempt timeout in seconds, or None for the SDK's default.
            ``Guard.acall`` enforces it; sync drivers read :func:`attempt_timeout`
            and pass it to their SDK. Defaults to None.
        max_retry_after: the longest Retry-After honoured, in seconds; a
            provider that asks for a longer wait gets the error raised at once
            (retrying within the call would only block). Defaults to 60.
        wait: a tenacity wait strategy (``tenacity.wait_random_exponential(...)``,
            ``wait_fixed(...)``, ...) that replaces the built-in backoff. A
            Retry-After is still a floor under its wait, and a throttled answer
            without one is waited as if it were one attempt later. Defaults to None.
        stop: a tenacity stop strategy (``tenacity.stop_after_delay(...)``,
            ``stop_after_attempt(...)``, ...): retrying stops when it says so or
            when ``max_attempts`` is reached, whichever comes first. It sees the
            upcoming wait (``stop_before_delay`` works). Defaults to None.
        retry: a tenacity retry strategy (``tenacity.retry_if_exception_type(...)``,
            ...) that narrows which errors are retried. It sees the wrapped
            :class:`~portable.errors.PortableError` (``Throttled``, ``Unavailable``,
            ...), never the provider's own type, and can only narrow: an error
            the driver calls not retryable is never retried. Defaults to None.

    Every strategy sees a ``tenacity.RetryCallState`` whose outcome is the
    failed attempt's error and whose clock is the guard's; a result is never
    retried. Deadlines hold as without strategies: no wait runs past one.

    Raises:
        ConfigError: a number out of range, or a strategy that is not callable.
    """

    max_attempts: int = 4
    initial_backoff: float = 0.1
    max_backoff: float = 20.0
    multiplier: float = 2.0
    timeout: float | None = None
    max_retry_after: float = 60.0
    wait: Strategy | None = None
    stop: Strategy | None = None
    retry: Strategy | None = None

    def __post_init__(self) -> None:
        _check_number("max_attempts", self.max_attempts, "must be a whole number >= 1", integer=True, minimum=1)
        seconds = "must be a finite number of seconds >= 0"
        _check_number("initial_backoff", self.initial_backoff, seconds, minimum=0)
        _check_number("max_backoff", self.max_backoff, seconds, minimum=0)
        _check_number("multiplier", self.multiplier, "must be a finite number >= 1", minimum=1)
        _check_number("timeout", self.timeout, "must be a positive number of seconds", above=0, optional=True)
        _check_number("max_retry_after", self.max_retry_after, seconds, minimum=0)
        for name in ("wait", "stop", "retry"):
            strategy = getattr(self, name)
            if strategy is not None and not callable(strategy):
                raise ConfigError(
                    f"{name} must be a tenacity {name} strategy (a callable), got {type(strategy).__name__}"
                )

    def backoff(self, attempt: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based), by the built-in backoff.

        Full jitter: uniform in [0, min(max_backoff, initial * multiplier**(attempt-1))],
        and never less than the provider's ``retry_after``. This is tenacity's
        ``wait_random_exponential(multiplier=initial_backoff, max=max_backoff,
        exp_base=multiplier)``, drawn from ``rng`` instead of the ``random`` module.
        """
        try:
            ceiling = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        except OverflowError:  # thousands of attempts: the ceiling has long been max_backoff
            ceiling = self.max_backoff
        delay = (rng or random).uniform(0.0, ceiling)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return delay


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    """When a circuit breaker opens and how it recovers.

    Attributes:
        failure_rate: the failure fraction over the window that opens it. Defaults to 0.5.
        window: how many recent calls the rate is taken over. Defaults to 20.
        min_calls: the fewest calls in the window before it may open. Defaults to 10.
        open_seconds: how long it stays open before a probe. Defaults to 30.
        half_open_probes: how many calls may probe at once while half-open;
            that many successes close it. Defaults to 1.
    """

    failure_rate: float = 0.5
    window: int = 20
    min_calls: int = 10
    open_seconds: float = 30.0
    half_open_probes: int = 1

    def __post_init__(self) -> None:
        _check_number(
            "failure_rate", self.failure_rate, "must be a fraction above 0 and at most 1", above=0, maximum=1
        )
        for name in ("window", "min_calls", "half_open_probes"):
            _check_number(name, getattr(self, name), "must be a whole number >= 1", integer=True, minimum=1)
        if self.min_calls > self.window:
            raise ConfigError(f"min_calls = {self.min_calls}: must be <= window ({self.window}), or it never opens")
        _check_number("open_seconds", self.open_seconds, "must be a finite number of seconds >= 0", minimum=0)


@dataclass(frozen=True, slots=True)
class RetryBudget:
    """How many retries an endpoint may take across all its calls: a token bucket.

    One budget is kept per (provider, endpoint) and shared by every guard,
    sync or async, that talks to that endpoint. Every call the guard lets
    through deposits ``ratio`` tokens; the clock adds ``min_per_second``
    tokens a second; the bucket holds at most ``max_tokens`` and starts full.
    Each retry takes one token. A retry that finds less than one token is not
    made: the call fails at once with its last error, whose message says the
    retry budget is exhausted. First attempts never need a token, so a budget
    never refuses a call, only its retries.

    So over any stretch of time, retries are at most ``ratio`` of the calls,
    plus ``min_per_second`` a second, plus the ``max_tokens`` a quiet endpoint
    has saved up: a partial outage that does not open the breaker multiplies
    the load on the endpoint by about ``1 + ratio``, not by ``max_attempts``.
    The same idea as the AWS SDKs' retry quota, gRPC's retry throttling and
    Finagle's retry budget.

    Attributes:
        ratio: tokens each call deposits: the fraction of calls that may be
            retried once load is high. Defaults to 0.25: with 4 attempts a
            20% transient error rate needs 0.248 retries a call and is
            absorbed; a 30% rate would need 0.42 and is held to about 1.25x
            the calls. 0 leaves only the floor.
        min_per_second: tokens the clock adds each second, the floor that
            lets a quiet endpoint retry. Defaults to 10.
        max_tokens: the most tokens the bucket holds (the largest burst of
            retries), and what it starts with. Defaults to 100.

    Raises:
        ConfigError: a number out of range, NaN or infinite.
    """

    ratio: float = 0.25
    min_per_second: float = 10.0
    max_tokens: float = 100.0

    def __post_init__(self) -> None:
        _check_number("ratio", self.ratio, "must be a fraction from 0 to 1", minimum=0, maximum=1)
        _check_number("min_per_second", self.min_per_second, "must be a finite number >= 0", minimum=0)
        _check_number("max_tokens", self.max_tokens, "must be a finite number >= 1", minimum=1)


@dataclass(frozen=True, slots=True)
class ResiliencePolicy:
    """The retry, breaker and retry-budget policy of a profile (``[profiles.X.resilience]``).

    ``breaker=None`` turns breakers off; ``retry_budget=None`` turns the
    per-endpoint retry budget off (each call then retries up to
    ``max_attempts`` whatever the others do). ``deadline`` is a default
    overall deadline in seconds for each guarded call, retries included, or
    None; a tighter :func:`deadline` block still wins.

    Raises:
        ConfigError: ``deadline`` is not a positive finite number of seconds, or
            a part is not the record it should be.
    """

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    breaker: BreakerPolicy | None = field(default_factory=BreakerPolicy)
    deadline: float | None = None
    retry_budget: RetryBudget | None = field(default_factory=RetryBudget)

    def __post_init__(self) -> None:
        _check_number("deadline", self.deadline, "must be a positive number of seconds", above=0, optional=True)
        for name, kind in (("retry", RetryPolicy), ("breaker", BreakerPolicy), ("retry_budget", RetryBudget)):
            value = getattr(self, name)
            if not isinstance(value, kind) and not (value is None and name != "retry"):
                raise ConfigError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
