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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from portable.driver.messaging import (
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DELIVERY_ATTEMPTS,
    ORIGINAL_ID,
    Delivery,
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
    """A Pulsar MessageId as portable's message id: ``LEDGER:ENTRY:PARTITION:BATCH_INDEX``
    (the binding's ``str(mid)`` is ``(LEDGER,ENTRY,PARTITION,BATCH_INDEX)``: one call, not four)."""
    return str(mid)[1:-1].replace(",", ":")


class _PulsarDelivery(Delivery):
    """One delivery: the Message the application gets and this process's lease of it, in one
    object (a consumer handles many thousands a second; the Subscription hands it out as it is).
    ``_handle`` is an int token, new for every delivery, so a stale handle finds nothing.

    Only the lease fields are set when it is made. Every field of the message (body,
    properties, key, attempt, id, publish time, headers) is read from the native message
    the first time it is asked for, then kept (:meth:`__getattr__`): a receive + ack loop
    that never reads them makes no Python objects for them (they are half of the cost of
    a message on the receiving side)."""

    __slots__ = ("deadline", "native", "status")

    native: Any  # the binding's _pulsar.Message: what ack and negative ack take
    deadline: float  # time.monotonic() when the lease or nack delay ends
    status: int  # _LEASED or _DELAYED

    def __init__(self, native: Any, token: int, deadline: float) -> None:
        self._handle = token
        self.native = native
        self.deadline = deadline
        self.status = _LEASED

    def __getattr__(self, name: str) -> Any:
        # called only for a slot not set yet: read that field from the native message, once
        read = _LAZY.get(name)
        if read is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = read(self)
        setattr(self, name, value)
        return value

    def __repr__(self) -> str:
        return f"Message(id={self.id!r}, key={self._key!r}, attempt={self._attempt}, bytes={len(self._body)}, state={self._state})"


def _read_id(d: _PulsarDelivery) -> str:
    return message_id_text(d.native.message_id())


def _read_headers(d: _PulsarDelivery) -> tuple[tuple[str, bytes], ...]:
    """The properties as ``(name, UTF-8 bytes)`` pairs, sorted by name (Pulsar keeps no order)."""
    return tuple([(name, value.encode()) for name, value in sorted(d._attributes.items())])


#: how each field of a delivery is read from its native message, the first time it is asked for
_LAZY: dict[str, Any] = {
    "_body": lambda d: d.native.data(),
    "_attributes": lambda d: d.native.properties(),
    "_key": lambda d: d.native.partition_key() or None,
    "_attempt": lambda d: d.native.redelivery_count() + 1,
    "_id": _read_id,
    "_published": lambda d: _fromtimestamp(d.native.publish_timestamp() / 1000.0, _UTC),
    "_headers": _read_headers,
    "_key_bytes": lambda d: None,  # Pulsar keys are text: key_bytes is the UTF-8 of key
    "_tombstone": lambda d: False,
}


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
        # pulsar-client's Python classes wrap each message and check every argument again; the
        # binding below them (pulsar-client 3.13's documented-as-internal ``_consumer``) takes the
        # same calls, at a third of the cost per message. Bypassing only the wrapper, same semantics.
        self._native = self.consumer._consumer  # pinned: pulsar-client==3.13.0
        self._leases: dict[int, _PulsarDelivery] = {}
        self._deadlines: list[tuple[float, int, Sequence[int]]] = []
        self._next_token = 1
        self._order = itertools.count()  # ties of the deadline heap: never compares the handles
        self._lock = threading.Condition()
        self._closed = False
        self._dead_producer: Any = None
        self._dead_ready = False
        self._sweeper = threading.Thread(target=self._sweep, name=f"portable-pulsar-leases-{s.subscription}", daemon=True)
        self._sweeper.start()

    # -- receive -------------------------------------------------------------------
    def receive(self, max_messages: int, wait: float, lease: float) -> list[Delivery]:
        native = self._native
        timeout = self._timeout_error
        try:
            first = native.receive(max(0, int(wait * 1000)))
        except timeout:
            return []
        got = [first]
        try:
            while len(got) < max_messages:
                got.append(native.receive(0))
        except timeout:
            pass
        deadline = time.monotonic() + lease
        out: list[Delivery] = []
        append = out.append
        new, cls = object.__new__, _PulsarDelivery
        with self._lock:
            # the handles of one receive call are consecutive ints: one range in the deadline heap
            first_token = token = self._next_token
            self._next_token += len(got)
            for message in got:
                # what _PulsarDelivery.__init__ does, inline: a thousand calls fewer per receive
                delivery = new(cls)
                delivery._handle = token
                delivery.native = message
                delivery.deadline = deadline
                delivery.status = _LEASED
                append(delivery)
                token += 1
            handles = range(first_token, token)
            self._leases.update(zip(handles, out, strict=True))  # type: ignore[arg-type]
            self._schedule(deadline, handles)
        return out

    # -- settling ----------------------------------------------------------------------
    def _take(self, handle: Any) -> _PulsarDelivery:
        """Remove and return the live delivery of ``handle``, or raise LeaseLost."""
        with self._lock:
            delivery = self._leases.get(handle)
            if delivery is None or delivery.status != _LEASED:
                raise LeaseLost(f"delivery {handle} has no lease any more: it ended and the message was given back")
            del self._leases[handle]
            return delivery

    def _live(self, handle: Any) -> _PulsarDelivery:
        delivery = self._leases.get(handle)
        if delivery is None or delivery.status != _LEASED:
            raise LeaseLost(f"delivery {handle} has no lease any more: it ended and the message was given back")
        return delivery

    def ack(self, handle: Any) -> None:
        self._native.acknowledge(self._take(handle).native)

    def ack_many(self, handles: Any) -> list[BaseException | None]:
        leases = self._leases
        with self._lock:
            taken = [leases.pop(handle, None) for handle in handles]
            natives = [d.native for d in taken if d is not None and d.status == _LEASED]
            if len(natives) != len(taken):
                for delivery in taken:
                    if delivery is not None and delivery.status != _LEASED:  # nacked with a delay: still held
                        leases[delivery._handle] = delivery
        if len(natives) != len(taken):
            return self._ack_each(taken)
        # every handle was live: one pass in C over the binding's acknowledge (it answers None);
        # an error takes its message's place in the results, and the rest go on
        acknowledge = self._native.acknowledge
        out: list[BaseException | None] = []
        left = iter(natives)
        while len(out) < len(natives):
            try:
                out.extend(map(acknowledge, left))
            except Exception as exc:
                out.append(exc)
        return out

    def _ack_each(self, taken: list[_PulsarDelivery | None]) -> list[BaseException | None]:
        """``ack_many`` of ``taken``, the deliveries its handles found, some not live (LeaseLost)."""
        out: list[BaseException | None] = []
        for delivery in taken:
            if delivery is None or delivery.status != _LEASED:
                out.append(LeaseLost("the delivery has no lease any more: it ended and the message was given back"))
                continue
            try:
                self._native.acknowledge(delivery.native)
                out.append(None)
            except Exception as exc:
                out.append(exc)
        return out

    def nack(self, handle: Any, delay: float) -> None:
        if delay <= 0:
            self._native.negative_acknowledge(self._take(handle).native)
            return
        with self._lock:
            delivery = self._live(handle)
            delivery.status = _DELAYED
            delivery.deadline = deadline = time.monotonic() + delay
            self._schedule(deadline, (handle,))

    def extend_lease(self, handle: Any, seconds: float) -> Any:
        with self._lock:
            delivery = self._live(handle)
            delivery.deadline = deadline = time.monotonic() + seconds
            self._schedule(deadline, (handle,))
        return handle

    def _schedule(self, deadline: float, handles: Sequence[int]) -> None:
        """Add the deadline of ``handles`` (under the lock); wake the sweeper only if it is due
        before the one the sweeper sleeps until (a receive's lease mostly ends after those before it)."""
        heap = self._deadlines
        wake = not heap or deadline < heap[0][0]
        heapq.heappush(heap, (deadline, next(self._order), handles))
        if wake:
            self._lock.notify()

    def _sweep(self) -> None:
        """Give back (negative-ack) every delivery whose lease or nack delay ended."""
        heap = self._deadlines
        leases = self._leases
        while True:
            due: list[Any] = []
            with self._lock:
                while not self._closed:
                    now = time.monotonic()
                    while heap and heap[0][0] <= now:
                        deadline, _, tokens = heapq.heappop(heap)
                        for token in tokens:
                            delivery = leases.get(token)
                            if delivery is not None and delivery.deadline == deadline:
                                del leases[token]
                                due.append(delivery.native)
                    if due:
                        break
                    self._lock.wait(heap[0][0] - now if heap else None)
                if self._closed:
                    return
            for native in due:
                try:
                    self._native.negative_acknowledge(native)
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
            self._live(message.handle)
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
            delayed = sum(1 for d in self._leases.values() if d.status == _DELAYED)
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
