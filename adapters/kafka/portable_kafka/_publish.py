"""The publishing side of ``kafka://``: one producer per topic, key -> partition, attributes -> headers."""

# mypy: disable-error-code="import-untyped"
from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from portable.driver.messaging import OutgoingMessage, TopicDriver
from portable.errors import TooLarge
from portable.resilience import remaining

from ._records import record_id, to_headers

if TYPE_CHECKING:
    from .kafka import KafkaMessaging

__all__ = ["KafkaTopic"]

log = logging.getLogger("portable.kafka")

#: publish_batch swaps acknowledged futures for ids every this many sends.
_RESOLVE_EVERY = 1000
#: Bytes a record adds to its body in a producer batch (a guess: varints, timestamps, offsets).
_BATCH_BYTES_PER_RECORD = 24


def _explain_refusal(exc: BaseException, topic: str) -> BaseException:
    """A broker's size refusal as TooLarge saying what to change; any other error as it is."""
    import kafka.errors as E

    if isinstance(exc, E.MessageSizeTooLargeError | E.RecordListTooLargeError):
        too_large = TooLarge(
            f"the broker refused a record for topic {topic!r} as too large ({exc}): raise the topic's "
            "max.message.bytes (and the URL's max_message_bytes=) or store the payload in a bucket "
            "and publish its key",
            provider="kafka",
        )
        too_large.__cause__ = exc
        return too_large
    return exc


class KafkaTopic(TopicDriver):
    """Publishes with one thread-safe KafkaProducer: key -> partition, attributes -> headers."""

    def __init__(self, driver: KafkaMessaging, topic: str) -> None:
        self._driver = driver
        self.topic = topic
        self._lock = threading.Lock()
        self._closed = False
        self.producer = driver.new_producer()
        self._send_timeout = driver.settings.send_timeout

    def _healthy_producer(self) -> Any:
        producer = self.producer
        manager = getattr(producer, "_transaction_manager", None)
        if manager is not None and getattr(manager, "has_fatal_error", lambda: False)():
            with self._lock:
                if self.producer is producer:
                    log.warning("the idempotent producer hit a fatal error; starting a new one")
                    producer.close(timeout=1)
                    self.producer = self._driver.new_producer()
                producer = self.producer
        return producer

    def publish(self, message: OutgoingMessage) -> str:
        producer = self._healthy_producer()
        key = message.key
        try:
            future = producer.send(
                self.topic,
                value=message.body,
                key=None if key is None else key.encode("utf-8"),
                headers=to_headers(message.attributes) if message.attributes else None,
            )
            metadata = future.get(timeout=remaining(self._send_timeout))
        except Exception as exc:
            explained = _explain_refusal(exc, self.topic)
            if explained is exc:
                raise
            raise explained from exc
        return record_id(metadata.topic, metadata.partition, metadata.offset)

    def publish_batch(self, messages: Iterable[OutgoingMessage]) -> list[str | BaseException]:
        """Send every message, then flush; the results are ids (or errors) in order.

        Each send's future is swapped for its id as soon as it is acknowledged
        (checked every ``_RESOLVE_EVERY`` sends), so a batch of many thousands does
        not keep thousands of futures and their metadata alive until the flush:
        the garbage collector's full passes cost in proportion to live objects.
        """
        producer = self._healthy_producer()
        topic = self.topic
        send = producer.send
        out: list[Any] = []  # futures, then ids or errors
        add = out.append
        done = 0  # out[:done] holds ids or errors
        pool = self._partitions_for_keyless(producer)
        batch_size = self._driver.settings.batch_size
        turn = random.randrange(len(pool)) if pool else 0
        room = batch_size
        for message in messages:
            key = message.key
            attributes = message.attributes
            partition = None
            if key is None and pool:  # sticky: fill one partition's batch, then the next
                room -= len(message.body) + _BATCH_BYTES_PER_RECORD
                if room < 0:
                    turn += 1
                    room = batch_size - len(message.body) - _BATCH_BYTES_PER_RECORD
                partition = pool[turn % len(pool)]
            try:
                add(
                    send(
                        topic,
                        value=message.body,
                        key=None if key is None else key.encode("utf-8"),
                        headers=to_headers(attributes) if attributes else None,
                        partition=partition,
                    )
                )
            except Exception as exc:
                add(_explain_refusal(exc, topic))
            if len(out) - done >= _RESOLVE_EVERY:
                done = self._resolve_futures(out, done, wait=False)
        producer.flush(timeout=remaining(self._send_timeout))
        self._resolve_futures(out, done, wait=True)
        return out

    def _partitions_for_keyless(self, producer: Any) -> list[int]:
        """The partitions a batch's keyless records may go to: those with a leader, else all.

        ``publish_batch`` spreads keyless records as the Java client's sticky
        partitioner does: each partition in turn gets about one producer batch
        (``batch_size``) of them. Batches fill, fewer requests go out, and each
        record skips kafka-python's per-record partitioner (a sort and a random
        choice: about a microsecond). Empty when the metadata cannot be had:
        then kafka-python's own partitioner chooses, record by record.
        """
        try:
            every = producer.partitions_for(self.topic)
            metadata = getattr(producer, "_metadata", None)
            available = metadata.available_partitions_for_topic(self.topic) if metadata is not None else None
        except Exception:  # send() reports the same trouble, record by record
            return []
        return sorted(available or every or ())

    def _resolve_futures(self, out: list[Any], start: int, *, wait: bool) -> int:
        """Replace the futures in ``out[start:]`` by ids or errors, stopping at the first not
        acknowledged yet unless ``wait``; return the index of the first future left."""
        for i in range(start, len(out)):
            item = out[i]
            if isinstance(item, str | BaseException):
                continue
            if not item.is_done and not wait:
                return i
            try:
                if item.is_done and item.exception is None:
                    metadata = item.value  # the common case, without get()'s timer
                else:
                    metadata = item.get(timeout=remaining(self._send_timeout))
            except Exception as exc:
                out[i] = _explain_refusal(exc, self.topic)
            else:
                out[i] = record_id(metadata.topic, metadata.partition, metadata.offset)
        return len(out)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.producer.close(timeout=self._driver.settings.request_timeout)
