"""The outbox on a bucket: :class:`Outbox` writes object + record; :meth:`Outbox.relay_once` publishes."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from ..driver.storage import check_key
from ..errors import (
    AlreadyExists,
    IdempotencyConflict,
    InvalidArgument,
    InvalidKey,
    NotFound,
    PortableError,
    PreconditionFailed,
)
from ..messaging import Topic
from ..storage import Bucket, open_bucket
from ._record import (
    OBJECT_TAG,
    OutboxRecord,
    check_attributes,
    check_idempotency_key,
    default_idempotency_key,
)

#: Where records are kept, unless ``Outbox(prefix=)`` says otherwise.
DEFAULT_PREFIX = ".outbox/"


@dataclass(frozen=True, slots=True)
class OutboxWrite:
    """What :meth:`Outbox.put` did.

    Attributes:
        etag: the object's new etag.
        idempotency_key: the write's key (the event carries it).
        record_key: where its record is (until the relay has published it).
        resumed: the record was already there (a retry of a write that had
            begun: a crashed writer run again); False for a fresh write.
    """

    etag: str | None
    idempotency_key: str
    record_key: str
    resumed: bool


@dataclass(slots=True)
class RelayStats:
    """What one relay pass did.

    Attributes:
        published: records whose object is committed: published, acknowledged, record deleted.
        waiting: records whose object is not (yet) committed: kept for a later pass.
        abandoned: records older than ``abandon_after`` whose object never appeared: deleted, no event.
        uncertain: records older than ``abandon_after`` whose key now holds another write's object:
            published (whether this write was ever committed cannot be told; docs/outbox.md).
        failed: records whose publish or delete failed (kept; the next pass tries again).
        errors: the typed errors of those failures.
    """

    published: int = 0
    waiting: int = 0
    abandoned: int = 0
    uncertain: int = 0
    failed: int = 0
    errors: list[PortableError] = field(default_factory=list)


class Outbox:
    """"Object committed => event published", exactly once to an idempotent consumer, on one bucket.

    :meth:`put` writes a record under ``prefix`` (create-only, named by the
    write's idempotency key), then the object, tagged with that key
    (metadata ``portable-outbox-key``), then marks the record committed
    (compare-and-swap on its etag). :meth:`relay_once` publishes each
    record marked committed, or whose object carries its tag (a writer that
    crashed before its mark), with the idempotency key as the
    message's ``portable.idempotency_key``, and deletes the record once the
    broker acknowledged. A crash at any point either leaves the record (the
    relay or the writer's retry finishes the job) or has published an event
    that a consumer with an idempotency store (``Subscription.run(...,
    idempotency=store)``) recognises as a repeat. docs/outbox.md walks
    through every crash point.

    Thread-safe; several writers and several relays may share one outbox.
    """

    def __init__(self, bucket: Bucket | str, *, prefix: str = DEFAULT_PREFIX) -> None:
        """Args:
            bucket: the Bucket (or its URL) that holds both the objects and the records.
            prefix: where records are kept; ends with ``/``. Defaults to ``.outbox/``.
                Objects may not be written under it.

        Raises:
            InvalidArgument / InvalidKey: a bad prefix or bucket.
        """
        if isinstance(bucket, str):
            bucket = open_bucket(bucket)
        if not isinstance(bucket, Bucket):
            raise InvalidArgument(f"bucket must be a Bucket or a URL, got {type(bucket).__name__}")
        if type(prefix) is not str or not prefix.endswith("/"):
            raise InvalidKey(f"the outbox prefix must be a str ending with '/', got {prefix!r}")
        check_key(prefix[:-1], bucket.capabilities.max_key_bytes)
        self.bucket = bucket
        self.prefix = prefix
        self._stop = threading.Event()

    def _record_key(self, idempotency_key: str) -> str:
        return self.prefix + hashlib.sha256(idempotency_key.encode()).hexdigest()

    # -- writing ----------------------------------------------------------
    def put(
        self,
        key: str,
        data: bytes,
        *,
        event: bytes | None = None,
        attributes: Mapping[str, str] | None = None,
        event_key: str | None = None,
        idempotency_key: str | None = None,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        cache_control: str | None = None,
        content_encoding: str | None = None,
        content_disposition: str | None = None,
    ) -> OutboxWrite:
        """Store ``data`` under ``key`` and record the event it implies; the relay publishes it.

        Safe to repeat: after a crash (or an error), call it again with the
        same arguments; the record already there is recognised and the write
        finishes. A repeat after the event was published records it again and
        the event is published again, with the same idempotency key: an
        idempotent consumer handles it once.

        Args:
            event: the message body. Defaults to JSON naming the key, size and SHA-256.
            attributes, event_key: the message's attributes and ordering key.
            idempotency_key: names this write and its event. Defaults to one
                derived from ``key`` and the SHA-256 of ``data``: writing the same
                bytes to the same key again is the same event. Give distinct
                keys for writes that must each raise an event.
            content_type, metadata, cache_control, content_encoding, content_disposition:
                as for ``Bucket.put``; ``metadata`` gains ``portable-outbox-key``.

        Raises:
            InvalidKey / InvalidArgument: bad input, before any request (a key
                under the outbox prefix, metadata naming ``portable-outbox-key``).
            IdempotencyConflict: ``idempotency_key`` was used for another write or event.
            PortableError: the bucket failed; call again to finish.
        """
        check_key(key, self.bucket.capabilities.max_key_bytes)
        if key.startswith(self.prefix) or key == self.prefix[:-1]:
            raise InvalidKey(f"{key!r} is under the outbox prefix {self.prefix!r}; write objects elsewhere")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidArgument(f"data must be bytes, got {type(data).__name__}")
        data = bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        idem = check_idempotency_key(default_idempotency_key(key, sha) if idempotency_key is None else idempotency_key)
        if event is None:
            event = json.dumps({"key": key, "size": len(data), "sha256": sha}, sort_keys=True).encode()
        elif type(event) is not bytes:
            raise InvalidArgument(f"event must be bytes, got {type(event).__name__}")
        if event_key is not None:
            check_idempotency_key(event_key)
        user = dict(metadata or {})
        if any(name.lower() == OBJECT_TAG for name in user):
            raise InvalidArgument(f"metadata {OBJECT_TAG!r} is the outbox's own; choose another name")
        user[OBJECT_TAG] = idem
        record = OutboxRecord(key, idem, len(data), sha, event, check_attributes(attributes), event_key,
                              record_key=self._record_key(idem))
        resumed, record_etag = self._write_record(record)
        etag = self.bucket.put(
            key, data, content_type=content_type, metadata=user, cache_control=cache_control,
            content_encoding=content_encoding, content_disposition=content_disposition,
        )
        self._mark_committed(record, record_etag)
        return OutboxWrite(etag, idem, record.record_key, resumed)

    def _write_record(self, record: OutboxRecord) -> tuple[bool, str | None]:
        """Create the record (create-only where the provider enforces it).

        Returns whether it was there already (a retry) and its etag.
        """
        conditional = self.bucket.capabilities.conditional_create
        try:
            etag = self.bucket.put(record.record_key, record.to_bytes(), content_type="application/json",
                                   if_none_match="*" if conditional else None)
            return False, etag
        except AlreadyExists:
            try:
                etag = self.bucket.head(record.record_key).etag
            except NotFound:
                etag = None
            found = self._read(record.record_key)
            if found is None:  # published and deleted meanwhile: record it again
                return self._write_record(record)
            if not found.same_write(record):
                raise IdempotencyConflict(
                    f"outbox idempotency key {record.idempotency_key!r} was used for another write "
                    f"({found.key!r}, {found.size} bytes, or another event); give each write its own key"
                ) from None
            return True, etag

    def _mark_committed(self, record: OutboxRecord, record_etag: str | None) -> None:
        """Mark the record: its object is committed (so a later overwrite of the key cannot hide that).

        Compare-and-swap on the record's etag: a record the relay already
        published and deleted (or changed) is left alone, never recreated.
        Where the provider has no compare-and-swap the mark is skipped, and
        the relay goes by the object's tag alone.
        """
        if record_etag is None or not self.bucket.capabilities.conditional_update:
            return
        marked = OutboxRecord(record.key, record.idempotency_key, record.size, record.sha256, record.event,
                              record.attributes, record.event_key, record.created, True, record.record_key)
        try:
            self.bucket.put(record.record_key, marked.to_bytes(), content_type="application/json",
                            if_match=record_etag)
        except (PreconditionFailed, NotFound):
            pass  # the relay got there first: the event is published (or about to be)

    def _read(self, record_key: str) -> OutboxRecord | None:
        try:
            return OutboxRecord.from_bytes(self.bucket.get(record_key), record_key)
        except NotFound:
            return None

    # -- relaying ---------------------------------------------------------
    def pending(self) -> Iterator[OutboxRecord]:
        """The records not yet published (and deleted), in the order of their keys (not of writing)."""
        for info in self.bucket.list(self.prefix):
            found = self._read(info.key)
            if found is not None:
                yield found

    def _committed(self, record: OutboxRecord) -> bool | None:
        """For a record not marked committed: True if the object under its key is this write's (the
        writer crashed between its object and its mark), False if another write's, None if there is none."""
        try:
            info = self.bucket.head(record.key)
        except NotFound:
            return None
        return info.metadata.get(OBJECT_TAG) == record.idempotency_key

    def relay_once(self, topic: Topic, *, abandon_after: float | None = None) -> RelayStats:
        """Publish every record whose object is committed, then delete the record; one pass.

        Each record is published with ``idempotency_key=`` its write's key (so
        the message carries ``portable.idempotency_key``), its attributes and
        ordering key; ``Topic.publish`` returns once the broker acknowledged,
        and only then is the record deleted. A crash between the two publishes
        it again on the next pass: a consumer with an idempotency store skips
        the repeat.

        Args:
            topic: where events go.
            abandon_after: seconds after which a record whose object never
                appeared is given up (deleted, no event: its writer crashed
                before committing and was never run again), and a record whose
                key holds another write's object is published anyway. Defaults
                to None: such records wait for ever (see :meth:`pending`).
                Choose it far above the longest a writer takes between its
                record and its object.

        Raises:
            InvalidArgument: a bad ``abandon_after``.
            PortableError: listing the records failed (per-record failures are counted instead).
        """
        if abandon_after is not None and (type(abandon_after) not in (int, float) or abandon_after < 0):
            raise InvalidArgument(f"abandon_after must be seconds >= 0 or None, got {abandon_after!r}")
        stats = RelayStats()
        now = time.time()
        for record in self.pending():
            try:
                committed = True if record.committed else self._committed(record)
                stale = abandon_after is not None and now - record.created > abandon_after
                if committed is None and stale:
                    self.bucket.delete(record.record_key)
                    stats.abandoned += 1
                elif committed or (committed is False and stale):
                    topic.publish(record.event, key=record.event_key, attributes=dict(record.attributes) or None,
                                  idempotency_key=record.idempotency_key)
                    self.bucket.delete(record.record_key)
                    if committed:
                        stats.published += 1
                    else:
                        stats.uncertain += 1
                else:
                    stats.waiting += 1
            except PortableError as exc:
                stats.failed += 1
                stats.errors.append(exc)
        return stats

    def run_relay(
        self,
        topic: Topic,
        *,
        poll: float = 1.0,
        abandon_after: float | None = None,
        stop_event: threading.Event | None = None,
    ) -> None:
        """Relay until :meth:`stop` (or ``stop_event``): a pass, then ``poll`` seconds' sleep when it found nothing to do."""
        if type(poll) not in (int, float) or poll <= 0:
            raise InvalidArgument(f"poll must be seconds > 0, got {poll!r}")
        stop = stop_event if stop_event is not None else self._stop
        while not stop.is_set():
            stats = self.relay_once(topic, abandon_after=abandon_after)
            if stats.published + stats.uncertain + stats.abandoned == 0:
                stop.wait(poll)

    def stop(self) -> None:
        """Ask :meth:`run_relay` (without its own ``stop_event``) to return after its current pass."""
        self._stop.set()
