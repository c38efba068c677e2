"""The received side of a message: :data:`Message`, and how the portable layer settles it.

A :class:`Message` is the driver layer's :class:`~portable.driver.messaging.Delivery`
itself, so a driver that makes its own deliveries (Kafka) hands out objects that
are Messages without a wrapper. What a Message's ``ack``, ``nack``,
``extend_lease`` and ``dead_letter`` do is here, in :class:`MessageSettler`:
one per Subscription, set on every message it hands out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..driver.messaging import (
    ACKED,
    DEAD_LETTERED,
    LEASED,
    NACKED,
    Delivery,
    MessagingCapabilities,
    ReceivedMessage,
    SubscriptionDriver,
)
from ..errors import InvalidArgument, PreconditionFailed, Unsupported
from ..resilience import Guard
from ._validation import attribute_text, check_delay, check_lease

if TYPE_CHECKING:
    from ._topic import Topic

T = TypeVar("T")

#: One delivery of a message, as :meth:`Subscription.receive` and ``run()`` hand it out
#: (see :class:`~portable.driver.messaging.Delivery` for its fields and methods: ``body``,
#: ``key``, ``attributes``, and losslessly ``headers``, ``key_bytes`` and ``tombstone``).
Message = Delivery


class MessageSettler:
    """Settles the messages of one Subscription: the portable half of
    :meth:`Message.ack`, ``nack``, ``extend_lease`` and ``dead_letter`` (a
    :class:`~portable.driver.messaging.Settler`).

    A message is settled once: a second ack is a no-op, anything else after
    settling raises InvalidArgument. Every call to the driver goes through the
    subscription's guard (retries, breaker) as an ``ack``-class operation.

    Args:
        side: the subscription's driver.
        guard: the subscription's guard.
        capabilities: the provider's (leases, delays, lease extension).
        provider: the scheme, for error messages.
        url: the subscription's URL: the source a dead-lettered copy names.
        dead_letter_target: the subscription's choice of portable dead-letter topic for
            an override (None: the configured one); None means the provider's native one.
    """

    def __init__(
        self,
        side: SubscriptionDriver,
        guard: Guard,
        *,
        capabilities: MessagingCapabilities,
        provider: str,
        url: str,
        dead_letter_target: Callable[[str | Topic | None], Topic | None],
    ) -> None:
        self._side = side
        self._guard = guard
        self._capabilities = capabilities
        self._provider = provider
        self._url = url
        self._dead_letter_target = dead_letter_target

    def may_settle(self, message: Delivery, state: str) -> bool:
        """Whether ``message`` may be settled as ``state`` now: True while leased, False for a repeat ack.

        Raises:
            InvalidArgument: it was already settled otherwise.
        """
        if message._state is LEASED:
            return True
        if message._state == state == ACKED:
            return False
        raise InvalidArgument(f"message {message.id} was already {message._state}; it cannot be {state} now")

    def call_with_handle(self, message: Delivery, op: str, fn: Callable[..., T], *args: Any) -> T:
        """Call ``fn(handle, *args)``; retry once if the lease keeper swapped the handle meanwhile."""
        handle = message._handle
        try:
            return self._guard.call("ack", f"{op} {message.id}", fn, handle, *args)
        except PreconditionFailed:
            if message._handle is handle:
                raise
            return self._guard.call("ack", f"{op} {message.id}", fn, message._handle, *args)

    def ack(self, message: Delivery) -> None:
        """Ack ``message`` (see :meth:`Message.ack`)."""
        if message._state is LEASED or self.may_settle(message, ACKED):
            self.call_with_handle(message, "ack", self._side.ack)
            message._state = ACKED

    def nack(self, message: Delivery, delay: float) -> None:
        """Give ``message`` back for ``delay`` seconds (see :meth:`Message.nack`)."""
        seconds = self.check_nack(message, delay)
        if seconds is not None:
            self.call_with_handle(message, "nack", self._side.nack, seconds)
            message._state = NACKED

    def extend_lease(self, message: Delivery, seconds: float) -> None:
        """Make ``message``'s lease end ``seconds`` from now (see :meth:`Message.extend_lease`)."""
        seconds = self.check_extension(message, seconds)
        started = time.monotonic()
        message._handle = self.call_with_handle(message, "extend_lease", self._side.extend_lease, seconds)
        message._lease_ends = started + seconds

    def check_extension(self, message: Delivery, seconds: object) -> float:
        """The lease ``extend_lease(seconds)`` asks the driver for (both faces call it).

        Raises:
            Unsupported: the provider cannot extend leases.
            InvalidArgument: a bad lease, or ``message`` was already settled.
        """
        if not self._capabilities.lease_extension:
            raise Unsupported(f"{self._provider}:// cannot extend a message's lease", provider=self._provider)
        lease = check_lease(seconds, self._capabilities, self._provider)
        if message._state is not LEASED:
            raise InvalidArgument(f"message {message.id} was already {message._state}; its lease cannot be extended")
        return lease

    def check_nack(self, message: Delivery, delay: object) -> float | None:
        """The delay ``nack(delay)`` asks the driver for, or None if ``message`` may not be nacked now.

        Raises:
            InvalidArgument: a bad delay, or ``message`` was already settled.
        """
        seconds = check_delay(delay, self._capabilities, self._provider)
        return seconds if self.may_settle(message, NACKED) else None

    def dead_letter_target_of(self, message: Delivery, reason: object) -> tuple[bool, Topic | None]:
        """Whether ``dead_letter(reason)`` may move ``message`` now, and the portable topic to
        republish it to (None: the provider's native destination). Both faces call it.

        Raises:
            InvalidArgument: ``reason`` is not a non-empty str, or it was already settled.
            ConfigError: there is no dead-letter destination.
        """
        if type(reason) is not str or not reason:
            raise InvalidArgument("reason must be a non-empty str saying why the message is dead-lettered")
        if not self.may_settle(message, DEAD_LETTERED):
            return False, None
        return True, self._dead_letter_target(None)

    def dead_letter(self, message: Delivery, reason: str) -> None:
        """Move ``message`` to the dead-letter destination (see :meth:`Message.dead_letter`)."""
        movable, target = self.dead_letter_target_of(message, reason)
        if movable:
            self.move_to_dead_letter(message, reason, target)

    def move_to_dead_letter(self, message: Delivery, reason: str, target: Topic | None) -> None:
        """Republish ``message`` to ``target`` and ack it, or with no target move it to the
        provider's native dead-letter destination; then it is settled as dead-lettered."""
        if target is None:
            self._guard.call(
                "ack", f"dead_letter {message.id}", self._side.dead_letter,
                ReceivedMessage.like(message, message._handle), attribute_text(reason, 900),
            )  # fmt: skip
        else:
            target._republish(message, reason, self._url)
            self._guard.call("ack", f"ack {message.id}", self._side.ack, message._handle)
        message._state = DEAD_LETTERED
