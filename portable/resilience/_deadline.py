"""Deadlines: an overall deadline per thread and asyncio task, and the per-attempt timeout drivers read."""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import DeadlineExceeded, InvalidArgument, PortableError

if TYPE_CHECKING:
    from ._policy import ResiliencePolicy

#: The overall deadline in force, as ``time.monotonic()`` seconds (the earliest of nested ones).
DEADLINE_AT: contextvars.ContextVar[float | None] = contextvars.ContextVar("portable_deadline", default=None)
#: The guard's per-attempt timeout while an attempt runs (seconds), for :func:`attempt_timeout`.
ATTEMPT_LIMIT: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "portable_attempt_timeout", default=None
)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """Give every portable call inside the block an overall deadline.

    Retries stop (raising DeadlineExceeded) rather than sleep past it, a call
    made after it passed fails before any request, and drivers read
    :func:`remaining` to bound each request. Nested deadlines keep the
    earlier one. Works per thread and per asyncio task.

    Yields:
        The deadline as ``time.monotonic()`` seconds.

    Raises:
        InvalidArgument: ``seconds`` is not > 0.
    """
    if not seconds > 0:
        raise InvalidArgument(f"a deadline must be > 0 seconds, got {seconds}")
    at = time.monotonic() + seconds
    token = tighten(at)
    try:
        yield at
    finally:
        DEADLINE_AT.reset(token)


def tighten(at: float) -> contextvars.Token[float | None]:
    """Put the deadline ``at`` in force unless an earlier one already is; reset the token to undo."""
    outer = DEADLINE_AT.get()
    return DEADLINE_AT.set(at if outer is None else min(at, outer))


#: What :func:`impose_limits` returns and :func:`lift_limits` undoes: the tokens of the two context
#: variables (a plain tuple: this is made on every call of a policy with limits, and a class costs more)
Limits = tuple[contextvars.Token[float | None] | None, contextvars.Token[float | None] | None]


def impose_limits(policy: ResiliencePolicy, per_attempt: bool = True) -> Limits:
    """Put a policy's own deadline (tightening any in force) and its per-attempt timeout in force.

    Args:
        policy: the guard's policy.
        per_attempt: also set the per-attempt timeout that sync drivers read
            through :func:`attempt_timeout` (the async guard sets it per attempt).

    Returns:
        The tokens for :func:`lift_limits`, which a guard calls when the call ends.
    """
    own = policy.deadline
    if own is None:
        deadline_token = None
    else:  # tighten(), written out: this runs on every call of such a policy
        at, outer = time.monotonic() + own, DEADLINE_AT.get()
        deadline_token = DEADLINE_AT.set(at if outer is None or at < outer else outer)
    timeout = policy.retry.timeout
    return deadline_token, None if timeout is None or not per_attempt else ATTEMPT_LIMIT.set(timeout)


def lift_limits(limits: Limits) -> None:
    """Put the deadline and per-attempt timeout back as they were before :func:`impose_limits`."""
    deadline_token, timeout_token = limits
    if timeout_token is not None:
        ATTEMPT_LIMIT.reset(timeout_token)
    if deadline_token is not None:
        DEADLINE_AT.reset(deadline_token)


def current_deadline() -> float | None:
    """The overall deadline (``time.monotonic()`` seconds) in force, or None."""
    return DEADLINE_AT.get()


def remaining(default: float | None = None) -> float | None:
    """Seconds left before the deadline in force, or ``default`` when there is none."""
    at = DEADLINE_AT.get()
    if at is None:
        return default
    return max(0.0, at - time.monotonic())


def attempt_timeout(default: float | None = None) -> float | None:
    """What the request being made now may take: the smaller of the guard's
    per-attempt timeout and the time left before the deadline, else ``default``.

    Sync drivers pass this to their SDK (``timeout=``, ``read_timeout``).
    """
    per_call = ATTEMPT_LIMIT.get()
    left = remaining()
    if per_call is None:
        return default if left is None else left
    return per_call if left is None else min(per_call, left)


def deadline_error(provider: str, what: str, attempts: int = 0, last: PortableError | None = None) -> DeadlineExceeded:
    """The error of a call stopped by its deadline: before its first attempt, or after ``attempts`` of them."""
    if last is None:
        return DeadlineExceeded(f"{what}: the deadline passed before the call was made", provider=provider)
    return DeadlineExceeded(
        f"{what}: deadline reached after {attempts} attempt(s); last error: {last.message}",
        provider=provider,
    )
