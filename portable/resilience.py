"""Retries, circuit breakers and deadlines: the only layer of portable that retries.

Every call a portable type makes to a driver goes through :meth:`Guard.call`:

1. If the operation's circuit breaker is open, fail fast with
   :class:`~portable.errors.CircuitOpen`, naming the breaker and its next probe.
2. Call the driver once, bare. On success that is all: the success path costs
   a dictionary lookup, a ``try`` and a breaker tally.
3. On failure, classify the native error with the driver (``code_of``,
   ``is_retryable``, ``retry_after``) and wrap it once in the matching
   :class:`~portable.errors.PortableError`, the native error as ``__cause__``.
4. Retry only a retryable error, with exponential backoff and full jitter,
   at least as long as the provider's Retry-After, never past the overall
   deadline (:func:`deadline`), at most ``max_attempts`` times in all.

Breakers are kept per (provider, endpoint, operation class) and shared by
every object that talks to the same endpoint, so one outage opens one breaker.
"""

from __future__ import annotations

import contextlib
import contextvars
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ParamSpec, Protocol, TypeVar

from ._redact import redact
from .errors import (
    CircuitOpen,
    DeadlineExceeded,
    ErrorCode,
    PortableError,
    error_for,
)

__all__ = [
    "BreakerPolicy",
    "BreakerState",
    "CircuitBreaker",
    "Guard",
    "ResiliencePolicy",
    "RetryPolicy",
    "breaker_for",
    "current_deadline",
    "deadline",
    "remaining",
    "reset_breakers",
]

P = ParamSpec("P")
R = TypeVar("R")


# ---------------------------------------------------------------- policies
@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed call is retried.

    Attributes:
        max_attempts: attempts in all, the first included. Defaults to 4; 1 turns retries off.
        initial_backoff: the first backoff ceiling in seconds. Defaults to 0.1.
        max_backoff: the largest backoff ceiling in seconds. Defaults to 20.
        multiplier: growth of the ceiling per attempt. Defaults to 2.
        timeout: per-attempt timeout in seconds that drivers pass to their
            SDK, or None for the SDK's default. Defaults to None.
    """

    max_attempts: int = 4
    initial_backoff: float = 0.1
    max_backoff: float = 20.0
    multiplier: float = 2.0
    timeout: float | None = None

    def __post_init__(self) -> None:
        from .errors import ConfigError

        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.multiplier < 1:
            raise ConfigError("backoffs must be >= 0 and multiplier >= 1")

    def backoff(self, attempt: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based).

        Full jitter: uniform in [0, min(max_backoff, initial * multiplier**(attempt-1))],
        and never less than the provider's ``retry_after``.
        """
        ceiling = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
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
        from .errors import ConfigError

        if not 0 < self.failure_rate <= 1:
            raise ConfigError(f"breaker failure_rate must be in (0, 1], got {self.failure_rate}")
        if self.window < 1 or self.min_calls < 1 or self.half_open_probes < 1:
            raise ConfigError("breaker window, min_calls and half_open_probes must be >= 1")
        if self.open_seconds < 0:
            raise ConfigError("breaker open_seconds must be >= 0")


@dataclass(frozen=True, slots=True)
class ResiliencePolicy:
    """The retry and breaker policy of a profile (``[profiles.X.resilience]``).

    ``breaker=None`` turns breakers off. ``deadline`` is a default overall
    deadline in seconds for each public call, or None.
    """

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    breaker: BreakerPolicy | None = field(default_factory=BreakerPolicy)
    deadline: float | None = None


# ---------------------------------------------------------------- deadlines
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("portable_deadline", default=None)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """Give every portable call inside the block an overall deadline.

    Retries stop (raising DeadlineExceeded) rather than sleep past it, and
    drivers read :func:`remaining` to bound each request. Nested deadlines
    keep the earlier one. Works per thread and per asyncio task.
    """
    if seconds <= 0:
        from .errors import InvalidArgument

        raise InvalidArgument(f"a deadline must be > 0 seconds, got {seconds}")
    at = time.monotonic() + seconds
    outer = _DEADLINE.get()
    token = _DEADLINE.set(at if outer is None else min(at, outer))
    try:
        yield at
    finally:
        _DEADLINE.reset(token)


def current_deadline() -> float | None:
    """The overall deadline (``time.monotonic()`` seconds) in force, or None."""
    return _DEADLINE.get()


def remaining(default: float | None = None) -> float | None:
    """Seconds left before the deadline in force, or ``default`` when there is none."""
    at = _DEADLINE.get()
    if at is None:
        return default
    return max(0.0, at - time.monotonic())


