"""The receiving side's bookkeeping inside one group member: fetched records, local leases, key order.

Kafka has no per-message lease: the partition assignment is the lease between
members. Inside a member, :class:`LocalLeases` keeps portable's lease itself.
Each fetched record becomes one :class:`_Delivery` (the Message the application
gets) that is *ready* (deliverable now), *held* (a retry copy not yet due),
*key-blocked* (a record of a key whose earlier message is in flight) or
*leased* (delivered, not yet settled, until its local lease ends).

A consumer handles many thousands of messages a second, so this path is
written for speed: one object per message, C-speed attribute stores, and
records without headers turned into deliveries inline, without a call.
"""

# mypy: disable-error-code="import-untyped"
from __future__ import annotations

import datetime as dt
import functools
import heapq
import itertools
import logging
import operator
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from portable.driver.messaging import Delivery, SubscriptionDriver
from portable.errors import ConfigError, MissingDependency, PreconditionFailed

from ._progress import PartitionProgress
from ._records import (
    ATTEMPT_HEADER,
    DUE_HEADER,
    INTERNAL_PREFIX,
    ORIGINAL_ID_HEADER,
    PUBLISHED_HEADER,
    epoch_ms,
    record_id,
)

__all__ = ["LocalLeases"]

log = logging.getLogger("portable.kafka")

#: A partition is paused while this many of its fetched messages wait here, resumed below half.
_PAUSE_AT = 1000

#: Shared by every delivery without headers (read-only, so one object serves all).
_NO_ATTRIBUTES: Mapping[str, str] = MappingProxyType({})


class _LostLease(PreconditionFailed):
    """The message's partition left this member (or it was settled already)."""


class _Delivery(Delivery):
    """One delivery of a fetched record: the Message the application gets and this member's
    bookkeeping of it, in one object.

    A consumer handles many thousands of messages a second, and every object kept per
    message in flight costs allocation and garbage-collector time, so there is one (a
    :class:`portable.driver.messaging.Delivery`, which the Subscription hands out as it is).
    ``_handle`` is an int token, new for every delivery: a later delivery of the same
    record is a new object with a new token, and a stale handle finds nothing.
    """

    __slots__ = ("_stamped", "batch", "due", "lease_ends", "offset", "tp")

    _stamped: Any  # engine=confluent: the librdkafka Message, whose timestamp publish_time reads when asked
    tp: Any  # kafka.TopicPartition
    offset: int
    due: float  # held copies: epoch ms from the header, then time.monotonic() when due
    lease_ends: float  # time.monotonic()
    batch: _LeaseBatch  # the receive that leased it

    def __init__(
        self,
        id: str,
        value: bytes | None,
        attributes: Mapping[str, str],
        key: str | None,
        publish_time: dt.datetime,
        delivery_attempt: int,
        handle: int,
        tp: Any,
        offset: int,
        raw_key: bytes | None,
        due: float,
        headers: tuple[tuple[str, bytes], ...],
    ) -> None:
        # the record's value as it came: None is a tombstone, read as b""
        if value is None:
            self._body = b""
            self._tombstone = True
        else:
            self._body = value
            self._tombstone = False
        self._id = id
        self._attributes = attributes
        self._key = key
        self._published = publish_time
        self._attempt = delivery_attempt
        self._handle = handle
        self._key_bytes = raw_key  # the record key as it came, always (Message.key_bytes)
        self._headers = headers
        self.tp = tp
        self.offset = offset
        self.due = due

    @property
    def publish_time(self) -> dt.datetime:
        """When the record was appended (its timestamp, UTC). The confluent engine makes it
        when first asked, from the Message it keeps (few handlers read it, and a datetime a
        message costs about 0.05 us)."""
        try:
            return self._published
        except AttributeError:
            stamp: int = self._stamped.timestamp()[1]
            when = self._published = dt.datetime.fromtimestamp(max(stamp, 0) / 1000.0, dt.UTC)
            return when


class _LeaseBatch:
    """The deliveries one receive leased together, until their lease ends or all are settled.

    The lease heap holds batches, not deliveries, and a batch lets go of its
    deliveries as soon as the last is settled: a settled message is not kept
    alive (its body included) until its lease would have ended.
    """

    __slots__ = ("items", "left")

    def __init__(self, items: list[_Delivery]) -> None:
        self.items = items
        self.left = len(items)


