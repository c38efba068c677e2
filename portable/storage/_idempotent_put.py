"""``Bucket.put(..., idempotency_key=k)``: a put whose repeat is recognised, with no other store."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, NamedTuple

from ..driver.idempotency import fingerprint
from ..driver.storage import ObjectInfo
from ..errors import (
    AlreadyExists,
    IdempotencyConflict,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
)

if TYPE_CHECKING:
    from ._bucket import Bucket

__all__ = [
    "KEY_METADATA",
    "PAYLOAD_METADATA",
    "IdempotencyTag",
    "idempotent_put",
    "idempotent_request",
    "own_earlier_write",
]

#: user metadata that tags an object with the idempotency key and payload of the put that wrote it
KEY_METADATA = "portable-idempotency-key"
PAYLOAD_METADATA = "portable-payload"


def idempotent_put(
    bucket: Bucket,
    key: str,
    data: bytes | bytearray | memoryview,
    *,
    content_type: str | None,
    metadata: Mapping[str, str] | None,
    if_none_match: Literal["*"] | None,
    if_match: str | None,
    idempotency_key: str,
    cache_control: str | None = None,
    content_encoding: str | None = None,
    content_disposition: str | None = None,
) -> str | None:
    """``Bucket.put(..., idempotency_key=k)``: a put whose repeat is recognised, with no other store.

    The object is tagged with two metadata entries, a hash of ``k`` and the
    payload's fingerprint. When a conditional put fails because the object is
    already there (``AlreadyExists``) or has changed (``PreconditionFailed``),
    the object is read back: if it carries the same key and payload, it is
    this put's own earlier write (one that succeeded but reported a failure,
    then was retried) and its etag is returned; the same key with another
    payload raises IdempotencyConflict; anything else raises the original error.
    The async face (``portable.aio.AsyncBucket.put``) runs the same steps:
    :func:`idempotent_request` before, :func:`own_earlier_write` after a refusal.
    """
    data, tag = idempotent_request(idempotency_key, data, metadata)
    try:
        return bucket.put(
            key, data, content_type=content_type, metadata=tag.metadata, if_none_match=if_none_match,
            if_match=if_match, cache_control=cache_control, content_encoding=content_encoding,
            content_disposition=content_disposition,
        )
    except (AlreadyExists, PreconditionFailed) as exc:
        try:
            info = bucket.head(key)
        except NotFound:
            raise exc from None
        return own_earlier_write(exc, info, tag, key, bucket.provider)


class IdempotencyTag(NamedTuple):
    """What an idempotent put tags its object with, and the key it was given (for messages)."""

    idempotency_key: str
    marker: str
    fingerprint: str
    metadata: dict[str, str]


def idempotent_request(
    idempotency_key: object, data: bytes | bytearray | memoryview, metadata: Mapping[str, str] | None
) -> tuple[bytes | bytearray | memoryview, IdempotencyTag]:
    """Check ``idempotency_key``; return the data (as bytes where it is a buffer) and the tag to write.

    Raises:
        InvalidArgument: ``idempotency_key`` is not a non-empty str of at most 1,024 characters.
    """
    if type(idempotency_key) is not str or not idempotency_key or len(idempotency_key) > 1024:
        raise InvalidArgument(f"idempotency_key must be a non-empty str of at most 1,024 characters, got {idempotency_key!r}")
    if type(data) is not bytes:
        data = bytes(data) if isinstance(data, bytearray | memoryview) else data
    marker = hashlib.blake2b(idempotency_key.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    fp = fingerprint(data) if isinstance(data, bytes) else ""
    tagged = {**(metadata or {}), KEY_METADATA: marker, PAYLOAD_METADATA: fp}
    return data, IdempotencyTag(idempotency_key, marker, fp, tagged)


def own_earlier_write(
    refused: AlreadyExists | PreconditionFailed, found: ObjectInfo, tag: IdempotencyTag, key: str, provider: str
) -> str | None:
    """After a refused conditional put: the etag of ``found`` if this very put wrote it, else raise.

    Raises:
        IdempotencyConflict: the same idempotency key wrote ``found`` with another payload.
        AlreadyExists / PreconditionFailed: ``refused`` itself, when ``found`` is not this put's write.
    """
    stored = found.metadata or {}
    if stored.get(KEY_METADATA) != tag.marker:
        raise refused
    if stored.get(PAYLOAD_METADATA) != tag.fingerprint:
        raise IdempotencyConflict(
            f"put {key}: idempotency key {tag.idempotency_key[:200]!r} already wrote this object "
            "with a different payload; use a new key for a new write",
            provider=provider,
        ) from refused
    return found.etag
