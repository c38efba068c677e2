"""The async delivery: :class:`AsyncMessage`, and :class:`AsyncSettler`, which settles it.

An AsyncMessage wraps the sync face's delivery (a
:class:`~portable.driver.messaging.Delivery`, ``portable.messaging.Message``):
same properties, and ``ack``, ``nack``, ``extend_lease`` and ``dead_letter``
awaited. The sync subscription's :class:`~portable.messaging._message.MessageSettler`
checks every argument and the settlement state (one source of truth); the async
settler then awaits the async driver through the shared guard and moves the
delivery's state on, so a message is settled once whichever face settles it.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from ..cloudevents import CloudEvent
from ..driver.aio_messaging import AsyncSubscriptionDriver
from ..driver.messaging import ACKED, DEAD_LETTERED, LEASED, NACKED, Delivery, ReceivedMessage
from ..errors import PreconditionFailed
from ..messaging import Topic
from ..messaging._message import MessageSettler
from ..messaging._validation import attribute_text
from ..resilience import Guard
from ._msg_topic import AsyncTopic

T = TypeVar("T")


class AsyncSettler:
    """Settles the messages of one AsyncSubscription (the async half of its sync settler).

    Every driver call goes through the subscription's guard as an ``ack``-class operation.
    """

    def __init__(self, sync: MessageSettler, side: AsyncSubscriptionDriver, guard: Guard, url: str) -> None:
        self.sync = sync
        self._side = side
        self._guard = guard
        self._url = url
        self._topics: dict[int, tuple[Topic, AsyncTopic]] = {}

    async def call_with_handle(
        self, message: Delivery, op: str, fn: Callable[..., Awaitable[T]], *args: Any
    ) -> T:
        """Await ``fn(handle, *args)``; again once if the lease keeper swapped the handle meanwhile."""
        handle = message._handle
        try:
            return await self._guard.acall("ack", f"{op} {message.id}", fn, handle, *args)
        except PreconditionFailed:
            if message._handle is handle:
                raise
            return await self._guard.acall("ack", f"{op} {message.id}", fn, message._handle, *args)

    async def ack(self, message: Delivery) -> None:
        """Ack ``message`` (see :meth:`AsyncMessage.ack`)."""
        if message._state is LEASED or self.sync.may_settle(message, ACKED):
            await self.call_with_handle(message, "ack", self._side.ack)
            message._state = ACKED

    async def nack(self, message: Delivery, delay: float) -> None:
        """Give ``message`` back for ``delay`` seconds (see :meth:`AsyncMessage.nack`)."""
        seconds = self.sync.check_nack(message, delay)
        if seconds is not None:
            await self.call_with_handle(message, "nack", self._side.nack, seconds)
            message._state = NACKED

    async def extend_lease(self, message: Delivery, seconds: float) -> None:
        """Make ``message``'s lease end ``seconds`` from now (see :meth:`AsyncMessage.extend_lease`)."""
        lease = self.sync.check_extension(message, seconds)
        started = time.monotonic()
        message._handle = await self.call_with_handle(message, "extend_lease", self._side.extend_lease, lease)
        message._lease_ends = started + lease

    async def dead_letter(self, message: Delivery, reason: str) -> None:
        """Move ``message`` to the dead-letter destination (see :meth:`AsyncMessage.dead_letter`)."""
        movable, target = self.sync.dead_letter_target_of(message, reason)
        if movable:
            await self.move_to_dead_letter(message, reason, target)

    async def move_to_dead_letter(self, message: Delivery, reason: str, target: Topic | None) -> None:
        """Republish ``message`` to ``target`` and ack it, or with no target move it to the
        provider's native dead-letter destination; then it is settled as dead-lettered."""
        if target is None:
            await self._guard.acall(
                "ack", f"dead_letter {message.id}", self._side.dead_letter,
                ReceivedMessage.like(message, message._handle), attribute_text(reason, 900),
            )  # fmt: skip
        else:
            await self._async_topic(target)._republish(message, reason, self._url)
            await self._guard.acall("ack", f"ack {message.id}", self._side.ack, message._handle)
        message._state = DEAD_LETTERED

    def _async_topic(self, topic: Topic) -> AsyncTopic:
        """The async face of a dead-letter topic (one per topic, sharing its guard)."""
        known = self._topics.get(id(topic))
        if known is None or known[0] is not topic:
            known = self._topics[id(topic)] = (topic, AsyncTopic.from_sync(topic))
        return known[1]


