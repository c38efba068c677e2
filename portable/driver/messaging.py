"""The messaging driver protocol: what a queue or pub/sub adapter implements.

Application code should use :mod:`portable.messaging` (``Topic``,
``Subscription``, ``Message``). An adapter provides three small things:

* a :class:`MessagingDriver` — the factory class named in the scheme table,
  built by ``from_url(parsed)``. It holds the client/connection, classifies
  errors (it is the :class:`~portable.driver.Classifier` the portable layer's
  Guard uses for every call below), declares :attr:`capabilities`, answers
  ``as_()``, and opens the two sides of the URL;
* a :class:`TopicDriver` (``driver.topic()``): the publishing side;
* a :class:`SubscriptionDriver` (``driver.subscription()``): the receiving side.

A driver class may implement all three and return ``self`` from
:meth:`MessagingDriver.topic` and :meth:`MessagingDriver.subscription`
(the embedded drivers do).

Which side a URL names
----------------------

``open_topic(url)`` calls ``from_url(parsed).topic()``; ``open_subscription(url)``
calls ``from_url(parsed).subscription()``. A URL may name a topic, a
subscription or both, and the driver decides which sides exist:

* a queue is both sides: ``sqs://events``, ``azqueue://account/q``,
  ``mem://q``, ``sqlite://./q.db?name=q``;
* ``pubsub://project/topics/t`` names a topic; ``?subscription=s`` adds the
  receiving side; ``pubsub://project/subscriptions/s`` names a subscription
  (its ``topic()`` may look the topic up, or raise);
* ``kafka://host:9092/topic?group=g``: the topic, and with ``group`` the
  consumer group that receives.

:meth:`MessagingDriver.topic` / :meth:`MessagingDriver.subscription` raise
:class:`~portable.errors.InvalidURL` (before any request) when the URL does not
name that side, with a message that shows how to name it. They may talk to
the provider (look a queue URL up, read its attributes) and then refine
:attr:`MessagingDriver.capabilities` (an SQS FIFO queue has ``ordering``; a
redrive policy gives ``native_dead_letter``): the portable layer reads the
capabilities *after* opening a side.

Inputs a driver can rely on (the portable layer checks them first):

* a body is ``bytes`` and ``len(body) + size of attributes`` is at most
  ``capabilities.max_message_bytes``;
* attribute names match ``[A-Za-z0-9][A-Za-z0-9_.-]{0,127}`` (no ``..``, not
  ending in ``.``), values are ``str``, and there are at most
  ``capabilities.max_attributes`` of them, reserved ``portable.*`` ones included;
* an ordering ``key`` is a non-empty ``str`` of at most 128 UTF-8 bytes, or None;
* a batch holds 1 to ``capabilities.max_batch`` items;
* ``max_messages`` is 1 to ``capabilities.max_batch``; ``wait`` is 0 to 20 seconds
  (the portable layer loops for longer waits); ``lease`` and ``seconds`` are
  within ``[capabilities.min_lease_seconds, capabilities.max_lease_seconds]``;
  a nack ``delay`` is within ``[0, capabilities.max_lease_seconds]``;
* a handle passed back is one this subscription returned (the latest one for
  that delivery, if :meth:`SubscriptionDriver.extend_lease` returned a new one).

Error contract (drivers raise native errors; :meth:`Classifier.code_of` maps them):

* a topic, queue or subscription that does not exist: ``NOT_FOUND``;
* ack, nack, extend or dead-letter of a delivery whose lease was lost (it expired
  and the message was delivered again, or the handle is stale): ``PRECONDITION_FAILED``.
  A provider that cannot tell (SQS often accepts stale receipt handles) may
  succeed instead; it must never fail with another code for that reason;
* a body the provider refuses as too large despite the check: ``TOO_LARGE``;
* throttling: ``THROTTLED`` (with ``retry_after`` if the provider said);
  connection failures and 5xx: ``UNAVAILABLE`` (retryable).

The portable layer retries through :class:`portable.resilience.Guard`;
drivers never retry. A batch method reports each item's outcome instead of
raising for one failed item, so that only failed items are retried.

One object per message
----------------------

:meth:`SubscriptionDriver.receive` returns :class:`ReceivedMessage` records,
which the Subscription turns into :class:`Delivery` objects (the
``portable.messaging.Message`` a subscriber gets). A receive path that handles
many thousands of messages a second (Kafka) may instead return objects of its
own Delivery subclass: the Subscription hands them out as they are, one object
per message for the allocator and the garbage collector. A Delivery asks the
subscription it came from to settle it through a :class:`Settler`, which the
portable layer implements; a driver never calls it.

Lossless fields: besides the convenient ``attributes`` (``dict[str, str]``), a
driver reports what the provider carried exactly: ``headers`` (``(name, bytes)``
pairs in wire order, duplicates kept, binary values as bytes; for a provider
without wire order, a stated order), ``key_bytes`` (a key that is not simply
UTF-8 text) and ``tombstone`` (no body at all). Headers a driver adds for its
own bookkeeping stay out of ``headers`` and ``attributes``.

Reserved attributes
-------------------

Attribute names starting with ``portable.`` (:data:`RESERVED_PREFIX`) belong to
the portable layer and are carried like any other attribute:
:data:`IDEMPOTENCY_ATTRIBUTE` (every publish with ``idempotency_key=``), and on
dead-lettered messages the :data:`DEAD_LETTER_ATTRIBUTES`
(:data:`DEAD_LETTER_REASON`, :data:`DEAD_LETTER_SOURCE`,
:data:`DELIVERY_ATTEMPTS`, :data:`ORIGINAL_ID`). A provider without native
attributes (Azure Storage Queue) must carry them in its own envelope.
"""

