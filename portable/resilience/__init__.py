"""Retries, circuit breakers and deadlines: the only layer of portable that retries.

Every call a portable type makes to a driver goes through :meth:`Guard.call`
(or :meth:`Guard.acall` for a coroutine function):

1. If the overall deadline in force has passed, fail with
   :class:`~portable.errors.DeadlineExceeded` before any request.
2. If the operation's circuit breaker is open, fail fast with
   :class:`~portable.errors.CircuitOpen`, naming the breaker and its next probe.
3. Call the driver once, bare. On success that is all: the success path costs
   a dictionary lookup, a ``try`` and a breaker tally (about 0.3 us; see
   ``bench/resilience_bench.py``), and no timer unless a timeout is configured.
4. On failure, classify the native error with the driver (``code_of``,
   ``is_retryable``, ``retry_after``) and wrap it once in the matching
   :class:`~portable.errors.PortableError`, the native error as ``__cause__``.
5. Retry only a retryable error, with exponential backoff and full jitter,
   at least as long as the provider's Retry-After (a throttled answer without
   one backs off one step further), never past the overall deadline, at most
   ``max_attempts`` times in all.

Deadlines:
    :func:`deadline` gives every portable call inside a ``with`` block an
    overall deadline (per thread and per asyncio task; nested blocks keep the
    earlier one). A profile's ``deadline`` bounds each public call on its own.
    The per-attempt timeout (``RetryPolicy.timeout``) is what one request may
    take: :meth:`Guard.acall` enforces it with ``asyncio.timeout``; a sync
    driver reads :func:`attempt_timeout` and passes it to its SDK (a thread
    cannot be interrupted).

Breakers are kept per (provider, endpoint, operation class) and shared by
every object that talks to the same endpoint, so one outage opens one breaker.
The first policy that creates a breaker sets it; :func:`reset_breakers`
forgets them all.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import random
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ParamSpec, Protocol, TypeVar

from .driver.redaction import redact
from .errors import (
    CircuitOpen,
    ConfigError,
    DeadlineExceeded,
    ErrorCode,
    InvalidArgument,
    PortableError,
    error_for,
)

__all__ = [
    "BreakerListener",
    "BreakerPolicy",
    "BreakerState",
    "CircuitBreaker",
    "Guard",
    "ResiliencePolicy",
    "RetryPolicy",
    "add_breaker_listener",
    "attempt_timeout",
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
        timeout: per-attempt timeout in seconds, or None for the SDK's default.
            ``Guard.acall`` enforces it; sync drivers read :func:`attempt_timeout`
            and pass it to their SDK. Defaults to None.
        max_retry_after: the longest Retry-After honoured, in seconds; a
            provider that asks for a longer wait gets the error raised at once
            (retrying within the call would only block). Defaults to 60.
    """

    max_attempts: int = 4
    initial_backoff: float = 0.1
    max_backoff: float = 20.0
    multiplier: float = 2.0
    timeout: float | None = None
    max_retry_after: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.multiplier < 1:
            raise ConfigError("backoffs must be >= 0 and multiplier >= 1")
        if self.timeout is not None and not self.timeout > 0:
            raise ConfigError(f"timeout must be > 0 seconds or None, got {self.timeout}")
        if self.max_retry_after < 0:
            raise ConfigError(f"max_retry_after must be >= 0, got {self.max_retry_after}")

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


# ---------------------------------------------------------------- deadlines
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("portable_deadline", default=None)
_ATTEMPT: contextvars.ContextVar[float | None] = contextvars.ContextVar("portable_attempt_timeout", default=None)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """Give every portable call inside the block an overall deadline.

    Retries stop (raising DeadlineExceeded) rather than sleep past it, a call
    made after it passed fails before any request, and drivers read
    :func:`remaining` to bound each request. Nested deadlines keep the
    earlier one. Works per thread and per asyncio task.

    Yields:
        The deadline as ``time.monotonic()`` seconds.
    """
    if not seconds > 0:
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


def attempt_timeout(default: float | None = None) -> float | None:
    """What the request being made now may take: the smaller of the guard's
    per-attempt timeout and the time left before the deadline, else ``default``.

    Sync drivers pass this to their SDK (``timeout=``, ``read_timeout``).
    """
    per_call = _ATTEMPT.get()
    left = remaining()
    if per_call is None:
        return default if left is None else left
    return per_call if left is None else min(per_call, left)


