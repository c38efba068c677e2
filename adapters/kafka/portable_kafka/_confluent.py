"""The confluent-kafka (librdkafka) engine of ``kafka://``: ``?engine=confluent``.

The client differs, the contract does not: the bookkeeping of fetched records,
local leases, key order, settlement, commits and rebalances is the kafka-python
engine's own (:mod:`._receive`, :mod:`._progress`, :mod:`._commits`,
:mod:`._rebalance`); this module feeds it librdkafka's messages and speaks
librdkafka's API for the few client calls (consume, pause/resume, commit,
produce). Partitions are keyed by kafka-python's ``TopicPartition`` namedtuple
in the bookkeeping, as in the other engine.

Differences from the kafka-python engine, all inside the client: librdkafka
fetches in its own threads (a ``receive`` that finds records buffered there
does no network I/O), the rebalance callbacks run inside ``consume`` (so in
the thread that receives, under its lock), and a paused partition's buffered
records are librdkafka's to drop and fetch again on resume.
"""

# mypy: disable-error-code="import-untyped"
from __future__ import annotations

import contextlib
import functools
import logging
import random
import threading
import time
from collections import deque, namedtuple
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from portable.driver.messaging import OutgoingMessage, TopicDriver, plain_items
from portable.errors import DeadlineExceeded, PortableError, TooLarge
from portable.resilience import remaining

from ._confluent_config import confluent_consumer_config
from ._publish import _BATCH_BYTES_PER_RECORD
from ._rebalance import Rebalancing
from ._receive import _NO_ATTRIBUTES, _Delivery, plain_attributes
from ._records import INTERNAL_PREFIX, record_id, to_headers

if TYPE_CHECKING:
    from .kafka import KafkaMessaging

__all__ = ["ConfluentSubscription", "ConfluentTopic"]

log = logging.getLogger("portable.kafka")

#: Seconds a topic's partitions (with a leader) are kept before librdkafka's metadata is asked again.
_METADATA_FOR = 10.0

#: Seconds a new assignment's retry-topic partitions wait for the main topic's first fetch (_on_assign).
_RETRY_PARKED_FOR = 0.1

#: A record with headers, in the shape :meth:`LocalLeases._delivery_with_headers` reads.
_Record = namedtuple("_Record", "offset timestamp key value headers")


def _consume_error(error: Any) -> None:
    """A message that carries an error: skip a partition's end (not asked for), raise any other."""
    from confluent_kafka import KafkaException

    if error.code() == -191:  # _PARTITION_EOF
        return
    raise KafkaException(error)


def _explain(error: Any, topic: str) -> BaseException:
    """A librdkafka error (KafkaError) as an exception: a size refusal as TooLarge with the fix."""
    from confluent_kafka import KafkaError, KafkaException

    exc = KafkaException(error)
    if error.code() in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE):
        too_large = TooLarge(
            f"the broker refused a record for topic {topic!r} as too large ({error.str()}): raise the "
            "topic's max.message.bytes (and the URL's max_message_bytes=) or store the payload in a "
            "bucket and publish its key",
            provider="kafka",
        )
        too_large.__cause__ = exc
        return too_large
    return exc


def _produce(
    producer: Any, topic: str, value: bytes | None, key: bytes | None, headers: Any, on_delivery: Any,
    partition: int = -1,
) -> None:
    """``producer.produce``, waiting (serving delivery reports) while librdkafka's queue is full.

    ``partition`` -1 is librdkafka's partitioner's choice.
    """
    while True:
        try:
            producer.produce(topic, value, key, partition=partition, headers=headers, on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.05)


def _refused(exc: BaseException, topic: str) -> BaseException:
    """A record ``produce`` refused before sending (over message.max.bytes, ...), explained."""
    error = exc.args[0] if exc.args and hasattr(exc.args[0], "code") else None
    return _explain(error, topic) if error is not None else exc


def _delivered(out: list[Any], i: int, prefix: str, err: Any, msg: Any) -> None:
    """publish_batch's delivery report of record ``i``: its id (``prefix`` is ``TOPIC/``), or the error."""
    if err is None:
        out[i] = f"{prefix}{msg.partition()}/{msg.offset()}"
    else:
        out[i] = _explain(err, prefix[:-1])


