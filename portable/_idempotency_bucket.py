"""Idempotency records in any portable :class:`~portable.storage.Bucket`.

URLs: any storage URL that :func:`portable.storage.open_bucket` opens
(``file://./.portable/idempotency``, ``s3://bucket/prefix``, ``gs://...``,
``az://...``, ``mem://name``). ``open_store("mem://")`` is the in-process
:class:`~portable.idempotency.MemoryStore`, not a bucket; to use a memory
*bucket*, pass ``BucketStore(open_bucket("mem://name"))``.

Options (taken off the URL before the bucket sees it):
    ``max_result_bytes`` (int): the largest stored result. Defaults to 64 KiB.

How: each key is one small JSON object under ``<prefix><h[:2]>/<h>`` where
``h`` is a 128-bit hash of the key. A claim is a create-only write
(``if_none_match="*"``); every later change (complete, release, take-over of
an expired lease) is a compare-and-swap on the etag (``if_match``). Both
are enforced by S3, GCS, Azure Blob, the file and the memory drivers, so no
other database is needed. A provider without conditional writes is refused
with :class:`~portable.errors.MissingCapability` when the store is made.

A claim costs one write when the key is new; its complete or release one
more (the store remembers the etag it wrote, and reads only if the object
changed since). Every step is safe to retry: a write that succeeded but reported a failure
is recognised by the token it carries. Expired and released records are not
deleted (a later claim overwrites them): a delete cannot be made conditional
on every provider, so deleting could remove a claim made a moment earlier.
To reclaim space, give the prefix a lifecycle rule that deletes objects not
modified for longer than the largest ``ttl`` you use (S3 and GCS lifecycle
rules, Azure lifecycle management): a live record is rewritten at least
once per ``ttl``, so such a rule never removes one.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .driver.idempotency import (
    DEFAULT_MAX_RESULT_BYTES,
    Claim,
    check_claim_args,
    check_result,
    conflict_error,
    lost_error,
    new_token,
)
from .errors import (
    AlreadyExists,
    Internal,
    MissingCapability,
    NotFound,
    PreconditionFailed,
)

if TYPE_CHECKING:
    from .storage import Bucket

__all__ = ["BucketStore"]

_IN_PROGRESS = "in_progress"
_COMPLETED = "completed"
_RELEASED = "released"
#: compare-and-swap rounds before giving up; each lost round means another writer made progress
_MAX_ROUNDS = 64
#: claims remembered per store for a read-free complete/release
_MAX_HELD = 4096


class BucketStore:
    """Idempotency records as objects in a portable bucket.

    Args:
        bucket: any Bucket with conditional create and etag-conditional update.
        prefix: where records live inside the bucket, e.g. ``"idempotency/"``.
            Defaults to the bucket's root.
        max_result_bytes: the largest result kept. Defaults to 64 KiB.
        clock: wall-clock seconds; tests pass a fake one.

    Raises:
        MissingCapability: the bucket's provider cannot enforce conditional writes.
    """

    def __init__(
        self,
        bucket: Bucket,
        *,
        prefix: str = "",
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        caps = bucket.capabilities
        if not (caps.conditional_create and caps.conditional_update):
            raise MissingCapability(
                f"{bucket.provider}:// cannot enforce conditional writes, so it cannot hold "
                "idempotency records; use sqlite:// or redis:// instead",
                provider=bucket.provider,
            )
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        self.bucket = bucket
        self.prefix = prefix
        self.max_result_bytes = max_result_bytes
        self._clock = clock
        self._held: dict[str, tuple[str, dict[str, Any], str]] = {}

    def __repr__(self) -> str:
        return f"BucketStore({self.bucket!r}, prefix={self.prefix!r})"

    def object_key(self, key: str) -> str:
        """The object under which ``key``'s record is stored."""
        h = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
        return f"{self.prefix}{h[:2]}/{h}"

    # -- records --------------------------------------------------------
    def _read(self, name: str) -> tuple[dict[str, Any], str] | None:
        """The record and the etag it was read at, or None if there is none."""
        try:
            etag = self.bucket.head(name).etag
            data = self.bucket.get(name)
        except NotFound:
            return None
        if etag is None:
            raise Internal(f"{self.bucket.provider}:// returned no etag for {name}; cannot compare-and-swap")
        try:
            record = json.loads(data)
        except ValueError:
            raise Internal(f"idempotency record {name} is not JSON; was it written by something else?") from None
        if not isinstance(record, dict) or record.get("v") != 1:
            raise Internal(f"idempotency record {name} has an unknown format")
        return record, etag

    def _write(self, name: str, record: dict[str, Any], *, etag: str | None) -> str | None:
        """Create (etag None) or compare-and-swap the record.

        Returns:
            None if another writer won; else the new etag ("" if the provider gave none).
        """
        body = json.dumps(record, separators=(",", ":")).encode()
        try:
            if etag is None:
                new = self.bucket.put(name, body, content_type="application/json", if_none_match="*")
            else:
                new = self.bucket.put(name, body, content_type="application/json", if_match=etag)
        except (AlreadyExists, PreconditionFailed, NotFound):
            return None
        return new or ""

    def _hold(self, token: str, name: str, record: dict[str, Any], etag: str) -> None:
        """Remember the claim this store wrote, so complete/release can swap without reading first."""
        if not etag:
            return
        held = self._held
        if len(held) >= _MAX_HELD:
            held.clear()  # abandoned claims: forget them; they fall back to reading
        held[token] = (name, record, etag)

    def _new(self, key: str, fp: str, token: str, lease: float, ttl: float) -> dict[str, Any]:
        now = self._clock()
        return {
            "v": 1,
            "key": key[:200],
            "state": _IN_PROGRESS,
            "fp": fp,
            "token": token,
            "lease_until": now + lease,
            "expires_at": now + ttl,
            "ttl": ttl,
            "result": None,
        }

    # -- the protocol ---------------------------------------------------
    def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        check_claim_args(key, fingerprint, lease, ttl)
        name = self.object_key(key)
        token = new_token()
        fresh = self._new(key, fingerprint, token, lease, ttl)
        written = self._write(name, fresh, etag=None)
        if written is not None:
            self._hold(token, name, fresh, written)
            return Claim("acquired", token)
        for _ in range(_MAX_ROUNDS):
            found = self._read(name)
            if found is None:
                fresh = self._new(key, fingerprint, token, lease, ttl)
                written = self._write(name, fresh, etag=None)
                if written is not None:
                    self._hold(token, name, fresh, written)
                    return Claim("acquired", token)
                continue
            record, etag = found
            now = self._clock()
            if record["token"] == token and record["state"] == _IN_PROGRESS:
                return Claim("acquired", token)  # our own write landed though it reported a failure
            live = record["expires_at"] > now and record["state"] != _RELEASED
            if live:
                if record["fp"] != fingerprint:
                    raise conflict_error(key)
                if record["state"] == _COMPLETED:
                    result = record["result"]
                    return Claim("completed", None, None if result is None else base64.b64decode(result))
                if record["lease_until"] > now:
                    return Claim("in_progress")
            fresh = self._new(key, fingerprint, token, lease, ttl)
            written = self._write(name, fresh, etag=etag)
            if written is not None:
                self._hold(token, name, fresh, written)
                return Claim("acquired", token)
        raise _contended(key)

    def complete(self, key: str, token: str, result: bytes | None) -> None:
        check_result(result, self.max_result_bytes)
        encoded = None if result is None else base64.b64encode(result).decode("ascii")
        self._change(key, token, lambda r: {**r, "state": _COMPLETED, "result": encoded,
                                             "expires_at": max(r["expires_at"], self._clock() + r["ttl"])},
                     done_state=_COMPLETED)

    def release(self, key: str, token: str) -> None:
        self._change(key, token, lambda r: {**r, "state": _RELEASED}, done_state=_RELEASED)

    def extend(self, key: str, token: str, lease: float) -> None:
        """Push the lease of a held claim ``lease`` seconds from now (long effects)."""
        self._change(key, token, lambda r: {**r, "lease_until": self._clock() + lease}, done_state=None)

    def _change(
        self,
        key: str,
        token: str,
        update: Callable[[dict[str, Any]], dict[str, Any]],
        done_state: str | None,
    ) -> None:
        name = self.object_key(key)
        held = self._held.pop(token, None)
        if held is not None and held[0] == name and held[1]["expires_at"] > self._clock():
            # The claim as this store wrote it: swap at once; if anything changed since, read below.
            changed = update(held[1])
            written = self._write(name, changed, etag=held[2])
            if written is not None:
                if done_state is None:
                    self._hold(token, name, changed, written)
                return
        for _ in range(_MAX_ROUNDS):
            found = self._read(name)
            if found is None or found[0]["token"] != token:
                raise lost_error(key)
            record, etag = found
            if done_state is not None and record["state"] == done_state:
                return  # this change landed already (a retried call, or a write that reported a failure)
            if record["state"] != _IN_PROGRESS or record["expires_at"] <= self._clock():
                raise lost_error(key)
            changed = update(record)
            written = self._write(name, changed, etag=etag)
            if written is not None:
                if done_state is None:
                    self._hold(token, name, changed, written)
                return
        raise _contended(key)


def _contended(key: str) -> Internal:
    return Internal(
        f"idempotency key {key[:200]!r}: gave up after {_MAX_ROUNDS} compare-and-swap rounds "
        "lost to other writers"
    )
