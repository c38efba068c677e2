"""Queues and pub/sub through one API: :class:`Topic`, :class:`Subscription`, :class:`Message`.

>>> import portable.messaging as pm
>>> topic = pm.open_topic("mem://doc-orders")
>>> message_id = topic.publish(b'{"order": 1}', key="customer-7", attributes={"kind": "order"})
>>> sub = pm.open_subscription("mem://doc-orders", lease=30)
>>> [m] = sub.receive(max_messages=10, wait=1)
>>> m.body, m.key, m.attributes["kind"], m.delivery_attempt
(b'{"order": 1}', 'customer-7', 'order', 1)
>>> m.ack()

Or let the consumer loop do the leasing, acking, retrying and dead-lettering::

    sub.run(handle_order, concurrency=8, max_deliveries=5, idempotency=store)

Delivery is at least once: a message not acked within its lease is delivered
again. Effects are exactly once where ``run(..., idempotency=store)`` is given.

Which URL opens what
--------------------

``open_topic(url)`` opens the publishing side the URL names and
``open_subscription(url)`` the receiving side (see :mod:`portable.driver.messaging`):
a queue URL is both (``sqs://events``, ``azqueue://acct/q``, ``mem://q``,
``sqlite://./q.db?name=q``); ``pubsub://project/topics/t`` is a topic, and
``pubsub://project/subscriptions/s`` or ``pubsub://project/topics/t?subscription=s``
a subscription; ``kafka://host:9092/topic?group=g`` is both. A URL that does
not name the side asked for raises InvalidURL before any request. With no URL,
the active profile's ``queue`` is opened and its ``requires`` are checked
(MissingCapability at start-up, not in production).

What every provider accepts (checked before any request, with a typed error):

* a body is ``bytes`` (``bytearray``/``memoryview`` are copied); ``str`` raises
  InvalidArgument. Body plus attribute names and values must fit
  ``capabilities.max_message_bytes`` (TooLarge otherwise): SQS 256 KiB,
  Azure Storage Queue about 48 KiB, Pub/Sub 10 MB, sqlite 16 MiB;
* attribute names are 1-128 of ``[A-Za-z0-9_.-]``, starting with a letter or
  digit, without ``..`` or a trailing ``.``; names starting with ``portable.``,
  ``goog``, ``aws.`` or ``amazon.`` (any case) are reserved. Values are
  non-empty ``str`` of at most 1,024 UTF-8 bytes without control characters
  (tab and newlines allowed). At most ``capabilities.max_attributes`` attributes,
  the reserved ones this layer adds included (SQS: 9);
* an ordering ``key`` and an ``idempotency_key`` are 1-128 printable ASCII
  characters without spaces (SQS's MessageGroupId alphabet).

Where providers differ (the capabilities say which applies):

* ordering per key holds only with ``capabilities.ordering``; elsewhere the key is
  carried but order is best effort;
* ``nack(delay=)`` and leases are capped at ``max_lease_seconds`` (Pub/Sub 600 s)
  and rounded up to ``lease_granularity_seconds`` (SQS, Azure: whole seconds);
* ``publish(..., idempotency_key=k)`` always carries ``k`` as the attribute
  ``portable.idempotency_key``; with ``publish_dedup`` the provider also drops a
  repeat within ``dedup_window_seconds`` (SQS FIFO, sqlite, mem);
* ``delivery_attempt`` is exact only with ``delivery_count`` (not Pub/Sub without
  a dead-letter policy, not Kafka without its retry header).
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, overload

from .. import urls
from .._native import native_object
from ..config import Profile, check_requirements, load_profile
from ..driver.idempotency import Claim, IdempotencyStore
from ..driver.messaging import (
    IDEMPOTENCY_ATTRIBUTE,
    RESERVED_PREFIX,
    MessagingCapabilities,
    MessagingDriver,
    OutgoingMessage,
    QueueStats,
    ReceivedMessage,
    SubscriptionDriver,
    TopicDriver,
)
from ..driver.redaction import redact
from ..errors import (
    ConfigError,
    InvalidArgument,
    InvalidKey,
    PortableError,
    PreconditionFailed,
    TooLarge,
    Unsupported,
)
from ..resilience import Guard, ResiliencePolicy
from ._consumer import RunStats, _Consumer, _signals_stop

if TYPE_CHECKING:
    import datetime as dt

    from ..cloudevents import CloudEvent

__all__ = [
    "Claim",
    "IdempotencyStore",
    "Message",
    "MessagingCapabilities",
    "OutgoingMessage",
    "QueueStats",
    "RunStats",
    "Subscription",
    "Topic",
    "open_subscription",
    "open_topic",
]

T = TypeVar("T")

#: Reserved attributes on a dead-lettered message.
DEAD_LETTER_REASON = "portable.dead_letter_reason"
DEAD_LETTER_SOURCE = "portable.dead_letter_source"
DELIVERY_ATTEMPTS = "portable.delivery_attempts"
ORIGINAL_ID = "portable.original_id"
DEAD_LETTER_ATTRIBUTES = (DEAD_LETTER_REASON, DEAD_LETTER_SOURCE, DELIVERY_ATTEMPTS, ORIGINAL_ID)

DEFAULT_LEASE = 30.0
_MAX_WAIT_SLICE = 20.0
_MAX_RECEIVE = 1000

_ATTR_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_RESERVED_NAME = re.compile(r"(?i)(portable\.|goog|aws\.|amazon\.)")
_BAD_VALUE_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_TOKEN = re.compile(r"[!-~]{1,128}")


# ---------------------------------------------------------------- validation
def _as_body(body: object) -> bytes:
    if type(body) is bytes:
        return body
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    if isinstance(body, str):
        raise InvalidArgument("a message body must be bytes, got str; encode it first, e.g. text.encode('utf-8')")
    raise InvalidArgument(f"a message body must be bytes, got {type(body).__name__}")


def _check_token(what: str, value: object) -> str:
    if type(value) is str and 0 < len(value) <= 128 and value.isascii() and value.isprintable() and " " not in value:
        return value
    if type(value) is not str or not _TOKEN.fullmatch(value):
        shown = value[:60] if isinstance(value, str) else type(value).__name__
        raise InvalidKey(
            f"{what} must be 1-128 printable ASCII characters without spaces, got {shown!r}"
        )
    return value


#: attribute names that passed the name check and are not reserved by a cloud (portable.* may be)
_GOOD_NAMES: set[str] = set()


def _check_attribute_name(name: object, allow_reserved: bool) -> None:
    if type(name) is not str or not _ATTR_NAME.fullmatch(name) or ".." in name or name[-1] == ".":
        raise InvalidKey(
            f"attribute name {name!r} must be 1-128 of A-Z a-z 0-9 _ . -, starting with a letter "
            "or digit, without '..' or a trailing '.'"
        )
    reserved = _RESERVED_NAME.match(name)
    if reserved and not (allow_reserved and name.startswith(RESERVED_PREFIX)):
        raise InvalidKey(
            f"attribute name {name!r} is reserved (portable., goog, aws., amazon. prefixes); rename it"
        )
    if len(_GOOD_NAMES) < 4096:
        _GOOD_NAMES.add(name)


def _check_attribute_value(name: str, value: object) -> int:
    """Check one attribute value the slow way; return its size in UTF-8 bytes."""
    if type(value) is not str:
        raise InvalidArgument(
            f"attribute {name!r} must be a str, got {type(value).__name__}; convert it, e.g. str(value)"
        )
    if not value:
        raise InvalidArgument(f"attribute {name!r} is empty; SQS rejects empty values, so portable does too")
    try:
        encoded = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgument(f"attribute {name!r} is not valid UTF-8 (it holds a lone surrogate)") from None
    if encoded > 1024:
        raise InvalidArgument(f"attribute {name!r} is {encoded} bytes; the limit is 1,024 (Pub/Sub's)")
    if _BAD_VALUE_CHARS.search(value):
        raise InvalidArgument(f"attribute {name!r} holds a control character; remove it")
    return encoded


def check_attributes(attributes: object, *, allow_reserved: bool = False) -> tuple[dict[str, str], int]:
    """Validate message attributes; return them as a dict and their size in bytes.

    Raises:
        InvalidKey: a bad or reserved attribute name.
        InvalidArgument: attributes that are not a mapping, or a bad value.
    """
    if type(attributes) is not dict and not isinstance(attributes, Mapping):
        raise InvalidArgument(f"attributes must be a mapping of str to str, got {type(attributes).__name__}")
    out: dict[str, str] = {}
    size = 0
    good = _GOOD_NAMES
    for name, value in attributes.items():
        if name not in good:
            _check_attribute_name(name, allow_reserved)
        elif not allow_reserved and name.startswith(RESERVED_PREFIX):
            raise InvalidKey(f"attribute name {name!r} is reserved (portable. prefix); rename it")
        if type(value) is str and 0 < len(value) <= 1024 and value.isascii() and value.isprintable():
            encoded = len(value)  # the common case: short printable ASCII, nothing more to check
        else:
            encoded = _check_attribute_value(name, value)
        out[name] = value
        size += len(name) + encoded
    return out, size


# ---------------------------------------------------------------- topic
class Topic:
    """Publishes messages to one topic or queue. Thread-safe.

    Attributes:
        url: the URL it was opened with (secrets masked in repr).
        provider: the scheme (``"sqs"``).
        capabilities: what the provider supports.
    """

    def __init__(
        self,
        driver: MessagingDriver,
        topic: TopicDriver,
        *,
        url: str = "",
        policy: ResiliencePolicy | None = None,
    ) -> None:
        self._driver = driver
        self._topic = topic
        self.url = url
        self.provider = driver.scheme
        self.capabilities = driver.capabilities
        self._max_bytes = self.capabilities.max_message_bytes
        self._guard = Guard(driver.scheme, driver.endpoint, driver, policy)
        self._what = f"publish to {redact(url) or driver.endpoint}"

    def __repr__(self) -> str:
        return f"Topic({redact(self.url)!r})"

    def __enter__(self) -> Topic:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _outgoing(
        self,
        body: object,
        key: object,
        attributes: object,
        idempotency_key: object,
        *,
        allow_reserved: bool = False,
    ) -> OutgoingMessage:
        data = body if type(body) is bytes else _as_body(body)
        size = len(data)
        attrs: dict[str, str]
        if attributes is None:
            attrs = {}
        else:
            attrs, extra = check_attributes(attributes, allow_reserved=allow_reserved)
            size += extra
        if key is not None:
            _check_token("an ordering key", key)
        if idempotency_key is not None:
            _check_token("an idempotency key", idempotency_key)
            attrs[IDEMPOTENCY_ATTRIBUTE] = idempotency_key  # type: ignore[assignment]
            size += len(IDEMPOTENCY_ATTRIBUTE) + len(idempotency_key)  # type: ignore[arg-type]
        if size > self._max_bytes:
            raise TooLarge(
                f"the message is {size} bytes (body plus attributes); {self.provider}:// takes at most "
                f"{self._max_bytes}; store large payloads in a bucket and publish their key"
            )
        if len(attrs) > self.capabilities.max_attributes:
            raise InvalidArgument(
                f"{len(attrs)} attributes (reserved ones included); {self.provider}:// takes at most "
                f"{self.capabilities.max_attributes}"
            )
        return OutgoingMessage(data, attrs, key, idempotency_key)  # type: ignore[arg-type]

    def publish(
        self,
        body: bytes,
        *,
        key: str | None = None,
        attributes: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> str:
        """Publish one message; return the provider's message id.

        Args:
            body: the payload, bytes.
            key: ordering key: messages with the same key are delivered in order
                where ``capabilities.ordering``; carried everywhere.
            attributes: string attributes (see the module docstring for the rules).
            idempotency_key: carried as ``portable.idempotency_key``; with
                ``capabilities.publish_dedup`` a repeat inside the dedup window
                publishes nothing and returns the first id.

        Raises:
            InvalidArgument / InvalidKey / TooLarge: bad input, before any request.
            NotFound: the topic does not exist.
        """
        if type(body) is bytes and key is None and attributes is None and idempotency_key is None:
            if len(body) > self._max_bytes:
                raise TooLarge(
                    f"the message is {len(body)} bytes; {self.provider}:// takes at most {self._max_bytes}; "
                    "store large payloads in a bucket and publish their key"
                )
            message = OutgoingMessage(body)
        else:
            message = self._outgoing(body, key, attributes, idempotency_key)
        return self._guard.call("publish", self._what, self._topic.publish, message)

    def publish_batch(self, messages: Iterable[bytes | OutgoingMessage]) -> list[str]:
        """Publish many messages (native batches of ``capabilities.max_batch``); return their ids in order.

        Each item is ``bytes`` or an :class:`OutgoingMessage` (``body``, ``attributes``,
        ``key``, ``idempotency_key``). Every item is validated before anything is
        sent. A failed item is retried on its own under the retry policy; the
        first that still fails raises, after the items before it were published.
        """
        # Validate everything first. A plain body that passed stays bytes until the driver
        # reads it (_Chunk), so a large batch does not hold one more live object per message:
        # the garbage collector's full passes cost in proportion to live objects.
        max_bytes = self._max_bytes
        items: list[bytes | OutgoingMessage] = [
            m
            if type(m) is bytes and len(m) <= max_bytes
            else self._outgoing(m, None, None, None)
            if not isinstance(m, OutgoingMessage)
            else self._outgoing(m.body, m.key, m.attributes or None, m.idempotency_key)
            for m in messages
        ]
        ids: list[str] = []
        size = self.capabilities.max_batch
        for start in range(0, len(items), size):
            chunk = _Chunk(items[start : start + size])
            results = self._guard.call("publish", self._what, self._topic.publish_batch, chunk)
            if len(results) != len(chunk):
                raise PortableError(
                    f"{self._what}: the driver answered {len(results)} results for {len(chunk)} messages",
                    provider=self.provider,
                )
            for i, failed in [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]:
                err = self._guard.wrap(self._what, failed)
                if not err.retryable:
                    raise err from (None if err is failed else failed)
                results[i] = self._guard.call("publish", self._what, self._topic.publish, chunk[i])
            ids += cast("list[str]", results)  # every error was replaced by an id, or raised
        return ids

    def publish_event(
        self,
        event: CloudEvent,
        *,
        mode: Literal["binary", "structured"] = "binary",
        key: str | None = None,
    ) -> str:
        """Publish a CloudEvent (see :mod:`portable.cloudevents`); return the message id.

        ``binary`` carries the event's attributes as ``ce_*`` message attributes
        and its data as the body; ``structured`` sends the JSON event format as the
        body. Either way the idempotency key is ``source`` and ``id``, so a repeat
        of the same event is deduplicated where the provider can.
        """
        from ..cloudevents import to_message

        body, attributes = to_message(event, mode=mode)
        return self.publish(body, key=key, attributes=attributes, idempotency_key=event.dedup_key())

    def _republish(self, message: Message, reason: str, source: str) -> str:
        """Publish a dead-lettered copy of ``message`` (original attributes plus the reason)."""
        attributes = dict(message.attributes)
        attributes[DEAD_LETTER_REASON] = _short(reason, 900)
        attributes[DEAD_LETTER_SOURCE] = _short(redact(source), 900)
        attributes[DELIVERY_ATTEMPTS] = str(message.delivery_attempt)
        attributes[ORIGINAL_ID] = message.id
        return self._publish_keeping(message.body, message.key, attributes)

    def _publish_keeping(self, body: bytes, key: str | None, attributes: Mapping[str, str]) -> str:
        """Publish with ``portable.*`` attributes kept as they are and no provider dedup.

        For moving messages (dead-lettering, redrive): the idempotency key stays an
        attribute for consumers, but a provider must not drop the copy as a repeat.
        """
        out = self._outgoing(body, key, attributes or None, None, allow_reserved=True)
        return self._guard.call("publish", self._what, self._topic.publish, out)

    def as_(self, kind: type[T]) -> T:
        """Return the native object of type ``kind`` (each adapter documents which)."""
        return native_object(self._driver, kind, self.provider)

    def close(self) -> None:
        """Release the driver's connections."""
        self._topic.close()
        self._driver.close()