from __future__ import annotations

import abc
import datetime as dt
import time
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..cloudevents import CloudEvent, from_message
from ..errors import Unsupported
from . import Capabilities, Classifier

if TYPE_CHECKING:
    from .aio_messaging import AsyncSubscriptionDriver, AsyncTopicDriver

__all__ = [
    "ACKED",
    "DEAD_LETTERED",
    "DEAD_LETTER_ATTRIBUTES",
    "DEAD_LETTER_REASON",
    "DEAD_LETTER_SOURCE",
    "DELIVERY_ATTEMPTS",
    "IDEMPOTENCY_ATTRIBUTE",
    "LEASED",
    "MAX_RECEIVE",
    "NACKED",
    "ORIGINAL_ID",
    "RESERVED_PREFIX",
    "plain_items",
    "Delivery",
    "MessagingCapabilities",
    "MessagingDriver",
    "OutgoingMessage",
    "QueueStats",
    "ReceivedMessage",
    "Settler",
    "SubscriptionDriver",
    "TopicDriver",
]

#: Attributes whose names start with this belong to the portable layer.
RESERVED_PREFIX = "portable."
#: The attribute that carries ``publish(..., idempotency_key=)``, always.
IDEMPOTENCY_ATTRIBUTE = "portable.idempotency_key"
#: Why a dead-lettered message was moved (on the moved copy).
DEAD_LETTER_REASON = "portable.dead_letter_reason"
#: Where a dead-lettered message came from (a URL, secrets masked).
DEAD_LETTER_SOURCE = "portable.dead_letter_source"
#: How many times a dead-lettered message had been delivered.
DELIVERY_ATTEMPTS = "portable.delivery_attempts"
#: The id the dead-lettered message had where it came from.
ORIGINAL_ID = "portable.original_id"
#: The reserved attributes of a dead-lettered message, in the order above.
DEAD_LETTER_ATTRIBUTES = (DEAD_LETTER_REASON, DEAD_LETTER_SOURCE, DELIVERY_ATTEMPTS, ORIGINAL_ID)

#: The most messages one ``Subscription.receive`` returns (its ``max_messages``).
MAX_RECEIVE = 1000

#: The settlement states of a :class:`Delivery`: leased when handed out, then
#: settled once, as one of the other three.
LEASED = "leased"
ACKED = "acked"
NACKED = "nacked"
DEAD_LETTERED = "dead-lettered"


