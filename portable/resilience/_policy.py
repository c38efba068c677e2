"""The policies: plain, frozen records of how a guard retries, breaks and bounds a call."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

#: A tenacity strategy (``tenacity.wait_*``, ``stop_*``, ``retry_*``) or any callable of the same
#: shape: it takes a ``tenacity.RetryCallState`` and returns seconds (wait) or a verdict (stop, retry).
#: Typed loosely on purpose, so that tenacity's types never appear in portable's public API.
Strategy = Callable[[Any], Any]


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
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.multiplier < 1:
            raise ConfigError("backoffs must be >= 0 and multiplier >= 1")
        if self.timeout is not None and not self.timeout > 0:
            raise ConfigError(f"timeout must be > 0 seconds or None, got {self.timeout}")
        if self.max_retry_after < 0:
            raise ConfigError(f"max_retry_after must be >= 0, got {self.max_retry_after}")
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
        if not 0 < self.failure_rate <= 1:
            raise ConfigError(f"breaker failure_rate must be in (0, 1], got {self.failure_rate}")
        if self.window < 1 or self.min_calls < 1 or self.half_open_probes < 1:
            raise ConfigError("breaker window, min_calls and half_open_probes must be >= 1")
        if self.min_calls > self.window:
            raise ConfigError(
                f"breaker min_calls ({self.min_calls}) must be <= window ({self.window}), or it never opens"
            )
        if self.open_seconds < 0:
            raise ConfigError("breaker open_seconds must be >= 0")


@dataclass(frozen=True, slots=True)
class ResiliencePolicy:
    """The retry and breaker policy of a profile (``[profiles.X.resilience]``).

    ``breaker=None`` turns breakers off. ``deadline`` is a default overall
    deadline in seconds for each guarded call, retries included, or None; a
    tighter :func:`deadline` block still wins.
    """

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    breaker: BreakerPolicy | None = field(default_factory=BreakerPolicy)
    deadline: float | None = None

    def __post_init__(self) -> None:
        if self.deadline is not None and not self.deadline > 0:
            raise ConfigError(f"deadline must be > 0 seconds or None, got {self.deadline}")
