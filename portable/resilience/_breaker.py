"""Circuit breakers: one per (provider, endpoint, operation class), shared by the whole process."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from ..driver.redaction import redact
from ..errors import CircuitOpen, ErrorCode, InvalidArgument
from ..telemetry._observe import BREAKER_LISTENERS
from ._budget import reset_retry_budgets
from ._policy import BreakerPolicy


class BreakerState:
    """The states of a :class:`CircuitBreaker` (plain strings, for logs and listeners)."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


#: a module global: the hot paths compare states by identity, and a global is found faster than a class attribute
_CLOSED = BreakerState.CLOSED
#: ``listener(breaker, old_state, new_state)``, called on every state change
BreakerListener = Callable[["CircuitBreaker", str, str], None]
#: the same list as the telemetry's (portable.telemetry._observe), which cannot import this module
_LISTENERS_OF_EVERY_BREAKER: list[BreakerListener] = BREAKER_LISTENERS
#: every state change is logged here at WARNING, with the breaker's name (its redacted endpoint)
#: and the code of the last failure it counted
_log = logging.getLogger("portable.resilience")


class CircuitBreaker:
    """A failure-rate circuit breaker over a sliding window of recent calls.

    Closed: calls pass; each outcome is tallied. A :class:`Guard` tallies one
    outcome per call, when the call ends, whatever number of attempts it took:
    the breaker counts what the caller sees. When at least ``min_calls``
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
        "_last_code",
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
        self._last_code: ErrorCode | None = None
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
                    raise self._refusal(now)
                changed = self._transition(BreakerState.HALF_OPEN)
            if self.state == BreakerState.HALF_OPEN:
                if self._probes_in_flight >= self.policy.half_open_probes:
                    if now - self._half_open_at < max(self.policy.open_seconds, 1e-9):
                        raise self._refusal(now, probing=True)
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

    def record(self, success: bool, probe: int = 0, code: ErrorCode | None = None) -> None:
        """Tally one outcome of a call admitted by :meth:`before_call`.

        Args:
            success: the provider answered (an error such as NotFound is a
                healthy answer; the Guard decides).
            probe: the ticket :meth:`before_call` returned.
            code: the failure's error code, for the log line of a state change.
        """
        if success and not probe and self.state is _CLOSED:
            self._outcomes.append(True)  # atomic; the full window drops its oldest
            return
        if not success and code is not None:
            self._last_code = code
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
        code = self._last_code
        try:
            _log.warning(
                "circuit breaker %s: %s -> %s (last failure: %s; failure rate %.0f%%)",
                self.name, old, new, "none" if code is None else code.name, 100 * self.failure_rate(),
                extra={
                    "portable_breaker": self.name,
                    "portable_breaker_state": new,
                    "portable_error_code": None if code is None else code.name,
                },
            )  # fmt: skip
        except Exception:
            pass  # logging must not break the call that changed the state
        for listener in (*self._listeners, *_LISTENERS_OF_EVERY_BREAKER):
            try:
                listener(self, old, new)
            except Exception:
                pass  # a broken listener must not break the call that changed the state

    def _refusal(self, now: float, probing: bool = False) -> CircuitOpen:
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


_BREAKER_REGISTRY: dict[tuple[str, str, str], CircuitBreaker] = {}
_REGISTRY_LOCK = threading.Lock()


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
    found = _BREAKER_REGISTRY.get(key)
    if found is not None:
        return found
    with _REGISTRY_LOCK:
        found = _BREAKER_REGISTRY.get(key)
        if found is None:
            found = CircuitBreaker(f"{provider}:{redact(endpoint)}:{op_class}", policy, clock)
            _BREAKER_REGISTRY[key] = found
        return found


def add_breaker_listener(listener: BreakerListener) -> Callable[[], None]:
    """Call ``listener(breaker, old_state, new_state)`` on every state change of every breaker.

    Returns:
        A function that removes the listener again.
    """
    _LISTENERS_OF_EVERY_BREAKER.append(listener)

    def remove() -> None:
        with contextlib.suppress(ValueError):
            _LISTENERS_OF_EVERY_BREAKER.remove(listener)

    return remove


def reset_breakers() -> None:
    """Forget every breaker, and every retry budget (tests, or after reconfiguration).

    Both are per-endpoint state that a test or a reconfiguration starts afresh;
    :func:`reset_retry_budgets` forgets the budgets alone. Guards made before
    keep the breakers and budgets they hold; make new ones.
    """
    with _REGISTRY_LOCK:
        _BREAKER_REGISTRY.clear()
    reset_retry_budgets()
