"""The guard's observers: the one place that sees every guarded call of every provider.

An observer is told when a guarded call starts (:meth:`CallObserver.started`),
and the :class:`CallScope` it returns is told of each failed attempt and of
the call's end. :data:`OBSERVERS` is empty unless something registered one
(OpenTelemetry instrumentation, the cost meter, a test), and the guard reads
:func:`observing` (a list's truth) before it builds a :class:`CallInfo`: with
no observer a call pays that one check.

Observers must not raise: an observer's exception is swallowed and the call
goes on (an observer's bug must not fail a storage write), and must not block.

What counts as one call:

* every :meth:`Guard.call` / :meth:`Guard.acall` (``operation`` the driver method's name);
* every driver batch of ``Bucket.get_many`` / ``put_many`` / ``delete_many`` / ``copy_many``
  (both faces; at most 4,096 items each): ``operation`` is that name, ``args`` is
  ``(batch,)`` (keys, ``(key, data)`` or ``(source, destination)`` pairs), the result
  told to :meth:`CallScope.ended` is the list of ``(key, outcome)`` pairs, a failed
  item's outcome its exception; such an item is then retried alone, as a call of its own;
* idempotency claims are not calls: :data:`CLAIM_OBSERVERS` hear of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..driver.redaction import redact

__all__ = [
    "OBSERVERS",
    "CallInfo",
    "CallObserver",
    "CallScope",
    "BREAKER_LISTENERS",
    "CLAIM_OBSERVERS",
    "ClaimObserver",
    "add_observer",
    "describe_driver",
    "key_hash",
    "notify_attempt_failed",
    "notify_claim",
    "notify_ended",
    "notify_rejected",
    "observing",
    "operation_of",
    "start_scopes",
]


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
        target: the bucket, container, queue or topic the call addresses (its name, redacted), or ""
            when unknown (the guard's ``target``: given by the portable type, else read from the driver).
        face: "sync" (:meth:`Guard.call`) or "async" (:meth:`Guard.acall`).
        domain: "storage", "messaging", "compute", "idempotency", or "" when unknown (the guard's
            ``domain``, read from the driver's base class).
    """

    __slots__ = ("args", "domain", "endpoint", "face", "op_class", "operation", "provider", "target", "what")

    def __init__(
        self,
        provider: str,
        endpoint: str,
        op_class: str,
        operation: str,
        what: str,
        args: tuple[Any, ...],
        target: str = "",
        face: str = "sync",
        domain: str = "",
    ) -> None:
        self.provider = provider
        self.endpoint = endpoint
        self.op_class = op_class
        self.operation = operation
        self.what = what
        self.args = args
        self.target = target
        self.face = face
        self.domain = domain

    def __repr__(self) -> str:
        return f"CallInfo({self.provider!r}, {self.op_class!r}, {self.operation!r}, {self.what!r})"


class CallScope(Protocol):
    """What an observer keeps for one call while it runs."""

    def attempt_failed(self, attempt: int, exc: BaseException, retry_in: float | None) -> None:
        """Attempt number ``attempt`` (from 1) failed with ``exc`` (native or portable).

        ``retry_in`` is the backoff before the next attempt, or None when this failure is final.
        """

    def rejected(self, exc: BaseException) -> None:
        """The call, or its next attempt, was refused: a breaker is open or the retry budget is spent.

        A breaker refusing the first attempt raises :class:`~portable.errors.CircuitOpen` (``exc``);
        one opening between attempts does the same after :meth:`attempt_failed` reported the last
        failure with its ``retry_in``; a spent retry budget is told here after that failure was
        reported final (``retry_in`` None), ``exc`` the error the caller sees.
        """

    def ended(self, error: BaseException | None, result: Any) -> None:
        """The call ended: ``error`` is what the caller sees (None on success), ``result`` the value returned."""


class CallObserver(Protocol):
    """Something told of every guarded call."""

    def started(self, info: CallInfo) -> CallScope | None:
        """A call is starting; return a scope to follow it, or None to ignore it."""


#: the registered observers, in registration order; the guard reads it on every call
OBSERVERS: list[CallObserver] = []

class ClaimObserver(Protocol):
    """Something told of every idempotency claim (``run_once``, ``arun_once``, the consumer loop)."""

    def claimed(
        self, store: object, key: str, claim: Any, error: BaseException | None, started_ns: int, ended_ns: int
    ) -> None:
        """A claim of ``key`` in ``store`` ran from ``started_ns`` to ``ended_ns`` (``time.time_ns()``).

        ``claim`` is the :class:`~portable.driver.idempotency.Claim` it returned (its ``status``:
        acquired, completed, in_progress), or None when it raised ``error``. Never log ``key``
        raw: it may be a customer's identifier; use :func:`key_hash`.
        """


#: the registered claim observers; run_once reads this list's truth before it notes the time
CLAIM_OBSERVERS: list[ClaimObserver] = []

