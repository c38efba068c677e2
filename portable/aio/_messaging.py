"""Async messaging: :class:`AsyncTopic`, :class:`AsyncSubscription`, :class:`AsyncMessage`.

>>> import asyncio, portable.aio
>>> async def main():
...     async with portable.aio.open_topic("mem://aio-doc") as topic:
...         await topic.publish(b"hello", key="k-1")
...     async with portable.aio.open_subscription("mem://aio-doc") as sub:
...         async for message in sub:
...             await message.ack()
...             return message.body, message.key
>>> asyncio.run(main())
(b'hello', 'k-1')

The async types mirror :mod:`portable.messaging`: the same names, arguments,
typed errors (raised before any request), capabilities and semantics. Each
wraps its sync twin (``from_sync``), which validates, owns the guard (one
breaker and one retry budget per endpoint, whichever face calls) and the sync
driver; requests go to the side's async driver
(:meth:`~portable.driver.messaging.SubscriptionDriver.async_driver`): native
where the library is async, else the bounded thread pool of
:mod:`portable.driver.threads`.

Consuming: ``async for message in subscription`` yields messages as they
arrive and keeps the lease of each message the caller holds alive until it is
settled; leaving the loop (break, exception, cancel) gives back what is still
unsettled (nack 0). ``await subscription.run(handler)`` is the consumer loop of
:meth:`portable.messaging.Subscription.run` for a coroutine handler
(see :mod:`portable.aio._consumer`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, cast

from ..config import Profile
from ..driver.aio_messaging import AsyncSubscriptionDriver, async_subscription_of
from ..driver.idempotency import IdempotencyStore
from ..driver.messaging import ACKED, Delivery, QueueStats, ReceivedMessage
from ..driver.redaction import redact
from ..errors import InvalidArgument
from ..messaging import DEFAULT_LEASE, RunStats, Subscription, Topic, default_idempotency_key
from ..messaging import open_subscription as open_sync_subscription
from ..messaging import open_topic as open_sync_topic
from ..resilience import ResiliencePolicy
from ._consumer import AsyncConsumerLoop, iterate, iteration_args
from ._msg_message import AsyncMessage, AsyncSettler
from ._msg_topic import AsyncMessagingClient, AsyncTopic

__all__ = ["AsyncMessage", "AsyncSubscription", "AsyncTopic", "open_subscription", "open_topic"]

log = logging.getLogger("portable.messaging")

#: background releases of messages a cancelled receive got after all (kept referenced until done)
_releasing: set[asyncio.Future[Any]] = set()


class AsyncSubscription(AsyncMessagingClient[Subscription, AsyncSubscriptionDriver]):
    """Receives messages from one subscription or queue, from coroutines.

    The async twin of :class:`portable.messaging.Subscription`. Open it with
    :func:`portable.aio.open_subscription` or wrap a sync Subscription with
    :meth:`from_sync`.
    """

    def __init__(self, sync: Subscription, aside: AsyncSubscriptionDriver) -> None:
        super().__init__(sync, aside)
        self._settler = AsyncSettler(sync._settler, aside, self._guard, sync.url)

    @classmethod
    def from_sync(cls, subscription: Subscription) -> AsyncSubscription:
        """The async face of ``subscription``: it shares its driver, guard and settlement rules.

        Closing the AsyncSubscription closes ``subscription``.
        """
        if not isinstance(subscription, Subscription):
            raise InvalidArgument(
                f"from_sync takes a portable.messaging.Subscription, got {type(subscription).__name__}"
            )
        return cls(subscription, async_subscription_of(subscription._side))

    @property
    def lease(self) -> float:
        """The default lease in seconds of :meth:`receive`, ``async for`` and :meth:`run`."""
        return self._sync.lease

    @property
    def dead_letter(self) -> str | Topic | None:
        """The portable dead-letter topic (URL or Topic), if one was configured."""
        return self._sync.dead_letter

    @property
    def dead_letter_url(self) -> str | None:
        """The URL of the native dead-letter destination, else the configured one (as the sync twin's)."""
        return self._sync.dead_letter_url

    # -- receiving -----------------------------------------------------
    async def receive(self, max_messages: int = 1, wait: float = 0.0, *, lease: float | None = None) -> list[AsyncMessage]:
        """Lease up to ``max_messages`` messages, waiting up to ``wait`` seconds for the first
        (see :meth:`Subscription.receive`: same arguments and errors).

        Cancelled while a request is out, what that request (or an earlier one of
        this call) leased is given back (nack 0) as soon as it arrives, so nothing
        waits for its lease to end.
        """
        plan = self._sync._receive_plan(max_messages, wait, lease)
        fetched: list[list[ReceivedMessage] | list[Delivery]] = []
        try:
            request = next(plan)
            while True:
                request = plan.send(await self._fetch(request, fetched))
        except StopIteration as done:
            settler = self._settler
            return [AsyncMessage(m, settler) for m in done.value]
        except asyncio.CancelledError:
            self._give_back([r for got in fetched for r in got])
            raise

    async def _fetch(
        self, request: tuple[int, float, float], fetched: list[list[ReceivedMessage] | list[Delivery]]
    ) -> list[ReceivedMessage] | list[Delivery]:
        call = asyncio.ensure_future(self._guard.acall("receive", self._what, self._aside.receive, *request))
        try:
            got: list[ReceivedMessage] | list[Delivery] = await asyncio.shield(call)
        except asyncio.CancelledError:
            call.add_done_callback(lambda done: None if done.cancelled() or done.exception() else self._give_back(done.result()))
            raise
        fetched.append(got)
        return got

    def _give_back(self, records: list[ReceivedMessage] | list[Delivery] | list[Any]) -> None:
        """Release (nack 0) deliveries nobody will see, in the background."""
        if not records:
            return

        async def release() -> None:
            for record in records:
                try:
                    await self._guard.acall("ack", f"release {record.id}", self._aside.nack, record.handle, 0.0)
                except Exception as exc:
                    log.warning("could not give back message %s after a cancelled receive: %s", record.id, exc)

        task = asyncio.ensure_future(release())
        _releasing.add(task)
        task.add_done_callback(_releasing.discard)

    def __aiter__(self) -> AsyncIterator[AsyncMessage]:
        """``async for message in subscription``: :meth:`messages` with its defaults."""
        return self.messages()

    def messages(
        self, *, lease: float | None = None, poll: float = 1.0, prefetch: int = 1
    ) -> AsyncIterator[AsyncMessage]:
        """Yield messages as they arrive, forever (or until the loop is left).

        While the caller holds a yielded message, its lease is extended in the
        background (at half its lease, where ``capabilities.lease_extension``),
        until it is settled. Leaving the loop (``break``, an exception, the task
        cancelled) gives back every message still unsettled (nack 0), including
        those received but not yet yielded: settle a message before leaving if
        it was handled. The iterator is an async generator, so a ``break`` gives
        back when it is closed: at once with ``contextlib.aclosing(sub.messages())``,
        else when the event loop finalises it.

        Args:
            lease: seconds each message is leased for (and extended by). Defaults
                to the subscription's ``lease``.
            poll: seconds one receive waits for a message (long poll); 0 to 20. Defaults to 1.
            prefetch: messages taken per receive, 1 to ``capabilities.max_batch``. Defaults to 1.

        Raises:
            InvalidArgument: bad arguments, before any request.
        """
        return iterate(self, *iteration_args(self, lease, poll, prefetch))

    async def ack_many(self, messages: Iterable[AsyncMessage]) -> None:
        """Ack many messages in native batches (see :meth:`Subscription.ack_many`)."""
        deliveries = [_delivery_of(m) for m in messages]
        settler = self._settler
        for chunk in self._sync._ack_chunks(deliveries):
            results = await self._guard.acall(
                "ack", f"ack {len(chunk)} messages", self._aside.ack_many, [m._handle for m in chunk]
            )
            for message in self._sync._acked(chunk, results):
                await settler.call_with_handle(message, "ack", self._aside.ack)
                message._state = ACKED

    async def stats(self) -> QueueStats:
        """Approximate counts: available, in flight, delayed and dead letters (None where unknown)."""
        return await self._guard.acall("admin", f"stats of {redact(self.url)}", self._aside.stats)

    # -- the consumer loop ---------------------------------------------
    async def run(
        self,
        handler: Callable[[AsyncMessage], Any],
        *,
        concurrency: int = 1,
        max_deliveries: int | None = 5,
        idempotency: IdempotencyStore | Any | None = None,
        dead_letter: str | Topic | AsyncTopic | None = None,
        lease: float | None = None,
        backoff: float = 1.0,
        max_backoff: float = 300.0,
        poll: float = 1.0,
        drain_timeout: float = 30.0,
        stop_event: threading.Event | asyncio.Event | None = None,
        handle_signals: bool = True,
        idempotency_key: Callable[[Delivery], str | None] = default_idempotency_key,
        idempotency_lease: float = 60.0,
        idempotency_ttl: float = 7 * 86400.0,
    ) -> RunStats:
        """Receive and handle messages until stopped; return what was done.

        :meth:`Subscription.run`'s whole contract, with ``await handler(message)``
        (a coroutine function taking an :class:`AsyncMessage`) run as up to
        ``concurrency`` tasks: the same arguments, checks and errors; leases (and
        idempotency claims) extended while a handler runs; ack on return; nack
        with backoff on an exception; dead-letter at ``max_deliveries`` (native, or
        republished to ``dead_letter``); a message whose idempotency key is
        completed is acked without running the handler. A handler made by
        ``store.transactional(fn)`` is sync: ``fn(message, tx)`` runs in the
        thread pool with the sync Message.

        Stopping: :meth:`stop`, ``stop_event.set()`` (a ``threading.Event`` or an
        ``asyncio.Event``), SIGTERM/SIGINT (when called on the main thread and
        ``handle_signals``), or cancelling the task. The loop stops receiving,
        gives back (nack 0) what it holds but has not started, and lets running
        handlers finish within ``drain_timeout``; the handlers still running then
        are cancelled, and their messages are given back and their claims
        released: never acked, never dead-lettered (a handler cancelled mid-way
        counts as not run). A second signal (or cancel) stops waiting. Cancelled,
        ``run`` re-raises CancelledError after the drain; stopped otherwise, it
        returns the stats.

        ``idempotency`` is a sync store or a :class:`portable.aio.AsyncIdempotencyStore`;
        either way its claims are made on the sync store underneath, each call in
        the bounded thread pool (the claim bookkeeping is the sync loop's).

        Raises:
            InvalidArgument: bad arguments, or a ``handler`` that is not a coroutine function.
            ConfigError / MissingCapability: as :meth:`Subscription.run`, at start.
        """
        target = dead_letter.sync if isinstance(dead_letter, AsyncTopic) else dead_letter
        options = self._sync._run_options(
            cast("Callable[[Delivery], Any]", handler), concurrency=concurrency, max_deliveries=max_deliveries,
            idempotency=_sync_store(idempotency),
            dead_letter=target, lease=lease, backoff=backoff, max_backoff=max_backoff, poll=poll,
            drain_timeout=drain_timeout, idempotency_key=idempotency_key, idempotency_lease=idempotency_lease,
            idempotency_ttl=idempotency_ttl,
        )  # fmt: skip
        if options.transactional is None and not _is_coroutine_function(handler):
            raise InvalidArgument(
                "handler must be a coroutine function (async def) taking an AsyncMessage; for a sync "
                "function, use portable.messaging's Subscription.run, or wrap it: "
                "async def handler(m): await asyncio.to_thread(fn, m)"
            )
        if stop_event is not None and not isinstance(stop_event, threading.Event | asyncio.Event):
            raise InvalidArgument(f"stop_event must be a threading.Event or an asyncio.Event, got {type(stop_event).__name__}")
        consumer = AsyncConsumerLoop(self, options)
        stops = self._sync._stops
        with self._sync._stops_lock:
            stops.add(consumer.external)
        try:
            return await consumer.run(stop_event, handle_signals=handle_signals)
        finally:
            with self._sync._stops_lock:
                stops.discard(consumer.external)

    def stop(self) -> None:
        """Ask every running :meth:`run` loop of this subscription (either face's) to stop gracefully."""
        self._sync.stop()


def _sync_store(store: Any) -> IdempotencyStore | None:
    """The sync store of ``run(idempotency=)``: the store itself, or an async store's ``sync``."""
    underneath = getattr(store, "sync", None)
    if isinstance(underneath, IdempotencyStore) and inspect.iscoroutinefunction(getattr(store, "claim", None)):
        return underneath
    return cast("IdempotencyStore | None", store)


def _delivery_of(message: Any) -> Delivery:
    """The Delivery of an AsyncMessage (read by attribute, so a proxy of one serves too)."""
    delivery = getattr(message, "message", None)
    if not isinstance(delivery, Delivery):
        raise InvalidArgument(f"expected an AsyncMessage, got {type(message).__name__}")
    return delivery


def _is_coroutine_function(fn: object) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004


def open_topic(
    url: str | None = None, *, profile: str | Profile | None = None, policy: ResiliencePolicy | None = None
) -> AsyncTopic:
    """Open the publishing side of ``url`` (or of the active profile's ``queue``) for coroutines.

    Everything :func:`portable.messaging.open_topic` checks is checked, the same
    way (it opens the sync twin). Not a coroutine: use the result with ``async with``.

    Raises:
        UnknownScheme / MissingDependency / InvalidURL / ConfigError: before any request.
        MissingCapability: the profile requires what the provider lacks.
    """
    return AsyncTopic.from_sync(open_sync_topic(url, profile=profile, policy=policy))


def open_subscription(
    url: str | None = None,
    *,
    profile: str | Profile | None = None,
    policy: ResiliencePolicy | None = None,
    lease: float = DEFAULT_LEASE,
    dead_letter: str | Topic | AsyncTopic | None = None,
) -> AsyncSubscription:
    """Open the receiving side of ``url`` (or of the active profile's ``queue``) for coroutines.

    The arguments and checks of :func:`portable.messaging.open_subscription`
    (it opens the sync twin). Not a coroutine: use the result with ``async with``.

    Raises:
        UnknownScheme / MissingDependency / InvalidURL / ConfigError: before any request.
        MissingCapability: the profile requires what the provider lacks.
    """
    target = dead_letter.sync if isinstance(dead_letter, AsyncTopic) else dead_letter
    sync = open_sync_subscription(url, profile=profile, policy=policy, lease=lease, dead_letter=target)
    return AsyncSubscription.from_sync(sync)
