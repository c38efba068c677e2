"""The receiving side: one pulsar-client consumer, and the leases this process keeps.

Pulsar's own lease is the consumer's ack timeout: one value per consumer, fixed when
it subscribes, at least 10 s, and on expiry it redelivers *every* unacked message of
that consumer. portable's lease is per receive call and per message, down to a second,
and can be extended. So the lease is kept here, in the subscribing process, the way a
broker would keep it:

* a received message stays unacknowledged at the broker, which gives it to no other
  consumer of the subscription while this consumer is connected;
* when its lease ends (a sweeper thread watches the deadlines), the driver negatively
  acknowledges it: the broker redelivers it, to any consumer, and counts the redelivery
  (``redelivery_count``, read as ``delivery_attempt - 1`` on Shared and Key_Shared);
* ``extend_lease`` moves the deadline (no request);
* ``nack(delay)`` holds the message here for ``delay`` seconds, then negatively
  acknowledges it (Pulsar's own negative-ack delay is one value per consumer);
* an ack, nack or dead-letter of a delivery whose lease ended raises :class:`LeaseLost`.

If the process dies or closes, the broker redelivers every unacknowledged message at
once, whatever its lease or nack delay said (docs/adapters/pulsar.md, "Known differences").
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from portable.driver.messaging import (
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DELIVERY_ATTEMPTS,
    ORIGINAL_ID,
    QueueStats,
    ReceivedMessage,
    SubscriptionDriver,
)
from portable.driver.redaction import redact

from ._admin import AdminError
from ._settings import SUBSCRIPTION_TYPES

if TYPE_CHECKING:
    from .pulsar import PulsarMessaging

__all__ = ["LeaseLost", "PulsarSubscription", "message_id_text"]

log = logging.getLogger("portable.pulsar")

_LEASED, _DELAYED = 0, 1
_UTC = dt.UTC
_fromtimestamp = dt.datetime.fromtimestamp


class LeaseLost(Exception):
    """The delivery's lease ended (or it was settled) before this call: PRECONDITION_FAILED."""


def message_id_text(mid: Any) -> str:
    """A Pulsar MessageId as portable's message id: ``LEDGER:ENTRY:PARTITION:BATCH_INDEX``."""
    return f"{mid.ledger_id()}:{mid.entry_id()}:{mid.partition()}:{mid.batch_index()}"


class _Lease:
    __slots__ = ("deadline", "message", "state")

    def __init__(self, message: Any, deadline: float) -> None:
        self.message = message
        self.deadline = deadline
        self.state = _LEASED