#: ``listener(breaker, old_state, new_state)`` for every state change of every circuit breaker
#: (:func:`portable.resilience.add_breaker_listener` adds to it; kept here so that telemetry
#: can listen without importing portable.resilience, which imports this module)
BREAKER_LISTENERS: list[Callable[[Any, str, str], None]] = []


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


# -- what the guard calls (only when OBSERVERS is non-empty) -----------------------------------

#: driver base classes, by name (this module imports no driver), and the domain each serves
_DOMAINS = (
    ("StorageDriver", "storage"),
    ("AsyncStorageDriver", "storage"),
    ("MessagingDriver", "messaging"),
    ("TopicDriver", "messaging"),
    ("SubscriptionDriver", "messaging"),
    ("ComputeDriver", "compute"),
    ("AsyncComputeDriver", "compute"),
    ("CompareAndSwapStore", "idempotency"),
)
#: the attributes drivers keep the name of what they address in, in order of preference
_TARGET_ATTRIBUTES = (
    "bucket",
    "container",
    "queue",
    "topic",
    "topic_name",
    "subscription_name",
    "job_queue",
    "table",
    "collection",
    "name",
)


def describe_driver(driver: object) -> tuple[str, str]:
    """``(domain, target)`` of a guard's driver, for observers: read once, when the guard is made.

    The domain comes from the driver's base classes; the target from the first of
    :data:`_TARGET_ATTRIBUTES` it (or its ``settings``, or the driver it wraps, ``inner``)
    holds as a string, else the last part of a ``mem://``, ``file://`` or ``local://``
    endpoint (redacted); "" when it holds none.
    """
    inner = getattr(driver, "inner", None)  # a wrapper (chaos+) addresses what the driver it wraps does
    if inner is not None and inner is not driver and not isinstance(inner, str):
        found = describe_driver(inner)
        if found[1]:
            return found
    names = {cls.__name__ for cls in type(driver).__mro__}
    domain = next((found for base, found in _DOMAINS if base in names), "")
    target = ""
    settings = getattr(driver, "settings", None)  # a driver that keeps its URL's settings apart (kafka://)
    for attribute in _TARGET_ATTRIBUTES:
        try:
            value = getattr(driver, attribute, None)
            if not isinstance(value, str):  # MessagingDriver.topic is a method
                value = getattr(settings, attribute, None)
        except Exception:
            continue
        if isinstance(value, str) and value:
            target = value
            break
    else:
        # the embedded drivers name what they serve in their endpoint: mem://NAME, file:///ROOT
        endpoint = getattr(driver, "endpoint", "")
        if isinstance(endpoint, str) and endpoint.startswith(("mem://", "file://", "local://")):
            target = endpoint.split("://", 1)[1].rstrip("/").rsplit("/", 1)[-1]
    if target:
        target = redact(target)
    return domain, target



def operation_of(fn: Callable[..., Any], what: str) -> str:
    """The operation name observers see: ``fn``'s ``__name__``, or the first word of ``what`` for a lambda."""
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or name == "<lambda>" or not name:
        name = what.split(" ", 1)[0]
    return name


def start_scopes(info: CallInfo) -> list[CallScope]:
    """Tell every observer that ``info`` starts; the scopes they return (an observer that raises is skipped)."""
    scopes: list[CallScope] = []
    for observer in tuple(OBSERVERS):
        try:
            scope = observer.started(info)
        except Exception:
            continue  # an observer's bug must not fail the call
        if scope is not None:
            scopes.append(scope)
    return scopes


def notify_attempt_failed(
    scopes: list[CallScope], attempt: int, exc: BaseException, retry_in: float | None
) -> None:
    """Tell each scope that attempt ``attempt`` failed (``retry_in`` None: the failure is final)."""
    for scope in scopes:
        try:
            scope.attempt_failed(attempt, exc, retry_in)
        except Exception:
            pass


def notify_rejected(scopes: list[CallScope], exc: BaseException) -> None:
    """Tell each scope that a breaker or the retry budget refused the call (or its next attempt)."""
    for scope in scopes:
        try:
            scope.rejected(exc)
        except Exception:
            pass


def notify_claim(store: object, key: str, claim: Any, error: BaseException | None, started_ns: int) -> None:
    """Tell every claim observer of one claim that started at ``started_ns`` and ended now."""
    import time

    ended_ns = time.time_ns()
    for observer in tuple(CLAIM_OBSERVERS):
        try:
            observer.claimed(store, key, claim, error, started_ns, ended_ns)
        except Exception:
            pass


def key_hash(key: str) -> str:
    """A short, stable stand-in for an idempotency key in span names and logs (16 hex digits of its SHA-256)."""
    import hashlib

    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def notify_ended(scopes: list[CallScope], error: BaseException | None, result: Any) -> None:
    """Tell each scope, last started first, that the call ended."""
    for scope in reversed(scopes):
        try:
            scope.ended(error, result)
        except Exception:
            pass

