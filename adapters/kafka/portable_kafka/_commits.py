"""Settling messages (ack, nack, dead letter) and the offset commits that follow.

Kafka commits one offset per partition: "everything below this is done". An
ack marks one message done in its partition's :class:`~._progress.PartitionProgress`,
and the commit point moves only over a contiguous run of done offsets, so a
commit never passes a message still in flight. Commits are sent when
``receive`` starts, shortly after acks, before partitions are revoked, and on
``close``. A nack or dead letter publishes a copy first (to the retry or
dead-letter topic) and then settles the original like an ack.
"""

# mypy: disable-error-code="import-untyped"
from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from portable.driver.messaging import (
    DEAD_LETTER_ATTRIBUTES,
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DELIVERY_ATTEMPTS,
    ORIGINAL_ID,
    QueueStats,
    ReceivedMessage,
)
from portable.errors import Unavailable, Unsupported
from portable.resilience import remaining

from ._receive import _NO_DELIVERIES, LocalLeases, _Delivery, _LostLease
from ._records import (
    ATTEMPT_HEADER,
    DUE_HEADER,
    ORIGINAL_ID_HEADER,
    PUBLISHED_HEADER,
    epoch_ms,
    to_headers,
)

if TYPE_CHECKING:
    from .kafka import KafkaMessaging

__all__ = ["Settlement"]

log = logging.getLogger("portable.kafka")

#: Acks trigger a commit at most this often (seconds); receive and close always commit.
_ACK_COMMIT_INTERVAL = 0.2


