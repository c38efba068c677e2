"""The publishing side: :class:`Topic` and :func:`open_topic`."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar, cast, overload

from ..cloudevents import CloudEvent, to_message
from ..config import Profile
from ..driver.messaging import (
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DELIVERY_ATTEMPTS,
    IDEMPOTENCY_ATTRIBUTE,
    ORIGINAL_ID,
    Delivery,
    MessagingDriver,
    OutgoingMessage,
    TopicDriver,
)
from ..driver.redaction import redact
from ..errors import InvalidArgument, PortableError, TooLarge
from ..resilience import ResiliencePolicy
from ..telemetry._propagation import (
    TRACEPARENT,
    TRACESTATE,
    UNSET_CONTEXT,
    message_context,
    publish_context,
    tracing,
)
from ._open import MessagingClient, Resolved
from ._validation import as_body, attribute_text, check_attributes, check_token

log = logging.getLogger("portable.messaging")
T = TypeVar("T")


class Topic(MessagingClient[TopicDriver]):
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
        super().__init__(driver, topic, url=url, policy=policy, action="publish to")
        self._max_bytes = self.capabilities.max_message_bytes
        # where attributes cannot travel, no trace context is added (azqueue:// with envelope=never
        # refuses any attribute: its bodies are bare for native consumers)
        self._traces = self.capabilities.max_attributes > 0 and not (
            self.provider == "azqueue" and "envelope=never" in url.partition("?")[2].split("&")
        )
        # azqueue:// carries attributes in portable's envelope only: a message that would go bare
        # (no attributes, key or idempotency key) stays bare, so native readers of bare bodies
        # read what they read without tracing; it goes without the trace context
        self._bare_stays_bare = self.provider == "azqueue"

    def _outgoing(
        self,
        body: object,
        key: object,
        attributes: object,
        idempotency_key: object,
        *,
        allow_reserved: bool = False,
        trace: Mapping[str, str] | None = None,
    ) -> OutgoingMessage:
        data = body if type(body) is bytes else as_body(body)
        size = len(data)
        attrs: dict[str, str]
        if attributes is None:
            attrs = {}
        else:
            attrs, extra = check_attributes(attributes, allow_reserved=allow_reserved)
            size += extra
        if key is not None:
            check_token("an ordering key", key)
        if idempotency_key is not None:
            check_token("an idempotency key", idempotency_key)
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
        if trace:
            self._add_trace(attrs, size, trace)
        return OutgoingMessage(data, attrs, key, idempotency_key)  # type: ignore[arg-type]

    def _add_trace(self, attrs: dict[str, str], size: int, trace: Mapping[str, str]) -> None:
        """Add the trace context ``trace`` to ``attrs`` if the message still fits with it.

        A message that is at the provider's attribute or size limit already goes
        without it (tracing must never make a valid publish fail): logged at DEBUG.
        """
        extra = sum(len(name) + len(value) for name, value in trace.items())
        if len(attrs) + len(trace) <= self.capabilities.max_attributes and size + extra <= self._max_bytes:
            attrs.update(trace)
        else:
            log.debug("%s: no room for the trace context (%s) in this message; published without it",
                      self._what, ", ".join(trace))

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

        With tracing on (opentelemetry-api and a tracer provider), the current
        span's context is added as ``traceparent`` (and ``tracestate``) unless
        ``attributes`` has a ``traceparent``; a message at the provider's
        attribute or size limit goes without it (see docs/messaging.md, Tracing).

        Raises:
            InvalidArgument / InvalidKey / TooLarge: bad input, before any request.
            NotFound: the topic does not exist.
        """
        message = self._message(body, key, attributes, idempotency_key)
        return self._guard.call("publish", self._what, self._sender(self._side.publish), message)

    def _message(
        self, body: object, key: object, attributes: object, idempotency_key: object, *, traced: bool = True
    ) -> OutgoingMessage:
        """The validated message of ``publish(body, key=, attributes=, idempotency_key=)`` (both faces call it).

        With tracing on (see :mod:`portable.telemetry._propagation`) the current span's
        ``traceparent`` / ``tracestate`` are added, unless ``attributes`` carry a
        ``traceparent`` of their own or ``traced`` is False.
        """
        trace = self._trace(attributes) if traced and tracing() else None
        if trace is not None and not self._goes_bare(key, attributes, idempotency_key):
            return self._outgoing(body, key, attributes, idempotency_key, trace=trace)
        if type(body) is bytes and key is None and attributes is None and idempotency_key is None:
            if len(body) > self._max_bytes:
                raise TooLarge(
                    f"the message is {len(body)} bytes; {self.provider}:// takes at most {self._max_bytes}; "
                    "store large payloads in a bucket and publish their key"
                )
            return OutgoingMessage(body)
        return self._outgoing(body, key, attributes, idempotency_key)

    def _sender(self, send: Callable[[Any], T]) -> Callable[[Any], T]:
        """``send`` (a driver's ``publish`` or ``publish_batch``), or with tracing on, ``send``
        giving each message that carries the caller's context the context current inside the
        guarded call instead: the guard's ``send`` span, where portable is instrumented (the
        conventions: with no "create" span, the send span's context is the one injected).
        A traceparent other than the caller's current one (a caller's own) is left alone.
        """
        if not tracing():
            return send
        ambient = publish_context(None)
        if ambient is None:
            return send

        def in_send_span(messages: Any) -> T:
            return send(in_send_context(messages, ambient))

        in_send_span.__name__ = send.__name__  # the operation observers see
        return in_send_span

    def _asender(self, send: Callable[[Any], Awaitable[T]]) -> Callable[[Any], Awaitable[T]]:
        """:meth:`_sender` for an async driver's ``publish`` / ``publish_batch``."""
        if not tracing():
            return send
        ambient = publish_context(None)
        if ambient is None:
            return send

        async def in_send_span(messages: Any) -> T:
            return await send(in_send_context(messages, ambient))

        in_send_span.__name__ = send.__name__
        return in_send_span

    def _goes_bare(self, key: object, attributes: object, idempotency_key: object) -> bool:
        """Whether a message with these fields travels as a bare body (so it gets no trace context)."""
        return self._bare_stays_bare and key is None and not attributes and idempotency_key is None

    def _trace(self, attributes: object) -> Mapping[str, str] | None:
        """The trace context to build a message with ``attributes`` with, or None (off, or the caller's own).

        With no span current it is the placeholder the guard's send span replaces (:func:`publish_context`).
        """
        if not self._traces:
            return None
        if attributes is None or type(attributes) is dict:
            return publish_context(attributes)
        return publish_context(attributes if isinstance(attributes, Mapping) else None)

    def publish_batch(self, messages: Iterable[bytes | OutgoingMessage]) -> list[str]:
        """Publish many messages (native batches of ``capabilities.max_batch``); return their ids in order.

        Each item is ``bytes`` or an :class:`OutgoingMessage` (``body``, ``attributes``,
        ``key``, ``idempotency_key``). Every item is validated before anything is
        sent. A failed item is retried on its own under the retry policy; the
        first that still fails raises, after the items before it were published.
        With tracing on, every item without a ``traceparent`` of its own gets the
        current span's (the batch's one creation context).
        """
        ids: list[str] = []
        chunks = self._chunks(messages)
        publish_batch, publish = self._sender(self._side.publish_batch), self._sender(self._side.publish)
        for chunk in chunks:
            results = self._guard.call("publish", self._what, publish_batch, chunk)
            for i in self._retry_items(chunk, results):
                results[i] = self._guard.call("publish", self._what, publish, chunk[i])
            ids += cast("list[str]", results)  # every error was replaced by an id, or raised
        return ids

    def _chunks(self, messages: Iterable[bytes | OutgoingMessage]) -> list[LazyOutgoingMessages]:
        """Every item of ``publish_batch(messages)`` validated, in driver calls of ``capabilities.max_batch``.

        Raises:
            InvalidArgument / InvalidKey / TooLarge: an item is bad (nothing is sent).
        """
        # Validate everything first. A plain body that passed stays bytes until the driver
        # reads it (LazyOutgoingMessages), so a large batch does not hold one more live object per message:
        # the garbage collector's full passes cost in proportion to live objects.
        max_bytes = self._max_bytes
        trace = self._trace(None) if tracing() else None
        if trace is not None:
            return self._traced_chunks(messages, trace)
        items: list[bytes | OutgoingMessage] = [
            m
            if type(m) is bytes and len(m) <= max_bytes
            else self._outgoing(m, None, None, None)
            if not isinstance(m, OutgoingMessage)
            else self._outgoing(m.body, m.key, m.attributes or None, m.idempotency_key)
            for m in messages
        ]
        size = self.capabilities.max_batch
        return [LazyOutgoingMessages(items[start : start + size]) for start in range(0, len(items), size)]

    def _traced_chunks(
        self, messages: Iterable[bytes | OutgoingMessage], trace: Mapping[str, str]
    ) -> list[LazyOutgoingMessages]:
        """:meth:`_chunks` with the trace context ``trace`` added to every item that has none of its own."""
        items: list[bytes | OutgoingMessage] = []
        for m in messages:
            if not isinstance(m, OutgoingMessage):
                items.append(self._outgoing(m, None, None, None, trace=None if self._bare_stays_bare else trace))
                continue
            own = m.attributes or None
            mine = trace if own is None else self._trace(own)  # None: the item has a traceparent of its own
            if self._goes_bare(m.key, own, m.idempotency_key):
                mine = None
            items.append(self._outgoing(m.body, m.key, own, m.idempotency_key, trace=mine))
        size = self.capabilities.max_batch
        return [LazyOutgoingMessages(items[start : start + size]) for start in range(0, len(items), size)]

    def _retry_items(self, chunk: Sequence[OutgoingMessage], results: list[str | BaseException]) -> list[int]:
        """The positions in ``chunk`` whose publish failed retryably (to publish again one by one).

        Raises:
            PortableError: the driver answered a wrong number of results, or an item
                failed for good (the items before it were published).
        """
        if len(results) != len(chunk):
            raise PortableError(
                f"{self._what}: the driver answered {len(results)} results for {len(chunk)} messages",
                provider=self.provider,
            )
        retry: list[int] = []
        # an id is a str: the type check first keeps a batch of 100,000 ids cheap to scan
        for i, failed in [(i, r) for i, r in enumerate(results) if type(r) is not str and isinstance(r, BaseException)]:
            err = self._guard.wrap(self._what, failed)
            if not err.retryable:
                raise err from (None if err is failed else failed)
            retry.append(i)
        return retry

    def publish_event(
        self,
        event: CloudEvent,
        *,
        mode: Literal["binary", "structured"] = "binary",
        key: str | None = None,
    ) -> str:
        """Publish a CloudEvent (see :mod:`portable.cloudevents`); return the message id.

        ``binary`` carries the event's attributes as message attributes (``ce-*``
        on Pub/Sub, its binding's names; ``ce_*`` elsewhere) and its data as the
        body; ``structured`` sends the JSON event format as the body, data bytes
        exactly as given. Either way the idempotency key is ``source`` and ``id``,
        so a repeat of the same event is deduplicated where the provider can.
        With tracing on, the message gets ``traceparent`` / ``tracestate``
        attributes unless the event has the distributed-tracing extension
        (``extensions={"traceparent": ...}``): then that is its creation context.

        Raises:
            InvalidArgument: binary mode needs more attributes than the provider
                carries (SQS: 10, one of them the idempotency key); use
                ``mode="structured"``. Nothing is sent.
        """
        message = self._event_message(event, mode, key)
        return self._guard.call("publish", self._what, self._sender(self._side.publish), message)

    def _event_message(
        self, event: CloudEvent, mode: Literal["binary", "structured"], key: str | None
    ) -> OutgoingMessage:
        """The validated message of ``publish_event(event, mode=, key=)`` (both faces call it)."""
        body, attributes = to_message(
            event, mode=mode, provider=self.provider,
            max_attributes=self.capabilities.max_attributes - 1,  # one for the idempotency key
        )  # fmt: skip
        # an event with the distributed-tracing extension carries its own creation context
        return self._message(body, key, attributes, event.dedup_key(), traced="traceparent" not in event.extensions)

    def _republish(self, message: Delivery, reason: str, source: str) -> str:
        """Publish a dead-lettered copy of ``message`` (original attributes plus the reason)."""
        copy = self._dead_letter_copy(message, reason, source)
        return self._guard.call("publish", self._what, self._side.publish, copy)

    def _dead_letter_copy(self, message: Delivery, reason: str, source: str) -> OutgoingMessage:
        """The dead-lettered copy of ``message``: its attributes plus the reason, source, attempts and id."""
        attributes = dict(message.attributes)
        attributes[DEAD_LETTER_REASON] = attribute_text(reason, 900)
        attributes[DEAD_LETTER_SOURCE] = attribute_text(redact(source), 900)
        attributes[DELIVERY_ATTEMPTS] = str(message.delivery_attempt)
        attributes[ORIGINAL_ID] = message.id
        return self._keeping(message.body, message.key, attributes)

    def _publish_keeping(self, body: bytes, key: str | None, attributes: Mapping[str, str]) -> str:
        """Publish with ``portable.*`` attributes kept as they are and no provider dedup.

        For moving messages (dead-lettering, redrive): the idempotency key stays an
        attribute for consumers, but a provider must not drop the copy as a repeat.
        """
        return self._guard.call("publish", self._what, self._side.publish, self._keeping(body, key, attributes))

    def _keeping(self, body: bytes, key: str | None, attributes: Mapping[str, str]) -> OutgoingMessage:
        """The validated message of :meth:`_publish_keeping`."""
        return self._outgoing(body, key, attributes or None, None, allow_reserved=True)


