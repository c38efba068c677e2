"""What a guard decides between the attempts of one call, shared by its sync and async faces.

:class:`Attempts` does no I/O: the guard's two loops (sync and async) call the
driver and sleep. This class tallies the call's outcome with the breaker (once,
when the call ends: the breaker counts what the caller sees), decides whether
a failure is final and how long to wait before the next attempt, takes a token
from the endpoint's retry budget for it, and takes the breaker's leave for it. Each attempt runs inside ``with attempts:``,
which keeps a failure for the next decision and tallies a success. The bare
first attempt of ``Guard.call`` and ``Guard.acall`` needs none of it, so an
:class:`Attempts` is made only once a call fails.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._logging import domain_logger
from ..driver.redaction import redact
from ..errors import CircuitOpen, ErrorCode, PortableError
from ._breaker import CircuitBreaker
from ._deadline import DEADLINE_AT, deadline_error
from ._policy import RetryPolicy

if TYPE_CHECKING:
    import tenacity

    from ..telemetry._observe import CallScope
    from ._guard import Guard

#: codes that say the provider is unhealthy; others (NotFound, ...) are healthy answers
UNHEALTHY_CODES = frozenset(
    {ErrorCode.UNAVAILABLE, ErrorCode.THROTTLED, ErrorCode.DEADLINE_EXCEEDED, ErrorCode.UNKNOWN}
)


def names_a_strategy(retry: RetryPolicy) -> bool:
    """Whether ``retry`` names any tenacity strategy."""
    return retry.wait is not None or retry.stop is not None or retry.retry is not None


class Attempts:
    """The attempts of one guarded call: their number, the breaker's probe ticket, the strategies' state.

    Args:
        guard: the guard making the call.
        what: the operation and its target, for error messages.
        breaker: the breaker of the call's operation class, or None.
        probe: the ticket the breaker gave the attempt in flight.
        failure: the error of the first attempt, which already ran.
        fn, args, kwargs: the driver call, shown to tenacity strategies.
        started: the guard's clock when the call began, for the strategies'
            elapsed time; None when the guard did not note it (the policy
            names no strategy).
        scopes: the observers' scopes of an observed call (see
            :mod:`portable.telemetry._observe`), told of each failed attempt and
            of a refusal; empty when nothing observes the call.
    """

    __slots__ = (
        "args",
        "attempt",
        "breaker",
        "budget_refused",
        "failure",
        "fn",
        "guard",
        "kwargs",
        "probe",
        "scopes",
        "started",
        "tenacity_state",
        "what",
    )

    def __init__(
        self,
        guard: Guard,
        what: str,
        breaker: CircuitBreaker | None,
        probe: int,
        failure: Exception,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        started: float | None = None,
        scopes: list[CallScope] | None = None,
    ) -> None:
        self.guard = guard
        self.what = what
        self.breaker = breaker
        self.probe = probe
        self.failure: Exception | None = failure
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.started = started
        self.attempt = 1
        self.scopes = scopes
        self.budget_refused = False  # the endpoint's retry budget refused the retry (for the observers)
        self.tenacity_state: tenacity.RetryCallState | None = None

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        """End the attempt in flight.

        A success is tallied (it ends the call); an ordinary failure is kept for
        :meth:`backoff_or_raise` and suppressed; an interruption
        (KeyboardInterrupt, cancellation) gives a probe's slot back and propagates.
        """
        if exc is None:
            if self.breaker is not None:
                self.breaker.record(True, self.probe)
            return False
        if isinstance(exc, Exception):
            self.failure = exc
            return True
        if self.probe and self.breaker is not None:
            self.breaker.abandon(self.probe)
        return False

    def backoff_or_raise(self) -> float:
        """Raise the failed attempt's error if it is final, else take a retry token and return the wait before the next.

        The breaker hears of the failure only if it ends the call (a half-open
        probe's attempt is tallied at once: a probe is judged on its own).

        Raises:
            PortableError: the failure wrapped once, when it is not retryable, the
                attempts or the strategies are spent, the provider asked for a
                longer wait than ``max_retry_after``, or the endpoint's retry
                budget is exhausted (the message says so).
            DeadlineExceeded: the wait would pass the deadline in force.
        """
        exc = self.failure
        assert exc is not None, "no attempt has failed"
        err = self.guard.wrap(self.what, exc)
        healthy = err.code not in UNHEALTHY_CODES
        breaker = self.breaker
        judged = bool(self.probe) and breaker is not None
        if judged:
            breaker.record(healthy, self.probe, err.code)  # type: ignore[union-attr]
        try:
            delay = self._wait_before_retry(err, exc)
        except BaseException:
            if breaker is not None and not judged:
                breaker.record(healthy, 0, err.code)  # the call ends here: this is what its caller sees
            if self.scopes:
                self._tell_final(err)
            raise
        if self.scopes:
            from ..telemetry._observe import notify_attempt_failed

            notify_attempt_failed(self.scopes, self.attempt, err, delay)
        log = domain_logger(self.guard.domain)
        if log.isEnabledFor(logging.INFO):
            guard = self.guard
            log.info(
                "retrying %s on %s %s in %.3fs: attempt %d failed with %s (%s)",
                self.what, guard.provider, redact(guard.endpoint), delay, self.attempt,
                err.code.name, type(err).__name__,
                extra={
                    "portable_provider": guard.provider,
                    "portable_endpoint": redact(guard.endpoint),
                    "portable_error_code": err.code.name,
                    "portable_attempt": self.attempt,
                    "portable_retry_in": delay,
                },
            )  # fmt: skip
        return delay

    def _tell_final(self, err: PortableError) -> None:
        """Tell the observers that the attempt's failure ``err`` ends the call (and if the budget refused its retry)."""
        from ..telemetry._observe import notify_attempt_failed, notify_rejected

        assert self.scopes is not None
        notify_attempt_failed(self.scopes, self.attempt, err, None)
        if self.budget_refused:
            notify_rejected(self.scopes, err)

    def _wait_before_retry(self, err: PortableError, exc: Exception) -> float:
        """The wait before the next attempt after ``err`` (``exc`` wrapped), or raise ``err`` if it is final."""
        guard = self.guard
        cause = None if err is exc else exc
        retry = guard.policy.retry
        attempt = self.attempt
        if not err.retryable or attempt >= retry.max_attempts:
            raise err from cause
        hint = err.retry_after
        if hint is not None and hint > retry.max_retry_after:
            raise err from cause  # asked to come back much later: not within this call
        # a throttled answer that names no wait backs off one step further
        step = attempt + 1 if err.code == ErrorCode.THROTTLED and hint is None else attempt
        if names_a_strategy(retry):
            delay = self._consult_strategies(retry, err, cause, step)
        else:
            delay = retry.backoff(step, hint, guard.rng)
        at = DEADLINE_AT.get()
        if at is not None and time.monotonic() + delay >= at:
            raise deadline_error(guard.provider, self.what, attempt, err) from exc
        budget = guard.retry_budget
        if budget is not None and not budget.try_spend():
            err.message = (
                f"{err.message} (not retried: the retry budget of {budget.name} is exhausted, "
                f"after {attempt} attempt(s); too many calls to it are failing)"
            )
            err.args = (err.message,)
            self.budget_refused = True
            raise err from cause
        return delay

    def admit_next(self) -> None:
        """Count the next attempt and take the breaker's leave for it.

        Raises:
            CircuitOpen: the breaker opened meanwhile; the last failure is its cause.
        """
        last, self.failure = self.failure, None
        self.attempt += 1
        if self.breaker is not None:
            try:
                self.probe = self.breaker.before_call()
            except CircuitOpen as opened:
                if self.scopes:
                    from ..telemetry._observe import notify_rejected

                    notify_rejected(self.scopes, opened)
                raise opened from last

    def _consult_strategies(
        self, retry: RetryPolicy, err: PortableError, cause: Exception | None, step: int
    ) -> float:
        """The wait the policy's tenacity strategies choose after ``err``, or raise ``err`` if they stop.

        tenacity's order: ``retry`` decides whether to go on, ``wait`` chooses
        the wait (Retry-After is its floor), ``stop`` sees it as ``upcoming_sleep``.
        """
        state = self._call_state()
        state.attempt_number = self.attempt
        state.set_exception((type(err), err, err.__traceback__))
        state.outcome_timestamp = self.guard.clock()
        if retry.retry is not None and not retry.retry(state):
            raise err from cause
        hint = err.retry_after
        if retry.wait is None:
            delay = retry.backoff(step, hint, self.guard.rng)
        else:
            state.attempt_number = step
            try:
                delay = max(0.0, float(retry.wait(state)))
            finally:
                state.attempt_number = self.attempt
            if hint is not None:
                delay = max(delay, hint)
        state.upcoming_sleep = delay
        if retry.stop is not None and retry.stop(state):
            raise err from cause
        state.idle_for += delay
        return delay

    def _call_state(self) -> tenacity.RetryCallState:
        """The tenacity call state the strategies read, made at the first failure that consults them."""
        state = self.tenacity_state
        if state is not None:
            state.prepare_for_next_attempt()
            return state
        # Imported here, not at the top: a program that names no strategy never loads tenacity (nor
        # the asyncio it imports), and one that names some has loaded it already to make them.
        import tenacity

        retrying: Any = None  # no tenacity.Retrying drives these attempts; the guard does
        state = tenacity.RetryCallState(retrying, self.fn, self.args, self.kwargs)
        state.start_time = self.guard.clock() if self.started is None else self.started
        self.tenacity_state = state
        return state