# ---------------------------------------------------------------- breakers
class BreakerState:
    """The states of a :class:`CircuitBreaker` (plain strings, for logs and listeners)."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


_CLOSED = BreakerState.CLOSED
BreakerListener = Callable[["CircuitBreaker", str, str], None]
_GLOBAL_LISTENERS: list[BreakerListener] = []


class CircuitBreaker:
    """A failure-rate circuit breaker over a sliding window of recent calls.

    Closed: calls pass; each outcome is tallied. When at least ``min_calls``
    of the last ``window`` calls are in and the failure fraction reaches
    ``failure_rate``, it opens. Open: calls fail fast with CircuitOpen until
    ``open_seconds`` have passed. Half-open: up to ``half_open_probes`` calls
    probe; that many successes close it, one failure reopens it. A probe that
    never reports (its thread hung) stops counting after ``open_seconds``.

    Thread-safe and asyncio-safe: the lock guards only the tallies and is
    never held while the protected call runs, nor while listeners run.
    Outcomes of calls admitted before a state change are ignored after it.
    """

    __slots__ = (
        "_clock",
        "_generation",
        "_half_open_at",
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
        self._generation = 0
        self._half_open_at = 0.0
        self._listeners: list[BreakerListener] = []

    def __repr__(self) -> str:
        return f"CircuitBreaker({self.name!r}, state={self.state})"

    def add_listener(self, listener: BreakerListener) -> None:
        """Call ``listener(breaker, old_state, new_state)`` on every state change.

        Listeners run on the thread that caused the change, outside the
        breaker's lock; an exception in one is ignored.
        """
        self._listeners.append(listener)

    @property
    def probe_at(self) -> float:
        """Clock time at which an open breaker lets a probe through."""
        return self.opened_at + self.policy.open_seconds

    def failure_rate(self) -> float:
        """The failure fraction over the current window (0 when empty)."""
        outcomes = list(self._outcomes)
        return outcomes.count(False) / len(outcomes) if outcomes else 0.0

    def before_call(self) -> int:
        """Admit or refuse a call.

        Returns:
            0 for an ordinary call; for a half-open probe, a positive ticket
            that must be passed back to :meth:`record` (or :meth:`abandon`).

        Raises:
            CircuitOpen: open, or half-open with every probe slot taken.
        """
        if self.state is _CLOSED:
            return 0
        changed = None
        with self._lock:
            now = self._clock()
            if self.state == BreakerState.OPEN:
                if now < self.probe_at:
                    raise self._open_error(now)
                changed = self._transition(BreakerState.HALF_OPEN)
            if self.state == BreakerState.HALF_OPEN:
                if self._probes_in_flight >= self.policy.half_open_probes:
                    if now - self._half_open_at < max(self.policy.open_seconds, 1e-9):
                        raise self._open_error(now, probing=True)
                    self._generation += 1  # the probes in flight hung: stop waiting for them
                    self._half_open_at = now
                    self._probes_in_flight = self._probe_successes = 0
                self._probes_in_flight += 1
                ticket = self._generation
            else:
                ticket = 0
        if changed:
            self._notify(*changed)
        return ticket

    def record(self, success: bool, probe: int = 0) -> None:
        """Tally one outcome of a call admitted by :meth:`before_call`.

        Args:
            success: the provider answered (an error such as NotFound is a
                healthy answer; the Guard decides).
            probe: the ticket :meth:`before_call` returned.
        """
        if success and not probe and self.state is _CLOSED:
            self._outcomes.append(True)  # atomic; the full window drops its oldest
            return
        changed = None
        with self._lock:
            if probe:
                if probe != self._generation or self.state != BreakerState.HALF_OPEN:
                    return  # a probe of an earlier half-open spell
                self._probes_in_flight -= 1
                if success:
                    self._probe_successes += 1
                    if self._probe_successes >= self.policy.half_open_probes:
                        changed = self._transition(BreakerState.CLOSED)
                else:
                    changed = self._transition(BreakerState.OPEN)
            elif self.state == BreakerState.CLOSED:
                outcomes = self._outcomes
                outcomes.append(success)
                if (
                    not success
                    and len(outcomes) >= self.policy.min_calls
                    and outcomes.count(False) >= self.policy.failure_rate * len(outcomes)
                ):
                    changed = self._transition(BreakerState.OPEN)
            # else: a call admitted before the breaker opened; its outcome is stale
        if changed:
            self._notify(*changed)

    def abandon(self, probe: int) -> None:
        """Give a probe's slot back without an outcome (the call was cancelled)."""
        if not probe:
            return
        with self._lock:
            if probe == self._generation and self.state == BreakerState.HALF_OPEN:
                self._probes_in_flight = max(0, self._probes_in_flight - 1)

    def force(self, state: str) -> None:
        """Put the breaker in ``state`` now (operators and tests)."""
        states = (BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN)
        if state not in states:
            raise InvalidArgument(f"unknown breaker state {state!r}")
        state = states[states.index(state)]  # the constant itself: the hot path compares by identity
        with self._lock:
            changed = self._transition(state) if state != self.state else None
        if changed:
            self._notify(*changed)

    def _transition(self, new: str) -> tuple[str, str]:
        """Change state (lock held); the caller notifies listeners after releasing it."""
        old, self.state = self.state, new
        now = self._clock()
        if new == BreakerState.OPEN:
            self.opened_at = now
        elif new == BreakerState.HALF_OPEN:
            self._half_open_at = now
        self._generation += 1
        self._probes_in_flight = 0
        self._probe_successes = 0
        if new == BreakerState.CLOSED:
            self._outcomes.clear()
        return old, new

    def _notify(self, old: str, new: str) -> None:
        for listener in (*self._listeners, *_GLOBAL_LISTENERS):
            try:
                listener(self, old, new)
            except Exception:
                pass  # a broken listener must not break the call that changed the state

    def _open_error(self, now: float, probing: bool = False) -> CircuitOpen:
        wait = max(0.0, self.probe_at - now)
        when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=wait)
        why = "is half-open and its probe is still running" if probing else "is open after repeated failures"
        return CircuitOpen(
            f"circuit breaker {self.name} {why}; next probe in {wait:.1f}s "
            f"(at {when:%H:%M:%S}Z)",
            breaker=self.name,
            probe_at=self.probe_at,
            retry_after=wait,
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
    """The process-wide breaker for (provider, endpoint, operation class).

    The first call creates it with ``policy`` and ``clock``; later calls get the same one.
    """
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


def add_breaker_listener(listener: BreakerListener) -> Callable[[], None]:
    """Call ``listener(breaker, old_state, new_state)`` on every state change of every breaker.

    Returns:
        A function that removes the listener again.
    """
    _GLOBAL_LISTENERS.append(listener)

    def remove() -> None:
        with contextlib.suppress(ValueError):
            _GLOBAL_LISTENERS.remove(listener)

    return remove


def reset_breakers() -> None:
    """Forget every breaker (tests, or after reconfiguration).

    Guards made before keep the breakers they hold; make new ones.
    """
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


async def _asyncio_sleep(delay: float) -> None:
    # asyncio is imported on first async use, so sync users never pay for it
    import asyncio

    await asyncio.sleep(delay)


class Guard:
    """Runs driver calls under one retry policy and per-operation-class breakers.

    A portable type holds one Guard per driver. ``call(op_class, what, fn,
    *args)`` runs ``fn(*args)``; ``acall`` awaits ``fn(*args)``. ``op_class``
    picks the breaker ("read", "write", "publish", ...); ``what`` names the
    operation and its target in error messages, so it must hold no secret.

    Args:
        provider: the scheme, for error messages and breaker names.
        endpoint: where requests go; breakers are shared per endpoint.
        classifier: the driver (``code_of``, ``is_retryable``, ``retry_after``).
        policy: retries, breakers and the default deadline. Defaults to
            :class:`ResiliencePolicy()`.
        clock: monotonic seconds for the breakers (tests pass a fake one).
        sleep, asleep: how to wait between attempts (tests pass fakes).
        rng: the jitter's random source (tests pass a seeded one).
    """

    __slots__ = (
        "_asleep",
        "_breakers",
        "_classifier",
        "_sleep",
        "clock",
        "endpoint",
        "policy",
        "provider",
        "rng",
    )

    def __init__(
        self,
        provider: str,
        endpoint: str,
        classifier: _Classifier,
        policy: ResiliencePolicy | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.provider = provider
        self.endpoint = endpoint
        self.policy = policy or ResiliencePolicy()
        self.clock = clock
        self.rng = rng
        self._classifier = classifier
        self._sleep = sleep
        self._asleep = _asyncio_sleep if asleep is None else asleep
        self._breakers: dict[str, CircuitBreaker | None] = {}

    def __repr__(self) -> str:
        return f"Guard({self.provider!r}, {redact(self.endpoint)!r})"

    def breaker(self, op_class: str) -> CircuitBreaker | None:
        """The breaker guarding ``op_class``, or None if breakers are off."""
        try:
            return self._breakers[op_class]
        except KeyError:
            bp = self.policy.breaker
            found = None if bp is None else breaker_for(self.provider, self.endpoint, op_class, bp, self.clock)
            self._breakers[op_class] = found
            return found

    # -- sync -----------------------------------------------------------
    def call(self, op_class: str, what: str, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Run ``fn(*args, **kwargs)`` with breaker, retries, deadline and error wrapping.

        Raises:
            CircuitOpen: the breaker of ``op_class`` is open.
            DeadlineExceeded: the deadline passed, or would pass during a backoff.
            PortableError: the driver's error, wrapped once, after the last attempt.
        """
        policy = self.policy
        if policy.deadline is not None or policy.retry.timeout is not None:
            return self._call_bounded(op_class, what, fn, args, kwargs)
        at = _DEADLINE.get()
        if at is not None and time.monotonic() >= at:
            raise self._expired(what, 0, None)
        try:
            breaker = self._breakers[op_class]
        except KeyError:
            breaker = self.breaker(op_class)
        probe = breaker.before_call() if breaker is not None else 0
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            return self._after_failure(op_class, what, breaker, probe, exc, fn, args, kwargs)
        except BaseException:
            if probe:
                breaker.abandon(probe)  # type: ignore[union-attr]
            raise
        if breaker is not None:
            breaker.record(True, probe)
        return result

    def _call_bounded(
        self, op_class: str, what: str, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> R:
        """``call`` with the policy's own deadline and per-attempt timeout in force.

        Its body repeats ``call``'s first attempt on purpose: a shared helper would add a
        Python call to every guarded operation's success path (0.30 us, bench/resilience_bench.py).
        """
        policy = self.policy
        dtoken = None
        if policy.deadline is not None:
            own = time.monotonic() + policy.deadline
            outer = _DEADLINE.get()
            dtoken = _DEADLINE.set(own if outer is None else min(own, outer))
        ttoken = _ATTEMPT.set(policy.retry.timeout) if policy.retry.timeout is not None else None
        try:
            at = _DEADLINE.get()
            if at is not None and time.monotonic() >= at:
                raise self._expired(what, 0, None)
            breaker = self.breaker(op_class)
            probe = breaker.before_call() if breaker is not None else 0
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                return self._after_failure(op_class, what, breaker, probe, exc, fn, args, kwargs)
            except BaseException:
                if probe:
                    breaker.abandon(probe)  # type: ignore[union-attr]
                raise
            if breaker is not None:
                breaker.record(True, probe)
            return result
        finally:
            if ttoken is not None:
                _ATTEMPT.reset(ttoken)
            if dtoken is not None:
                _DEADLINE.reset(dtoken)

    def _after_failure(
        self,
        op_class: str,
        what: str,
        breaker: CircuitBreaker | None,
        probe: int,
        exc: Exception,
        fn: Callable[..., R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> R:
        attempt = 1
        while True:
            delay = self._judge(what, breaker, probe, exc, attempt)
            if delay > 0:
                self._sleep(delay)
            attempt += 1
            probe = self._admit(breaker, exc)
            try:
                result = fn(*args, **kwargs)
            except Exception as again:
                exc = again
                continue
            except BaseException:
                if probe:
                    breaker.abandon(probe)  # type: ignore[union-attr]
                raise
            if breaker is not None:
                breaker.record(True, probe)
            return result

    # -- async ----------------------------------------------------------
    async def acall(
        self, op_class: str, what: str, fn: Callable[..., Awaitable[R]], *args: Any, **kwargs: Any
    ) -> R:
        """Await ``fn(*args, **kwargs)`` with the same breaker, retries, deadline and wrapping as :meth:`call`.

        Each attempt is bounded by :func:`attempt_timeout` when a per-attempt
        timeout or a deadline is in force (``asyncio.timeout``); a timed-out
        attempt counts as a retryable DeadlineExceeded. Cancelling the task
        cancels the attempt and gives a half-open probe's slot back.
        """
        policy = self.policy
        if policy.deadline is not None:
            at = time.monotonic() + policy.deadline
            outer = _DEADLINE.get()
            dtoken = _DEADLINE.set(at if outer is None else min(at, outer))
            try:
                return await self._acall(op_class, what, fn, args, kwargs)
            finally:
                _DEADLINE.reset(dtoken)
        return await self._acall(op_class, what, fn, args, kwargs)

    async def _acall(
        self,
        op_class: str,
        what: str,
        fn: Callable[..., Awaitable[R]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> R:
        at = _DEADLINE.get()
        timeout = self.policy.retry.timeout
        if at is not None and time.monotonic() >= at:
            raise self._expired(what, 0, None)
        try:
            breaker = self._breakers[op_class]
        except KeyError:
            breaker = self.breaker(op_class)
        probe = breaker.before_call() if breaker is not None else 0
        attempt = 1
        while True:
            try:
                if at is None and timeout is None:
                    result = await fn(*args, **kwargs)
                else:
                    result = await self._bounded(fn, args, kwargs, at, timeout)
            except Exception as exc:
                delay = self._judge(what, breaker, probe, exc, attempt)
                if delay > 0:
                    await self._asleep(delay)
                attempt += 1
                probe = self._admit(breaker, exc)
                continue
            except BaseException:
                if probe:
                    breaker.abandon(probe)  # type: ignore[union-attr]
                raise
            if breaker is not None:
                breaker.record(True, probe)
            return result

    @staticmethod
    async def _bounded(
        fn: Callable[..., Awaitable[R]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        at: float | None,
        timeout: float | None,
    ) -> R:
        """Await one attempt under a timer (a bare ``loop.call_at``: lighter than ``asyncio.timeout``)."""
        limit = timeout
        if at is not None:
            left = max(0.0, at - time.monotonic())
            limit = left if limit is None else min(limit, left)
        assert limit is not None
        import asyncio

        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        handle = loop.call_at(loop.time() + limit, expire)
        token = _ATTEMPT.set(limit)
        try:
            return await fn(*args, **kwargs)
        except asyncio.CancelledError:
            if expired and task.uncancel() == 0:
                raise DeadlineExceeded(f"no answer within {limit:.3g}s", retryable=True) from None
            raise
        finally:
            handle.cancel()
            _ATTEMPT.reset(token)

    # -- shared ---------------------------------------------------------
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

    def _judge(
        self, what: str, breaker: CircuitBreaker | None, probe: int, exc: Exception, attempt: int
    ) -> float:
        """Tally a failed attempt; raise if it is final, else return the backoff before the next."""
        err = self.wrap(what, exc)
        if breaker is not None:
            breaker.record(err.code not in _UNHEALTHY, probe)
        cause = None if err is exc else exc
        retry = self.policy.retry
        if not err.retryable or attempt >= retry.max_attempts:
            raise err from cause
        hint = err.retry_after
        if hint is not None and hint > retry.max_retry_after:
            raise err from cause  # asked to come back much later: not within this call
        step = attempt + 1 if err.code == ErrorCode.THROTTLED and hint is None else attempt
        delay = retry.backoff(step, hint, self.rng)
        at = _DEADLINE.get()
        if at is not None and time.monotonic() + delay >= at:
            raise self._expired(what, attempt, err) from exc
        return delay

    @staticmethod
    def _admit(breaker: CircuitBreaker | None, last: Exception) -> int:
        if breaker is None:
            return 0
        try:
            return breaker.before_call()
        except CircuitOpen as opened:
            raise opened from last

    def _expired(self, what: str, attempts: int, last: PortableError | None) -> DeadlineExceeded:
        if last is None:
            return DeadlineExceeded(f"{what}: the deadline passed before the call was made", provider=self.provider)
        return DeadlineExceeded(
            f"{what}: deadline reached after {attempts} attempt(s); last error: {last.message}",
            provider=self.provider,
        )
