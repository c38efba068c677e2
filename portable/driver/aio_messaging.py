"""The async messaging drivers: what :mod:`portable.aio`'s topics and subscriptions await.

As in :mod:`portable.driver.aio_storage`, one class per side serves both kinds
of engine: :class:`AsyncTopicDriver` and :class:`AsyncSubscriptionDriver` wrap
the sync :class:`~portable.driver.messaging.TopicDriver` /
:class:`~portable.driver.messaging.SubscriptionDriver` and, by default, run
each sync method in the bounded pool of :mod:`portable.driver.threads`. A
natively async engine (aiobotocore for SQS, the Azure ``aio`` queue client,
Pub/Sub's async clients, aiokafka) subclasses them and overrides what it
serves on the event loop.

A sync side names its async twin with ``TopicDriver.async_driver()`` and
``SubscriptionDriver.async_driver()``; the defaults return these classes.
A driver class that serves both sides (every queue driver: ``mem``, ``sqlite``,
SQS, Azure Queue, Pub/Sub) inherits both hooks under one name, so its
``async_driver()`` must return one object that serves both:
:class:`AsyncQueueDriver` (or a native subclass of it). The portable layer asks
through :func:`async_topic_of` and :func:`async_subscription_of`, which take the
hook's answer when it serves the side asked for and otherwise adapt that side
through the pool, so a hook that serves only one side never breaks the other.

Contracts (receive's long poll, leases, ordering, dead letters) are exactly
the sync ones; errors are native and classified by the sync MessagingDriver.
A receive that waits blocks a pool thread for up to ``wait`` seconds on the
thread-adapted default; native drivers wait on the event loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .threads import run_blocking

if TYPE_CHECKING:  # annotations only: driver.messaging names these classes in its hooks
    from .messaging import (
        Delivery,
        OutgoingMessage,
        QueueStats,
        ReceivedMessage,
        SubscriptionDriver,
        TopicDriver,
    )

__all__ = [
    "AsyncQueueDriver",
    "AsyncSubscriptionDriver",
    "AsyncTopicDriver",
    "async_subscription_of",
    "async_topic_of",
]


class AsyncTopicDriver:
    """Async publishing side. The default runs the sync TopicDriver in the bounded pool."""

    #: whether this class publishes on the event loop (True in native subclasses)
    native: bool = False

    def __init__(self, sync: TopicDriver) -> None:
        self.sync = sync

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.sync!r})"

    async def publish(self, message: OutgoingMessage) -> str:
        return await run_blocking(self.sync.publish, message)

    async def publish_batch(self, messages: Iterable[OutgoingMessage]) -> list[str | BaseException]:
        return await run_blocking(self.sync.publish_batch, list(messages))

    async def aclose(self) -> None:
        """Release the async side's own connections (native drivers); the sync side is closed by its owner."""


class AsyncSubscriptionDriver:
    """Async receiving side. The default runs the sync SubscriptionDriver in the bounded pool."""

    native: bool = False

    def __init__(self, sync: SubscriptionDriver) -> None:
        self.sync = sync

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.sync!r})"

    async def receive(self, max_messages: int, wait: float, lease: float) -> list[ReceivedMessage] | list[Delivery]:
        return await run_blocking(self.sync.receive, max_messages, wait, lease)

    async def ack(self, handle: Any) -> None:
        await run_blocking(self.sync.ack, handle)

    async def ack_many(self, handles: Iterable[Any]) -> list[BaseException | None]:
        return await run_blocking(self.sync.ack_many, list(handles))

    async def nack(self, handle: Any, delay: float) -> None:
        await run_blocking(self.sync.nack, handle, delay)

    async def extend_lease(self, handle: Any, seconds: float) -> Any:
        return await run_blocking(self.sync.extend_lease, handle, seconds)

    async def dead_letter(self, message: ReceivedMessage, reason: str) -> None:
        await run_blocking(self.sync.dead_letter, message, reason)

    def dead_letter_url(self) -> str | None:
        return self.sync.dead_letter_url()

    async def stats(self) -> QueueStats:
        return await run_blocking(self.sync.stats)

    async def aclose(self) -> None:
        """Release the async side's own connections (native drivers); the sync side is closed by its owner."""


class AsyncQueueDriver(AsyncTopicDriver, AsyncSubscriptionDriver):
    """Both async sides of a driver that serves both (a queue): what its ``async_driver()`` returns.

    ``sync`` is the one sync driver; a native engine subclasses this and overrides what it serves.
    """

    sync: Any  # the one driver that is both a TopicDriver and a SubscriptionDriver

    def __init__(self, sync: Any) -> None:
        self.sync = sync


def async_topic_of(side: TopicDriver) -> AsyncTopicDriver:
    """The async publishing side of ``side``: its ``async_driver()`` if that publishes, else the pool adapter."""
    made = side.async_driver()
    return made if isinstance(made, AsyncTopicDriver) else AsyncTopicDriver(side)


def async_subscription_of(side: SubscriptionDriver) -> AsyncSubscriptionDriver:
    """The async receiving side of ``side``: its ``async_driver()`` if that receives, else the pool adapter."""
    made: object = side.async_driver()
    return made if isinstance(made, AsyncSubscriptionDriver) else AsyncSubscriptionDriver(side)
