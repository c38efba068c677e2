"""``Bucket.put(..., idempotency_key=k)``: a put whose repeat is recognised, with no other store."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from ..driver.idempotency import fingerprint
from ..errors import (
    AlreadyExists,
    IdempotencyConflict,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
)

if TYPE_CHECKING:
    from ._bucket import Bucket

__all__ = ["KEY_METADATA", "PAYLOAD_METADATA", "idempotent_put"]

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
    """
    if type(idempotency_key) is not str or not idempotency_key or len(idempotency_key) > 1024:
        raise InvalidArgument(f"idempotency_key must be a non-empty str of at most 1,024 characters, got {idempotency_key!r}")
    if type(data) is not bytes:
        data = bytes(data) if isinstance(data, bytearray | memoryview) else data
    marker = hashlib.blake2b(idempotency_key.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    fp = fingerprint(data) if isinstance(data, bytes) else ""
    tagged = {**(metadata or {}), KEY_METADATA: marker, PAYLOAD_METADATA: fp}
    try:
        return bucket.put(
            key, data, content_type=content_type, metadata=tagged, if_none_match=if_none_match, if_match=if_match,
            cache_control=cache_control, content_encoding=content_encoding, content_disposition=content_disposition,
        )
    except (AlreadyExists, PreconditionFailed) as exc:
        try:
            info = bucket.head(key)
        except NotFound:
            raise exc from None
        found = info.metadata or {}
        if found.get(KEY_METADATA) != marker:
            raise
        if found.get(PAYLOAD_METADATA) != fp:
            raise IdempotencyConflict(
                f"put {key}: idempotency key {idempotency_key[:200]!r} already wrote this object "
                "with a different payload; use a new key for a new write",
                provider=bucket.provider,
            ) from exc
        return info.etag
