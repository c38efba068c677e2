"""Conditional writes, decided once for every engine of a scheme.

A write's condition arrives in :class:`~portable.driver.storage.WriteOptions`
already validated (``if_none_match`` and ``if_match`` are never both set).
What a provider can compare differs: S3 and Azure compare etags, GCS compares
*generations*, so a GCS driver (gcsfs or obstore) turns the portable etag
into a generation precondition through :func:`generation_precondition`, and
both engines refuse the same etags the same way.

A refused condition is told apart by the condition the *request* carried,
never by the error body: S3 answers 412 PreconditionFailed to both
``If-None-Match: *`` and ``If-Match``, and only AWS and moto name the failed
header in the body's ``<Condition>`` element (s3s, MinIO and others do not).
A driver records the condition on the native error it raises
(:func:`note_condition`) and its classifier reads it back
(:func:`refused_condition_code`): a create-only write that is refused is
AlreadyExists, an ``if_match`` write PreconditionFailed, on every server.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

from ..errors import ErrorCode, PreconditionFailed

if TYPE_CHECKING:
    from .storage import WriteOptions

__all__ = [
    "CREATE_ONLY_GENERATION",
    "condition_of",
    "generation_precondition",
    "note_condition",
    "refused_condition_code",
    "request_condition",
]

#: The attribute :func:`note_condition` sets on a native error.
_NOTE = "portable_condition"

#: The generation a create-only write asks for: GCS reads 0 as "no live object".
CREATE_ONLY_GENERATION = "0"
_GENERATION = re.compile(r"^[0-9]{1,20}$")


def generation_precondition(options: WriteOptions, *, key: str | None = None, provider: str = "gs") -> str | None:
    """The generation a GCS write must match, from the portable condition of ``options``.

    The etag portable reports for a GCS object is its generation (a decimal
    string), so ``if_match=etag`` is a generation match and
    ``if_none_match`` is a match of generation 0.

    Args:
        options: the write's options.
        key: the key written, named in the error. Defaults to none named.
        provider: the scheme named in the error. Defaults to ``gs``.

    Returns:
        :data:`CREATE_ONLY_GENERATION` for a create-only write, the
        generation for ``if_match``, None for an unconditional write.

    Raises:
        PreconditionFailed: ``if_match`` is not a generation (an etag of
            another provider), so it cannot be the object's current one; no
            request needs to be sent to know it.
    """
    if options.if_none_match:
        return CREATE_ONLY_GENERATION
    if options.if_match is None:
        return None
    if not _GENERATION.match(options.if_match):
        where = f"{key!r}: " if key is not None else ""
        raise PreconditionFailed(
            f"{where}{options.if_match!r} is not a GCS generation, so it cannot be current", provider=provider
        )
    return options.if_match


Condition = Literal["If-None-Match", "If-Match"]


def request_condition(options: WriteOptions) -> Condition | None:
    """The HTTP condition header a write with ``options`` sends, or None for an unconditional write."""
    if options.if_none_match:
        return "If-None-Match"
    if options.if_match is not None:
        return "If-Match"
    return None


def note_condition(exc: BaseException, options: WriteOptions) -> BaseException:
    """Record on native error ``exc`` the condition its request carried; returns ``exc``.

    The error stays the library's own (it is re-raised as it was); only an
    attribute is added, so that the classifier can tell a refused create-only
    write from a refused ``if_match`` without trusting the error body.
    An unconditional write records nothing.
    """
    condition = request_condition(options)
    if condition is not None:
        try:
            setattr(exc, _NOTE, condition)
        except (AttributeError, TypeError):  # an exception type without a __dict__: nothing to record
            pass
    return exc


def condition_of(exc: BaseException) -> Condition | None:
    """The condition :func:`note_condition` recorded on ``exc`` or on an error in its cause chain."""
    current: BaseException | None = exc
    for _ in range(8):
        if current is None:
            return None
        found = getattr(current, _NOTE, None)
        if found in ("If-None-Match", "If-Match"):
            return found  # type: ignore[no-any-return]
        current = current.__cause__ or current.__context__
    return None


def refused_condition_code(exc: BaseException, *, body_condition: str = "") -> ErrorCode:
    """The code of a write refused with HTTP 412 (S3's PreconditionFailed).

    Args:
        exc: the native error of the refused write.
        body_condition: what the error body's ``<Condition>`` element named,
            if the server sent one; used only when no condition was recorded.
            Defaults to none.

    Returns:
        ALREADY_EXISTS when the request carried ``If-None-Match`` (a
        create-only write found an object), else PRECONDITION_FAILED.
    """
    condition = condition_of(exc) or body_condition
    return ErrorCode.ALREADY_EXISTS if condition == "If-None-Match" else ErrorCode.PRECONDITION_FAILED