class LazyOutgoingMessages(Sequence[OutgoingMessage]):
    """The validated items of one driver call: a plain body becomes an OutgoingMessage only as
    the driver reads it, and is dropped after it is sent (iterable again, for a retry)."""

    __slots__ = ("_items",)

    def __init__(self, items: list[bytes | OutgoingMessage]) -> None:
        self._items = items

    def plain_items(self) -> list[bytes | OutgoingMessage]:
        """The items as they are held: a body-only message as its ``bytes`` (see
        :func:`portable.driver.messaging.plain_items`); the list must not be changed."""
        return self._items

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


def in_send_context(messages: Any, ambient: Mapping[str, str]) -> Any:
    """``messages`` (one OutgoingMessage or a chunk) with the context current now in place of
    ``ambient`` (the caller's, or :data:`UNSET_CONTEXT`, added when the messages were made), where
    it differs; the placeholder is removed if no span is current after all."""
    fresh = message_context(None)
    if fresh is None and ambient is not UNSET_CONTEXT:
        return messages
    if fresh is not None and fresh.get(TRACEPARENT) == ambient.get(TRACEPARENT):
        return messages
    mine = ambient[TRACEPARENT]

    def moved(m: OutgoingMessage) -> OutgoingMessage:
        if m.attributes.get(TRACEPARENT) != mine:
            return m
        attributes = {n: v for n, v in m.attributes.items() if n != TRACESTATE and n != TRACEPARENT}
        if fresh is not None:
            attributes.update(fresh)
        return OutgoingMessage(m.body, attributes, m.key, m.idempotency_key)

    if isinstance(messages, OutgoingMessage):
        return moved(messages)
    return LazyOutgoingMessages([moved(m) for m in messages])


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
    where = Resolved.of(url, profile, policy)
    side = where.open("topic", where.driver.topic)
    return Topic(where.driver, side, url=where.url, policy=where.policy)
