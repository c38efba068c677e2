"""HTTP as every storage driver reads and writes it: ranges, status codes and etags.

Provider-neutral: what a status means is the same on S3, GCS and Azure up to
a few codes that a driver overrides (a 409, a 503), so each driver starts
from :data:`HTTP_STATUS_CODES` and names only its differences.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import ErrorCode

__all__ = ["HTTP_STATUS_CODES", "code_of_status", "listed_parts", "md5_of_etag", "normal_etag", "range_header"]

#: What an HTTP error status means wherever a provider gives it no other meaning.
HTTP_STATUS_CODES: Mapping[int, ErrorCode] = {
    400: ErrorCode.INVALID_ARGUMENT,
    401: ErrorCode.PERMISSION_DENIED,
    403: ErrorCode.PERMISSION_DENIED,
    404: ErrorCode.NOT_FOUND,
    408: ErrorCode.DEADLINE_EXCEEDED,
    412: ErrorCode.PRECONDITION_FAILED,
    413: ErrorCode.TOO_LARGE,
    416: ErrorCode.INVALID_ARGUMENT,
    429: ErrorCode.THROTTLED,
}


def code_of_status(
    status: int,
    table: Mapping[int, ErrorCode] = HTTP_STATUS_CODES,
    *,
    other_client_error: ErrorCode = ErrorCode.INVALID_ARGUMENT,
) -> ErrorCode:
    """The stable code of an HTTP error status.

    Args:
        status: the HTTP status of the answer.
        table: the statuses with a meaning of their own. Defaults to
            :data:`HTTP_STATUS_CODES`.
        other_client_error: the code of a 4xx status that ``table`` does not
            name. Defaults to INVALID_ARGUMENT.

    Returns:
        ``table[status]``; else UNAVAILABLE for a 5xx, ``other_client_error``
        for a 4xx, and UNKNOWN for anything else.
    """
    code = table.get(status)
    if code is not None:
        return code
    if status >= 500:
        return ErrorCode.UNAVAILABLE
    if 400 <= status < 500:
        return other_client_error
    return ErrorCode.UNKNOWN


def range_header(start: int, end: int | None) -> str:
    """The ``Range`` header value of the bytes ``[start, end)`` (to the end when ``end`` is None)."""
    return f"bytes={start}-" if end is None else f"bytes={start}-{end - 1}"


def normal_etag(value: object) -> str | None:
    """An etag in the one form portable reports: the quoted HTTP entity tag, as S3 sends it in headers.

    S3's ETag header is quoted (``"9e10...c3"``), and so is the ``<ETag>`` of
    AWS's listings; S3-compatible servers differ (some list it bare, some pad
    it), and one object must not report two etags. A bare value is quoted,
    surrounding spaces go, a weak tag (``W/"..."``) is kept as it is; None and
    an empty value (a listing without the element) are None.
    """
    if value is None:
        return None
    text = str(value).strip()
    if not text:
        return None
    if text.startswith('"') or text.startswith('W/"'):
        return text
    return f'"{text.strip(chr(34))}"'


def md5_of_etag(etag: str | None) -> bytes | None:
    """The MD5 an S3 part's (or single-part object's) ETag is, where it is one (32 hex digits), else None."""
    bare = (etag or "").strip().strip('"')
    if len(bare) != 32:
        return None
    try:
        return bytes.fromhex(bare)
    except ValueError:
        return None


def listed_parts(found: Mapping[int, tuple[int, str]]) -> list[tuple[int, int, bytes | None, str]]:
    """S3's ListParts answer (part number -> (size, ETag)) as the parts a resumed upload keeps:
    ``(offset, size, md5, etag)`` from part 1 up to the first gap, the etag in :func:`normal_etag`'s form."""
    kept: list[tuple[int, int, bytes | None, str]] = []
    offset, number = 0, 1
    while number in found:
        size, etag = found[number]
        kept.append((offset, size, md5_of_etag(etag), normal_etag(etag) or etag))
        offset += size
        number += 1
    return kept
