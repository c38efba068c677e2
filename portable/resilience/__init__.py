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
5. Retry only a retryable error, with exponential backoff and full jitter
   (or the policy's tenacity ``wait``, ``stop`` and ``retry`` strategies, see
   :class:`RetryPolicy`), at least as long as the provider's Retry-After (a
   throttled answer without one backs off one step further), never past the
   overall deadline, at most ``max_attempts`` times in all, and only while
   the endpoint's retry budget has a token (else the last error is raised
   at once, saying so).

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
A breaker counts what the caller sees: one outcome per call, however many
attempts it took. The first policy that creates a breaker sets it;
:func:`reset_breakers` forgets them all (and the retry budgets).

Retry budgets are kept per (provider, endpoint), one token bucket shared by
the sync and async faces of every object that talks to the endpoint (see
:class:`RetryBudget`): retries are at most a fraction of recent calls plus a
small floor, so a partial outage multiplies the endpoint's load by about
``1 + ratio`` instead of ``max_attempts``. Their counters are
:meth:`EndpointRetryBudget.stats`; :func:`add_retry_budget_listener` hears
when one runs dry and when it recovers.

The modules behind this one: ``_policy`` (the policy records), ``_deadline``
(deadlines and the per-attempt timeout), ``_breaker`` (breakers and their
registry), ``_budget`` (retry budgets and theirs), ``_attempts`` (what is decided between attempts, shared by the sync
and async faces) and ``_guard`` (the guard and its loops).
"""

from __future__ import annotations

from ._breaker import (
    BreakerListener,
    BreakerState,
    CircuitBreaker,
    add_breaker_listener,
    breaker_for,
    reset_breakers,
)
from ._budget import (
    EndpointRetryBudget,
    RetryBudgetListener,
    RetryBudgetStats,
    add_retry_budget_listener,
    reset_retry_budgets,
    retry_budget_for,
)
from ._deadline import attempt_timeout, current_deadline, deadline, remaining
from ._guard import Guard
from ._policy import BreakerPolicy, ResiliencePolicy, RetryBudget, RetryPolicy

__all__ = [
    "BreakerListener",
    "BreakerPolicy",
    "BreakerState",
    "CircuitBreaker",
    "EndpointRetryBudget",
    "Guard",
    "ResiliencePolicy",
    "RetryBudget",
    "RetryBudgetListener",
    "RetryBudgetStats",
    "RetryPolicy",
    "add_breaker_listener",
    "add_retry_budget_listener",
    "attempt_timeout",
    "breaker_for",
    "current_deadline",
    "deadline",
    "remaining",
    "reset_breakers",
    "reset_retry_budgets",
    "retry_budget_for",
]