# ---------------------------------------------------------------- breakers
class BreakerState:
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    """A failure-rate circuit breaker over a sliding window of recent calls.

    Closed: calls pass; each outcome is tallied. When at least ``min_calls``
    of the last ``window`` calls are in and the failure fraction reaches
    ``failure_rate``, it opens. Open: calls fail fast with CircuitOpen until
    ``open_seconds`` have passed. Half-open: up to ``half_open_probes`` calls
    probe; that many successes close it, one failure reopens it.

    Thread-safe and asyncio-safe: the lock guards only the tallies and is
    never held while the protected call runs.
    """

    __slots__ = (
        "_clock",
        "_listeners",
        "_lock",
        "_outcomes",
        "_probe_successes",
        "_probes_in_flight",
        "name",
        "opened_at",
        "policy",
        "state",
    )

    def __init__(self, name: str, policy: BreakerPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.policy = policy
        self.state = BreakerState.CLOSED
        self.opened_at = 0.0
        self._clock = clock
        self._lock = threading.Lock()
        self._outcomes: deque[bool] = deque(maxlen=policy.window)
        self._probes_in_flight = 0
        self._probe_successes = 0
        self._listeners: list[Callable[[CircuitBreaker, str, str], None]] = []

    def __repr__(self) -> str:
        return f"CircuitBreaker({self.name!r}, state={self.state})"

    def add_listener(self, listener: Callable[[CircuitBreaker, str, str], None]) -> None:
        """Call ``listener(breaker, old_state, new_state)`` on every state change."""
        self._listeners.append(listener)

    @property
    def probe_at(self) -> float:
        """Clock time at which an open breaker lets a probe through."""
        return self.opened_at + self.policy.open_seconds

    def before_call(self) -> bool:
        """Admit or refuse a call. Returns True if the call is a half-open probe."""
        if self.state == BreakerState.CLOSED:
            return False
        with self._lock:
            if self.state == BreakerState.OPEN:
                if self._clock() < self.probe_at:
                    raise self._open_error()
                self._transition(BreakerState.HALF_OPEN)
            if self.state == BreakerState.HALF_OPEN:
                if self._probes_in_flight >= self.policy.half_open_probes:
                    raise self._open_error()
                self._probes_in_flight += 1
                return True
        return False

    def record(self, success: bool, probe: bool = False) -> None:
        """Tally one outcome (a call admitted by :meth:`before_call`)."""
        if success and not probe and self.state == BreakerState.CLOSED:
            self._outcomes.append(True)  # atomic; the full window drops its oldest
            return
        with self._lock:
            if probe or self.state == BreakerState.HALF_OPEN:
                if probe:
                    self._probes_in_flight = max(0, self._probes_in_flight - 1)
                if self.state != BreakerState.HALF_OPEN:
                    return
                if success:
                    self._probe_successes += 1
                    if self._probe_successes >= self.policy.half_open_probes:
                        self._transition(BreakerState.CLOSED)
                else:
                    self._transition(BreakerState.OPEN)
                return
            if self.state != BreakerState.CLOSED:
                return
            outcomes = self._outcomes
            outcomes.append(success)
            if (
                not success
                and len(outcomes) >= self.policy.min_calls
                and outcomes.count(False) / len(outcomes) >= self.policy.failure_rate
            ):
                self._transition(BreakerState.OPEN)

    def _transition(self, new: str) -> None:
        old, self.state = self.state, new
        if new == BreakerState.OPEN:
            self.opened_at = self._clock()
        self._probes_in_flight = 0
        self._probe_successes = 0
        if new == BreakerState.CLOSED:
            self._outcomes.clear()
        for listener in self._listeners:
            listener(self, old, new)

    def _open_error(self) -> CircuitOpen:
        wait = max(0.0, self.probe_at - self._clock())
        return CircuitOpen(
            f"circuit breaker {self.name} is open after repeated failures; "
            f"next probe in {wait:.1f}s",
            breaker=self.name,
            probe_at=self.probe_at,
        )


_BREAKERS: dict[tuple[str, str, str], CircuitBreaker] = {}
_BREAKERS_LOCK = threading.Lock()


def breaker_for(
    provider: str,
    endpoint: str,
    op_class: str,
    policy: BreakerPolicy,
    clock: Callable[[], float] = time.monotonic,
) -> CircuitBreaker:
    """The process-wide breaker for (provider, endpoint, operation class)."""
    key = (provider, endpoint, op_class)
    found = _BREAKERS.get(key)
    if found is not None:
        return found
    with _BREAKERS_LOCK:
        found = _BREAKERS.get(key)
        if found is None:
            found = CircuitBreaker(f"{provider}:{redact(endpoint)}:{op_class}", policy, clock)
            _BREAKERS[key] = found
        return found


def reset_breakers() -> None:
    """Forget every breaker (tests, or after reconfiguration)."""
    with _BREAKERS_LOCK:
        _BREAKERS.clear()


# ---------------------------------------------------------------- the guard
class _Classifier(Protocol):
    def code_of(self, exc: BaseException) -> ErrorCode: ...
    def is_retryable(self, exc: BaseException) -> bool: ...
    def retry_after(self, exc: BaseException) -> float | None: ...


#: codes that say the provider is unhealthy; others (NotFound, ...) are healthy answers
_UNHEALTHY = frozenset(
    {ErrorCode.UNAVAILABLE, ErrorCode.THROTTLED, ErrorCode.DEADLINE_EXCEEDED, ErrorCode.UNKNOWN}
)


class Guard:
    """Runs driver calls under one retry policy and per-operation-class breakers.

    A portable type holds one Guard per driver. ``call(op_class, what, fn,
    *args)`` runs ``fn(*args)``; ``op_class`` picks the breaker ("read",
    "write", "publish", ...); ``what`` names the operation and its target in
    error messages, so it must hold no secret.
    """

    __slots__ = ("_breakers", "_classifier", "_sleep", "clock", "endpoint", "policy", "provider", "rng")

    def __init__(
        self,
        provider: str,
        endpoint: str,
        classifier: _Classifier,
        policy: ResiliencePolicy | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.provider = provider
        self.endpoint = endpoint
        self.policy = policy or ResiliencePolicy()
        self.clock = clock
        self.rng = rng
        self._classifier = classifier
        self._sleep = sleep
        self._breakers: dict[str, CircuitBreaker | None] = {}

    def breaker(self, op_class: str) -> CircuitBreaker | None:
        """The breaker guarding ``op_class``, or None if breakers are off."""
        try:
            return self._breakers[op_class]
        except KeyError:
            bp = self.policy.breaker
            found = None if bp is None else breaker_for(self.provider, self.endpoint, op_class, bp, self.clock)
            self._breakers[op_class] = found
            return found

    def call(self, op_class: str, what: str, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Run ``fn(*args, **kwargs)`` with breaker, retries, deadline and error wrapping."""
        try:
            breaker = self._breakers[op_class]
        except KeyError:
            breaker = self.breaker(op_class)
        probe = breaker.before_call() if breaker is not None else False
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            return self._after_failure(op_class, what, breaker, probe, exc, fn, args, kwargs)
        if breaker is not None:
            breaker.record(True, probe)
        return result

    def wrap(self, what: str, exc: BaseException) -> PortableError:
        """Wrap a native error once in the portable error its driver classifies it as."""
        if isinstance(exc, PortableError):
            if exc.provider is None:
                exc.provider = self.provider
            return exc
        classifier = self._classifier
        try:
            code = classifier.code_of(exc)
            retryable = classifier.is_retryable(exc)
            retry_after = classifier.retry_after(exc)
        except Exception:  # a classifier bug must not hide the real error
            code, retryable, retry_after = ErrorCode.UNKNOWN, False, None
        detail = redact(str(exc)) or type(exc).__name__
        cls = error_for(code)
        return cls(
            f"{what}: {detail}",
            provider=self.provider,
            retryable=retryable,
            retry_after=retry_after,
        )

    def _after_failure(
        self,
        op_class: str,
        what: str,
        breaker: CircuitBreaker | None,
        probe: bool,
        exc: Exception,
        fn: Callable[..., R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> R:
        retry = self.policy.retry
        attempt = 1
        while True:
            err = self.wrap(what, exc)
            if breaker is not None:
                breaker.record(err.code not in _UNHEALTHY, probe)
            if not err.retryable or attempt >= retry.max_attempts:
                raise err from (None if err is exc else exc)
            delay = retry.backoff(attempt, err.retry_after, self.rng)
            at = _DEADLINE.get()
            if at is not None and self.clock() + delay >= at:
                raise DeadlineExceeded(
                    f"{what}: deadline reached after {attempt} attempt(s); last error: {err.message}",
                    provider=self.provider,
                ) from exc
            if delay > 0:
                self._sleep(delay)
            attempt += 1
            probe = breaker.before_call() if breaker is not None else False
            try:
                result = fn(*args, **kwargs)
            except Exception as again:
                exc = again
                continue
            if breaker is not None:
                breaker.record(True, probe)
            return result