class PulsarSubscription(SubscriptionDriver):
    """A subscription (shared, key_shared, failover or exclusive) of one topic."""

    def __init__(self, driver: PulsarMessaging) -> None:
        import pulsar

        self._driver = driver
        s = driver.settings
        self.settings = s
        policy = None
        if s.max_redeliveries and s.dead_letter_topic:
            policy = pulsar.ConsumerDeadLetterPolicy(
                max_redeliver_count=s.max_redeliveries,
                dead_letter_topic=s.full_topic(s.dead_letter_topic),
                initial_subscription_name=s.dead_letter_subscription,
            )
        assert s.subscription is not None
        self.consumer = driver.client.subscribe(
            s.full_topic(),
            s.subscription,
            consumer_type=getattr(pulsar.ConsumerType, SUBSCRIPTION_TYPES[s.type]),
            receiver_queue_size=s.receiver_queue_size,
            negative_ack_redelivery_delay_ms=s.nack_redelivery_ms,
            initial_position=(
                pulsar.InitialPosition.Earliest if s.start == "earliest" else pulsar.InitialPosition.Latest
            ),
            batch_index_ack_enabled=True,
            dead_letter_policy=policy,
        )
        self._timeout_error: type[BaseException] = pulsar.Timeout
        self._leases: dict[int, _Lease] = {}
        self._deadlines: list[tuple[float, int]] = []
        self._tokens = itertools.count(1)
        self._lock = threading.Condition()
        self._closed = False
        self._dead_producer: Any = None
        self._dead_ready = False
        self._sweeper = threading.Thread(target=self._sweep, name=f"portable-pulsar-leases-{s.subscription}", daemon=True)
        self._sweeper.start()

    # -- receive -------------------------------------------------------------------
    def receive(self, max_messages: int, wait: float, lease: float) -> list[ReceivedMessage]:
        consumer = self.consumer
        timeout = self._timeout_error
        try:
            first = consumer.receive(max(0, int(wait * 1000)))
        except timeout:
            return []
        got = [first]
        try:
            while len(got) < max_messages:
                got.append(consumer.receive(0))
        except timeout:
            pass
        deadline = time.monotonic() + lease
        out: list[ReceivedMessage] = []
        append = out.append
        tokens = self._tokens
        with self._lock:
            leases = self._leases
            heap = self._deadlines
            for message in got:
                token = next(tokens)
                leases[token] = _Lease(message, deadline)
                heapq.heappush(heap, (deadline, token))
                append(_received(message, token))
            self._lock.notify()
        return out

    # -- settling ----------------------------------------------------------------------
    def _take(self, handle: Any) -> _Lease:
        """Remove and return the live lease of ``handle``, or raise LeaseLost."""
        with self._lock:
            lease = self._leases.get(handle)
            if lease is None or lease.state != _LEASED:
                raise LeaseLost(f"delivery {handle} has no lease any more: it ended and the message was given back")
            del self._leases[handle]
            return lease

    def ack(self, handle: Any) -> None:
        self.consumer.acknowledge(self._take(handle).message)

    def ack_many(self, handles: Any) -> list[BaseException | None]:
        out: list[BaseException | None] = []
        acknowledge = self.consumer.acknowledge
        for handle in handles:
            try:
                acknowledge(self._take(handle).message)
                out.append(None)
            except Exception as exc:
                out.append(exc)
        return out

    def nack(self, handle: Any, delay: float) -> None:
        if delay <= 0:
            self.consumer.negative_acknowledge(self._take(handle).message)
            return
        with self._lock:
            lease = self._leases.get(handle)
            if lease is None or lease.state != _LEASED:
                raise LeaseLost(f"delivery {handle} has no lease any more: it ended and the message was given back")
            lease.state = _DELAYED
            lease.deadline = time.monotonic() + delay
            heapq.heappush(self._deadlines, (lease.deadline, handle))
            self._lock.notify()

    def extend_lease(self, handle: Any, seconds: float) -> Any:
        with self._lock:
            lease = self._leases.get(handle)
            if lease is None or lease.state != _LEASED:
                raise LeaseLost(f"delivery {handle} has no lease any more: it ended and the message was given back")
            lease.deadline = time.monotonic() + seconds
            heapq.heappush(self._deadlines, (lease.deadline, handle))
        return handle

    def _sweep(self) -> None:
        """Give back (negative-ack) every delivery whose lease or nack delay ended."""
        heap = self._deadlines
        while True:
            due: list[Any] = []
            with self._lock:
                while not self._closed:
                    now = time.monotonic()
                    while heap and heap[0][0] <= now:
                        deadline, token = heapq.heappop(heap)
                        lease = self._leases.get(token)
                        if lease is not None and lease.deadline == deadline:
                            del self._leases[token]
                            due.append(lease.message)
                    if due:
                        break
                    self._lock.wait(heap[0][0] - now if heap else None)
                if self._closed:
                    return
            for message in due:
                try:
                    self.consumer.negative_acknowledge(message)
                except Exception as exc:  # the consumer reconnects; the broker redelivers on reconnect anyway
                    log.warning("could not give back a message whose lease ended: %s", exc)

    # -- dead letters -------------------------------------------------------------------
    def dead_letter_url(self) -> str | None:
        s = self.settings
        if s.dead_letter_topic is None:
            return None
        return s.url_for(s.dead_letter_topic, s.dead_letter_subscription, dead_letter_topic="none")

    def dead_letter(self, message: ReceivedMessage, reason: str) -> None:
        s = self.settings
        assert s.dead_letter_topic is not None
        with self._lock:
            lease = self._leases.get(message.handle)
            if lease is None or lease.state != _LEASED:
                raise LeaseLost(f"delivery {message.handle} has no lease any more: it was given back")
        producer = self._dead_letter_producer()
        properties = dict(message.attributes)
        properties[DEAD_LETTER_REASON] = reason
        properties[DEAD_LETTER_SOURCE] = redact(self._driver.settings.url_for(s.topic, s.subscription))
        properties[DELIVERY_ATTEMPTS] = str(message.delivery_attempt)
        properties[ORIGINAL_ID] = message.id
        # what Pulsar's own dead-letter copies carry, for native consumers of the topic
        properties["REAL_TOPIC"] = s.full_topic()
        properties["ORIGIN_MESSAGE_ID"] = message.id
        kwargs: dict[str, Any] = {"properties": properties}
        if message.key is not None:
            kwargs["partition_key"] = message.key
        producer.send(message.body, **kwargs)
        self.ack(message.handle)

    def _dead_letter_producer(self) -> Any:
        """The producer of the dead-letter topic, its subscription created first (so nothing is lost)."""
        if self._dead_producer is None:
            s = self.settings
            assert s.dead_letter_topic is not None and s.dead_letter_subscription is not None
            self._driver.ensure_subscription(s.dead_letter_topic, s.dead_letter_subscription)
            self._dead_producer = self._driver.client.create_producer(
                s.full_topic(s.dead_letter_topic), batching_enabled=False,
                send_timeout_millis=int(s.send_timeout * 1000),
            )  # fmt: skip
        return self._dead_producer

    # -- stats and closing -------------------------------------------------------------
    def stats(self) -> QueueStats:
        s = self.settings
        try:
            topic = self._driver.admin("GET", s.rest_path() + "/stats")
        except AdminError as exc:
            if exc.status == 404:
                raise
            log.debug("no stats for %s: %s", s.topic, exc)
            return QueueStats()
        sub = (topic.get("subscriptions") or {}).get(s.subscription) or {}
        backlog = int(sub.get("msgBacklog", 0))
        with self._lock:
            delayed = sum(1 for lease in self._leases.values() if lease.state == _DELAYED)
            held = len(self._leases) - delayed
        unacked = int(sub.get("unackedMessages", held + delayed))
        dead: int | None = None
        if s.dead_letter_topic is not None:
            try:
                dlq = self._driver.admin("GET", s.rest_path(s.dead_letter_topic) + "/stats")
                dead_sub = (dlq.get("subscriptions") or {}).get(s.dead_letter_subscription) or {}
                dead = int(dead_sub.get("msgBacklog", 0))
            except AdminError:
                dead = 0
        return QueueStats(
            available=max(0, backlog - unacked), in_flight=held, delayed=delayed, dead_letters=dead
        )

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
        self._sweeper.join(timeout=5)
        for closable in (self.consumer, self._dead_producer):
            if closable is not None:
                try:
                    closable.close()
                except Exception as exc:
                    log.debug("closing %s: %s", closable, exc)


def _received(message: Any, token: int) -> ReceivedMessage:
    properties = message.properties()
    key = message.partition_key() or None
    return ReceivedMessage(
        message_id_text(message.message_id()),
        message.data(),
        properties,
        key,
        _fromtimestamp(message.publish_timestamp() / 1000.0, _UTC),
        message.redelivery_count() + 1,
        token,
        tuple((name, value.encode()) for name, value in properties.items()),
    )
