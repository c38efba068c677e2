"""What an adapter implements. Application code uses :mod:`portable.storage`,
:mod:`portable.messaging` and :mod:`portable.compute`, never these protocols.

Every driver follows three rules:

1. It receives clean input: the portable type has already validated keys,
   names, sizes and options, and normalised defaults.
2. It raises the native library's errors and only *classifies* them through
   :meth:`Classifier.code_of`, :meth:`Classifier.is_retryable` and
   :meth:`Classifier.retry_after`. The portable layer wraps each error once.
3. It never retries. It turns its SDK's own retries off (or to the minimum)
   so that a call has one retry budget, owned by :mod:`portable.resilience`.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, ClassVar

from ..errors import ErrorCode, PortableError

__all__ = ["Capabilities", "Classifier", "ErrorCode"]


class Capabilities:
    """Base of every domain's capability record (a frozen dataclass of flags and limits).

    A profile's ``requires`` names the boolean fields; the other fields are limits.
    """

    __slots__ = ()
    __dataclass_fields__: ClassVar[dict[str, Any]]

    def supported(self) -> frozenset[str]:
        """Names of the boolean capabilities this provider has."""
        return frozenset(f.name for f in fields(self) if getattr(self, f.name) is True)

    @classmethod
    def flag_names(cls) -> frozenset[str]:
        """Names of every boolean capability."""
        return frozenset(f.name for f in fields(cls) if f.type in ("bool", bool))


class Classifier:
    """Default error classification, shared by every driver base class.

    A driver overrides :meth:`code_of` to map its library's errors; the
    defaults understand portable's own errors and the standard library's
    connection and timeout errors.
    """

    def code_of(self, exc: BaseException) -> ErrorCode:
        """Return the stable code for a native error."""
        if isinstance(exc, PortableError):
            return exc.code
        if isinstance(exc, FileNotFoundError | KeyError):
            return ErrorCode.NOT_FOUND
        if isinstance(exc, FileExistsError):
            return ErrorCode.ALREADY_EXISTS
        if isinstance(exc, PermissionError):
            return ErrorCode.PERMISSION_DENIED
        if isinstance(exc, TimeoutError):
            return ErrorCode.DEADLINE_EXCEEDED
        if isinstance(exc, ConnectionError):
            return ErrorCode.UNAVAILABLE
        return ErrorCode.UNKNOWN

    def is_retryable(self, exc: BaseException) -> bool:
        """Whether the same call may succeed if repeated."""
        if isinstance(exc, PortableError):
            return exc.retryable
        return self.code_of(exc) in (
            ErrorCode.UNAVAILABLE,
            ErrorCode.THROTTLED,
            ErrorCode.DEADLINE_EXCEEDED,
        )

    def retry_after(self, exc: BaseException) -> float | None:
        """Seconds the provider asked the caller to wait, if it said."""
        return getattr(exc, "retry_after", None)

    def as_(self, kind: type[Any]) -> Any:
        """Return a native object of type ``kind``, or None if the driver has none."""
        return None