@dataclass(frozen=True, slots=True)
class MessagingCapabilities(Capabilities):
    """What a messaging provider can do. A profile's ``requires`` names the boolean fields.

    Attributes:
        ordering: messages with the same ``key`` are delivered in publish order,
            one at a time (SQS FIFO group, Pub/Sub ordering key, Kafka partition key).
        native_dead_letter: :meth:`SubscriptionDriver.dead_letter` moves a message
            to a dead-letter destination configured at the provider (SQS redrive
            target, Pub/Sub dead-letter topic, sqlite's dead-letter table), and
            :meth:`SubscriptionDriver.dead_letter_url` names it. Without it the
            portable layer republishes poison messages to a configured DLQ.
        lease_extension: :meth:`SubscriptionDriver.extend_lease` works (SQS
            ChangeMessageVisibility, Pub/Sub modify_ack_deadline, Azure update).
            Kafka keeps the lease inside the group member; across members the
            partition assignment is the lease.
        exactly_once: an ack that returned normally is never followed by another
            delivery of that message, and an ack after the lease was lost fails
            with PRECONDITION_FAILED (Pub/Sub exactly-once subscriptions, sqlite).
        publish_dedup: a second publish with the same ``idempotency_key`` within
            ``dedup_window_seconds`` is dropped by the provider and returns the
            first message's id (SQS FIFO deduplication id, sqlite, mem).
        nack_delay: ``nack(delay=)`` holds the message back for ``delay`` seconds.
            Without it a nacked message may come back at once.
        delivery_count: ``delivery_attempt`` counts every delivery exactly
            (SQS ApproximateReceiveCount and Azure dequeue_count do; Pub/Sub
            only with a dead-letter policy; Kafka counts through a retry header).
        max_lease_seconds: the longest lease (and nack delay) the provider takes
            (SQS 43,200; Pub/Sub 600; Azure 7 days).
        min_lease_seconds: the shortest lease it honours (Pub/Sub 10; SQS 0).
        lease_granularity_seconds: leases are rounded up to a multiple of this
            (SQS and Azure: whole seconds); 0 for none.
        max_message_bytes: the largest body plus attributes the portable layer
            lets through, after any envelope the driver adds (SQS 262,144; Azure
            about 48 KiB of body after base64; Pub/Sub 10,000,000).
        max_attributes: the most attributes per message, reserved ones included.
        dedup_window_seconds: how long ``publish_dedup`` remembers a key, or None.
        max_batch: the most messages per publish batch and per receive call
            (SQS 10; Pub/Sub 1,000; Azure 32).
    """

    ordering: bool = False
    native_dead_letter: bool = False
    lease_extension: bool = True
    exactly_once: bool = False
    publish_dedup: bool = False
    nack_delay: bool = True
    delivery_count: bool = True
    max_lease_seconds: float = 43200.0
    min_lease_seconds: float = 0.0
    lease_granularity_seconds: float = 0.0
    max_message_bytes: int = 262144
    max_attributes: int = 32
    dedup_window_seconds: float | None = None
    max_batch: int = 10


