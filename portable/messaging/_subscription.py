"""The receiving side: :class:`Subscription` and :func:`open_subscription`."""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterable
from typing import Any, cast

from ..config import Profile
from ..driver.idempotency import IdempotencyStore, TransactionalHandler
from ..driver.messaging import (
    ACKED,
    LEASED,
    MAX_RECEIVE,
    Delivery,
    MessagingDriver,
    QueueStats,
    ReceivedMessage,
    SubscriptionDriver,
)
from ..driver.redaction import redact
from ..errors import ConfigError, InvalidArgument, MissingCapability, PortableError
from ..resilience import ResiliencePolicy
from ._claims import default_idempotency_key
from ._consumer import (
    ConsumerLoop,
    RunStats,
    stop_on_signals,
)
from ._handling import RunOptions
from ._message import Message, MessageSettler
from ._open import MessagingClient, Resolved
from ._topic import Topic, open_topic
from ._validation import check_lease, check_seconds
from ._window import acked_in_batch

#: Seconds a received message stays leased unless ``lease`` says otherwise.
DEFAULT_LEASE = 30.0
#: the longest wait one driver call is asked for; longer waits loop
_MAX_WAIT_SLICE = 20.0

#: what ``Subscription._receive_plan`` yields (one driver call's arguments), is sent and returns
ReceivePlan = Generator[tuple[int, float, float], "list[ReceivedMessage] | list[Delivery]", "list[Message]"]


def _tell_owner_gone(side: weakref.ref[SubscriptionDriver]) -> None:
    """A Subscription was collected: tell its driver, if still alive (see ``SubscriptionDriver.owner_gone``)."""
    driver = side()
    if driver is not None:
        driver.owner_gone()


class DeadLetterTarget:
    """The portable dead-letter topic of one Subscription's messages: the one given for a
    message, else the configured one (opened when first needed), else None for the
    provider's native dead-letter queue.

    The Subscription's settler calls this, not a method of the Subscription: a message
    refers to its settler, and nothing it refers to may lead back to the Subscription (see
    :meth:`~portable.driver.messaging.SubscriptionDriver.owner_gone`).
    """

    __slots__ = ("_configured", "_native", "_policy", "_provider", "_topic")

    def __init__(
        self, configured: str | Topic | None, *, policy: ResiliencePolicy | None, native: bool, provider: str
    ) -> None:
        self._configured = configured
        self._policy = policy
        self._native = native
        self._provider = provider
        self._topic: Topic | None = configured if isinstance(configured, Topic) else None

    def __call__(self, override: str | Topic | None) -> Topic | None:
        """The portable DLQ topic to republish to, or None to use the native one.

        Raises:
            ConfigError: there is neither.
        """
        if override is not None:
            return override if isinstance(override, Topic) else open_topic(override, policy=self._policy)
        if self._native:
            return None
        if self._topic is None and isinstance(self._configured, str):
            self._topic = open_topic(self._configured, policy=self._policy)
        if self._topic is None:
            raise ConfigError(
                f"{self._provider}:// has no native dead-letter queue: give a dead_letter= URL to "
                "open_subscription() or run(), or set the profile's dead_letter"
            )
        return self._topic


