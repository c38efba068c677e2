"""The guard: runs driver calls under a retry policy, per-operation-class breakers and deadlines."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Protocol, TypeVar

from ..driver.redaction import redact, scrub_exception_chain
from ..errors import CircuitOpen, DeadlineExceeded, ErrorCode, PortableError, error_for
from ..telemetry._auto import check_providers
from ..telemetry._observe import (
    OBSERVERS,
    CallInfo,
    CallScope,
    describe_driver,
    notify_ended,
    notify_rejected,
    operation_of,
    start_scopes,
)
from ._attempts import Attempts, names_a_strategy
from ._breaker import _CLOSED, CircuitBreaker, breaker_for
from ._budget import EndpointRetryBudget, retry_budget_for
from ._deadline import (
    ATTEMPT_LIMIT,
    DEADLINE_AT,
    Limits,
    deadline_error,
    impose_limits,
    lift_limits,
)
from ._policy import ResiliencePolicy

R = TypeVar("R")

#: ``DEADLINE_AT.get``, bound once: CPython 3.11 looks a method of an imported name up as an
#: attribute on every call (a bound method each time), which the success path would feel
_deadline_in_force = DEADLINE_AT.get


class ErrorClassifier(Protocol):
    """What a guard asks a driver about its native errors."""

    def code_of(self, exc: BaseException) -> ErrorCode: ...
    def is_retryable(self, exc: BaseException) -> bool: ...
    def retry_after(self, exc: BaseException) -> float | None: ...


async def _asyncio_sleep(delay: float) -> None:
    # asyncio is imported on first async use, so sync users never pay for it
    import asyncio

    await asyncio.sleep(delay)


#: what a guard without a retry budget counts its calls with: the same C call as a budget's, so that
#: the success path has no branch on whether there is one
_NO_BUDGET_COUNTER = itertools.count().__next__


def _needs_set_up(policy: ResiliencePolicy) -> bool:
    """Whether a call under ``policy`` needs set-up before its first attempt (so no bare fast path).

    That is a deadline of its own, a per-attempt timeout, or tenacity
    strategies (they measure time from the call's start).
    """
    return policy.deadline is not None or policy.retry.timeout is not None or names_a_strategy(policy.retry)


class Guard:
    """Runs driver calls under one retry policy, per-operation-class breakers and the endpoint's retry budget.

    A portable type holds one Guard per driver. ``call(op_class, what, fn,
    *args)`` runs ``fn(*args)``; ``acall`` awaits ``fn(*args)``. ``op_class``
    picks the breaker ("read", "write", "publish", ...); ``what`` names the
    operation and its target in error messages, so it must hold no secret.

    Breakers count what the caller sees: one tally per call, made when the
    call ends, however many attempts it took (a call that succeeded after
    retries is a success; one that failed after its retries is a failure if
    its error says the provider is unhealthy). A half-open probe is the
    exception: each probing attempt is judged on its own.

    Args:
        provider: the scheme, for error messages and breaker names.
        endpoint: where requests go; breakers and the retry budget are shared per endpoint.
        classifier: the driver (``code_of``, ``is_retryable``, ``retry_after``).
        policy: retries, breakers and the default deadline. Defaults to
            :class:`ResiliencePolicy()`.
        clock: monotonic seconds for the breakers, the retry budget's refill and
            the elapsed time tenacity strategies see (tests pass a fake one).
        sleep, asleep: how to wait between attempts (tests pass fakes).
        rng: the built-in backoff's random source (tests pass a seeded one).
        target: the bucket, queue or topic the guarded calls address (its name, no secret),
            for observers (:mod:`portable.telemetry`): span names and per-bucket counts.
            Defaults to the name the driver holds (``bucket``, ``queue``, ...), if any.
        domain: "storage", "messaging", "compute" or "idempotency", for observers; defaults
            to the one the driver's base class serves.

    Observers: while any is registered (:data:`portable.telemetry._observe.OBSERVERS`), a call
    goes through ``_observed_call`` / ``_observed_acall``, which tell them of its start, each
    failed attempt, a breaker's or the retry budget's refusal, and its end. Without one a call
    pays one check of that list's truth, then the path below.
    """

    __slots__ = (
        "_asleep",
        "_breakers",
        "_budget",
        "_classifier",
        "_note_call",
        "_policy",
        "_set_up_each_call",
        "_sleep",
        "clock",
        "domain",
        "endpoint",
        "provider",
        "rng",
        "target",
    )

    def __init__(
        self,
        provider: str,
        endpoint: str,
        classifier: ErrorClassifier,
        policy: ResiliencePolicy | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] | None = None,
        rng: random.Random | None = None,
        target: str | None = None,
        domain: str | None = None,
    ) -> None:
        self.provider = provider
        if target is None or domain is None:
            found_domain, found_target = describe_driver(classifier)
            target = found_target if target is None else target
            domain = found_domain if domain is None else domain
        self.target = target
        self.domain = domain
        check_providers()  # a tracer or meter provider set since the last guard was made
        self.endpoint = endpoint
        self.clock = clock
        self.policy = policy or ResiliencePolicy()
        self.rng = rng
        self._classifier = classifier
        self._sleep = sleep
        self._asleep = _asyncio_sleep if asleep is None else asleep
        self._breakers: dict[str, CircuitBreaker | None] = {}

    def __repr__(self) -> str:
        return f"Guard({self.provider!r}, {redact(self.endpoint)!r})"

    @property
    def policy(self) -> ResiliencePolicy:
        """The retry, breaker and deadline policy of every call."""
        return self._policy

    @policy.setter
    def policy(self, policy: ResiliencePolicy) -> None:
        # decided once here, so that the success path reads one flag instead of the policy's fields
        self._policy = policy
        self._set_up_each_call = _needs_set_up(policy)
        rb = policy.retry_budget
        self._budget = None if rb is None else retry_budget_for(self.provider, self.endpoint, rb, self.clock)
        self._note_call = _NO_BUDGET_COUNTER if self._budget is None else self._budget.note_call

    @property
    def retry_budget(self) -> EndpointRetryBudget | None:
        """The endpoint's retry budget, or None if the policy has none."""
        return self._budget

    def breaker(self, op_class: str) -> CircuitBreaker | None:
        """The breaker guarding ``op_class``, or None if breakers are off."""
        try:
            return self._breakers[op_class]
        except KeyError:
            bp = self._policy.breaker
            found = None if bp is None else breaker_for(self.provider, self.endpoint, op_class, bp, self.clock)
            self._breakers[op_class] = found
            return found

    # The first attempt of call and acall is written out in each, not shared: a helper would add a
    # Python call to every guarded operation's success path (bench/resilience_bench.py). What they
    # share is everything after a failure, in Attempts; only their loops differ, by an await.

    # -- sync -----------------------------------------------------------
    def call(self, op_class: str, what: str, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Run ``fn(*args, **kwargs)`` with breaker, retries, deadline and error wrapping.

        Raises:
            CircuitOpen: the breaker of ``op_class`` is open.
            DeadlineExceeded: the deadline passed, or would pass during a backoff.
            PortableError: the driver's error, wrapped once, after the last attempt.
        """
        if OBSERVERS:
            return self._observed_call(op_class, what, fn, args, kwargs)
        if self._set_up_each_call:
            limits: Limits | None = impose_limits(self._policy)
            started: float | None = self.clock()  # tenacity strategies measure from here
        else:
            limits = started = None
        try:
            at = _deadline_in_force()
            if at is not None and time.monotonic() >= at:
                raise deadline_error(self.provider, what)
            try:
                breaker = self._breakers[op_class]
            except KeyError:
                breaker = self.breaker(op_class)
            probe = breaker.before_call() if breaker is not None else 0
            self._note_call()
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                attempts = Attempts(self, what, breaker, probe, exc, fn, args, kwargs, started)
                return self._retry(attempts, fn, args, kwargs)
            except BaseException:
                if probe:
                    breaker.abandon(probe)  # type: ignore[union-attr]
                raise
            if breaker is not None:
                breaker.record(True, probe)
            return result
        finally:
            if limits is not None:
                lift_limits(limits)

    def _retry(self, attempts: Attempts, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        """After a failed first attempt: wait and attempt again until ``fn`` succeeds or a failure is final."""
        while True:
            delay = attempts.backoff_or_raise()
            if delay > 0:
                self._sleep(delay)
            attempts.admit_next()
            with attempts:
                return fn(*args, **kwargs)

    # -- async ----------------------------------------------------------
    async def acall(
        self, op_class: str, what: str, fn: Callable[..., Awaitable[R]], *args: Any, **kwargs: Any
    ) -> R:
        """Await ``fn(*args, **kwargs)`` with the same breaker, retries, deadline and wrapping as :meth:`call`.

        Each attempt is bounded by :func:`attempt_timeout` when a per-attempt
        timeout or a deadline is in force (a timer on the event loop); a timed-out
        attempt counts as a retryable DeadlineExceeded. Cancelling the task
        cancels the attempt and gives a half-open probe's slot back.
        """
        if OBSERVERS:
            return await self._observed_acall(op_class, what, fn, args, kwargs)
        if self._set_up_each_call:
            limits: Limits | None = impose_limits(self._policy, per_attempt=False)
            started: float | None = self.clock()  # tenacity strategies measure from here
        else:
            limits = started = None
        try:
            at = _deadline_in_force()
            if at is not None and time.monotonic() >= at:
                raise deadline_error(self.provider, what)
            try:
                breaker = self._breakers[op_class]
            except KeyError:
                breaker = self.breaker(op_class)
            # a closed breaker's before_call and record(True), written out: two Python calls less
            # per call (the outcome is the same: 0, no probe; a success appended to the window)
            probe = 0 if breaker is None or breaker.state is _CLOSED else breaker.before_call()
            self._note_call()
            try:
                if at is None and (limits is None or self._policy.retry.timeout is None):
                    result = await fn(*args, **kwargs)
                else:
                    result = await _await_within(fn, args, kwargs, at, self._policy.retry.timeout)
            except Exception as exc:
                attempts = Attempts(self, what, breaker, probe, exc, fn, args, kwargs, started)
                return await self._aretry(attempts, fn, args, kwargs)
            except BaseException:
                if probe:
                    breaker.abandon(probe)  # type: ignore[union-attr]
                raise
            if breaker is not None:
                if not probe and breaker.state is _CLOSED:
                    breaker._outcomes.append(True)  # CircuitBreaker.record's closed-success path
                else:
                    breaker.record(True, probe)
            return result
        finally:
            if limits is not None:
                lift_limits(limits)

    async def _aretry(
        self, attempts: Attempts, fn: Callable[..., Awaitable[R]], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> R:
        """:meth:`_retry` for a coroutine function, each attempt under the time it may take."""
        at = _deadline_in_force()
        timeout = self._policy.retry.timeout
        while True:
            delay = attempts.backoff_or_raise()
            if delay > 0:
                await self._asleep(delay)
            attempts.admit_next()
            with attempts:
                if at is None and timeout is None:
                    return await fn(*args, **kwargs)
                return await _await_within(fn, args, kwargs, at, timeout)

    # -- observed calls -------------------------------------------------
    # call and acall once more, telling the observers; kept apart so that the unobserved success
    # path stays as it was (one check of OBSERVERS' truth).

    def _observed_call(
        self, op_class: str, what: str, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> R:
        """:meth:`call` with the observers told of its start, failed attempts, a refusal and its end."""
        scopes = start_scopes(self._info(op_class, what, fn, args, "sync"))
        error: BaseException | None = None
        result: Any = None
        limits: Limits | None = None
        started: float | None = None
        try:
            if self._set_up_each_call:
                limits = impose_limits(self._policy)
                started = self.clock()
            at = _deadline_in_force()
            if at is not None and time.monotonic() >= at:
                raise deadline_error(self.provider, what)
            breaker = self.breaker(op_class)
            probe = self._admit(breaker, scopes)
            self._note_call()
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                attempts = Attempts(self, what, breaker, probe, exc, fn, args, kwargs, started, scopes)
                result = self._retry(attempts, fn, args, kwargs)
                return result  # type: ignore[no-any-return]
            except BaseException:
                if probe:
                    breaker.abandon(probe)  # type: ignore[union-attr]
                raise
            if breaker is not None:
                breaker.record(True, probe)
            return result  # type: ignore[no-any-return]
        except BaseException as exc:
            error = exc
            raise
        finally:
            if limits is not None:
                lift_limits(limits)
            notify_ended(scopes, error, result)

    async def _observed_acall(
        self,
        op_class: str,
        what: str,
        fn: Callable[..., Awaitable[R]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> R:
        """:meth:`acall` with the observers told of its start, failed attempts, a refusal and its end."""
        scopes = start_scopes(self._info(op_class, what, fn, args, "async"))
        error: BaseException | None = None
        result: Any = None
        limits: Limits | None = None
        started: float | None = None
        try:
            if self._set_up_each_call:
                limits = impose_limits(self._policy, per_attempt=False)
                started = self.clock()
            at = _deadline_in_force()
            if at is not None and time.monotonic() >= at:
                raise deadline_error(self.provider, what)
            breaker = self.breaker(op_class)
            probe = self._admit(breaker, scopes)
            self._note_call()
            try:
                if at is None and (limits is None or self._policy.retry.timeout is None):
                    result = await fn(*args, **kwargs)
                else:
                    result = await _await_within(fn, args, kwargs, at, self._policy.retry.timeout)
            except Exception as exc:
                attempts = Attempts(self, what, breaker, probe, exc, fn, args, kwargs, started, scopes)
                result = await self._aretry(attempts, fn, args, kwargs)
                return result  # type: ignore[no-any-return]
            except BaseException:
                if probe:
                    breaker.abandon(probe)  # type: ignore[union-attr]
                raise
            if breaker is not None:
                breaker.record(True, probe)
            return result  # type: ignore[no-any-return]
        except BaseException as exc:
            error = exc
            raise
        finally:
            if limits is not None:
                lift_limits(limits)
            notify_ended(scopes, error, result)

    # -- driver batches ---------------------------------------------------
    def observed_batch(
        self, op_class: str, operation: str, batch: list[Any], results: Iterable[tuple[str, Any]]
    ) -> Iterable[tuple[str, Any]]:
        """A driver batch method's per-item ``results``, told to the observers as one call.

        The batch methods (``get_many``, ``put_many``, ``delete_many``, ``copy_many``) run the
        driver's own concurrency outside :meth:`call` (a failed item is retried alone, through
        it). With no observer this returns ``results`` as they are; with some it consumes them
        inside one observed call (``operation``, ``args=(batch,)``, the result the list of
        ``(key, outcome)`` pairs, a failed item's outcome its exception) and returns that list.
        """
        if not OBSERVERS:
            return results
        scopes = start_scopes(self._batch_info(op_class, operation, batch, "sync"))
        error: BaseException | None = None
        collected: list[tuple[str, Any]] | None = None
        try:
            collected = list(results)
            return collected
        except BaseException as exc:
            error = exc
            raise
        finally:
            notify_ended(scopes, error, collected)

    def aobserved_batch(
        self, op_class: str, operation: str, batch: list[Any], results: AsyncIterable[tuple[str, Any]]
    ) -> AsyncIterable[tuple[str, Any]]:
        """:meth:`observed_batch` for an async driver's batch (an async iterator of ``(key, outcome)``)."""
        if not OBSERVERS:
            return results
        return self._acollected_batch(op_class, operation, batch, results)

    async def _acollected_batch(
        self, op_class: str, operation: str, batch: list[Any], results: AsyncIterable[tuple[str, Any]]
    ) -> AsyncIterator[tuple[str, Any]]:
        scopes = start_scopes(self._batch_info(op_class, operation, batch, "async"))
        error: BaseException | None = None
        collected: list[tuple[str, Any]] = []
        try:
            async for pair in results:
                collected.append(pair)
        except BaseException as exc:
            error = exc
            raise
        finally:
            notify_ended(scopes, error, collected)  # before the first item is handed on: spans nest
        for pair in collected:
            yield pair

    def _batch_info(self, op_class: str, operation: str, batch: list[Any], face: str) -> CallInfo:
        what = f"{operation} {len(batch)} objects"
        return CallInfo(
            self.provider, self.endpoint, op_class, operation, what, (batch,), self.target, face, self.domain
        )

    def _info(self, op_class: str, what: str, fn: Callable[..., Any], args: tuple[Any, ...], face: str) -> CallInfo:
        """The observers' view of one call."""
        operation = operation_of(fn, what)
        return CallInfo(
            self.provider, self.endpoint, op_class, operation, what, args, self.target, face, self.domain
        )

    @staticmethod
    def _admit(breaker: CircuitBreaker | None, scopes: list[CallScope]) -> int:
        """The breaker's ticket for the first attempt; a refusal is told to the observers, then raised."""
        if breaker is None:
            return 0
        try:
            return breaker.before_call()
        except CircuitOpen as refused:
            notify_rejected(scopes, refused)
            raise

    # -- errors ---------------------------------------------------------
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
        scrub_exception_chain(exc)  # it becomes the __cause__: a printed traceback shows it
        cls = error_for(code)
        return cls(
            f"{what}: {detail}",
            provider=self.provider,
            retryable=retryable,
            retry_after=retry_after,
        )


async def _await_within(
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
    import asyncio  # here, not at the top: sync users never load asyncio

    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    handle = loop.call_at(loop.time() + limit, expire)
    token = ATTEMPT_LIMIT.set(limit)
    try:
        return await fn(*args, **kwargs)
    except asyncio.CancelledError:
        if expired and task.uncancel() == 0:
            raise DeadlineExceeded(f"no answer within {limit:.3g}s", retryable=True) from None
        raise
    finally:
        handle.cancel()
        ATTEMPT_LIMIT.reset(token)