#: What a batch holds once it let go of its deliveries.
_NO_DELIVERIES: list[_Delivery] = []


def plain_attributes(headers: list[tuple[str, bytes | None]]) -> dict[str, str] | None:
    """The attributes of a record whose headers are all the application's, or None for any other.

    The common record with headers (an idempotency key, a trace context)
    takes this path inline in both engines' tracking: the text view of its headers, as
    ``_delivery_with_headers`` builds it (the last value of a name wins, a
    value that is not UTF-8 is left out), with the headers kept as they
    came. A header of this driver's own (``portable.kafka.*``: a retry copy)
    or a null value (read as ``b""``) returns None, for that full path.
    Measured with one header per record (receive + ack_many on Apache
    Kafka): 6.8-7.0 us of client CPU a message through the full path.
    """
    attributes: dict[str, str] = {}
    for name, value in headers:
        if value is None or name.startswith(INTERNAL_PREFIX):
            return None
        try:
            attributes[name] = value.decode("utf-8")
        except UnicodeDecodeError:
            attributes.pop(name, None)  # not text: only in headers (an earlier text value is not the last)
    return attributes


@functools.cache
def _record_fields() -> Callable[[Any], tuple[int, int, bytes | None, bytes | None, Any]]:
    """(offset, timestamp, key, value, headers) of a kafka-python ConsumerRecord, in one C call."""
    from kafka.consumer.fetcher import ConsumerRecord

    names = ConsumerRecord._fields
    return operator.itemgetter(*(names.index(n) for n in ("offset", "timestamp", "key", "value", "headers")))


def _unpark_resumed(consumer: Any) -> None:
    """Drop the records kafka-python 3.0.12 parked for partitions no longer paused, so that it
    fetches those partitions again (caller holds _poll_lock: the fetcher is not thread-safe).

    When a partition is paused while the fetcher holds parsed records of it that it has not
    returned yet, the fetcher parks them (``_paused_partition_records``) and, after ``resume``,
    gives them back only in a ``fetched_records`` call that finds its in-line slot
    (``_next_partition_records``) None. The slot is None only right after a park: a drained
    slot keeps its empty object, and the next fetch response takes it. Meanwhile the fetcher
    never sends a fetch for a partition with parked records. So a resumed partition's parked
    records, and every later record of that partition, are never returned: the messages are
    stranded until a rebalance takes the partition away.

    The parked records start at the partition's fetch position (the fetcher moved it past every
    record it returned), so dropping them loses nothing: the next fetch reads them again from
    that position. That costs one refetch of at most ``max_partition_fetch_bytes`` per resume,
    and depends on no timing of the slot.
    """
    fetcher: Any = getattr(consumer, "_fetcher", None)
    parked = getattr(fetcher, "_paused_partition_records", None)
    if not parked:
        return
    state = fetcher._subscriptions
    for tp in [tp for tp in parked if not state.is_paused(tp)]:
        parked.pop(tp).drain()


@functools.cache
def speedups() -> Any:
    """``portable_kafka._speedups`` (``_speedups.c``): the per-message loops of tracking
    (engine=confluent), leasing and acking in C, bound to ``_Delivery``, ``_LeaseBatch``
    and confluent-kafka's Message where it is installed; or None where the distribution
    was installed without a C compiler. The engines then run the same loops in Python,
    which ``_speedups.c`` follows line for line (tests run both). See :func:`speedups_for`
    for the switch."""
    try:
        from . import _speedups  # type: ignore[attr-defined]
    except ImportError as exc:
        log.debug(
            "portable_kafka._speedups is not built (%s): the per-message loops run in Python", exc
        )
        return None
    try:
        from confluent_kafka import Message
    except ImportError:  # the kafka-python engine alone: no track()
        Message = None
    _speedups.bind(_Delivery, _LeaseBatch, Message)
    return _speedups


