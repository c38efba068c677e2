"""Idempotency records in any portable :class:`~portable.storage.Bucket`.

URLs: any storage URL that :func:`portable.storage.open_bucket` opens
(``file://./.portable/idempotency``, ``s3://bucket/prefix``, ``gs://...``,
``az://...``, ``mem://name``). ``open_store("mem://")`` is the in-process
:class:`~portable.idempotency.MemoryStore`, not a bucket; to use a memory
*bucket*, pass ``BucketStore(open_bucket("mem://name"))``. Open with
``open_store(url, policy=...)`` to give the bucket its own resilience policy.

Options (taken off the URL before the bucket sees it):
    ``max_result_bytes`` (int): the largest stored result. Defaults to 64 KiB.

How: each key is one small JSON object under ``<prefix><h[:2]>/<h>`` where
``h`` is a 128-bit hash of the key, holding an
:class:`~portable.driver.idempotency.IdempotencyRecord` (``result`` in
base64). A claim is a create-only write (``if_none_match="*"``); every later
change (complete, release, take-over of an expired lease) is a
compare-and-swap on the etag (``if_match``): the protocol of
:class:`~portable.driver.idempotency.CompareAndSwapStore`. Both conditions
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

from ..driver.idempotency import (
    DEFAULT_MAX_RESULT_BYTES,
    CompareAndSwapStore,
    IdempotencyRecord,
    read_record,
)
from ..errors import AlreadyExists, Internal, MissingCapability, NotFound, PreconditionFailed
from ..storage import Bucket

__all__ = ["BucketStore"]


class BucketStore(CompareAndSwapStore[str, str]):
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
        super().__init__(max_result_bytes=max_result_bytes, clock=clock)
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        self.bucket = bucket
        self.prefix = prefix

    def __repr__(self) -> str:
        return f"BucketStore({self.bucket!r}, prefix={self.prefix!r})"

    def object_key(self, key: str) -> str:
        """The object under which ``key``'s record is stored."""
        h = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
        return f"{self.prefix}{h[:2]}/{h}"

    # -- records as JSON objects -------------------------------------------
    def _doc(self, key: str) -> str:
        return self.object_key(key)

    def _read(self, doc: str) -> tuple[IdempotencyRecord, str] | None:
        """The record and the etag it was read at, or None if there is none."""
        try:
            etag = self.bucket.head(doc).etag
            data = self.bucket.get(doc)
        except NotFound:
            return None
        if etag is None:
            raise Internal(f"{self.bucket.provider}:// returned no etag for {doc}; cannot compare-and-swap")
        try:
            decoded = json.loads(data)
        except ValueError:
            raise Internal(f"idempotency record {doc} is not JSON; was it written by something else?") from None
        record = read_record(decoded, doc)
        if record["result"] is not None:
            record["result"] = base64.b64decode(record["result"])
        return record, etag

    def _write(self, doc: str, record: IdempotencyRecord, version: str | None = None) -> str | None:
        """Create (``version`` None) or compare-and-swap on the etag ``version``.

        Returns:
            None if another writer won; else the new etag ("" if the provider gave none).
        """
        result = record["result"]
        stored = {**record, "result": None if result is None else base64.b64encode(result).decode("ascii")}
        body = json.dumps(stored, separators=(",", ":")).encode()
        try:
            if version is None:
                new = self.bucket.put(doc, body, content_type="application/json", if_none_match="*")
            else:
                new = self.bucket.put(doc, body, content_type="application/json", if_match=version)
        except (AlreadyExists, PreconditionFailed, NotFound):
            return None
        return new or ""
