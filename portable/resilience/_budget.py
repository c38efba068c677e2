"""Retry budgets: one token bucket per (provider, endpoint), shared by the whole process."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..driver.redaction import redact
from ._policy import RetryBudget

#: ``listener(budget, exhausted)``: called with True when a budget first refuses a retry, and with
#: False when it grants one again
RetryBudgetListener = Callable[["EndpointRetryBudget", bool], None]
_LISTENERS_OF_EVERY_BUDGET: list[RetryBudgetListener] = []


@dataclass(frozen=True, slots=True)
class RetryBudgetStats:
    """What a budget has seen since it was made (for metrics).

    Attributes:
        calls: calls the guards let through to the endpoint (each deposits ``ratio`` tokens).
        retries: retries it granted (each took a token).
        refused: retries it refused (each failed its call at once).
        tokens: tokens in the bucket now.
        exhausted: whether its last decision was a refusal.
    """

    calls: int
    retries: int
    refused: int
    tokens: float
    exhausted: bool


class EndpointRetryBudget:
    """The retry budget of one endpoint: a token bucket fed by calls and by the clock (see :class:`RetryBudget`).

    A guard calls :attr:`note_call` for every call it lets through to the
    endpoint and :meth:`try_spend` before every retry. ``note_call`` is the
    success path's only cost: it advances a counter (``itertools.count``, one
    C call, atomic under the GIL) and takes no lock; the deposits are made when
    a retry next asks for a token. ``try_spend`` takes the budget's lock, never
    while a call runs. Thread-safe and asyncio-safe.

    Attributes:
        name: ``provider:endpoint``, secrets masked.
        policy: the :class:`RetryBudget` it was made with.
        note_call: count one call let through (the guards call it).
    """

    __slots__ = (
        "_calls",
        "_clock",
        "_deposited",
        "_listeners",
        "_lock",
        "_reads",
        "_refilled_at",
        "_tokens",
        "exhausted",
        "name",
        "note_call",
        "policy",
        "refused",
        "retries",
    )

    def __init__(self, name: str, policy: RetryBudget, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self._calls = itertools.count()
        self.note_call: Callable[[], int] = self._calls.__next__
        self._reads = 0  # counts taken by reading the counter, not by calls
        self._deposited = 0  # calls whose tokens are in the bucket
        self._tokens = float(policy.max_tokens)
        self._refilled_at = clock()
        self._listeners: list[RetryBudgetListener] = []
        self.retries = 0
        self.refused = 0
        self.exhausted = False

    def __repr__(self) -> str:
        return f"EndpointRetryBudget({self.name!r}, tokens={self.tokens:.1f})"

    def add_listener(self, listener: RetryBudgetListener) -> None:
        """Call ``listener(budget, exhausted)`` when this budget first refuses a retry (True) and
        when it grants one again (False).

        Listeners run on the calling thread, outside the budget's lock; an exception in one is ignored.
        """
        self._listeners.append(listener)

    def _settle(self) -> None:
        """Put the deposits of the calls counted since the last settlement, and the clock's, in the bucket (lock held)."""
        calls = next(self._calls) - self._reads  # this read advanced the counter too
        self._reads += 1
        now = self._clock()
        policy = self.policy
        earned = (calls - self._deposited) * policy.ratio + max(0.0, now - self._refilled_at) * policy.min_per_second
        self._deposited = calls
        self._refilled_at = now
        self._tokens = min(float(policy.max_tokens), self._tokens + earned)

    def try_spend(self) -> bool:
        """Take a token for one retry; False (and nothing taken) when less than one is left."""
        with self._lock:
            self._settle()
            granted = self._tokens >= 1.0
            if granted:
                self._tokens -= 1.0
                self.retries += 1
            else:
                self.refused += 1
            changed = self.exhausted == granted
            self.exhausted = not granted
        if changed:
            for listener in (*self._listeners, *_LISTENERS_OF_EVERY_BUDGET):
                try:
                    listener(self, not granted)
                except Exception:
                    pass  # a broken listener must not break the call
        return granted

    @property
    def tokens(self) -> float:
        """Tokens in the bucket now: how many retries it would grant before the next call."""
        with self._lock:
            self._settle()
            return self._tokens

    def stats(self) -> RetryBudgetStats:
        """The budget's counters and tokens now."""
        with self._lock:
            self._settle()
            return RetryBudgetStats(self._deposited, self.retries, self.refused, self._tokens, self.exhausted)


_BUDGET_REGISTRY: dict[tuple[str, str], EndpointRetryBudget] = {}
_REGISTRY_LOCK = threading.Lock()


def retry_budget_for(
    provider: str, endpoint: str, policy: RetryBudget, clock: Callable[[], float] = time.monotonic
) -> EndpointRetryBudget:
    """The process-wide retry budget of (provider, endpoint).

    The first call creates it with ``policy`` and ``clock``; later calls get the same one, whatever
    policy they pass, so every guard of the endpoint, sync or async, spends from one budget.
    """
    key = (provider, endpoint)
    found = _BUDGET_REGISTRY.get(key)
    if found is not None:
        return found
    with _REGISTRY_LOCK:
        found = _BUDGET_REGISTRY.get(key)
        if found is None:
            found = EndpointRetryBudget(f"{provider}:{redact(endpoint)}", policy, clock)
            _BUDGET_REGISTRY[key] = found
        return found


def add_retry_budget_listener(listener: RetryBudgetListener) -> Callable[[], None]:
    """Call ``listener(budget, exhausted)`` whenever any budget becomes exhausted (True) or recovers (False).

    Returns:
        A function that removes the listener again.
    """
    _LISTENERS_OF_EVERY_BUDGET.append(listener)

    def remove() -> None:
        with contextlib.suppress(ValueError):
            _LISTENERS_OF_EVERY_BUDGET.remove(listener)

    return remove


def reset_retry_budgets() -> None:
    """Forget every retry budget (tests, or after reconfiguration).

    Guards made before keep the budgets they hold; make new ones.
    """
    with _REGISTRY_LOCK:
        _BUDGET_REGISTRY.clear()