class _Chunk(Sequence[OutgoingMessage]):
    """Validated items for one driver call: a plain body becomes an OutgoingMessage only as
    the driver reads it, and is dropped after it is sent (iterable again, for a retry)."""

    __slots__ = ("_items",)

    def __init__(self, items: list[bytes | OutgoingMessage]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> OutgoingMessage: ...
    @overload
    def __getitem__(self, index: slice) -> list[OutgoingMessage]: ...
    def __getitem__(self, index: int | slice) -> OutgoingMessage | list[OutgoingMessage]:
        if isinstance(index, slice):
            return [OutgoingMessage(m) if isinstance(m, bytes) else m for m in self._items[index]]
        m = self._items[index]
        return OutgoingMessage(m) if isinstance(m, bytes) else m

    def __iter__(self) -> Iterator[OutgoingMessage]:
        for m in self._items:
            yield OutgoingMessage(m) if isinstance(m, bytes) else m


def _seconds(value: object) -> float | None:
    """``value`` as finite float seconds, or None if it is not a real number."""
    if type(value) not in (int, float) or not math.isfinite(value):  # type: ignore[arg-type]
        return None
    return float(value)  # type: ignore[arg-type]


def _short(text: str, limit: int) -> str:
    text = _BAD_VALUE_CHARS.sub(" ", text) or "-"
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    return encoded[: limit - 3].decode("utf-8", "ignore") + "..."


# ---------------------------------------------------------------- message
_LEASED, _ACKED, _NACKED, _DEAD = "leased", "acked", "nacked", "dead-lettered"


class Message:
    """One delivery of a message. Settle it with :meth:`ack` or :meth:`nack`.

    Attributes:
        id: the provider's message id (the same on every delivery).
        body: the payload.
        attributes: the attributes it was published with (``portable.*`` included).
        key: the ordering key, or None.
        publish_time: when the provider accepted it (UTC).
        delivery_attempt: 1 on the first delivery (exact where
            ``capabilities.delivery_count``).
    """

    __slots__ = ("_delivery", "_handle", "_lease_ends", "_state", "_sub")

    def __init__(self, subscription: Subscription, delivery: ReceivedMessage, lease_ends: float) -> None:
        self._sub = subscription
        self._delivery = delivery
        self._handle = delivery.handle
        self._state = _LEASED
        self._lease_ends = lease_ends  # time.monotonic()

    def __repr__(self) -> str:
        return (
            f"Message(id={self.id!r}, key={self.key!r}, attempt={self.delivery_attempt}, "
            f"bytes={len(self.body)}, state={self._state})"
        )

    @property
    def id(self) -> str:
        return self._delivery.id

    @property
    def body(self) -> bytes:
        return self._delivery.body

    @property
    def attributes(self) -> Mapping[str, str]:
        return self._delivery.attributes

    @property
    def key(self) -> str | None:
        return self._delivery.key

    @property
    def publish_time(self) -> dt.datetime:
        return self._delivery.publish_time

    @property
    def delivery_attempt(self) -> int:
        return self._delivery.delivery_attempt

    @property
    def idempotency_key(self) -> str | None:
        """The publisher's ``idempotency_key``, or None."""
        return self.attributes.get(IDEMPOTENCY_ATTRIBUTE)

    @property
    def settled(self) -> bool:
        """Whether it was acked, nacked or dead-lettered."""
        return self._state != _LEASED

    @property
    def lease_remaining(self) -> float:
        """Seconds until the lease ends, as this process sees it (0 if past)."""
        return max(0.0, self._lease_ends - time.monotonic())

    def event(self) -> CloudEvent:
        """Decode the message as a CloudEvent (binary or structured mode).

        Raises:
            InvalidArgument: the message is not a CloudEvent.
        """
        from ..cloudevents import from_message

        return from_message(self.body, self.attributes)

    def _settle(self, state: str) -> bool:
        if self._state == _LEASED:
            return True
        if self._state == state == _ACKED:
            return False
        raise InvalidArgument(f"message {self.id} was already {self._state}; it cannot be {state} now")

    def _with_handle(self, op: str, fn: Callable[..., T], *args: Any) -> T:
        """Call ``fn(handle, *args)``; retry once if the lease keeper swapped the handle meanwhile."""
        handle = self._handle
        try:
            return self._sub._guard.call("ack", f"{op} {self.id}", fn, handle, *args)
        except PreconditionFailed:
            if self._handle is handle:
                raise
            return self._sub._guard.call("ack", f"{op} {self.id}", fn, self._handle, *args)

    def ack(self) -> None:
        """Settle the message: it is not delivered again. A second ack is a no-op.

        Raises:
            PreconditionFailed: the lease was lost (it expired and the message went
                to another consumer) on providers that can tell.
        """
        if self._settle(_ACKED):
            self._with_handle("ack", self._sub._driver_sub.ack)
            self._state = _ACKED

    def nack(self, delay: float = 0.0) -> None:
        """Give the message back, to be delivered again after ``delay`` seconds.

        ``delay`` is capped by ``capabilities.max_lease_seconds`` (InvalidArgument
        above it) and rounded up to the provider's granularity.
        """
        delay = self._sub._check_delay(delay)
        if self._settle(_NACKED):
            self._with_handle("nack", self._sub._driver_sub.nack, delay)
            self._state = _NACKED

    def extend_lease(self, seconds: float) -> None:
        """Make the lease end ``seconds`` from now (heartbeat a long handler).

        Raises:
            Unsupported: the provider has no per-message lease (Kafka).
            PreconditionFailed: the lease was already lost.
        """
        caps = self._sub.capabilities
        if not caps.lease_extension:
            raise Unsupported(f"{self._sub.provider}:// cannot extend a message's lease", provider=self._sub.provider)
        seconds = self._sub._check_lease(seconds)
        if self._state != _LEASED:
            raise InvalidArgument(f"message {self.id} was already {self._state}; its lease cannot be extended")
        started = time.monotonic()
        self._handle = self._with_handle("extend_lease", self._sub._driver_sub.extend_lease, seconds)
        self._lease_ends = started + seconds

    def dead_letter(self, reason: str) -> None:
        """Move the message to the dead-letter destination now (a poison message).

        The provider's native one if it has one, else the subscription's
        ``dead_letter`` topic.

        Raises:
            ConfigError: neither exists.
        """
        if type(reason) is not str or not reason:
            raise InvalidArgument("reason must be a non-empty str saying why the message is dead-lettered")
        if self._settle(_DEAD):
            self._sub._dead_letter(self, reason, self._sub._dead_letter_target(None))


class Delivery(Message):
    """A :class:`Message` that a driver makes itself: one object per message received.

    For receive paths that handle many thousands of messages a second (Kafka): a
    driver's ``receive`` may return objects of a Delivery subclass instead of
    :class:`~portable.driver.messaging.ReceivedMessage`, and the Subscription hands
    them out as they are, instead of wrapping each in a Message (an object less
    per message, for the allocator and the garbage collector). The subclass's
    ``__init__`` sets the fields below; the Subscription sets the rest when it
    receives them. A driver returns only Delivery objects or none.

    The fields a subclass sets, behind the same read-only properties as Message's:
    ``_id``, ``_body``, ``_attributes``, ``_key``, ``_published``, ``_attempt``,
    and ``_handle`` (the driver's handle, as ReceivedMessage.handle).
    """

    __slots__ = ("_attempt", "_attributes", "_body", "_id", "_key", "_published")

    _id: str
    _body: bytes
    _attributes: Mapping[str, str]
    _key: str | None
    _published: dt.datetime
    _attempt: int

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
    def key(self) -> str | None:
        return self._key

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


# ---------------------------------------------------------------- idempotency
def default_idempotency_key(message: Message) -> str | None:
    """The key ``run()`` deduplicates on: ``portable.idempotency_key``, else a CloudEvent's source and id."""
    key = message.idempotency_key
    if key is not None:
        return key
    from ..cloudevents import dedup_key_of

    return dedup_key_of(message.body, message.attributes)


# ---------------------------------------------------------------- subscription


class Subscription:
    """Receives messages from one subscription or queue. Thread-safe.

    Attributes:
        url: the URL it was opened with (secrets masked in repr).
        provider: the scheme (``"sqs"``).
        capabilities: what the provider supports.
        lease: the default lease in seconds of :meth:`receive` and :meth:`run`.
        dead_letter: the portable dead-letter topic URL, if one was configured.
    """

    def __init__(
        self,
        driver: MessagingDriver,
        subscription: SubscriptionDriver,
        *,
        url: str = "",
        policy: ResiliencePolicy | None = None,
        lease: float = DEFAULT_LEASE,
        dead_letter: str | Topic | None = None,
    ) -> None:
        self._driver = driver
        self._driver_sub = subscription
        self.url = url
        self.provider = driver.scheme
        self.capabilities = driver.capabilities
        self._policy = policy
        self._guard = Guard(driver.scheme, driver.endpoint, driver, policy)
        self._what = f"receive from {redact(url) or driver.endpoint}"
        self.lease = self._check_lease(lease)
        self.dead_letter = dead_letter
        self._dead_letter_topic: Topic | None = dead_letter if isinstance(dead_letter, Topic) else None
        self._stops: set[threading.Event] = set()
        self._stops_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Subscription({redact(self.url)!r})"

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- checks --------------------------------------------------------
    def _round(self, seconds: float) -> float:
        grain = self.capabilities.lease_granularity_seconds
        return math.ceil(seconds / grain - 1e-9) * grain if grain > 0 else seconds

    def _check_lease(self, seconds: object) -> float:
        caps = self.capabilities
        number = _seconds(seconds)
        if number is None or number <= 0:
            raise InvalidArgument(f"a lease must be a number of seconds > 0, got {seconds!r}")
        value = self._round(max(number, caps.min_lease_seconds))
        if value > caps.max_lease_seconds:
            raise InvalidArgument(
                f"a lease of {seconds}s is over {self.provider}://'s maximum of {caps.max_lease_seconds:g}s"
            )
        return value

    def _check_delay(self, delay: object) -> float:
        caps = self.capabilities
        number = _seconds(delay)
        if number is None or number < 0:
            raise InvalidArgument(f"a nack delay must be a number of seconds >= 0, got {delay!r}")
        if number > caps.max_lease_seconds:
            raise InvalidArgument(
                f"a nack delay of {delay}s is over {self.provider}://'s maximum of {caps.max_lease_seconds:g}s"
            )
        return self._round(number)

    # -- receiving -----------------------------------------------------
    def receive(self, max_messages: int = 1, wait: float = 0.0, *, lease: float | None = None) -> list[Message]:
        """Lease up to ``max_messages`` messages, waiting up to ``wait`` seconds for the first.

        Returns as soon as at least one message is there (then takes what else is
        ready, in native batches of ``capabilities.max_batch``), or an empty list
        when ``wait`` passes.

        Args:
            max_messages: 1 to 1,000. Defaults to 1.
            wait: seconds to wait for a first message (long poll). Defaults to 0.
            lease: seconds each message stays leased to this consumer. Defaults
                to the subscription's ``lease``.
        """
        if type(max_messages) is not int or not 1 <= max_messages <= _MAX_RECEIVE:
            raise InvalidArgument(f"max_messages must be an int from 1 to {_MAX_RECEIVE}, got {max_messages!r}")
        if (_seconds(wait) or 0.0) < 0 or _seconds(wait) is None:
            raise InvalidArgument(f"wait must be a number of seconds >= 0, got {wait!r}")
        lease_s = self.lease if lease is None else self._check_lease(lease)
        batch = self.capabilities.max_batch
        deadline = time.monotonic() + wait
        fetch = self._driver_sub.receive
        out: list[Message] = []
        while True:
            left = max(0.0, deadline - time.monotonic()) if not out else 0.0
            ask = min(batch, max_messages - len(out))
            got = self._guard.call("receive", self._what, fetch, ask, min(left, _MAX_WAIT_SLICE), lease_s)
            ends = time.monotonic() + lease_s
            if got and isinstance(got[0], Delivery):  # the driver made the messages: adopt them
                for d in got:
                    d._sub = self
                    d._state = _LEASED
                    d._lease_ends = ends
                out += got
            else:
                out += [Message(self, d, ends) for d in cast("list[ReceivedMessage]", got)]
            if len(out) >= max_messages or (out and len(got) < ask):
                return out
            if not out and time.monotonic() >= deadline:
                return out

    def ack_many(self, messages: Iterable[Message]) -> None:
        """Ack many messages in native batches (SQS DeleteMessageBatch, Pub/Sub acknowledge).

        A failed ack is retried on its own; the first that still fails raises.
        """
        pending = [m for m in messages if m._state is _LEASED or m._settle(_ACKED)]
        batch = self.capabilities.max_batch
        for start in range(0, len(pending), batch):
            chunk = pending[start : start + batch]
            results = self._guard.call(
                "ack", f"ack {len(chunk)} messages", self._driver_sub.ack_many, [m._handle for m in chunk]
            )
            if len(results) == len(chunk) and results.count(None) == len(chunk):
                for message in chunk:
                    message._state = _ACKED
                continue
            for message, result in zip(chunk, results, strict=True):
                if result is not None:
                    err = self._guard.wrap(f"ack {message.id}", result)
                    if not err.retryable:
                        raise err from (None if err is result else result)
                    message._with_handle("ack", self._driver_sub.ack)
                message._state = _ACKED

    def stats(self) -> QueueStats:
        """Approximate counts: available, in flight, delayed and dead letters (None where unknown)."""
        return self._guard.call("admin", f"stats of {redact(self.url)}", self._driver_sub.stats)

    @property
    def dead_letter_url(self) -> str | None:
        """The URL of the native dead-letter destination (opens as a subscription), else the configured one."""
        native = self._driver_sub.dead_letter_url() if self.capabilities.native_dead_letter else None
        if native:
            return native
        if isinstance(self.dead_letter, Topic):
            return self.dead_letter.url
        return self.dead_letter

    # -- dead letters --------------------------------------------------
    def _dead_letter_target(self, override: str | Topic | None) -> Topic | None:
        """The portable DLQ topic to republish to, or None to use the native one.

        Raises ConfigError if there is neither.
        """
        if override is not None:
            return override if isinstance(override, Topic) else open_topic(override, policy=self._policy)
        if self.capabilities.native_dead_letter:
            return None
        if self._dead_letter_topic is None and isinstance(self.dead_letter, str):
            self._dead_letter_topic = open_topic(self.dead_letter, policy=self._policy)
        if self._dead_letter_topic is None:
            raise ConfigError(
                f"{self.provider}:// has no native dead-letter queue: give a dead_letter= URL to "
                "open_subscription() or run(), or set the profile's dead_letter"
            )
        return self._dead_letter_topic

    def _dead_letter(self, message: Message, reason: str, target: Topic | None) -> None:
        if target is None:
            self._guard.call(
                "ack", f"dead_letter {message.id}", self._driver_sub.dead_letter,
                ReceivedMessage.like(message, message._handle), _short(reason, 900),
            )
        else:
            target._republish(message, reason, self.url)
            self._guard.call("ack", f"ack {message.id}", self._driver_sub.ack, message._handle)
        message._state = _DEAD

    # -- the consumer loop ---------------------------------------------
    def run(
        self,
        handler: Callable[[Message], Any],
        *,
        concurrency: int = 1,
        max_deliveries: int | None = 5,
        idempotency: IdempotencyStore | None = None,
        dead_letter: str | Topic | None = None,
        lease: float | None = None,
        backoff: float = 1.0,
        max_backoff: float = 300.0,
        poll: float = 1.0,
        drain_timeout: float = 30.0,
        stop_event: threading.Event | None = None,
        handle_signals: bool = True,
        idempotency_key: Callable[[Message], str | None] = default_idempotency_key,
        idempotency_lease: float = 60.0,
        idempotency_ttl: float = 7 * 86400.0,
    ) -> RunStats:
        """Receive and handle messages until stopped; return what was done.

        For each message, ``handler(message)`` runs on one of ``concurrency``
        threads while the loop extends the message's lease. Then:

        * success: the message is acked (unless the handler settled it itself);
        * exception: it is nacked with exponential backoff (``backoff * 2**(attempt-1)``,
          at most ``max_backoff``), and at attempt ``max_deliveries`` it is moved to
          the dead-letter destination: ``dead_letter`` if given, else the provider's
          native one, else the subscription's configured one (with the original
          attributes plus ``portable.dead_letter_reason`` and friends);
        * a message delivered more than ``max_deliveries`` times (a consumer kept
          crashing on it) is dead-lettered without running the handler;
        * with ``idempotency``: a message whose key (``idempotency_key(message)``:
          by default its ``portable.idempotency_key`` or CloudEvent source+id) is
          already completed is acked without running the handler; one in progress
          elsewhere is nacked with a delay; otherwise the handler runs under the
          claim, then ``complete(key, token, result)`` (the handler's return value
          if it is bytes) and ack; on failure ``release`` and nack. A key reused
          with a different body (IdempotencyConflict) is dead-lettered.

        Messages with the same ``key`` are handled one at a time, in order.
        Where the provider cannot extend leases (``capabilities.lease_extension``
        is False), a handler must finish within ``lease``.

        Stopping: :meth:`stop`, ``stop_event.set()``, or SIGTERM/SIGINT (handlers are
        installed only when called from the main thread and ``handle_signals``). The
        loop stops receiving, releases (nacks at once) what it holds but has not
        started, and waits up to ``drain_timeout`` seconds for running handlers to
        finish and settle. A second signal stops waiting. A message it did not handle
        is never acked.

        Raises:
            ConfigError: ``max_deliveries`` is set but there is no dead-letter
                destination (checked at start).
            InvalidArgument: bad arguments.
        """
        if not callable(handler):
            raise InvalidArgument("handler must be a callable taking a Message")
        if type(concurrency) is not int or not 1 <= concurrency <= 1024:
            raise InvalidArgument(f"concurrency must be an int from 1 to 1024, got {concurrency!r}")
        if max_deliveries is not None and (type(max_deliveries) is not int or max_deliveries < 1):
            raise InvalidArgument(f"max_deliveries must be an int >= 1 or None, got {max_deliveries!r}")
        for name, value in (("backoff", backoff), ("max_backoff", max_backoff), ("poll", poll),
                            ("drain_timeout", drain_timeout), ("idempotency_lease", idempotency_lease),
                            ("idempotency_ttl", idempotency_ttl)):
            number = _seconds(value)
            if number is None or number < 0:
                raise InvalidArgument(f"{name} must be a number of seconds >= 0, got {value!r}")
        if not 0 < idempotency_lease <= idempotency_ttl:
            raise InvalidArgument(
                f"idempotency_lease must be > 0 and at most idempotency_ttl ({idempotency_ttl}), got {idempotency_lease}"
            )
        lease_s = self.lease if lease is None else self._check_lease(lease)
        target = self._dead_letter_target(dead_letter) if max_deliveries is not None else None
        stop = stop_event or threading.Event()
        consumer = _Consumer(
            self, handler, concurrency=concurrency, max_deliveries=max_deliveries, idempotency=idempotency,
            target=target, lease=lease_s, backoff=float(backoff), max_backoff=float(max_backoff),
            poll=min(float(poll), _MAX_WAIT_SLICE), drain_timeout=float(drain_timeout), stop=stop,
            idempotency_key=idempotency_key, idempotency_lease=float(idempotency_lease),
            idempotency_ttl=float(idempotency_ttl),
        )
        with self._stops_lock:
            self._stops.add(stop)
        try:
            with _signals_stop(consumer) if handle_signals else contextlib.nullcontext():
                return consumer.run()
        finally:
            with self._stops_lock:
                self._stops.discard(stop)

    def stop(self) -> None:
        """Ask every running :meth:`run` loop of this subscription to stop gracefully."""
        with self._stops_lock:
            for event in self._stops:
                event.set()

    def as_(self, kind: type[T]) -> T:
        """Return the native object of type ``kind`` (each adapter documents which)."""
        return native_object(self._driver, kind, self.provider)

    def close(self) -> None:
        """Release the driver's connections."""
        self._driver_sub.close()
        self._driver.close()


# ---------------------------------------------------------------- opening
def open_driver(url: str) -> MessagingDriver:
    """Open the messaging driver for ``url`` (no portable layer around it)."""
    driver = urls.open_driver("messaging", url)
    if not isinstance(driver, MessagingDriver):
        raise PortableError(f"{urls.parse_url(url)}: the driver is not a MessagingDriver")
    return driver


def _resolve(url: str | None, profile: str | Profile | None) -> tuple[str, Profile]:
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    return url or prof.queue, prof


def _check(driver: MessagingDriver, prof: Profile) -> None:
    check_requirements(
        "messaging", driver.scheme, driver.capabilities.supported(), MessagingCapabilities.flag_names(), prof.requires
    )


def open_topic(
    url: str | None = None, *, profile: str | Profile | None = None, policy: ResiliencePolicy | None = None
) -> Topic:
    """Open the publishing side of ``url``, or of the active profile's ``queue``.

    The profile's ``requires`` are checked now (MissingCapability) and its
    resilience policy applies unless ``policy`` is given.

    Raises:
        UnknownScheme / MissingDependency / InvalidURL / ConfigError: before any request.
        InvalidURL: the URL names no topic (``pubsub://p/subscriptions/s``).
    """
    target, prof = _resolve(url, profile)
    driver = open_driver(target)
    guard = Guard(driver.scheme, driver.endpoint, driver, policy or prof.resilience)
    side = guard.call("admin", f"open topic {redact(target)}", driver.topic)
    _check(driver, prof)
    return Topic(driver, side, url=target, policy=policy or prof.resilience)


def open_subscription(
    url: str | None = None,
    *,
    profile: str | Profile | None = None,
    lease: float = DEFAULT_LEASE,
    dead_letter: str | Topic | None = None,
    policy: ResiliencePolicy | None = None,
) -> Subscription:
    """Open the receiving side of ``url``, or of the active profile's ``queue``.

    Args:
        lease: default seconds a received message stays leased. Defaults to 30;
            at least ``capabilities.min_lease_seconds`` (Pub/Sub and Azure: 1).
        dead_letter: where :meth:`Subscription.run` republishes poison messages when
            the provider has no native dead-letter queue. Defaults to the profile's
            ``dead_letter`` when the queue is the profile's own.

    Raises:
        UnknownScheme / MissingDependency / InvalidURL / ConfigError: before any request.
        InvalidURL: the URL names no subscription (``pubsub://p/topics/t``).
        MissingCapability: the profile requires what the provider lacks.
    """
    target, prof = _resolve(url, profile)
    driver = open_driver(target)
    guard = Guard(driver.scheme, driver.endpoint, driver, policy or prof.resilience)
    side = guard.call("admin", f"open subscription {redact(target)}", driver.subscription)
    _check(driver, prof)
    if dead_letter is None and (url is None or url == prof.queue):
        dead_letter = prof.dead_letter
    return Subscription(
        driver, side, url=target, policy=policy or prof.resilience, lease=lease, dead_letter=dead_letter
    )
