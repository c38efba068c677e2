"""The async publishing side: :class:`AsyncTopic`, and what it shares with AsyncSubscription.

An async messaging object wraps its sync twin (``portable.messaging.Topic`` /
``Subscription``): the twin validates and normalises every argument (one
source of truth), owns the Guard (so both faces share one breaker and one retry
budget per endpoint) and the sync driver; the async object awaits the sync
side's :meth:`~portable.driver.messaging.TopicDriver.async_driver` through
:meth:`~portable.resilience.Guard.acall`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Generic, Literal, Self, TypeVar, cast

from ..cloudevents import CloudEvent
from ..driver.aio_messaging import AsyncSubscriptionDriver, AsyncTopicDriver, async_topic_of
from ..driver.messaging import Delivery, MessagingCapabilities, OutgoingMessage
from ..driver.redaction import redact
from ..driver.threads import run_blocking
from ..errors import InvalidArgument
from ..messaging import Topic
from ..messaging._open import MessagingClient

T = TypeVar("T")
SyncT = TypeVar("SyncT", bound=MessagingClient[Any])
AsideT = TypeVar("AsideT", bound=AsyncTopicDriver | AsyncSubscriptionDriver)


class AsyncMessagingClient(Generic[SyncT, AsideT]):
    """What AsyncTopic and AsyncSubscription share: the sync twin, its guard, the async
    driver of its side, and the lifetime (``async with`` closes both drivers)."""

    def __init__(self, sync: SyncT, aside: AsideT) -> None:
        self._sync = sync
        self._guard = sync._guard
        self._aside = aside
        self._what = sync._what

    @property
    def sync(self) -> SyncT:
        """The sync twin: same driver, same guard (breakers and retry budget)."""
        return self._sync

    @property
    def url(self) -> str:
        """The URL it was opened with (secrets masked in repr)."""
        return self._sync.url

    @property
    def provider(self) -> str:
        """The scheme (``"sqs"``)."""
        return self._sync.provider

    @property
    def capabilities(self) -> MessagingCapabilities:
        """What the provider supports (as the sync twin's)."""
        return self._sync.capabilities

    @property
    def native(self) -> bool:
        """Whether the driver serves this side on the event loop (else through the bounded thread pool)."""
        return self._aside.native

    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact(self.url)!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def as_(self, kind: type[T]) -> T:
        """Return the native object of type ``kind`` (as the sync twin's ``as_``); it bypasses the retry layer."""
        return self._sync.as_(kind)

    async def aclose(self) -> None:
        """Close the async driver (its own connections), then the sync driver."""
        try:
            await self._aside.aclose()
        finally:
            await run_blocking(self._sync.close)


class AsyncTopic(AsyncMessagingClient[Topic, AsyncTopicDriver]):
    """Publishes messages to one topic or queue, from a coroutine.

    The async twin of :class:`portable.messaging.Topic`: the same arguments,
    validation (before any request, the same typed errors), CloudEvents,
    idempotency and ordering keys. Open it with :func:`portable.aio.open_topic`
    or wrap a sync Topic with :meth:`from_sync`.
    """

    @classmethod
    def from_sync(cls, topic: Topic) -> AsyncTopic:
        """The async face of ``topic``: it shares its driver and its guard (breakers, retry budget).

        Closing the AsyncTopic closes ``topic``.
        """
        if not isinstance(topic, Topic):
            raise InvalidArgument(f"from_sync takes a portable.messaging.Topic, got {type(topic).__name__}")
        return cls(topic, async_topic_of(topic._side))

    async def publish(
        self,
        body: bytes,
        *,
        key: str | None = None,
        attributes: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> str:
        """Publish one message; return the provider's message id (see :meth:`Topic.publish`).

        Cancelled while the request is out, the message may or may not have been
        published (delivery is at least once: publish again with the same
        ``idempotency_key`` where the provider deduplicates).

        Raises:
            InvalidArgument / InvalidKey / TooLarge: bad input, before any request.
            NotFound: the topic does not exist.
        """
        message = self._sync._message(body, key, attributes, idempotency_key)
        return await self._guard.acall("publish", self._what, self._sync._asender(self._aside.publish), message)

    async def publish_batch(self, messages: Iterable[bytes | OutgoingMessage]) -> list[str]:
        """Publish many messages; return their ids in order (see :meth:`Topic.publish_batch`).

        Every item is validated before anything is sent; a failed item is retried
        on its own; the first that still fails raises, after the items before it
        were published.
        """
        ids: list[str] = []
        chunks = self._sync._chunks(messages)
        publish_batch = self._sync._asender(self._aside.publish_batch)
        publish = self._sync._asender(self._aside.publish)
        for chunk in chunks:
            results = await self._guard.acall("publish", self._what, publish_batch, chunk)
            for i in self._sync._retry_items(chunk, results):
                results[i] = await self._guard.acall("publish", self._what, publish, chunk[i])
            ids += cast("list[str]", results)  # every error was replaced by an id, or raised
        return ids

    async def publish_event(
        self,
        event: CloudEvent,
        *,
        mode: Literal["binary", "structured"] = "binary",
        key: str | None = None,
    ) -> str:
        """Publish a CloudEvent; return the message id (see :meth:`Topic.publish_event`)."""
        message = self._sync._event_message(event, mode, key)
        return await self._guard.acall("publish", self._what, self._sync._asender(self._aside.publish), message)

    async def _republish(self, message: Delivery, reason: str, source: str) -> str:
        """Publish a dead-lettered copy of ``message`` (as :meth:`Topic._republish`)."""
        copy = self._sync._dead_letter_copy(message, reason, source)
        return await self._guard.acall("publish", self._what, self._aside.publish, copy)