@dataclass(frozen=True, slots=True, init=False)
class OutgoingMessage:
    """A message to publish, already validated.

    Attributes:
        body: the payload.
        attributes: string attributes, reserved ``portable.*`` ones included
            (``portable.idempotency_key`` whenever ``idempotency_key`` is set).
        key: the ordering key (SQS FIFO MessageGroupId, Pub/Sub ordering key,
            Kafka record key), or None.
        idempotency_key: the publisher's dedup key; a driver maps it to the
            provider's dedup id where there is one (SQS MessageDeduplicationId,
            hashed to fit 128 characters if needed).
    """

    body: bytes
    attributes: Mapping[str, str] = field(default_factory=dict)
    key: str | None = None
    idempotency_key: str | None = None

    def __init__(
        self,
        body: bytes,
        attributes: Mapping[str, str] | None = None,
        key: str | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        # The dataclass's frozen __init__ stores each field through object.__setattr__ by
        # name (1.3 us per message); the slot descriptors' own setters take 0.35 us, and a
        # publisher of many small messages pays it once per message.
        _set_out_body(self, body)
        _set_out_attributes(self, {} if attributes is None else attributes)
        _set_out_key(self, key)
        _set_out_idempotency_key(self, idempotency_key)


@dataclass(frozen=True, slots=True, init=False)
class ReceivedMessage:
    """One delivery of a message, as a driver returns it.

    Attributes:
        id: the provider's message id (the same on every delivery).
        body: the payload.
        attributes: the attributes it was published with (``portable.*`` included).
        key: the ordering key, or None.
        publish_time: when the provider accepted it (UTC).
        delivery_attempt: 1 on the first delivery, then counting; best effort
            where ``capabilities.delivery_count`` is False (never below 1).
        handle: the driver's opaque token for ack/nack/extend (SQS receipt handle,
            Pub/Sub ack id, Azure (id, pop receipt), Kafka (partition, offset)).
        headers: the provider's headers or attributes as sent, ``(name, bytes)``
            pairs in wire order with duplicates kept (Kafka headers, SQS message
            attributes including Binary ones, Pub/Sub attributes); ``()`` where the
            provider has none. Headers the driver adds for its own bookkeeping
            (Kafka's ``portable.kafka.*`` retry headers, SQS's ``portable.body``)
            are left out; ``portable.*`` attributes the portable layer adds are in.
        key_bytes: the key exactly as sent (a non-UTF-8 Kafka key); may be None
            where that is simply the UTF-8 of ``key``. ``Message.key_bytes``
            gives users the key as sent in every case.
        tombstone: the provider delivered no body at all (a Kafka record whose
            value is null: the delete marker of a compacted topic); ``body`` is
            then ``b""``. False everywhere else.
    """

    id: str
    body: bytes
    attributes: Mapping[str, str]
    key: str | None
    publish_time: dt.datetime
    delivery_attempt: int
    handle: Any
    headers: tuple[tuple[str, bytes], ...]
    key_bytes: bytes | None
    tombstone: bool

    def __init__(
        self,
        id: str,
        body: bytes,
        attributes: Mapping[str, str],
        key: str | None,
        publish_time: dt.datetime,
        delivery_attempt: int,
        handle: Any,
        headers: tuple[tuple[str, bytes], ...] = (),
        key_bytes: bytes | None = None,
        tombstone: bool = False,
    ) -> None:
        # by the slot descriptors, as OutgoingMessage: once per message received
        _set_in_headers(self, headers)
        _set_in_key_bytes(self, key_bytes)
        _set_in_tombstone(self, tombstone)
        _set_in_id(self, id)
        _set_in_body(self, body)
        _set_in_attributes(self, attributes)
        _set_in_key(self, key)
        _set_in_publish_time(self, publish_time)
        _set_in_delivery_attempt(self, delivery_attempt)
        _set_in_handle(self, handle)

    @classmethod
    def like(cls, message: Any, handle: Any, delivery_attempt: int | None = None) -> ReceivedMessage:
        """A ReceivedMessage with ``message``'s fields (a ReceivedMessage or a Delivery:
        headers, key bytes and the tombstone flag included) and another handle, and
        attempt if given."""
        return cls(
            message.id, message.body, message.attributes, message.key, message.publish_time,
            message.delivery_attempt if delivery_attempt is None else delivery_attempt, handle,
            message.headers, message.key_bytes, message.tombstone,
        )  # fmt: skip


# the frozen classes' slot setters, for their __init__ (looked up after @dataclass made the slots)
_set_out_body = OutgoingMessage.__dict__["body"].__set__
_set_out_attributes = OutgoingMessage.__dict__["attributes"].__set__
_set_out_key = OutgoingMessage.__dict__["key"].__set__
_set_out_idempotency_key = OutgoingMessage.__dict__["idempotency_key"].__set__
_set_in_id = ReceivedMessage.__dict__["id"].__set__
_set_in_body = ReceivedMessage.__dict__["body"].__set__
_set_in_attributes = ReceivedMessage.__dict__["attributes"].__set__
_set_in_key = ReceivedMessage.__dict__["key"].__set__
_set_in_publish_time = ReceivedMessage.__dict__["publish_time"].__set__
_set_in_delivery_attempt = ReceivedMessage.__dict__["delivery_attempt"].__set__
_set_in_handle = ReceivedMessage.__dict__["handle"].__set__
_set_in_headers = ReceivedMessage.__dict__["headers"].__set__
_set_in_key_bytes = ReceivedMessage.__dict__["key_bytes"].__set__
_set_in_tombstone = ReceivedMessage.__dict__["tombstone"].__set__


class Settler(Protocol):
    """How a :class:`Delivery` asks the subscription it came from to settle it.

    The portable layer implements it, one per Subscription, and sets it on every
    delivery it hands out. Each method checks its argument and the delivery's
    state (settled once; a second ack is a no-op), calls the driver through the
    retry layer, and then moves ``message._state`` on. Drivers never call it.
    """

    def ack(self, message: Delivery) -> None:
        """Ack ``message`` (:meth:`Delivery.ack`)."""

    def nack(self, message: Delivery, delay: float) -> None:
        """Give ``message`` back for ``delay`` seconds (:meth:`Delivery.nack`)."""

    def extend_lease(self, message: Delivery, seconds: float) -> None:
        """Make ``message``'s lease end ``seconds`` from now (:meth:`Delivery.extend_lease`)."""

    def dead_letter(self, message: Delivery, reason: str) -> None:
        """Move ``message`` to the dead-letter destination (:meth:`Delivery.dead_letter`)."""


class Delivery:
    """One delivery of a message (``portable.messaging.Message``). Settle it with :meth:`ack` or :meth:`nack`.

    Attributes:
        id: the provider's message id (the same on every delivery).
        body: the payload (``b""`` for a :attr:`tombstone`).
        attributes: the text attributes it was published with (``portable.*``
            included): a convenient ``dict[str, str]``. Where a provider allows a
            name twice (Kafka headers) the last value wins; a value that is not
            text (an SQS Binary attribute, a Kafka header that is not UTF-8) is
            only in :attr:`headers`.
        headers: every header or attribute as sent, ``(name, bytes)`` pairs in
            wire order with duplicates kept (see :attr:`headers`).
        key: the ordering key, or None (a Kafka key that is not UTF-8 shows its
            bytes decoded with U+FFFD; :attr:`key_bytes` has them exactly).
        key_bytes: the key exactly as sent, or None without a key.
        tombstone: whether the provider delivered no body at all (a Kafka record
            with a null value).
        publish_time: when the provider accepted it (UTC).
        delivery_attempt: 1 on the first delivery (exact where
            ``capabilities.delivery_count``).
        handle: the driver's token for this delivery (as :attr:`ReceivedMessage.handle`).

    For drivers: a ``receive`` that returns Delivery objects (see the module
    docstring) makes them of a subclass whose ``__init__`` sets ``_id``,
    ``_body``, ``_attributes``, ``_key``, ``_published``, ``_attempt``,
    ``_handle``, ``_headers`` (a tuple), ``_key_bytes`` (bytes, or None where it
    is the UTF-8 of ``_key`` or there is no key) and ``_tombstone`` (the fields
    above), and which may add slots of its own. The Subscription sets the rest
    (``_settler``, ``_state``, ``_lease_ends``) as it hands the delivery out. A
    driver returns only Delivery objects or none.
    """

    __slots__ = (
        "_attempt", "_attributes", "_body", "_handle", "_headers", "_id", "_key", "_key_bytes", "_lease_ends",
        "_published", "_settler", "_state", "_tombstone",
    )  # fmt: skip

    _id: str
    _body: bytes
    _attributes: Mapping[str, str]
    _key: str | None
    _published: dt.datetime
    _attempt: int
    _handle: Any
    _headers: tuple[tuple[str, bytes], ...]
    _key_bytes: bytes | None  # None: the UTF-8 of _key (or no key)
    _tombstone: bool
    _settler: Settler  # the subscription's, from receipt on
    _state: str  # LEASED, ACKED, NACKED or DEAD_LETTERED
    _lease_ends: float  # time.monotonic()

    def __init__(self, record: ReceivedMessage) -> None:
        """The delivery of what a driver's ``receive`` returned as ``record`` (the Subscription makes these)."""
        self._id = record.id
        self._body = record.body
        self._attributes = record.attributes
        self._key = record.key
        self._published = record.publish_time
        self._attempt = record.delivery_attempt
        self._handle = record.handle
        self._headers = record.headers
        self._key_bytes = record.key_bytes
        self._tombstone = record.tombstone

    def __repr__(self) -> str:
        body = "tombstone" if self._tombstone else f"bytes={len(self._body)}"
        return f"Message(id={self._id!r}, key={self._key!r}, attempt={self._attempt}, {body}, state={self._state})"

    @property
    def id(self) -> str:
        return self._id

    @property
    def body(self) -> bytes:
        return self._body

    @property
    def attributes(self) -> Mapping[str, str]:
        return self._attributes

    @property
    def headers(self) -> tuple[tuple[str, bytes], ...]:
        """Every header or attribute as the provider carried it: ``(name, bytes)`` pairs.

        Lossless where :attr:`attributes` is convenient: duplicates are kept, in
        wire order, and values are the bytes as sent. Per provider:

        * Kafka: the record headers in record order (a null header value reads as
          ``b""``), the ``portable.kafka.*`` headers of retry copies left out;
        * SQS: every message attribute, sorted by name (SQS keeps no order): a
          Binary one as its bytes, a String or Number one as the UTF-8 of its
          text; the ``portable.body`` attribute that carries binary bodies left out;
        * mem, sqlite: the attributes as UTF-8, in publish order;
        * providers without headers: ``()``.

        ``portable.*`` attributes (``portable.idempotency_key``, the dead-letter
        ones) are included, as they are on the wire.
        """
        return self._headers

    @property
    def key(self) -> str | None:
        return self._key

    @property
    def key_bytes(self) -> bytes | None:
        """The key exactly as sent (a Kafka record key of any bytes), or None without a key.

        Where a provider's keys are text (SQS MessageGroupId, Pub/Sub ordering
        key) this is the UTF-8 of :attr:`key`.
        """
        raw = self._key_bytes
        if raw is not None:
            return raw
        key = self._key
        return None if key is None else key.encode("utf-8")

    @property
    def tombstone(self) -> bool:
        """Whether the message has no body at all: a Kafka record whose value is null
        (the delete marker of a compacted topic). :attr:`body` is then ``b""``, so code
        that reads only bytes keeps working; check this to tell it from an empty body.
        False on every provider but Kafka."""
        return self._tombstone

    @property
    def publish_time(self) -> dt.datetime:
        return self._published

    @property
    def delivery_attempt(self) -> int:
        return self._attempt

    @property
    def handle(self) -> Any:
        """The driver's handle (as :attr:`ReceivedMessage.handle`)."""
        return self._handle

    @property
    def idempotency_key(self) -> str | None:
        """The publisher's ``idempotency_key``, or None."""
        return self._attributes.get(IDEMPOTENCY_ATTRIBUTE)

    @property
    def settled(self) -> bool:
        """Whether it was acked, nacked or dead-lettered."""
        return self._state != LEASED

    @property
    def lease_remaining(self) -> float:
        """Seconds until the lease ends, as this process sees it (0 if past)."""
        return max(0.0, self._lease_ends - time.monotonic())

    def event(self) -> CloudEvent:
        """Decode the message as a CloudEvent (binary or structured mode).

        Raises:
            InvalidArgument: the message is not a CloudEvent.
        """
        return from_message(self._body, self._attributes)

    def ack(self) -> None:
        """Settle the message: it is not delivered again. A second ack is a no-op.

        Raises:
            PreconditionFailed: the lease was lost (it expired and the message went
                to another consumer) on providers that can tell.
            InvalidArgument: it was already nacked or dead-lettered.
        """
        self._settler.ack(self)

    def nack(self, delay: float = 0.0) -> None:
        """Give the message back, to be delivered again after ``delay`` seconds.

        ``delay`` is capped by ``capabilities.max_lease_seconds`` (InvalidArgument
        above it) and rounded up to the provider's granularity.

        Raises:
            InvalidArgument: a bad delay, or the message was already settled.
            PreconditionFailed: the lease was lost, on providers that can tell.
        """
        self._settler.nack(self, delay)

    def extend_lease(self, seconds: float) -> None:
        """Make the lease end ``seconds`` from now (heartbeat a long handler).

        Raises:
            Unsupported: the provider has no per-message lease (Kafka).
            InvalidArgument: a bad lease, or the message was already settled.
            PreconditionFailed: the lease was already lost.
        """
        self._settler.extend_lease(self, seconds)

    def dead_letter(self, reason: str) -> None:
        """Move the message to the dead-letter destination now (a poison message).

        The provider's native one if it has one, else the subscription's
        ``dead_letter`` topic.

        Raises:
            ConfigError: neither exists.
            InvalidArgument: ``reason`` is not a non-empty str, or the message
                was already settled.
        """
        self._settler.dead_letter(self, reason)


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Approximate counts of a queue or subscription; None where the provider does not say.

    Attributes:
        available: messages ready to be received now.
        in_flight: delivered and not yet acked (leased).
        delayed: held back by a nack delay.
        dead_letters: messages in the native dead-letter destination.
    """

    available: int | None = None
    in_flight: int | None = None
    delayed: int | None = None
    dead_letters: int | None = None


class TopicDriver(abc.ABC):
    """The publishing side of a URL."""

    @abc.abstractmethod
    def publish(self, message: OutgoingMessage) -> str:
        """Publish one message; return the provider's message id.

        With ``publish_dedup``, a repeated ``idempotency_key`` inside the window
        returns the first message's id and publishes nothing.
        """

    def publish_batch(self, messages: Iterable[OutgoingMessage]) -> list[str | BaseException]:
        """Publish many messages (native batch where the provider has one).

        Returns, in input order, each message's id or the native error that
        stopped it; it raises only when the whole batch failed before any
        message could be judged (then the portable layer retries the batch).
        The portable layer passes at most ``capabilities.max_batch`` messages.
        Messages with the same ``key`` must keep their order.

        ``messages`` is a sequence that may also offer ``plain_items()``
        (:func:`plain_items` reads it): the same messages as a list in which a
        message that has only a body (no attributes, key or idempotency key) is
        its ``bytes``, so a driver that publishes many small messages need not
        have an OutgoingMessage made for each.
        """
        out: list[str | BaseException] = []
        for message in messages:
            try:
                out.append(self.publish(message))
            except Exception as exc:
                out.append(exc)
        return out

    def async_driver(self) -> AsyncTopicDriver:
        """This side's async face for :mod:`portable.aio`: the bounded-pool adapter unless overridden."""
        from .aio_messaging import AsyncTopicDriver

        return AsyncTopicDriver(self)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what this side holds (the MessagingDriver closes the client)."""


class SubscriptionDriver(abc.ABC):
    """The receiving side of a URL: leases, acks and dead letters."""

    #: The most a batched ``run`` receives at once; lower for a local buffer (why: _consumer.loop_batch)
    loop_batch: int = MAX_RECEIVE

    @abc.abstractmethod
    def receive(self, max_messages: int, wait: float, lease: float) -> list[ReceivedMessage] | list[Delivery]:
        """Lease up to ``max_messages`` messages for ``lease`` seconds.

        Returns ReceivedMessage objects, or, where one object per message
        matters (Kafka), :class:`Delivery` objects (of a subclass, usually),
        which the Subscription hands out as they are.

        Waits up to about ``wait`` seconds for the first message (long poll)
        and may return fewer, or none, at any time. A leased message is not
        delivered again until its lease ends or it is nacked. With ``ordering``,
        a message is not returned while an earlier one with the same key,
        returned by an earlier call, is leased or delayed; one call may return
        several messages of one key, in order (SQS FIFO, Kafka), and
        ``Subscription.run`` handles those one at a time. A provider whose lease is fixed per subscription
        applies ``lease`` by extending right after receipt; Kafka keeps it inside
        the group member (the partition assignment is the lease across members).
        """

    @abc.abstractmethod
    def ack(self, handle: Any) -> None:
        """Settle the delivery: the message is never delivered again.

        Lease lost: PRECONDITION_FAILED (or success where the provider cannot tell).
        Kafka commits the contiguous acked offsets; a later offset acked before an
        earlier one is committed when the earlier one is.
        """

    def ack_many(self, handles: Iterable[Any]) -> list[BaseException | None]:
        """Ack many deliveries (SQS DeleteMessageBatch, Pub/Sub acknowledge).

        Returns, in input order, None or the native error of each.
        """
        out: list[BaseException | None] = []
        for handle in handles:
            try:
                self.ack(handle)
                out.append(None)
            except Exception as exc:
                out.append(exc)
        return out

    @abc.abstractmethod
    def nack(self, handle: Any, delay: float) -> None:
        """Give the message back, to be delivered again after ``delay`` seconds.

        SQS/Azure set the visibility timeout to ``delay``; Pub/Sub modifies the
        ack deadline to ``delay``; Kafka republishes to its retry topic and
        acks. Lease lost: PRECONDITION_FAILED (or success).
        """

    def extend_lease(self, handle: Any, seconds: float) -> Any:
        """Make the lease end ``seconds`` from now; return the handle to use from now on.

        Azure returns a new pop receipt; most providers return ``handle``.
        Lease lost: PRECONDITION_FAILED. Only called when
        ``capabilities.lease_extension`` is True.
        """
        raise Unsupported("this provider cannot extend a lease")

    def dead_letter(self, message: ReceivedMessage, reason: str) -> None:
        """Move the delivery to the provider's dead-letter destination and settle it.

        Only called when ``capabilities.native_dead_letter`` is True. The moved
        message keeps body, key and attributes and should gain
        ``portable.dead_letter_reason`` = ``reason`` (and the other reserved
        dead-letter attributes) where the provider carries attributes.
        Lease lost: PRECONDITION_FAILED.
        """
        raise Unsupported("this provider has no native dead-letter destination")

    def dead_letter_url(self) -> str | None:
        """A URL that opens the native dead-letter destination as a subscription, or None."""
        return None

    def stats(self) -> QueueStats:
        """Approximate counts (SQS ApproximateNumberOfMessages*, Azure approximate_message_count)."""
        return QueueStats()

    def async_driver(self) -> AsyncSubscriptionDriver:
        """This side's async face for :mod:`portable.aio`: the bounded-pool adapter unless overridden."""
        from .aio_messaging import AsyncSubscriptionDriver

        return AsyncSubscriptionDriver(self)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what this side holds (the MessagingDriver closes the client)."""

    def owner_gone(self) -> None:  # noqa: B027 - optional hook
        """The Subscription that owned this side was collected (closed or not); messages handed out
        may still be settled through it. A driver whose objects refer to one another through objects
        the cycle collector does not see (the Kafka engine's deliveries) hands them back to it here.
        Called once, from a finaliser: must not raise. Default: nothing."""


class MessagingDriver(Classifier, abc.ABC):
    """Base class of messaging drivers: the factory built by ``from_url``.

    Attributes:
        scheme: the URL scheme this driver serves (``"sqs"``).
        endpoint: where requests go, for breaker keys and messages; never a secret.
        capabilities: what the provider (and the named queue) supports; may be
            refined by :meth:`topic` and :meth:`subscription`.
    """

    scheme: str = ""
    endpoint: str = ""
    capabilities: MessagingCapabilities = MessagingCapabilities()

    @abc.abstractmethod
    def topic(self) -> TopicDriver:
        """The publishing side of the URL. InvalidURL if the URL names no topic."""

    @abc.abstractmethod
    def subscription(self) -> SubscriptionDriver:
        """The receiving side of the URL. InvalidURL if the URL names no subscription."""

    def temporary(self, name: str) -> AbstractContextManager[str]:
        """Create a fresh, empty queue (or a topic with one subscription) called ``name``.

        The new queue lives next to the one the URL names (same account, project,
        region, database file); the context manager yields a URL that opens both
        sides of it and deletes the queue on exit. ``portable contract`` runs the
        messaging suite inside it, so a user's existing queues are never touched.
        A provider that can dead-letter natively should give the temporary queue
        a dead-letter destination too. Defaults to Unsupported.
        """
        raise Unsupported(f"{self.scheme}:// cannot create temporary queues for the contract suite")

    def close(self) -> None:
        """Release connections and threads."""


def plain_items(messages: Iterable[OutgoingMessage]) -> list[bytes | OutgoingMessage]:
    """The messages of a :meth:`TopicDriver.publish_batch` call, a body-only message as its ``bytes``.

    The portable layer keeps a validated plain body as ``bytes`` until a driver
    reads it; a driver that checks ``type(item) is bytes`` publishes it with no
    OutgoingMessage made (about 2 us per message in CPython 3.11). Any other
    iterable is read as it is.
    """
    offered = getattr(messages, "plain_items", None)
    if offered is not None:
        items: list[bytes | OutgoingMessage] = offered()
        return items
    return list(messages)