class Subscription(MessagingClient[SubscriptionDriver]):
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
        super().__init__(driver, subscription, url=url, policy=policy, action="receive from")
        self._policy = policy
        self.lease = check_lease(lease, self.capabilities, self.provider)
        self.dead_letter = dead_letter
        self._dead_letters = DeadLetterTarget(
            dead_letter, policy=policy, native=self.capabilities.native_dead_letter, provider=self.provider
        )
        self._stops: set[threading.Event] = set()
        self._stops_lock = threading.Lock()
        # what messages refer to (the settler, and through it the driver) never refers back to this
        # Subscription, so that it is collected when the application drops it with messages in
        # flight; the driver then hears of it (owner_gone: see SubscriptionDriver)
        self._settler = MessageSettler(
            subscription, self._guard, capabilities=self.capabilities, provider=self.provider, url=url,
            dead_letter_target=self._dead_letters,
        )  # fmt: skip
        if type(subscription).owner_gone is not SubscriptionDriver.owner_gone:
            # the driver is held weakly: were anything of it to refer to this Subscription after all,
            # a strong hold from the finalizer registry would keep both alive for good
            weakref.finalize(self, _tell_owner_gone, weakref.ref(subscription)).atexit = False

    @property
    def _driver_sub(self) -> SubscriptionDriver:
        """The receiving side's driver."""
        return self._side

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
        plan = self._receive_plan(max_messages, wait, lease)
        fetch = self._side.receive
        try:
            request = next(plan)
            while True:
                request = plan.send(self._guard.call("receive", self._what, fetch, *request))
        except StopIteration as done:
            received: list[Message] = done.value
            return received

    def _receive_plan(self, max_messages: object, wait: object, lease: object) -> ReceivePlan:
        """``receive(max_messages, wait, lease=)`` as a plan both faces follow: it checks the
        arguments, yields each driver call's ``(max_messages, wait, lease)``, is sent what the
        call returned, and returns the messages, leased and settled through this subscription.

        Raises:
            InvalidArgument: bad arguments (at the first ``next``, before any request).
        """
        if type(max_messages) is not int or not 1 <= max_messages <= MAX_RECEIVE:
            raise InvalidArgument(f"max_messages must be an int from 1 to {MAX_RECEIVE}, got {max_messages!r}")
        deadline = time.monotonic() + check_seconds("wait", wait)
        lease_s = self.lease if lease is None else check_lease(lease, self.capabilities, self.provider)
        batch = self.capabilities.max_batch
        settler = self._settler
        out: list[Message] = []
        while True:
            left = max(0.0, deadline - time.monotonic()) if not out else 0.0
            ask = min(batch, max_messages - len(out))
            got = yield (ask, min(left, _MAX_WAIT_SLICE), lease_s)
            ends = time.monotonic() + lease_s
            if got and isinstance(got[0], Delivery):  # the driver made the messages: adopt them
                messages = got
            else:
                messages = [Delivery(record) for record in cast("list[ReceivedMessage]", got)]
            for m in messages:
                m._settler = settler
                m._state = LEASED
                m._lease_ends = ends
            out += messages
            if len(out) >= max_messages or (out and len(got) < ask):
                return out
            if not out and time.monotonic() >= deadline:
                return out

    def ack_many(self, messages: Iterable[Message]) -> None:
        """Ack many messages in native batches (SQS DeleteMessageBatch, Pub/Sub acknowledge).

        A failed ack is retried on its own; the first that still fails raises.
        """
        for chunk in self._ack_chunks(messages):
            results = self._guard.call(
                "ack", f"ack {len(chunk)} messages", self._side.ack_many, [m._handle for m in chunk]
            )
            for message in self._acked(chunk, results):
                self._settler.call_with_handle(message, "ack", self._side.ack)
                message._state = ACKED

    def _ack_each(self, messages: list[Message]) -> list[PortableError | None]:
        """Ack ``messages`` in native batches; each one's error (or None), never raising (the consumer loop's
        batched settlement). A message whose batched ack failed is acked again on its own; one no longer
        leased (settled meanwhile) is left alone."""
        out: list[PortableError | None] = [None] * len(messages)
        index: list[int] | None = None  # where each pending message is in ``messages`` (None: the same place)
        pending = messages
        if not all(m._state is LEASED for m in messages):
            index = [i for i, m in enumerate(messages) if m._state is LEASED]
            pending = [messages[i] for i in index]
        batch = self.capabilities.max_batch
        settler = self._settler
        for start in range(0, len(pending), batch):
            chunk = pending[start : start + batch]
            try:
                results: list[BaseException | None] = self._guard.call(
                    "ack", f"ack {len(chunk)} messages", self._side.ack_many, [m._handle for m in chunk]
                )
            except PortableError:
                again = list(enumerate(chunk, start))
            else:
                if len(results) == len(chunk) and results.count(None) == len(chunk):
                    for m in chunk:
                        m._state = ACKED
                    continue
                again = acked_in_batch(list(enumerate(chunk, start)), results)
            for i, m in again:
                try:
                    settler.ack(m)
                except PortableError as exc:
                    out[i if index is None else index[i]] = exc
        return out

    def _ack_chunks(self, messages: Iterable[Message]) -> list[list[Message]]:
        """The messages of ``ack_many`` still to ack, in driver calls of ``capabilities.max_batch``.

        Raises:
            InvalidArgument: one was already nacked or dead-lettered (nothing is sent).
        """
        settler = self._settler
        pending = [m for m in messages if m._state is LEASED or settler.may_settle(m, ACKED)]
        batch = self.capabilities.max_batch
        return [pending[start : start + batch] for start in range(0, len(pending), batch)]

    def _acked(self, chunk: list[Message], results: list[BaseException | None]) -> list[Message]:
        """Mark what the driver acked in ``chunk``; return the messages to ack again one by one.

        Raises:
            PortableError: an ack failed for good (those before it are acked).
        """
        if len(results) == len(chunk) and results.count(None) == len(chunk):
            for message in chunk:
                message._state = ACKED
            return []
        again: list[Message] = []
        for message, result in zip(chunk, results, strict=True):
            if result is None:
                message._state = ACKED
                continue
            err = self._guard.wrap(f"ack {message.id}", result)
            if not err.retryable:
                raise err from (None if err is result else result)
            again.append(message)
        return again

    def stats(self) -> QueueStats:
        """Approximate counts: available, in flight, delayed and dead letters (None where unknown)."""
        return self._guard.call("admin", f"stats of {redact(self.url)}", self._side.stats)

    # -- dead letters --------------------------------------------------
    @property
    def dead_letter_url(self) -> str | None:
        """The URL of the native dead-letter destination (opens as a subscription), else the configured one."""
        native = self._side.dead_letter_url() if self.capabilities.native_dead_letter else None
        if native:
            return native
        if isinstance(self.dead_letter, Topic):
            return self.dead_letter.url
        return self.dead_letter

    def _dead_letter_target(self, override: str | Topic | None) -> Topic | None:
        """The portable DLQ topic to republish to, or None to use the native one (see :class:`DeadLetterTarget`)."""
        return self._dead_letters(override)

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
          attributes plus ``portable.dead_letter_reason``, which says what happened:
          how often the handler failed, with the last error, or never finished);
        * a message delivered more than ``max_deliveries`` times (a consumer kept
          crashing on it) is dead-lettered without running the handler;
        * with ``idempotency``: a message whose key (``idempotency_key(message)``:
          by default its ``portable.idempotency_key`` or CloudEvent source+id) is
          already completed is acked without running the handler; one in progress
          elsewhere is nacked until that claim's lease ends (``deferred``), which is
          not counted: the attempt that ``max_deliveries`` and the backoff count is
          the number of times the handler *started* for the key (the store's
          :attr:`~portable.driver.idempotency.Claim.starts`; a consumer killed
          mid-handler is a start that never finished), not the provider's
          ``delivery_attempt``. Otherwise the handler runs under the claim, then
          ``complete(key, token, result)`` (the handler's return value if it is
          bytes) and ack; on failure ``release`` and nack; when dead-lettered, the
          claim's counts are dropped (``forget``), so a redriven copy starts
          afresh. A key reused with a different body (IdempotencyConflict) is
          dead-lettered. A store that does not count starts (a third-party one
          whose claims carry no ``starts``) leaves the decision to ``delivery_attempt``.
          A handler made by ``store.transactional(fn)`` (``SqliteStore``,
          ``BucketStore``) runs ``fn(message, tx)`` so that its effect commits with the
          claim's completion: see docs/messaging.md, "Exactly once: what holds after a crash".

        Messages with the same ``key`` are handled one at a time, in order.
        Where the provider cannot extend leases (``capabilities.lease_extension``
        is False), a handler must finish within ``lease``.

        Stopping: :meth:`stop`, ``stop_event.set()``, or SIGTERM/SIGINT (handlers are
        installed only when called from the main thread and ``handle_signals``). The
        loop stops receiving, releases (nacks at once) what it holds but has not
        started, and waits up to ``drain_timeout`` seconds for running handlers to
        finish and settle. A second signal stops waiting. A message it did not handle
        is never acked.

        Where the subscription cannot count deliveries (``capabilities.delivery_count``
        is False: Pub/Sub without a dead-letter policy reports attempt 1 forever),
        ``max_deliveries`` needs ``idempotency``: the loop then counts the handler's
        starts per message in the store, under the message's idempotency key or,
        for a message without one, under ``portable.message-id:<id>`` (one record
        per message, kept ``idempotency_ttl``). The bound is then exact per key
        for as long as its record lives; a message still coming back after its
        record expired is counted from 1 again.

        Raises:
            ConfigError: ``max_deliveries`` is set but there is no dead-letter
                destination (checked at start).
            MissingCapability: ``max_deliveries`` is set, the subscription cannot
                count deliveries and no ``idempotency`` store is given (checked at start).
            InvalidArgument: bad arguments; a ``transactional`` handler whose store is
                not ``idempotency``.
        """
        options = self._run_options(
            handler, concurrency=concurrency, max_deliveries=max_deliveries, idempotency=idempotency,
            dead_letter=dead_letter, lease=lease, backoff=backoff, max_backoff=max_backoff, poll=poll,
            drain_timeout=drain_timeout, idempotency_key=idempotency_key, idempotency_lease=idempotency_lease,
            idempotency_ttl=idempotency_ttl,
        )  # fmt: skip
        stop = stop_event or threading.Event()
        consumer = ConsumerLoop(self, self._settler, options, stop)
        with self._stops_lock:
            self._stops.add(stop)
        try:
            with stop_on_signals(consumer) if handle_signals else contextlib.nullcontext():
                return consumer.run()
        finally:
            with self._stops_lock:
                self._stops.discard(stop)

    def _run_options(
        self,
        handler: Callable[[Message], Any],
        *,
        concurrency: int,
        max_deliveries: int | None,
        idempotency: IdempotencyStore | None,
        dead_letter: str | Topic | None,
        lease: float | None,
        backoff: float,
        max_backoff: float,
        poll: float,
        drain_timeout: float,
        idempotency_key: Callable[[Message], str | None],
        idempotency_lease: float,
        idempotency_ttl: float,
    ) -> RunOptions:
        """``run()``'s arguments checked and normalised (both faces call it); see :meth:`run`.

        Raises:
            InvalidArgument / ConfigError / MissingCapability: as :meth:`run` says, before any request.
        """
        if not callable(handler):
            raise InvalidArgument("handler must be a callable taking a Message")
        if type(concurrency) is not int or not 1 <= concurrency <= 1024:
            raise InvalidArgument(f"concurrency must be an int from 1 to 1024, got {concurrency!r}")
        if max_deliveries is not None and (type(max_deliveries) is not int or max_deliveries < 1):
            raise InvalidArgument(f"max_deliveries must be an int >= 1 or None, got {max_deliveries!r}")
        backoff_s = check_seconds("backoff", backoff)
        max_backoff_s = check_seconds("max_backoff", max_backoff)
        poll_s = check_seconds("poll", poll)
        drain_timeout_s = check_seconds("drain_timeout", drain_timeout)
        claim_lease_s = check_seconds("idempotency_lease", idempotency_lease)
        claim_ttl_s = check_seconds("idempotency_ttl", idempotency_ttl)
        if not 0 < claim_lease_s <= claim_ttl_s:
            raise InvalidArgument(
                f"idempotency_lease must be > 0 and at most idempotency_ttl ({idempotency_ttl}), got {idempotency_lease}"
            )
        if isinstance(handler, TransactionalHandler) and handler.store is not cast(Any, idempotency):
            raise InvalidArgument(
                "a handler made by store.transactional() commits with that store's claims: "
                "pass the same store as run(..., idempotency=store)"
            )
        counting_here = max_deliveries is not None and not self.capabilities.delivery_count
        if counting_here and idempotency is None:
            raise MissingCapability(
                f"{redact(self.url) or self.provider}: this subscription cannot count deliveries "
                f"(capabilities.delivery_count is False), so run(max_deliveries={max_deliveries}) would "
                "never dead-letter a poison message. Configure a dead-letter policy on the subscription "
                "(Pub/Sub: gcloud pubsub subscriptions update SUB --dead-letter-topic=TOPIC "
                "--max-delivery-attempts=N), or pass idempotency=store so run() counts the handler's "
                "starts itself, or pass max_deliveries=None",
                provider=self.provider,
            )
        lease_s = self.lease if lease is None else check_lease(lease, self.capabilities, self.provider)
        target = self._dead_letter_target(dead_letter) if max_deliveries is not None else None
        return RunOptions(
            handler=handler, concurrency=concurrency, max_deliveries=max_deliveries, idempotency=idempotency,
            target=target, lease=lease_s, backoff=backoff_s, max_backoff=max_backoff_s,
            poll=min(poll_s, _MAX_WAIT_SLICE), drain_timeout=drain_timeout_s, idempotency_key=idempotency_key,
            idempotency_lease=claim_lease_s, idempotency_ttl=claim_ttl_s, count_by_message_id=counting_here,
            max_lease_seconds=self.capabilities.max_lease_seconds,
        )  # fmt: skip

    def stop(self) -> None:
        """Ask every running :meth:`run` loop of this subscription to stop gracefully."""
        with self._stops_lock:
            for event in self._stops:
                event.set()


def open_subscription(
    url: str | None = None,
    *,
    profile: str | Profile | None = None,
    policy: ResiliencePolicy | None = None,
    lease: float = DEFAULT_LEASE,
    dead_letter: str | Topic | None = None,
) -> Subscription:
    """Open the receiving side of ``url``, or of the active profile's ``queue``.

    The profile's ``requires`` are checked now (MissingCapability) and its
    resilience policy applies unless ``policy`` is given.

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
    where = Resolved.of(url, profile, policy)
    side = where.open("subscription", where.driver.subscription)
    if dead_letter is None and (url is None or url == where.profile.queue):
        dead_letter = where.profile.dead_letter
    return Subscription(
        where.driver, side, url=where.url, policy=where.policy, lease=lease, dead_letter=dead_letter
    )
