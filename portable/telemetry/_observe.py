"""The guard's observers: the one place that sees every guarded call of every provider.

An observer is told when a guarded call starts (:meth:`CallObserver.started`),
and the :class:`CallScope` it returns is told of each failed attempt and of
the call's end. :data:`OBSERVERS` is empty unless something registered one
(OpenTelemetry instrumentation, the cost meter, a test), and the guard reads
:func:`observing` (a list's truth) before it builds a :class:`CallInfo`: with
no observer a call pays that one check.

Observers must not raise: an observer's exception is swallowed and the call
goes on (an observer's bug must not fail a storage write), and must not block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["OBSERVERS", "CallInfo", "CallObserver", "CallScope", "add_observer", "observing"]


class CallInfo:
    """One guarded call, as observers see it (no secret in any field).

    Attributes:
        provider: the scheme ("s3", "sqs", "kafka", "mem", ...).
        endpoint: where requests go, redacted.
        op_class: the guard's operation class ("read", "write", "publish", "receive", "ack", ...).
        operation: the driver method's name ("get", "put", "publish_batch", ...), or the
            guard's ``what`` verb when the call is a lambda.
        what: the operation and its target, as in error messages.
        args: the driver call's positional arguments (observers may read sizes from them; never log them).
    """

    __slots__ = ("args", "endpoint", "op_class", "operation", "provider", "what")

    def __init__(
        self, provider: str, endpoint: str, op_class: str, operation: str, what: str, args: tuple[Any, ...]
    ) -> None:
        self.provider = provider
        self.endpoint = endpoint
        self.op_class = op_class
        self.operation = operation
        self.what = what
        self.args = args

    def __repr__(self) -> str:
        return f"CallInfo({self.provider!r}, {self.op_class!r}, {self.operation!r}, {self.what!r})"


class CallScope(Protocol):
    """What an observer keeps for one call while it runs."""

    def attempt_failed(self, attempt: int, exc: BaseException, retry_in: float | None) -> None:
        """Attempt number ``attempt`` (from 1) failed with ``exc`` (native or portable).

        ``retry_in`` is the backoff before the next attempt, or None when this failure is final.
        """

    def rejected(self, exc: BaseException) -> None:
        """The call was refused before an attempt: a breaker is open or the retry budget is spent."""

    def ended(self, error: BaseException | None, result: Any) -> None:
        """The call ended: ``error`` is what the caller sees (None on success), ``result`` the value returned."""


class CallObserver(Protocol):
    """Something told of every guarded call."""

    def started(self, info: CallInfo) -> CallScope | None:
        """A call is starting; return a scope to follow it, or None to ignore it."""


#: the registered observers, in registration order; the guard reads it on every call
OBSERVERS: list[CallObserver] = []


def observing() -> bool:
    """Whether any observer is registered (the guard's one check per call)."""
    return bool(OBSERVERS)


def add_observer(observer: CallObserver) -> Callable[[], None]:
    """Register ``observer`` for every guarded call from now on; returns a function that removes it."""
    OBSERVERS.append(observer)

    def remove() -> None:
        try:
            OBSERVERS.remove(observer)
        except ValueError:
            pass

    return remove