class Settlement(LocalLeases):
    """ack, nack and dead_letter of leased deliveries, and the commits of the offsets they free.

    Handler threads settle under ``_state`` and send a commit only when the
    consumer is free (``_poll_lock`` taken without waiting); ``receive`` and
    ``close`` commit whatever is left.
    """

    def __init__(self, driver: KafkaMessaging) -> None:
        super().__init__()
        s = driver.settings
        assert s.topic is not None and s.group is not None
        self._driver = driver
        self.settings = s
        self.topic = s.topic
        self.retry_topic = s.retry_topic
        self.dead_letter_topic = s.dead_letter_topic
        self._producer: Any = None  # of retry and dead-letter copies, made on first use
        self._last_commit = 0.0
        #: tps revoked by an eager rebalance, kept until the next assignment (:class:`~._rebalance.Rebalancing`)
        self._suspended: set[Any] = set()
        self._closed = False
        self._commit_timeout_ms = int(s.request_timeout * 1000)
        self._send_timeout = s.send_timeout

    # -- receiving ---------------------------------------------------------------
    def receive(self, max_messages: int, wait: float, lease: float) -> list[_Delivery]:  # type: ignore[override]
        """Lease up to ``max_messages`` ready deliveries, polling the engine's consumer for up to ``wait`` s.

        Both engines share this loop; each polls in :meth:`_fetch`.
        """
        deadline = time.monotonic() + wait
        with self._poll_lock:
            if self._closed:
                raise Unavailable("the Kafka subscription is closed", provider="kafka")
            self._commit_async()
            polled = False
            while True:
                out = self._lease_ready(max_messages, lease)
                if out:
                    return out
                now = time.monotonic()
                left = deadline - now
                if polled and left <= 0:
                    return out
                timeout = max(0.0, left)
                with self._state:
                    for heap in (self._held, self._leases):
                        if heap:
                            timeout = min(timeout, max(0.0, heap[0][0] - now))
                self._pace()  # here nothing deliverable is buffered: only held and key-blocked records
                self._fetch(max_messages, timeout)
                polled = True

    def _fetch(self, max_messages: int, timeout: float) -> None:
        """Poll the consumer once for up to ``timeout`` s and track what it returns (caller holds _poll_lock)."""
        raise NotImplementedError

    # -- commits -----------------------------------------------------------------
    def _offsets_to_commit(self, partitions: Iterable[Any] | None = None) -> dict[Any, Any]:
        """The offsets whose commit point moved, of ``partitions`` or all, marked as being committed."""
        from kafka.structs import OffsetAndMetadata

        offsets: dict[Any, Any] = {}
        with self._state:
            if partitions is None:  # all but the suspended: this member does not own those now
                partitions = [tp for tp in self._progress if tp not in self._suspended] if self._suspended else self._progress
            for tp in partitions:
                progress = self._progress.get(tp)
                at = progress.to_commit() if progress is not None else None
                if at is not None:
                    assert progress is not None
                    progress.committed = at
                    offsets[tp] = OffsetAndMetadata(at, "", -1)
        return offsets

    def _commit_now(self, offsets: dict[Any, Any]) -> None:
        """Commit ``offsets`` and wait for the answer (the engine's client call; caller holds _poll_lock)."""
        raise NotImplementedError

    def _commit_async(self) -> None:
        """Send the commits that are due without waiting for the answer (caller holds _poll_lock)."""
        offsets = self._offsets_to_commit()
        if not offsets:
            return
        self._last_commit = time.monotonic()

        def done(committed: Any, result: Any) -> None:
            if isinstance(result, BaseException):
                log.debug("async commit of %s failed: %s; the next commit covers it", committed, result)
                with self._state:
                    for tp, meta in committed.items():
                        progress = self._progress.get(tp)
                        if progress is not None and progress.committed == meta.offset:
                            progress.committed = None

        self.consumer.commit_async(offsets, callback=done)

    def _commit_soon(self) -> None:
        """After an ack: commit now if the consumer is free and the last commit is not too recent."""
        if time.monotonic() - self._last_commit < _ACK_COMMIT_INTERVAL and self._ready:
            return
        if self._poll_lock.acquire(blocking=False):
            try:
                if not self._closed:
                    self._commit_async()
            except Exception as exc:  # receive and close commit again
                log.debug("commit after ack failed: %s", exc)
            finally:
                self._poll_lock.release()

    # -- settling ----------------------------------------------------------------
    def _settle(self, delivery: _Delivery) -> None:
        """Mark ``delivery`` done and let the next message of its key go (caller holds _state)."""
        self._unlease(delivery)
        self._progress[delivery.tp].settle(delivery.offset)
        if delivery._key is not None:
            self._release_key(delivery._key)

    def _settle_if_leased(self, handle: Any, delivery: _Delivery) -> None:
        """Settle ``delivery`` after its copy was published, unless its partition left meanwhile."""
        with self._state:
            if self._leased.get(handle) is not delivery:
                raise _LostLease(
                    "the message's partition moved to another group member while it was being "
                    "republished; it will also be delivered again from the last commit",
                    provider="kafka",
                )
            self._settle(delivery)

    def ack(self, handle: Any) -> None:
        with self._state:
            self._settle(self._leased_delivery(handle))
        self._commit_soon()

    def ack_many(self, handles: Iterable[Any]) -> list[BaseException | None]:
        handles = list(handles)
        out: list[BaseException | None] = [None] * len(handles)
        with self._state:
            if self._speedups is not None:  # _settle_many's loop, in C
                missing = self._speedups.settle(
                    handles, self._leased, self._progress, self._release_key, _NO_DELIVERIES
                )
            else:
                missing = self._settle_many(handles)
        for i in missing:
            out[i] = _LostLease("the message is no longer leased here", provider="kafka")
        self._commit_soon()
        return out

    def _settle_many(self, handles: list[Any]) -> list[int]:
        """Settle the deliveries leased under ``handles``; return the indexes of those that are not
        (caller holds _state).

        :meth:`_settle` and :meth:`_unlease`, inline: this runs once per message at full rate
        (``_speedups.c``'s ``settle`` does the same in C); the offsets are settled per partition
        run, in one call each.
        """
        take = self._leased.pop
        release = self._release_key
        missing: list[int] = []
        tp: Any = None
        offsets: list[int] = []
        for i, handle in enumerate(handles):
            delivery = take(handle, None)
            if delivery is None:
                missing.append(i)
                continue
            batch = delivery.batch
            batch.left -= 1
            if not batch.left:
                batch.items = _NO_DELIVERIES
            if delivery.tp is not tp:
                if offsets:
                    self._progress[tp].settle_many(offsets)
                    offsets = []
                tp = delivery.tp
            offsets.append(delivery.offset)
            if delivery._key is not None:
                release(delivery._key)
        if offsets:
            self._progress[tp].settle_many(offsets)
        return missing

    def nack(self, handle: Any, delay: float) -> None:
        if self.retry_topic is None:
            with self._state:
                self._redeliver_locally(self._leased_delivery(handle), delay)
            return
        with self._state:
            delivery = self._leased_delivery(handle)
        extra = {
            ATTEMPT_HEADER: str(delivery.delivery_attempt + 1),
            DUE_HEADER: str(epoch_ms() + int(delay * 1000)),
            ORIGINAL_ID_HEADER: delivery.id,
            PUBLISHED_HEADER: str(int(delivery.publish_time.timestamp() * 1000)),
        }
        placed = self._republish(self.retry_topic, delivery, delivery._headers, extra)
        self._settle_if_leased(handle, delivery)
        self._note_not_before(self.retry_topic, placed, time.monotonic() + delay)
        self._commit_soon()

    def _note_not_before(self, topic: str, placed: tuple[int, int] | None, when: float) -> None:
        """Remember that the retry copy at ``placed`` (partition, offset) is not due before ``when``
        here (see :meth:`LocalLeases._hold`); entries of copies another member took are dropped
        once their time has passed."""
        if placed is None:
            return
        with self._state:
            notes = self._not_before
            if len(notes) >= 1024:
                now = time.monotonic()
                for k in [k for k, t in notes.items() if t <= now]:
                    del notes[k]
            notes[(topic, *placed)] = when

    def dead_letter(self, message: ReceivedMessage, reason: str) -> None:
        if self.dead_letter_topic is None:
            raise Unsupported("this Kafka subscription has no dead-letter topic (dead_letter_topic=none)")
        with self._state:
            delivery = self._leased_delivery(message.handle)
        # the record's own headers as they came, but an earlier dead-lettering's reason (a
        # message moved twice carries only the latest), then this one's
        kept = tuple(h for h in delivery._headers if h[0] not in DEAD_LETTER_ATTRIBUTES)
        extra = {
            DEAD_LETTER_REASON: reason,
            DEAD_LETTER_SOURCE: self.settings.url_for(self.topic, self.settings.group),
            DELIVERY_ATTEMPTS: str(delivery.delivery_attempt),
            ORIGINAL_ID: delivery.id,
        }
        self._republish(self.dead_letter_topic, delivery, kept, extra)
        self._settle_if_leased(message.handle, delivery)
        self._commit_soon()

    def dead_letter_url(self) -> str | None:
        if self.dead_letter_topic is None:
            return None
        return self.settings.url_for(
            self.dead_letter_topic, f"{self.settings.group}.dlq", retry_topic="none", dead_letter_topic="none"
        )

    # -- copies to the retry and dead-letter topics ---------------------------------
    def producer(self) -> Any:
        """The producer of retry and dead-letter copies, started on first use."""
        with self._state:
            producer = self._producer
        if producer is None:
            producer = self._driver.new_producer()
            with self._state:
                if self._producer is None:
                    self._producer = producer
                else:
                    producer.close(timeout=1)
                    producer = self._producer
        return producer

    def _republish(
        self, topic: str, delivery: _Delivery, headers: tuple[tuple[str, bytes], ...], extra: dict[str, str]
    ) -> tuple[int, int] | None:
        """Send a copy of ``delivery``'s record to ``topic``: its value (a tombstone stays one), key
        bytes and ``headers`` as they came, then ``extra`` as UTF-8 headers; return the copy's
        (partition, offset) once the broker has it."""
        future = self.producer().send(
            topic,
            value=None if delivery._tombstone else delivery._body,
            key=delivery._key_bytes,
            headers=[*headers, *to_headers(extra)],
        )
        meta = future.get(timeout=remaining(self._send_timeout))
        return (meta.partition, meta.offset) if meta is not None and meta.offset >= 0 else None

    # -- stats and close: the same for both engines, around the client's calls ----------------
    def stats(self) -> QueueStats:
        """Ready, key-blocked and not yet fetched records as available, leased ones in flight, held
        retry copies as delayed (the lag is what the client's cached watermarks say)."""
        with self._poll_lock:
            with self._state:
                partitions = list(self._progress)
                in_flight = len(self._leased)
                delayed = len(self._held)
                ready = len(self._ready) + self._key_blocked_count()
            lag = self._lag(partitions) if partitions else 0
        return QueueStats(available=ready + lag, in_flight=in_flight, delayed=delayed, dead_letters=None)

    def _lag(self, partitions: list[Any]) -> int:
        """How many records of ``partitions`` lie past this member's position (the engine's client call)."""
        raise NotImplementedError

    def close(self) -> None:
        """Commit what is safe, then leave the group and close the clients (once; later calls do nothing)."""
        with self._poll_lock:
            if self._closed:
                return
            self._closed = True
            try:
                offsets = self._offsets_to_commit()
                if offsets:
                    self._commit_now(offsets)
            except Exception as exc:
                log.warning("final commit failed: %s; uncommitted messages will be delivered again", exc)
            finally:
                try:
                    self._close_clients()
                finally:
                    self._hand_back_to_gc()

    def _close_clients(self) -> None:
        """Close the consumer (leaving the group) and the retry producer (the engine's client calls)."""
        raise NotImplementedError