class AsyncMessage:
    """One delivery of a message, from :meth:`AsyncSubscription.receive`, ``async for`` or ``run()``.

    The same properties as :class:`portable.messaging.Message` (``id``, ``body``,
    ``attributes``, ``headers``, ``key``, ``key_bytes``, ``tombstone``,
    ``publish_time``, ``delivery_attempt``, ``idempotency_key``, ``settled``,
    ``lease_remaining``, ``event()``); settling is awaited. A message is settled
    once: a second ack is a no-op, anything else after settling raises InvalidArgument.
    """

    __slots__ = ("_delivery", "_settler")

    def __init__(self, delivery: Delivery, settler: AsyncSettler) -> None:
        self._delivery = delivery
        self._settler = settler

    def __repr__(self) -> str:
        return "Async" + repr(self._delivery)

    @property
    def message(self) -> Delivery:
        """The sync face's Message of this delivery (settling it there settles this one)."""
        return self._delivery

    @property
    def id(self) -> str:
        """The provider's message id (the same on every delivery)."""
        return self._delivery.id

    @property
    def body(self) -> bytes:
        """The payload (``b""`` for a tombstone)."""
        return self._delivery.body

    @property
    def attributes(self) -> Mapping[str, str]:
        """The text attributes it was published with (see ``Message.attributes``)."""
        return self._delivery.attributes

    @property
    def headers(self) -> tuple[tuple[str, bytes], ...]:
        """Every header or attribute as sent, losslessly (see ``Message.headers``)."""
        return self._delivery.headers

    @property
    def key(self) -> str | None:
        """The ordering key, or None."""
        return self._delivery.key

    @property
    def key_bytes(self) -> bytes | None:
        """The key exactly as sent, or None without a key."""
        return self._delivery.key_bytes

    @property
    def tombstone(self) -> bool:
        """Whether the provider delivered no body at all (a Kafka record with a null value)."""
        return self._delivery.tombstone

    @property
    def publish_time(self) -> dt.datetime:
        """When the provider accepted it (UTC)."""
        return self._delivery.publish_time

    @property
    def delivery_attempt(self) -> int:
        """1 on the first delivery (exact where ``capabilities.delivery_count``)."""
        return self._delivery.delivery_attempt

    @property
    def handle(self) -> Any:
        """The driver's token for this delivery."""
        return self._delivery.handle

    @property
    def idempotency_key(self) -> str | None:
        """The publisher's ``idempotency_key``, or None."""
        return self._delivery.idempotency_key

    @property
    def settled(self) -> bool:
        """Whether it was acked, nacked or dead-lettered (on either face)."""
        return self._delivery.settled

    @property
    def lease_remaining(self) -> float:
        """Seconds until the lease ends, as this process sees it (0 if past)."""
        return self._delivery.lease_remaining

    def event(self) -> CloudEvent:
        """Decode the message as a CloudEvent (see ``Message.event``)."""
        return self._delivery.event()

    async def ack(self) -> None:
        """Settle the message: it is not delivered again. A second ack is a no-op.

        Raises:
            PreconditionFailed: the lease was lost, on providers that can tell.
            InvalidArgument: it was already nacked or dead-lettered.
        """
        await self._settler.ack(self._delivery)

    async def nack(self, delay: float = 0.0) -> None:
        """Give the message back, to be delivered again after ``delay`` seconds (see ``Message.nack``).

        Raises:
            InvalidArgument: a bad delay, or the message was already settled.
            PreconditionFailed: the lease was lost, on providers that can tell.
        """
        await self._settler.nack(self._delivery, delay)

    async def extend_lease(self, seconds: float) -> None:
        """Make the lease end ``seconds`` from now (see ``Message.extend_lease``).

        Raises:
            Unsupported: the provider has no per-message lease (Kafka).
            InvalidArgument: a bad lease, or the message was already settled.
            PreconditionFailed: the lease was already lost.
        """
        await self._settler.extend_lease(self._delivery, seconds)

    async def dead_letter(self, reason: str) -> None:
        """Move the message to the dead-letter destination now (see ``Message.dead_letter``).

        Raises:
            ConfigError: there is no dead-letter destination.
            InvalidArgument: ``reason`` is not a non-empty str, or the message was already settled.
        """
        await self._settler.dead_letter(self._delivery, reason)
