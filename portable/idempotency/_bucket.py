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

Effects that hold after a crash: :meth:`BucketStore.run_and_complete` (and
:meth:`BucketStore.transactional` for ``Subscription.run``) hands the effect a
:class:`BucketEffects` whose :meth:`~BucketEffects.put` is a create-only put
tagged with the idempotency key (metadata ``portable-effect-of``). The put is
the commit point: once it landed, a re-run of the effect after a crash (the
claim was taken over before it was completed) finds the object tagged with
the same key and does not write it again. So every object an effect writes
through ``tx.put`` is written exactly once, provided the effect derives each
object key from the message (an order id, not a clock or a random name).
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..driver.idempotency import (
    DEFAULT_MAX_RESULT_BYTES,
    CompareAndSwapStore,
    IdempotencyRecord,
    TransactionalHandler,
    read_record,
)
from ..errors import AlreadyExists, Internal, MissingCapability, NotFound, PreconditionFailed
from ..storage import Bucket

__all__ = ["EFFECT_METADATA", "BucketEffects", "BucketStore"]

R = TypeVar("R")

#: user metadata naming the idempotency key (its 128-bit hash) whose effect wrote an object
EFFECT_METADATA = "portable-effect-of"


def _key_hash(key: str) -> str:
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


class BucketEffects:
    """The writes of one effect of :meth:`BucketStore.run_and_complete`: each at most once per key.

    Attributes:
        bucket: the store's bucket, for reads (writes that must hold after a
            crash go through :meth:`put`).
    """

    __slots__ = ("_mark", "bucket")

    def __init__(self, bucket: Bucket, key: str | None) -> None:
        self.bucket = bucket
        self._mark = None if key is None else _key_hash(key)

    def __repr__(self) -> str:
        return f"BucketEffects({self.bucket!r})"

    def put(
        self,
        object_key: str,
        data: bytes | bytearray | memoryview,
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> str | None:
        """Create ``object_key`` with ``data``, once for this idempotency key.

        A create-only put (``if_none_match="*"``) tagged with the key's hash in
        :data:`EFFECT_METADATA`. When the object is already there and carries
        this key's tag, it is this effect's own earlier write (a run that
        crashed before its claim was completed): the put does nothing and
        returns that object's etag, whatever ``data`` is now.

        Returns:
            The object's etag (None if the provider gave none).

        Raises:
            AlreadyExists: the object exists and was not written by this key's effect.
        """
        tagged = dict(metadata or {})
        if self._mark is not None:
            tagged[EFFECT_METADATA] = self._mark
        try:
            return self.bucket.put(object_key, data, content_type=content_type, metadata=tagged, if_none_match="*")
        except AlreadyExists:
            if self._mark is None:
                raise
            try:
                info = self.bucket.head(object_key)
            except NotFound:
                raise AlreadyExists(f"{object_key} existed, then was deleted; put it again") from None
            if (info.metadata or {}).get(EFFECT_METADATA) != self._mark:
                raise
            return info.etag


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
        h = _key_hash(key)
        return f"{self.prefix}{h[:2]}/{h}"

    # -- effects that hold after a crash -----------------------------------
    def run_and_complete(self, key: str | None, token: str | None, effect: Callable[[BucketEffects], R]) -> R:
        """Run ``effect(tx)``, whose :meth:`BucketEffects.put` writes are each made once per ``key``,
        then complete the claim (with the effect's return value when it is bytes).

        What holds after a crash: an object written through ``tx.put`` is
        written at most once for ``key`` (a re-run finds it and leaves it), so
        an effect made only of such puts happens exactly once; the completion
        after it only spares the re-run. Anything else the effect does (other
        buckets, other services, ``tx.bucket`` directly) is at least once.
        With ``key`` None, the puts are plain create-only puts.

        Returns:
            What ``effect`` returned.

        Raises:
            PreconditionFailed: the claim was lost before it was completed (the
                effect's puts stand: the claimer that took over finds them).
            Exception: whatever ``effect`` raised; the claim is still held.
        """
        out = effect(BucketEffects(self.bucket, key))
        if key is not None and token is not None:
            self.complete(key, token, out if isinstance(out, bytes) else None)
        return out

    def transactional(self, handler: Callable[[Any, BucketEffects], Any]) -> TransactionalHandler:
        """A ``Subscription.run`` handler whose object writes are made once per message key.

        ``handler(message, tx)`` writes through ``tx.put`` (a :class:`BucketEffects`);
        run it with ``sub.run(store.transactional(handler), idempotency=store)``.
        See :meth:`run_and_complete` for what holds after a crash.
        """
        return TransactionalHandler(self, handler)

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