class _Reports:
    """One ``publish_batch``'s results, and the delivery report callback its body-only records share.

    A body-only record is produced to a partition portable chose, and its index
    waits in that partition's queue. A report takes the first index waiting on
    its partition whose body equals the record's value. librdkafka reports a
    partition's records in the order they were produced (the idempotent
    producer's ordering), so that is the first one, and the comparison is a
    check that costs a copy of the value: if the order ever differed, the
    search finds the record with that value. Records with equal values are
    alike in everything (topic, partition, value, no key, no headers), so which
    of them gets which id changes nothing.
    """

    __slots__ = ("_ids", "_lock", "_waiting", "items", "out", "prefix")

    #: A C-made callable per record for the other records (key or headers): no Python closure to build.
    per_record = staticmethod(functools.partial)

    def __init__(self, items: list[Any], prefix: str) -> None:
        self.items = items
        self.out: list[Any] = [None] * len(items)
        self.prefix = prefix  # TOPIC/
        self._waiting: dict[int, deque[int]] = {}
        self._ids: dict[int, str] = {}  # partition -> TOPIC/PARTITION/, the start of its records' ids
        self._lock = threading.Lock()  # a search (never in the common case)

    def waiting(self, partition: int) -> deque[int]:
        queue = self._waiting.get(partition)
        if queue is None:
            queue = self._waiting[partition] = deque()
        return queue

    def delivered(self, err: Any, msg: Any) -> None:
        """librdkafka's report of a body-only record (in whichever thread polled)."""
        partition = msg.partition()
        try:
            i = self._waiting[partition].popleft()
        except (KeyError, IndexError):  # another report took the last one: search
            i = -1
        value = msg.value()
        if i < 0 or self.items[i] != value:
            queue = self._waiting.get(partition)
            i = self._search(b"" if value is None else value, i, queue)
            if i < 0:
                log.error("a delivery report of %s%s matched no record of its batch", self.prefix, partition)
                return
        if err is None:
            prefix = self._ids.get(partition)
            if prefix is None:
                prefix = self._ids[partition] = f"{self.prefix}{partition}/"
            self.out[i] = prefix + str(msg.offset())
        else:
            self.out[i] = _explain(err, self.prefix[:-1])

    def _search(self, value: bytes, taken: int, queue: deque[int] | None) -> int:
        """The first index waiting whose body is ``value``, on the report's partition's queue first
        (``taken``, popped from it, goes back first); -1 if none."""
        with self._lock:
            if taken >= 0 and queue is not None:
                queue.appendleft(taken)
            for waiting in ([queue] if queue is not None else []) + list(self._waiting.values()):
                for i in list(waiting):  # a copy: the producing thread may append meanwhile
                    if self.items[i] == value:
                        try:
                            waiting.remove(i)
                        except ValueError:  # another report took it meanwhile
                            continue
                        return i
            return -1


