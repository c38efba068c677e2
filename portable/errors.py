"""Errors raised by every portable API, whatever the provider.

Each error has a stable :class:`ErrorCode`; codes never change number, so they
can be logged, stored and compared across versions. The provider's own error,
when there is one, is kept as ``__cause__`` and its classification as
``retryable``.

The tree::

    PortableError
    ├── NotFound                     the object, queue, job or profile does not exist
    ├── AlreadyExists                a create-only write met an existing object
    ├── PreconditionFailed           an etag/generation condition did not hold
    ├── PermissionDenied             credentials lack the right
    ├── InvalidArgument              bad input, caught before any request is sent
    │   ├── InvalidKey
    │   ├── InvalidURL
    │   │   └── UnknownScheme
    │   ├── ConfigError
    │   └── TooLarge
    ├── Unavailable                  the provider did not answer; also an open breaker
    │   └── CircuitOpen
    ├── Throttled                    the provider asked us to slow down
    ├── DeadlineExceeded             the call or the overall deadline ran out
    ├── Cancelled                    the caller cancelled the operation
    ├── Unsupported                  the provider cannot do this
    │   ├── MissingDependency        a scheme whose distribution is not installed
    │   └── MissingCapability        a profile requires what the provider lacks
    ├── InProgress                   the idempotency key's first call is still running
    ├── IdempotencyConflict          the same key arrived with a different payload
    └── Internal                     anything the driver could not classify
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = [
    "AlreadyExists",
    "Cancelled",
    "CircuitOpen",
    "ConfigError",
    "DeadlineExceeded",
    "ErrorCode",
    "IdempotencyConflict",
    "InProgress",
    "Internal",
    "InvalidArgument",
    "InvalidKey",
    "InvalidURL",
    "MissingCapability",
    "MissingDependency",
    "NotFound",
    "PermissionDenied",
    "PortableError",
    "PreconditionFailed",
    "Throttled",
    "TooLarge",
    "Unavailable",
    "UnknownScheme",
    "Unsupported",
    "error_for",
]


class ErrorCode(enum.IntEnum):
    """Stable error codes. Numbers are part of the API and never change."""

    UNKNOWN = 1
    NOT_FOUND = 2
    ALREADY_EXISTS = 3
    PRECONDITION_FAILED = 4
    PERMISSION_DENIED = 5
    INVALID_ARGUMENT = 6
    UNAVAILABLE = 7
    THROTTLED = 8
    DEADLINE_EXCEEDED = 9
    CANCELLED = 10
    UNSUPPORTED = 11
    IN_PROGRESS = 12
    IDEMPOTENCY_CONFLICT = 13
    TOO_LARGE = 14


class PortableError(Exception):
    """Base of every error portable raises.

    Attributes:
        code: the stable :class:`ErrorCode`.
        retryable: whether retrying the same call may succeed.
        provider: the scheme of the provider that failed (``"s3"``), if any.
        retry_after: seconds the provider asked us to wait, if it said.
    """

    code: ErrorCode = ErrorCode.UNKNOWN
    default_retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        retryable: bool | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.retryable = self.default_retryable if retryable is None else retryable
        self.retry_after = retry_after

    def __str__(self) -> str:
        if self.provider:
            return f"[{self.provider}] {self.message}"
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (type(self), self.message, self.provider, self.retryable, self.retry_after),
        )


def _rebuild(
    cls: type[PortableError],
    message: str,
    provider: str | None,
    retryable: bool,
    retry_after: float | None,
) -> PortableError:
    err = cls.__new__(cls)
    PortableError.__init__(
        err, message, provider=provider, retryable=retryable, retry_after=retry_after
    )
    return err


class NotFound(PortableError):
    code = ErrorCode.NOT_FOUND


class AlreadyExists(PortableError):
    code = ErrorCode.ALREADY_EXISTS


class PreconditionFailed(PortableError):
    code = ErrorCode.PRECONDITION_FAILED


class PermissionDenied(PortableError):
    code = ErrorCode.PERMISSION_DENIED


class InvalidArgument(PortableError, ValueError):
    code = ErrorCode.INVALID_ARGUMENT


class InvalidKey(InvalidArgument):
    """An object key, message attribute or job name that the API or provider rejects."""


class InvalidURL(InvalidArgument):
    """A provider URL that cannot be parsed or names an unknown option."""


class UnknownScheme(InvalidURL):
    """A URL scheme that no built-in driver or installed entry point provides."""


class ConfigError(InvalidArgument):
    """A bad ``portable.toml`` or environment override; the message names file and key."""


class TooLarge(InvalidArgument):
    code = ErrorCode.TOO_LARGE


class Unavailable(PortableError):
    code = ErrorCode.UNAVAILABLE
    default_retryable = True


class CircuitOpen(Unavailable):
    """The circuit breaker for this provider is open: calls fail fast until it probes."""

    default_retryable = False

    def __init__(self, message: str, *, breaker: str, probe_at: float, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.breaker = breaker
        self.probe_at = probe_at


class Throttled(PortableError):
    code = ErrorCode.THROTTLED
    default_retryable = True


class DeadlineExceeded(PortableError, TimeoutError):
    code = ErrorCode.DEADLINE_EXCEEDED


class Cancelled(PortableError):
    code = ErrorCode.CANCELLED


class Unsupported(PortableError):
    code = ErrorCode.UNSUPPORTED


class MissingDependency(Unsupported, ImportError):
    """A known scheme whose adapter distribution is not installed."""


class MissingCapability(Unsupported):
    """A profile's ``requires`` names a capability the provider does not have."""


class InProgress(PortableError):
    """The first call with this idempotency key is still running."""

    code = ErrorCode.IN_PROGRESS
    default_retryable = True


class IdempotencyConflict(PortableError):
    """The idempotency key was used before with a different payload."""

    code = ErrorCode.IDEMPOTENCY_CONFLICT


class Internal(PortableError):
    code = ErrorCode.UNKNOWN


_BY_CODE: dict[ErrorCode, type[PortableError]] = {
    ErrorCode.UNKNOWN: Internal,
    ErrorCode.NOT_FOUND: NotFound,
    ErrorCode.ALREADY_EXISTS: AlreadyExists,
    ErrorCode.PRECONDITION_FAILED: PreconditionFailed,
    ErrorCode.PERMISSION_DENIED: PermissionDenied,
    ErrorCode.INVALID_ARGUMENT: InvalidArgument,
    ErrorCode.UNAVAILABLE: Unavailable,
    ErrorCode.THROTTLED: Throttled,
    ErrorCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    ErrorCode.CANCELLED: Cancelled,
    ErrorCode.UNSUPPORTED: Unsupported,
    ErrorCode.IN_PROGRESS: InProgress,
    ErrorCode.IDEMPOTENCY_CONFLICT: IdempotencyConflict,
    ErrorCode.TOO_LARGE: TooLarge,
}


def error_for(code: ErrorCode) -> type[PortableError]:
    """Return the exception class that carries ``code``."""
    return _BY_CODE[code]