def speedups_for() -> Any:
    """The C loops a new subscription runs, as ``PORTABLE_KAFKA_SPEEDUPS`` says: unset, where they
    are built (:func:`speedups`); ``0``, never (the Python loops); ``1``, always.

    Raises:
        ConfigError: the variable holds anything else.
        MissingDependency: ``1``, and the extension was not built (no C compiler at install).
    """
    switch = os.environ.get("PORTABLE_KAFKA_SPEEDUPS")
    if switch == "0":
        return None
    if switch not in (None, "1"):
        raise ConfigError(f"PORTABLE_KAFKA_SPEEDUPS must be 0 or 1 (or unset), got {switch!r}")
    fast = speedups()
    if fast is None and switch == "1":
        raise MissingDependency(
            "PORTABLE_KAFKA_SPEEDUPS=1, but portable_kafka._speedups was not built: reinstall "
            "portable-cloud-kafka where a C compiler and the Python headers are installed",
            provider="kafka",
        )
    return fast


class LocalLeases(SubscriptionDriver):
    """Fetched records inside this member: ready, held, key-blocked or leased.

    Threads: ``_poll_lock`` is held by whoever touches the consumer (it is not
    thread-safe); ``_state`` guards the bookkeeping, which handler threads
    (``ack``, ``extend_lease``) and kafka-python's network thread (the rebalance
    listener) touch too. Methods that say "caller holds" a lock take none.
    """

    consumer: Any  # the member's kafka.KafkaConsumer, made by the subscription

    #: Both clients fetch ahead into memory, so a receive of 256 costs what a quarter of a
    #: receive of 1,000 does, and a consumer loop's batches of 256 (not 1,000) keep its
    #: deliveries out of the cycle collector's oldest generation: measured on the confluent
    #: engine, 0.5 us of collections a message against 1.4-1.6 (bench/kafka_loop_breakdown.py).
    loop_batch = 256

    def __init__(self) -> None:
        self._poll_lock = threading.RLock()
        self._state = threading.Lock()
        #: the per-message loops in C (speedups()), or None: in Python
        self._speedups: Any = speedups_for()
        #: the C tracking leaves the deliveries it makes untracked by the cycle collector (the
        #: confluent engine sets it): every delivery this member refers to is handed back to it
        #: (_hand_back_to_gc) at close and when the owning Subscription is gone
        self._untracking = False
        self._progress: dict[Any, PartitionProgress] = {}  # assigned tp -> its fetched offsets
        self._leased: dict[int, _Delivery] = {}  # handle -> delivery in flight
        self._ready: deque[_Delivery] = deque()
        self._held: list[tuple[float, int, _Delivery]] = []  # (due, tiebreak, delivery): not yet due
        self._leases: list[tuple[float, int, _LeaseBatch]] = []  # (ends, tiebreak, batch), checked lazily
        self._key_blocked: dict[str, deque[_Delivery]] = {}  # key -> later records of a key in flight
        self._busy_keys: set[str] = set()  # keys with a delivery in flight
        self._paused: set[Any] = set()  # tps paused because their records pile up here
        self._last_publish_ms = -1  # publish times of a batch repeat: keep the last one's datetime
        self._last_publish_time = dt.datetime.fromtimestamp(0, dt.UTC)
        #: (topic, partition, offset) of a retry copy this member published -> time.monotonic() before
        #: which it is not delivered: the delay counts from when nack returned, not from its start
        self._not_before: dict[tuple[str, int, int], float] = {}
        self._handles = itertools.count(1)
        self._tiebreak = itertools.count()  # orders heap entries of equal time without comparing the rest

    # -- fetched records ---------------------------------------------------------
    def _track_fetched(self, records: Mapping[Any, list[Any]]) -> None:
        """Track fetched records: ready now, or held until a retry copy is due (caller holds _poll_lock).

        This runs once per fetched record, so the common record (no headers)
        takes the inline path: one object per message, no call.
        """
        ready = self._ready.append
        handle = self._handles.__next__
        fields = _record_fields()
        with self._state:
            last_ms, last_time = self._last_publish_ms, self._last_publish_time
            for tp, batch in records.items():
                progress = self._progress.get(tp)
                if progress is None:
                    continue  # revoked while the fetch was in flight
                prefix = f"{tp.topic}/{tp.partition}/"
                for record in progress.fetched_many(batch):
                    offset, published, key, value, headers = fields(record)
                    attributes: Mapping[str, str] = _NO_ATTRIBUTES
                    if headers:
                        plain = plain_attributes(headers)
                        if plain is None:  # a retry copy (this driver's headers), or a null value
                            self._track_with_headers(tp, record)
                            continue
                        attributes, headers = plain, tuple(headers)
                    else:
                        headers = ()
                    if published != last_ms:  # records of one batch share it
                        last_ms = published
                        last_time = dt.datetime.fromtimestamp(max(published, 0) / 1000.0, dt.UTC)
                    ready(
                        _Delivery(
                            prefix + str(offset),
                            value,
                            attributes,
                            None if key is None else key.decode("utf-8", "replace"),
                            last_time,
                            1,
                            handle(),
                            tp,
                            offset,
                            key,
                            0.0,
                            headers,
                        )
                    )
            self._last_publish_ms, self._last_publish_time = last_ms, last_time

    def _track_with_headers(self, tp: Any, record: Any) -> None:
        """Track a record with headers: ready, or held while it is a retry copy not due yet
        (caller holds _state)."""
        delivery = self._unless_held(tp, record)
        if delivery is not None:
            self._ready.append(delivery)

    def _unless_held(self, tp: Any, record: Any) -> _Delivery | None:
        """The delivery of a record with headers, or None when it is a retry copy not due yet,
        now held until it is (caller holds _state)."""
        delivery = self._delivery_with_headers(tp, record)
        if not delivery.due or not self._hold(delivery, epoch_ms()):
            return delivery
        return None

    def _hold(self, delivery: _Delivery, wall: int) -> bool:
        """Hold a retry copy that is not due yet (its ``due`` becomes time.monotonic()); False if
        it is due now (caller holds _state).

        Due is the later of the copy's due header (stamped when nack started, the time every
        member sees) and, for a copy this member published, the nack's return plus its delay:
        a republish that took long (a producer's first connection, a loaded broker) does not
        eat into the delay.
        """
        due = time.monotonic() + (delivery.due - wall) / 1000.0
        if self._not_before:
            tp = delivery.tp
            local = self._not_before.pop((tp.topic, tp.partition, delivery.offset), None)
            if local is not None and local > due:
                due = local
        if due <= time.monotonic():
            return False
        delivery.due = due
        heapq.heappush(self._held, (due, next(self._tiebreak), delivery))
        return True

    def _delivery_with_headers(self, tp: Any, record: Any) -> _Delivery:
        """The delivery of a record with headers: its headers and attributes, and the retry
        headers of a copy read back.

        ``headers`` keeps every header but this driver's own ``portable.kafka.*`` ones, in
        record order, duplicates and bytes as they came (a null value as ``b""``).
        ``attributes`` is the text view: the last value of a name wins, and a value that
        is not UTF-8 is left out of it.
        """
        attributes: dict[str, str] = {}
        headers: list[tuple[str, bytes]] = []
        attempt = 1
        due = 0
        original: str | None = None
        published = record.timestamp
        for name, value in record.headers:
            if name.startswith(INTERNAL_PREFIX):
                text = value.decode("utf-8", "replace") if value is not None else ""
                try:
                    if name == ATTEMPT_HEADER:
                        attempt = max(1, int(text))
                    elif name == DUE_HEADER:
                        due = int(text)
                    elif name == ORIGINAL_ID_HEADER:
                        original = text
                    elif name == PUBLISHED_HEADER:
                        published = int(text)
                except ValueError:
                    log.warning("ignoring a malformed %s header on %s/%s", name, tp, record.offset)
                continue
            if value is None:
                value = b""
            headers.append((name, value))
            try:
                attributes[name] = value.decode("utf-8")
            except UnicodeDecodeError:
                attributes.pop(name, None)  # not text: only in headers (an earlier text value is not the last)
        key = record.key
        return _Delivery(
            original or record_id(tp.topic, tp.partition, record.offset),
            record.value,
            attributes,
            None if key is None else key.decode("utf-8", "replace"),
            dt.datetime.fromtimestamp(max(published, 0) / 1000.0, dt.UTC),
            attempt,
            next(self._handles),
            tp,
            record.offset,
            key,
            float(due),
            tuple(headers),
        )

    def _next_attempt(self, old: _Delivery) -> _Delivery:
        """The next delivery of the record ``old`` delivered: the next attempt, a new handle."""
        return _Delivery(
            old._id, None if old._tombstone else old._body, old._attributes, old._key, old.publish_time,
            old._attempt + 1, next(self._handles), old.tp, old.offset, old._key_bytes, 0.0, old._headers,
        )  # fmt: skip

    # -- leasing -------------------------------------------------------------------
    def _lease_ready(self, max_messages: int, lease: float) -> list[_Delivery]:
        """Deliver up to ``max_messages`` ready records, one in flight per key (caller holds _poll_lock)."""
        now = time.monotonic()
        taken: list[_Delivery] = []
        with self._state:
            if self._leases and self._leases[0][0] <= now:
                self._take_back_expired(now)
            leases = self._leases
            while leases and not leases[0][2].left:  # settled in full: nothing to expire
                heapq.heappop(leases)
            held = self._held
            while held and held[0][0] <= now:
                self._ready.append(heapq.heappop(held)[2])
            ready = self._ready
            if not ready:
                return taken
            busy = self._busy_keys
            leased = self._leased
            ends = now + lease
            lease_batch = _LeaseBatch(taken)
            if self._speedups is not None:
                self._speedups.lease(
                    ready, max_messages, taken, lease_batch, ends, leased, busy, self._block
                )
            else:
                take = ready.popleft
                add = taken.append
                while ready and len(taken) < max_messages:
                    delivery = take()
                    key = delivery._key
                    if key is not None:
                        if key in busy:
                            self._block(key, delivery)
                            continue
                        busy.add(key)
                    delivery.lease_ends = ends
                    delivery.batch = lease_batch
                    leased[delivery._handle] = delivery
                    add(delivery)
            if taken:
                lease_batch.left = len(taken)
                heapq.heappush(self._leases, (ends, next(self._tiebreak), lease_batch))
        return taken

    def _hand_back_to_gc(self) -> None:
        """Stop untracking deliveries, and hand every delivery this member refers to back to the
        cycle collector.

        A delivery refers to its lease batch and its subscription's settler, which refer back
        to it while it is in flight (the batch while any of its deliveries is), so these are
        cycles; untracked, the collector could never free them. While this member works, each
        cycle ends as its delivery is settled or taken back; past close, or once the
        Subscription is gone, whatever is still here could become garbage at any time: from
        here on every delivery is tracked, as in Python.

        Takes no lock: it runs from a finaliser too, which may fire in a thread that holds
        ``_state`` already. Each container is walked in one C call (or copied in one) that
        runs no Python code, so no other thread changes it meanwhile. Retry copies
        (``_held``) are made in Python, tracked from the start.
        """
        if not self._untracking:
            return
        self._untracking = False
        retrack = self._speedups.retrack
        retrack(self._leased.values())
        retrack(self._ready)
        for blocked in list(self._key_blocked.values()):
            retrack(blocked)
        for entry in list(self._leases):
            retrack(entry[2].items)

    def owner_gone(self) -> None:
        """The Subscription is gone: every delivery goes back to the cycle collector (see _hand_back_to_gc)."""
        try:
            self._hand_back_to_gc()
        except Exception as exc:  # a finaliser: never raise
            log.warning("handing the deliveries back to the cycle collector failed: %s", exc)

    def _block(self, key: str, delivery: _Delivery) -> None:
        """Hold ``delivery`` behind the delivery of its key in flight (caller holds _state)."""
        self._key_blocked.setdefault(key, deque()).append(delivery)

    def _take_back_expired(self, now: float) -> None:
        """Take back deliveries whose lease ended; they go first, ahead of their key (caller holds _state)."""
        leases = self._leases
        leased = self._leased
        expired: list[_Delivery] = []
        while leases and leases[0][0] <= now:
            batch: _LeaseBatch = heapq.heappop(leases)[2]
            for delivery in batch.items:
                if leased.get(delivery._handle) is not delivery:
                    continue  # settled, or its partition left
                if delivery.lease_ends > now:  # extended: look again then
                    batch.left -= 1
                    delivery.batch = _LeaseBatch([delivery])
                    heapq.heappush(leases, (delivery.lease_ends, next(self._tiebreak), delivery.batch))
                    continue
                self._withdraw(delivery)
                expired.append(self._next_attempt(delivery))
            batch.items = _NO_DELIVERIES
        if expired:
            self._ready.extendleft(reversed(expired))

    def _leased_delivery(self, handle: Any) -> _Delivery:
        """The delivery in flight under ``handle`` (caller holds _state), or _LostLease."""
        delivery = self._leased.get(handle)
        if delivery is None:
            raise _LostLease(
                "the message is no longer leased here: its lease ended and it was delivered again, "
                "its partition moved to another group member (it will be delivered again from the "
                "last commit), or it was settled already",
                provider="kafka",
            )
        return delivery

    def _unlease(self, delivery: _Delivery) -> None:
        """Take ``delivery`` out of the leased set; its batch lets go when it was the last (caller holds _state)."""
        del self._leased[delivery._handle]
        batch = delivery.batch
        batch.left -= 1
        if not batch.left:
            batch.items = _NO_DELIVERIES

    def _withdraw(self, delivery: _Delivery) -> None:
        """Take ``delivery`` out of flight without settling it (its lease ended, it is held for a
        local retry, or its partition left) and unlock its key; records blocked behind the key stay
        where they are (caller holds _state)."""
        self._unlease(delivery)
        if delivery._key is not None:
            self._busy_keys.discard(delivery._key)

    def _release_key(self, key: str) -> None:
        """The message of ``key`` in flight was settled: the key's next one goes first (caller holds _state)."""
        self._busy_keys.discard(key)
        blocked = self._key_blocked.get(key)
        if blocked:
            self._ready.appendleft(blocked.popleft())
            if not blocked:
                del self._key_blocked[key]

    def _redeliver_locally(self, delivery: _Delivery, delay: float) -> None:
        """retry_topic=none: hold the record here, its offset uncommitted, and deliver it again later
        (caller holds _state)."""
        self._withdraw(delivery)
        again = self._next_attempt(delivery)
        again.due = time.monotonic() + delay
        heapq.heappush(self._held, (again.due, next(self._tiebreak), again))

    def extend_lease(self, handle: Any, seconds: float) -> Any:
        with self._state:
            self._leased_delivery(handle).lease_ends = time.monotonic() + seconds
        return handle

    # -- flow control --------------------------------------------------------------
    def _pace(self) -> None:
        """Pause partitions whose held or key-blocked records pile up here; resume them when they drain
        (caller holds _poll_lock)."""
        self._unpark()  # a partition resumed here or by a rebalance (cheap when none)
        with self._state:
            if not self._paused and len(self._held) < _PAUSE_AT and self._key_blocked_count() < _PAUSE_AT:
                return
            counts: dict[Any, int] = {}
            for _, _, entry in self._held:
                counts[entry.tp] = counts.get(entry.tp, 0) + 1
            for blocked in self._key_blocked.values():
                for other in blocked:
                    counts[other.tp] = counts.get(other.tp, 0) + 1
            pause = [tp for tp, n in counts.items() if n >= _PAUSE_AT and tp not in self._paused]
            resume = [tp for tp in self._paused if counts.get(tp, 0) < _PAUSE_AT // 2]
            self._paused.update(pause)
            self._paused.difference_update(resume)
        if pause:
            self._pause_partitions(pause)
        if resume:
            self._resume_partitions(resume)
            self._unpark()

    # the client's side of flow control: kafka-python's here, overridden by the confluent engine
    def _pause_partitions(self, tps: list[Any]) -> None:
        self.consumer.pause(*tps)

    def _resume_partitions(self, tps: list[Any]) -> None:
        self.consumer.resume(*tps)

    def _unpark(self) -> None:
        _unpark_resumed(self.consumer)

    def _key_blocked_count(self) -> int:
        """How many records wait behind a key in flight (caller holds _state)."""
        return sum(len(b) for b in self._key_blocked.values()) if self._key_blocked else 0
