"""What an adapter implements, and the public helpers it may use.

Application code uses :mod:`portable.storage`, :mod:`portable.messaging`,
:mod:`portable.compute` and :mod:`portable.idempotency`, never these protocols.

Imports run one way: the portable types build on this package, and no module
of ``portable.driver`` imports a portable type module (``portable.storage``,
``portable.messaging``, ``portable.compute``, ``portable.idempotency``, nor
their submodules; ``if TYPE_CHECKING:`` imports aside). What drivers share
lives here instead. An adapter or contrib distribution imports only public
modules: this package, :mod:`portable.errors`, :mod:`portable.urls`
(``ParsedURL``) and the public names of the portable types, never a private
``portable._*`` module. ``tests/test_architecture.py`` enforces both rules.

Every driver follows three rules:

1. It receives clean input: the portable type has already validated keys,
   names, sizes and options, and normalised defaults.
2. It raises the native library's errors and only *classifies* them through
   :meth:`Classifier.code_of`, :meth:`Classifier.is_retryable` and
   :meth:`Classifier.retry_after`. The portable layer wraps each error once.
3. It never retries. It turns its SDK's own retries off (or to the minimum)
   so that a call has one retry budget, owned by :mod:`portable.resilience`.

The public driver surface, module by module, and what an adapter takes from it:

``portable.driver`` (this module)
    :class:`Capabilities`, the base of every domain's capability record;
    :class:`Classifier`, the default error classification every driver base
    class inherits (override ``code_of`` to map a library's errors);
    :class:`ErrorCode`, the stable codes ``code_of`` returns.
``portable.driver.storage``
    :class:`StorageDriver` and :class:`WriteStream` to subclass; the records
    they exchange (``ObjectInfo``, ``ListPage``, ``WriteOptions``,
    ``StorageCapabilities``); ``check_key``, the portable key rules a
    ``Bucket`` applies before a driver sees a key (a driver that makes keys
    of its own checks them the same way); ``page_of_sorted_keys``, one
    listing page (prefix, delimiter, start_after, page token) cut from a
    sorted set of keys, as the embedded drivers list.
``portable.driver.messaging``
    :class:`MessagingDriver`, :class:`TopicDriver` and
    :class:`SubscriptionDriver` to subclass; the messages they exchange
    (``OutgoingMessage``, ``ReceivedMessage``: the delivery a driver returns,
    which the portable ``Message`` wraps), ``QueueStats``,
    ``MessagingCapabilities``, and the reserved attribute names
    (``IDEMPOTENCY_ATTRIBUTE``, ``RESERVED_PREFIX``).
``portable.driver.compute``
    :class:`ComputeDriver` to subclass; ``JobSpec``, ``Resources``,
    ``JobStatus``, ``JobState``, ``ComputeCapabilities`` and ``RESERVED_ENV``
    (the variables the launcher owns); the polling wait helper behind
    ``ComputeDriver.wait``, for a driver that waits by describing a job until
    it ends.
``portable.driver.idempotency``
    the ``IdempotencyStore`` protocol a store implements, ``Claim`` and
    ``ClaimStatus``, and the record helpers every store shares:
    ``fingerprint``, ``new_token``, ``check_claim_args``, ``check_result``,
    ``conflict_error``, ``lost_error``, ``without_options`` and the defaults
    ``DEFAULT_LEASE``, ``DEFAULT_TTL``, ``DEFAULT_MAX_RESULT_BYTES``.
``portable.driver.redaction``
    ``redact``, which masks secrets (URL passwords, secret query options,
    connection-string keys) in any text a driver shows: reprs, log lines,
    error messages; ``is_secret_option`` and ``SECRET_OPTION_NAMES`` for a
    driver that reads options of its own.
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