def _wait_for(producer: Any, done: threading.Event, timeout: float | None, topic: str) -> None:
    """Serve delivery reports until ``done`` is set (librdkafka bounds it by delivery.timeout.ms)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not done.is_set():
        left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
        if left <= 0:
            raise DeadlineExceeded(f"no acknowledgement from Kafka for topic {topic!r} in time", provider="kafka")
        producer.poll(left)


class ConfluentTopic(TopicDriver):
    """Publishes with one thread-safe librdkafka Producer: key -> partition (murmur2), attributes -> headers."""

    def __init__(self, driver: KafkaMessaging, topic: str) -> None:
        self._driver = driver
        self.topic = topic
        self._closed = False
        self._lock = threading.Lock()
        self.producer = driver.new_producer()
        self._send_timeout = driver.settings.send_timeout
        self._pool: list[int] = []  # the partitions with a leader, for body-only records
        self._pool_until = 0.0
        self._turn = random.randrange(1 << 16)  # the partition the next body-only record goes to

    def publish(self, message: OutgoingMessage) -> str:
        done = threading.Event()
        result: list[Any] = []

        def delivered(err: Any, msg: Any) -> None:
            result.append(_explain(err, self.topic) if err is not None else msg)
            done.set()

        key = message.key
        _produce(
            self.producer, self.topic, message.body, None if key is None else key.encode("utf-8"),
            to_headers(message.attributes) if message.attributes else None, delivered,
        )  # fmt: skip
        _wait_for(self.producer, done, remaining(self._send_timeout), self.topic)
        got = result[0]
        if isinstance(got, BaseException):
            raise got
        return record_id(got.topic(), got.partition(), got.offset())

    def publish_batch(self, messages: Iterable[OutgoingMessage]) -> list[str | BaseException]:
        """Produce every message, then flush; the results are ids (or errors) in order.

        Keyed records go where murmur2 hashes their key (librdkafka's
        partitioner). Body-only records (no key, no attributes) are spread as the
        kafka-python engine spreads them: each partition with a leader in turn
        gets about one ``batch_size`` of them. They are produced to that
        partition and share one delivery report callback (:class:`_Reports`),
        not one callable per record: a batch of 100,000 then keeps no 100,000
        callables alive until its flush, whose garbage-collector passes cost
        about 2 us a record. Other keyless records go where librdkafka's sticky
        partitioner puts them.
        """
        producer = self.producer
        topic = self.topic
        items = plain_items(messages)
        reports = _Reports(items, f"{topic}/")
        out = reports.out
        per_record = reports.per_record
        shared = reports.delivered
        pool = self._partitions_for_keyless()
        batch_size = self._driver.settings.batch_size
        turn = self._turn
        room = batch_size
        partition = pool[turn % len(pool)] if pool else -1
        waiting = reports.waiting(partition) if pool else deque()
        produce = producer.produce
        per_record_bytes = _BATCH_BYTES_PER_RECORD
        for i, message in enumerate(items):
            if type(message) is bytes and pool:  # a body-only message: no OutgoingMessage was made for it
                room -= len(message) + per_record_bytes
                if room < 0:
                    turn += 1
                    room = batch_size - len(message) - per_record_bytes
                    partition = pool[turn % len(pool)]
                    waiting = reports.waiting(partition)
                waiting.append(i)  # before produce: another thread's poll may serve its report at once
                try:
                    produce(topic, message, partition=partition, on_delivery=shared)
                except BufferError:
                    _produce(producer, topic, message, None, None, shared, partition)
                except Exception as exc:  # e.g. a record over message.max.bytes, refused before sending
                    with contextlib.suppress(ValueError):  # a report's value search may have taken it
                        waiting.remove(i)
                    out[i] = _refused(exc, topic)
                continue
            if type(message) is bytes:
                body, key, headers = message, None, None
            else:
                body, text, attributes = message.body, message.key, message.attributes
                key = None if text is None else text.encode("utf-8")
                headers = to_headers(attributes) if attributes else None
            delivered = per_record(_delivered, out, i, reports.prefix)
            try:
                produce(topic, body, key, headers=headers, on_delivery=delivered)
            except BufferError:
                _produce(producer, topic, body, key, headers, delivered)
            except Exception as exc:
                out[i] = _refused(exc, topic)
        self._turn = turn + 1  # the next batch starts on the next partition
        left = remaining(self._send_timeout)
        pending = producer.flush(-1 if left is None else left)
        for i, item in enumerate(out):
            if item is None:
                out[i] = (
                    DeadlineExceeded(f"no acknowledgement from Kafka for topic {topic!r} in time", provider="kafka")
                    if pending
                    else PortableError(f"Kafka reported no delivery of a record to topic {topic!r}", provider="kafka")
                )
        return out

    def _partitions_for_keyless(self) -> list[int]:
        """The partitions with a leader (librdkafka's metadata, kept for ``_METADATA_FOR`` seconds).

        Empty when the metadata cannot be had (the topic is being created, the
        cluster is out of reach): then librdkafka's partitioner places every record.
        """
        now = time.monotonic()
        if now < self._pool_until:
            return self._pool
        pool: list[int] = []
        try:
            limit = self._driver.settings.connect_timeout
            left = remaining(limit)  # the deadline's time left, where one is in force
            timeout = max(0.1, min(limit, limit if left is None else left))
            found = self.producer.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
            if found is not None and found.error is None:
                pool = sorted(p.id for p in found.partitions.values() if p.error is None and p.leader >= 0)
        except Exception as exc:  # produce reports the same trouble, record by record
            log.debug("no partition metadata for %s: %s", self.topic, exc)
        self._pool = pool
        self._pool_until = now + (_METADATA_FOR if pool else 0.0)
        return pool

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.producer.flush(self._driver.settings.request_timeout)


class ConfluentSubscription(Rebalancing):
    """A consumer-group member on librdkafka, with the kafka-python engine's bookkeeping.

    Threads: ``receive`` holds ``_poll_lock`` while it consumes; librdkafka runs
    the rebalance callbacks inside ``consume``, in that thread, and they take
    only ``_state``; ``ack``/``nack`` from handler threads touch the bookkeeping
    under ``_state`` and commit (asynchronously) when the consumer is free.
    """

    def __init__(self, driver: KafkaMessaging) -> None:
        from confluent_kafka import Consumer
        from kafka.structs import TopicPartition

        super().__init__(driver)
        # the C tracking leaves its deliveries to reference counting (see LocalLeases._hand_back_to_gc)
        self._untracking = self._speedups is not None
        self._tp = TopicPartition
        self._tps: dict[tuple[str, int], Any] = {}
        #: the retry topic's partitions of the last assignment, paused until the first fetch (_fetch)
        self._parked_retry: list[Any] = []
        self._producer_lock = threading.Lock()
        config = confluent_consumer_config(driver.settings, driver._password)
        config["on_commit"] = self._committed
        self.consumer = Consumer(config)
        topics = [self.topic] + ([self.retry_topic] if self.retry_topic else [])
        self._await_metadata(topics)
        self.consumer.subscribe(
            topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def _await_metadata(self, topics: list[str]) -> None:
        """Wait (up to connect_timeout) until librdkafka's metadata has every topic's partitions.

        A topic created a moment ago (the retry topic, by ensure_topics) may be missing from
        the first metadata; librdkafka then joins the group without it and rejoins when it
        appears, a second rebalance (about 0.3-1 s) in the first seconds of every new group.
        """
        until = time.monotonic() + self.settings.connect_timeout
        for topic in topics:
            while True:
                try:
                    found = self.consumer.list_topics(topic, timeout=1.0).topics.get(topic)
                except Exception as exc:  # consume reports the same trouble with its fix
                    log.debug("no metadata for %s yet: %s", topic, exc)
                    found = None
                if (found is not None and found.error is None and found.partitions) or time.monotonic() > until:
                    break
                time.sleep(0.05)

    # -- librdkafka's names for partitions -------------------------------------------------
    def _ck(self, tps: Iterable[Any], offsets: dict[Any, int] | None = None) -> list[Any]:
        from confluent_kafka import TopicPartition

        if offsets is None:
            return [TopicPartition(tp.topic, tp.partition) for tp in tps]
        return [TopicPartition(tp.topic, tp.partition, offsets[tp]) for tp in tps]

    def _ours(self, partitions: Iterable[Any]) -> list[Any]:
        return [self._tp_of(p.topic, p.partition) for p in partitions]

    def _tp_of(self, topic: str, partition: int) -> Any:
        tp = self._tps.get((topic, partition))
        if tp is None:
            tp = self._tps[(topic, partition)] = self._tp(topic, partition)
        return tp

    # -- receiving ------------------------------------------------------------------------
    def _fetch(self, max_messages: int, timeout: float) -> None:
        """Take what librdkafka has buffered, else wait up to ``timeout`` s for the first message and
        then take what else is buffered; track them (caller holds _poll_lock).

        ``consume(n, timeout)`` returns only when it has ``n`` messages or the timeout has
        passed, so one call with the receive's wait would hold a message that arrived
        early until the wait ended (``receive(1000, wait=3)`` answered one message after
        3 s), where receive returns as soon as one is there. A ``timeout`` of 0 returns
        what is buffered at once.

        After an assignment the retry topic's partitions are paused (:meth:`_on_assign`) until
        this call has asked for the main topic's first records, waiting at most
        ``_RETRY_PARKED_FOR`` (a longer wait goes on in slices of that length). They
        usually become fetchable a moment before the main topic's, and the broker holds a
        fetch of only their (empty) partitions for ``fetch.wait.max.ms``; the main topic's
        first records waited for it on every new assignment (0.11 s more per join, measured).
        """
        consume = self.consumer.consume
        wanted = max(max_messages, 100)
        deadline = time.monotonic() + timeout
        # with a retry topic the wait is cut in slices: an assignment made during one parks the
        # retry partitions (_on_assign), and the end of the next slice resumes them
        piece = _RETRY_PARKED_FOR if self.retry_topic is not None else timeout
        while True:
            parked = self._parked_retry
            messages = consume(num_messages=wanted, timeout=0)
            if not messages:
                left = deadline - time.monotonic()
                if left > 0:
                    messages = consume(num_messages=1, timeout=min(left, piece))
                    if messages:
                        messages += consume(num_messages=wanted - 1, timeout=0)
            if parked and parked is self._parked_retry:  # not parked again by a rebalance meanwhile
                self._parked_retry = []
                try:
                    self.consumer.resume(parked)
                except Exception as exc:  # given up meanwhile: nothing to resume
                    log.debug("resuming the retry topic's %s: %s", parked, exc)
            if messages or time.monotonic() >= deadline:
                break
        if messages:
            self._track_consumed(messages)

    def _track_consumed(self, messages: list[Any]) -> None:
        """Track librdkafka's messages as the kafka-python engine tracks its records (caller holds _poll_lock).

        In C where the extension is built (:func:`._receive.speedups`), else :meth:`_track_in_python`;
        both make the same deliveries, in the same order, with the same bookkeeping.
        """
        fast = self._speedups
        if fast is None:
            self._track_in_python(messages)
            return
        out: list[_Delivery] = []
        with self._state:
            try:
                fast.track(
                    messages, out, self._handles, self._partition_run, self._with_headers, _consume_error,
                    _NO_ATTRIBUTES, INTERNAL_PREFIX, self._untracking,
                )  # fmt: skip
            finally:
                self._ready.extend(out)

    def _partition_run(self, topic: str, partition: int) -> tuple[Any, Any, str, int] | None:
        """The C tracking's view of a partition: its TopicPartition, progress, id prefix and highest
        fetched offset; None when it was revoked meanwhile (caller holds _state)."""
        tp = self._tps.get((topic, partition)) or self._tp_of(topic, partition)
        progress = self._progress.get(tp)
        if progress is None:
            return None
        return tp, progress, f"{topic}/{partition}/", progress.last_fetched()

    def _with_headers(self, msg: Any, tp: Any, offset: int, headers: list[Any]) -> _Delivery | None:
        """The C tracking's full path: the delivery of a record with headers of this driver's own (a
        retry copy) or a null header value, or None when it is held until due (caller holds _state)."""
        return self._unless_held(tp, _Record(offset, msg.timestamp()[1], msg.key(), msg.value(), headers))

    def _track_in_python(self, messages: list[Any]) -> None:
        """:meth:`_track_consumed` in Python: the reference ``_speedups.c`` follows.

        This runs once per message at full rate, so the common one (no headers, or
        only the application's) becomes its delivery inline: the fields
        :meth:`_Delivery.__init__` sets, stored here without the call.
        """
        ready = self._ready.append
        handle = self._handles.__next__
        new = _Delivery.__new__
        with self._state:
            topic: Any = None
            partition = -1
            tp: Any = None
            progress: Any = None
            prefix = ""
            last = -1  # the current partition's highest fetched offset
            fetched: list[int] = []  # the current partition's new offsets, for its progress
            try:
                for msg in messages:
                    err = msg.error()
                    if err is not None:
                        _consume_error(err)  # a partition's end is skipped, any other error raises
                        continue
                    if msg.partition() != partition or msg.topic() != topic:
                        if fetched:
                            progress.add_fetched(fetched)
                            fetched = []
                        topic, partition = msg.topic(), msg.partition()
                        run = self._partition_run(topic, partition)
                        if run is None:
                            progress = None
                        else:
                            tp, progress, prefix, last = run
                    if progress is None:
                        continue  # revoked meanwhile
                    offset = msg.offset()
                    if offset <= last:
                        continue  # a refetch
                    last = offset
                    fetched.append(offset)
                    headers = msg.headers()
                    attributes: Mapping[str, str] = _NO_ATTRIBUTES
                    if headers:
                        plain = plain_attributes(headers)
                        if plain is None:  # a retry copy (this driver's headers), or a null value
                            held_or_not = self._with_headers(msg, tp, offset, headers)
                            if held_or_not is not None:
                                ready(held_or_not)
                            continue
                        attributes, headers = plain, tuple(headers)
                    else:
                        headers = ()
                    delivery = new(_Delivery)
                    value = msg.value()
                    if value is None:  # a tombstone, read as b""
                        delivery._body = b""
                        delivery._tombstone = True
                    else:
                        delivery._body = value
                        delivery._tombstone = False
                    key = msg.key()
                    delivery._key = None if key is None else key.decode("utf-8", "replace")
                    delivery._key_bytes = key
                    delivery._id = prefix + str(offset)
                    delivery._attributes = attributes
                    delivery._stamped = msg  # publish_time reads its timestamp when asked
                    delivery._attempt = 1
                    delivery._handle = handle()
                    delivery._headers = headers
                    delivery.tp = tp
                    delivery.offset = offset
                    delivery.due = 0.0
                    ready(delivery)
            finally:  # also when a message's error raises: the offsets of the deliveries made
                if fetched:
                    progress.add_fetched(fetched)

    # -- flow control: librdkafka's pause drops the partition's buffered messages, and resume
    # fetches again from the position (the offset after the last message consume returned)
    def _pause_partitions(self, tps: list[Any]) -> None:
        self.consumer.pause(self._ck(tps))

    def _resume_partitions(self, tps: list[Any]) -> None:
        self.consumer.resume(self._ck(tps))

    def _unpark(self) -> None:
        pass  # kafka-python's fetcher bug; librdkafka has no parked records

    # -- commits --------------------------------------------------------------------------
    def _commit_async(self) -> None:
        offsets = self._offsets_to_commit()
        if not offsets:
            return
        self._last_commit = time.monotonic()
        self.consumer.commit(offsets=self._ck(offsets, {tp: m.offset for tp, m in offsets.items()}), asynchronous=True)

    def _committed(self, err: Any, partitions: list[Any]) -> None:
        """librdkafka's commit report: a failed commit is sent again by the next one."""
        failed = [p for p in partitions if err is not None or p.error is not None]
        if not failed:
            return
        log.debug("async commit failed: %s; the next commit covers it", err or [p.error for p in failed])
        with self._state:
            for p in failed:
                progress = self._progress.get(self._tp_of(p.topic, p.partition))
                if progress is not None and progress.committed == p.offset:
                    progress.committed = None

    def _commit_now(self, offsets: dict[Any, Any]) -> None:
        self.consumer.commit(offsets=self._ck(offsets, {tp: m.offset for tp, m in offsets.items()}), asynchronous=False)

    # -- rebalances (inside consume, in the receiving thread) ----------------------------------------
    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        """librdkafka assigns every partition unpaused, from its committed offset unless told
        otherwise: a kept partition reads on after its last fetched record, a forgotten one that
        came back from its first unsettled offset. With the main topic's partitions, the retry
        topic's are assigned paused, and resumed by the next fetch (see :meth:`_fetch`)."""
        from confluent_kafka import TopicPartition

        tps = self._ours(partitions)
        rewind, kept, _unpause = self._start_assigned(tps)
        with self._state:
            self._paused.difference_update(tps)  # librdkafka assigns a partition unpaused
            for tp in kept:
                progress = self._progress.get(tp)
                last = progress.last_fetched() if progress is not None else -1
                if last >= 0:
                    rewind.setdefault(tp, last + 1)
        retry = self.retry_topic
        # the retry topic's partitions wait for the first fetch of the main topic's (see _fetch)
        parked = (
            [p for p in partitions if p.topic == retry]
            if retry is not None and any(p.topic != retry for p in partitions)
            else []
        )
        if not rewind and not parked:
            return  # confluent-kafka assigns them as they are
        listed = [TopicPartition(p.topic, p.partition, rewind.get(tp, p.offset)) for p, tp in zip(partitions, tps, strict=True)]
        if self.settings.assignor == "cooperative-sticky":
            consumer.incremental_assign(listed)
        else:
            consumer.assign(listed)
        if parked:
            consumer.pause(parked)
            self._parked_retry = parked

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        tps = self._ours(partitions)
        offsets = self._offsets_to_commit(tps)
        if offsets:
            try:
                self._commit_now(offsets)
            except Exception as exc:  # the new owner will redeliver: at least once holds
                log.warning("commit before giving up %s failed: %s", sorted(tps), exc)
        self._give_up(tps)

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        self._forget_partitions(self._ours(partitions), lost=True)

    # -- copies to the retry and dead-letter topics -------------------------------------------
    def producer(self) -> Any:
        """The librdkafka producer of retry and dead-letter copies, started on first use."""
        with self._producer_lock:
            if self._producer is None:
                self._producer = self._driver.new_producer()
            return self._producer

    def _republish(
        self, topic: str, delivery: _Delivery, headers: tuple[tuple[str, bytes], ...], extra: dict[str, str]
    ) -> tuple[int, int] | None:
        producer = self.producer()
        done = threading.Event()
        result: list[Any] = []

        def delivered(err: Any, msg: Any) -> None:
            result.append((msg.partition(), msg.offset()) if err is None else _explain(err, topic))
            done.set()

        _produce(producer, topic, None if delivery._tombstone else delivery._body, delivery._key_bytes,
                 [*headers, *to_headers(extra)], delivered)  # fmt: skip
        _wait_for(producer, done, remaining(self._send_timeout), topic)
        got = result[0]
        if isinstance(got, BaseException):
            raise got
        return got if got[1] >= 0 else None

    # -- the rest ---------------------------------------------------------------------------
    def _lag(self, partitions: list[Any]) -> int:
        """Records of ``partitions`` past this member's position (librdkafka's cached watermarks)."""
        try:
            positions = self.consumer.position(self._ck(partitions))
        except Exception:
            return 0
        lag = 0
        for p in positions:
            if p.offset < 0:
                continue
            try:
                _, high = self.consumer.get_watermark_offsets(p, timeout=1.0)
            except Exception:
                continue
            lag += max(0, high - p.offset)
        return lag

    def _close_clients(self) -> None:
        try:
            self._leave_group()
            self.consumer.close()
        finally:
            if self._producer is not None:
                self._producer.flush(self.settings.request_timeout)

    def _leave_group(self) -> None:
        """Unsubscribe and serve the revocation, so that ``close`` starts with nothing assigned.

        librdkafka's ``consumer_close`` can hang forever inside the rebalance
        callback when an assignment reaches it while it closes (its own
        ``rd_kafka_assign`` never answers: confluentinc/librdkafka#4884, #4527);
        seen here as a test teardown that never ended. Unsubscribing first and
        polling until the assignment is empty (at most 10 s) is the workaround
        its maintainers give. Records polled meanwhile are dropped unstored:
        their offsets are not committed, so the group delivers them again.
        """
        consumer = self.consumer
        try:
            consumer.unsubscribe()
            deadline = time.monotonic() + min(10.0, self.settings.request_timeout)
            while consumer.assignment() and time.monotonic() < deadline:
                consumer.poll(0.01)  # serves the revocation; 0.1 made every close last 0.1 s
        except Exception as exc:  # the close that follows reports what matters
            log.debug("leaving the group before close: %s", exc)
