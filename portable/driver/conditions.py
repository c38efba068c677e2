"""Conditional writes, decided once for every engine of a scheme.

A write's condition arrives in :class:`~portable.driver.storage.WriteOptions`
already validated (``if_none_match`` and ``if_match`` are never both set).
What a provider can compare differs: S3 and Azure compare etags, GCS compares
*generations*, so a GCS driver (gcsfs or obstore) turns the portable etag
into a generation precondition through :func:`generation_precondition`, and
both engines refuse the same etags the same way.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..errors import PreconditionFailed

if TYPE_CHECKING:
    from .storage import WriteOptions

__all__ = ["CREATE_ONLY_GENERATION", "generation_precondition"]

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
