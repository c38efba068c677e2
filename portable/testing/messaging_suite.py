"""The messaging contract: what every :class:`~portable.messaging.Topic` /
:class:`~portable.messaging.Subscription` provider must do.

Use it by subclassing :class:`MessagingContract` and providing one fixture::

    class TestSQS(MessagingContract):
        xfail = {"test_ack_after_the_lease_was_lost_fails": "SQS accepts stale receipt handles"}

        @pytest.fixture
        def queue_url(self, moto_server, unique_name):
            url = create_queue(moto_server, unique_name)       # the adapter's own helper
            yield url
            delete_queue(url)

Fixture contract:
    ``queue_url`` (function scope) returns a URL that both ``open_topic`` and
    ``open_subscription`` accept, naming a topic and one subscription of it
    (a queue is both) that is **empty and fresh** for the test: every message
    published to the topic after the fixture returns reaches that subscription,
    and nothing else is there. Give it a dead-letter destination when the
    provider dead-letters natively (``capabilities.native_dead_letter``): the
    subscription's ``dead_letter_url`` must then open it as a subscription.
    Pub/Sub: create the subscription with message ordering on, so that the
    ordering test applies, and a dead-letter policy with a subscription on the
    dead-letter topic.

Class attributes a subclass may set:
    ``min_lease``: the shortest lease/nack delay, in seconds, the suite may use
        (defaults to ``max(1, capabilities.min_lease_seconds)``; Pub/Sub declares 1 s; its subclasses use 2).
        Tests that must not see a lease expire use many times it.
        Leases are rounded up to ``capabilities.lease_granularity_seconds``.
    ``delivery_timeout``: how long to poll for a published message to arrive
        (defaults to 10 seconds).
    ``max_deliveries``: the ``max_deliveries`` of the dead-letter tests
        (defaults to 2; Pub/Sub's dead-letter policy needs at least 5).
    ``xfail``: ``{"test_name": "the provider behaviour that causes it"}``.

Every test runs on two faces, ``[sync]`` and ``[async]``: on the async face the
fixtures open the :mod:`portable.aio` twins (``AsyncTopic``, ``AsyncSubscription``)
and hand the test a sync-looking proxy of them (:func:`portable.testing.faces.blocking`),
so one test body checks both; ``run()`` gets the test's handler as a coroutine
handler (it runs the sync body off the event loop, on a proxy of the AsyncMessage).
An ``xfail`` entry applies to both faces.

Tests of optional behaviour (ordering, native dead letters, lease extension,
publish dedup, nack delay, exactly-once acks) are skipped with the capability's
name when the provider does not claim it; a provider that claims a capability
and fails its test fails the suite. The suite opens the URL with a short retry
policy and no circuit breaker. It uses ``mem://`` queues for the portable
dead-letter path, so every provider is tested against it without setup.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ..aio import open_subscription as open_async_subscription
from ..aio import open_topic as open_async_topic
from ..cloudevents import CloudEvent
from ..config import Profile
from ..driver.messaging import IDEMPOTENCY_ATTRIBUTE, OutgoingMessage
from ..errors import InvalidArgument, InvalidKey, PreconditionFailed, TooLarge, Unsupported
from ..idempotency import MemoryStore, fingerprint
from ..messaging import (
    DEAD_LETTER_REASON,
    DELIVERY_ATTEMPTS,
    ORIGINAL_ID,
    Message,
    Subscription,
    Topic,
    open_driver,
    open_subscription,
    open_topic,
)
from ..resilience import ResiliencePolicy, RetryPolicy
from .faces import Blocking, LoopThread, unwrap

#: the faces every test runs on
FACES = ("sync", "async")

__all__ = ["MessagingContract", "contract_profile", "temporary_url"]


def contract_profile(url: str) -> Profile:
    """A profile for contract tests: a few quick retries, no breaker, no requirements."""
    return Profile(
        name="contract",
        storage="mem://contract",
        queue=url,
        jobs="local://./.portable/jobs",
        resilience=ResiliencePolicy(
            retry=RetryPolicy(max_attempts=3, initial_backoff=0.05, max_backoff=0.5), breaker=None
        ),
    )


def temporary_url(url: str, name: str) -> Iterator[str]:
    """``portable contract``'s hook: a fresh queue next to ``url`` for one test, removed after."""
    driver = open_driver(url)
    try:
        with driver.temporary(name) as temp:
            yield temp
    finally:
        driver.close()


def poll(
    sub: Subscription, count: int, timeout: float, *, lease: float | None = None, max_messages: int = 10
) -> list[Message]:
    """Receive until ``count`` messages arrived or ``timeout`` passed; return what came."""
    got: list[Message] = []
    until = time.monotonic() + timeout
    while len(got) < count:
        left = until - time.monotonic()
        if left <= 0:
            break
        got.extend(sub.receive(min(max_messages, count - len(got)), wait=min(left, 1.0), lease=lease))
    return got


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until true; fail the test with ``what`` after ``timeout``."""
    until = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > until:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)


def _faced_value(value: Any, runner: LoopThread) -> Any:
    """``value`` with each object of :mod:`portable.aio` in it (a list's items too) behind a proxy."""
    if isinstance(value, list):
        return [_faced_value(item, runner) for item in value]
    if type(value).__module__.startswith("portable.aio"):
        return _Faced(value, runner)
    return value


def _unwrapped(value: Any) -> Any:
    if isinstance(value, list):
        return [unwrap(item) for item in value]
    return unwrap(value)


class _Faced(Blocking):
    """:class:`~portable.testing.faces.Blocking` that also proxies the items of a list a call
    returns (``receive``) and unwraps those of a list it is given (``ack_many``)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        obj = object.__getattribute__(self, "_obj")
        attr = getattr(obj, name)
        if not callable(attr) or isinstance(attr, type):
            return attr
        runner: LoopThread = object.__getattribute__(self, "_runner")

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attr(*(_unwrapped(a) for a in args), **{k: _unwrapped(v) for k, v in kwargs.items()})
            if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                result = runner.run(result)
            return _faced_value(result, runner)

        call.__name__ = name
        return call


def faced(obj: Any) -> Any:
    """``obj`` (an AsyncTopic or AsyncSubscription) behind the suite's sync-looking proxy."""
    return _Faced(obj)


class _Runner:
    """Runs ``sub.run`` on a thread so a test can stop it and read its stats.

    On the async face (``sub`` is a proxy of an AsyncSubscription) the handler becomes a
    coroutine handler that runs the test's sync body in a worker thread, on a proxy of
    the AsyncMessage: what it asserts holds on both faces.
    """

    def __init__(self, sub: Subscription, handler: Callable[[Message], Any], **options: Any) -> None:
        self.stop = threading.Event()
        self.stats: Any = None
        self.error: BaseException | None = None
        run_handler: Callable[..., Any] = handler
        sync_handler: Callable[[Any], Any] = handler
        if isinstance(sub, Blocking):
            runner: LoopThread = object.__getattribute__(sub, "_runner")

            async def run_handler(m: Any) -> Any:
                return await asyncio.to_thread(sync_handler, _Faced(m, runner))

        def target() -> None:
            try:
                self.stats = sub.run(run_handler, stop_event=self.stop, handle_signals=False, **options)
            except BaseException as exc:  # surfaced by finish()
                self.error = exc

        self.thread = threading.Thread(target=target, name="contract-run", daemon=True)
        self.thread.start()

    def finish(self, timeout: float = 60.0) -> Any:
        self.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "run() did not return after stop"
        if self.error is not None:
            raise self.error
        return self.stats


class MessagingContract:
    """Mix-in with the messaging contract tests. Provide the ``queue_url`` fixture."""

    xfail: dict[str, str] = {}
    min_lease: float | None = None
    delivery_timeout: float = 10.0
    max_deliveries: int = 2

    # -- fixtures ---------------------------------------------------------
    @pytest.fixture(autouse=True, params=FACES)
    def face(self, request: pytest.FixtureRequest) -> str:
        """The face this test runs on: ``"sync"`` (portable.messaging) or ``"async"`` (portable.aio)."""
        face: str = request.param
        self._face = face
        return face

    def open_topic(self, url: str, **options: Any) -> Topic:
        """Open ``url``'s topic on this test's face (a proxy of an AsyncTopic on the async face)."""
        if getattr(self, "_face", "sync") == "async":
            return faced(open_async_topic(url, **options))  # type: ignore[no-any-return]
        return open_topic(url, **options)

    def open_subscription(self, url: str, **options: Any) -> Subscription:
        """Open ``url``'s subscription on this test's face (a proxy of an AsyncSubscription on the async face)."""
        if getattr(self, "_face", "sync") == "async":
            return faced(open_async_subscription(url, **options))  # type: ignore[no-any-return]
        return open_subscription(url, **options)

    @staticmethod
    def close(client: Topic | Subscription) -> None:
        """Close a topic or subscription of either face."""
        if isinstance(client, Blocking):
            client.aclose()
        else:
            client.close()

    @pytest.fixture
    def topic(self, queue_url: str, face: str) -> Iterator[Topic]:
        t = self.open_topic(queue_url, profile=contract_profile(queue_url))
        try:
            yield t
        finally:
            self.close(t)

    @pytest.fixture
    def subscription(self, queue_url: str, face: str) -> Iterator[Subscription]:
        s = self.open_subscription(queue_url, profile=contract_profile(queue_url), lease=self.lease_for(None, 30))
        try:
            yield s
        finally:
            self.close(s)

    def lease_for(self, sub: Subscription | None, factor: float = 1.0) -> float:
        """A short lease (or delay) the provider honours: ``factor`` times the minimum."""
        base = self.min_lease if self.min_lease is not None else 1.0
        if sub is not None:
            caps = sub.capabilities
            base = max(base, caps.min_lease_seconds)
            seconds = base * factor
            grain = caps.lease_granularity_seconds
            return math.ceil(seconds / grain) * grain if grain else seconds
        return base * factor

    @staticmethod
    def require(sub: Subscription | Topic, capability: str) -> None:
        if capability not in sub.capabilities.supported():
            pytest.skip(f"{sub.provider}:// does not claim the capability {capability}")

    def empty(self, sub: Subscription, wait: float = 0.5) -> bool:
        got = sub.receive(10, wait=wait, lease=self.lease_for(sub))
        for m in got:
            m.nack(0)
        return not got

    # -- publish and receive ---------------------------------------------
    def test_publish_then_receive_carries_body_attributes_and_key(
        self, topic: Topic, subscription: Subscription
    ) -> None:
        before = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        mid = topic.publish(b"hello \x00\xff", key="k-1", attributes={"kind": "greeting", "lang": "\u00e9t\u00e9"})
        assert isinstance(mid, str) and mid
        [m] = poll(subscription, 1, self.delivery_timeout)
        assert m.body == b"hello \x00\xff"
        assert m.key == "k-1"
        assert m.attributes["kind"] == "greeting"
        assert m.attributes["lang"] == "\u00e9t\u00e9"
        assert m.id == mid
        assert m.delivery_attempt == 1
        assert m.publish_time.tzinfo is not None
        assert before <= m.publish_time <= dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)
        m.ack()
        assert m.settled

    def test_acked_message_is_not_delivered_again(self, topic: Topic, subscription: Subscription) -> None:
        topic.publish(b"once")
        lease = self.lease_for(subscription)
        [m] = poll(subscription, 1, self.delivery_timeout, lease=lease)
        m.ack()
        assert subscription.receive(10, wait=lease + 0.5) == []

    def test_every_published_message_is_delivered_at_least_once(
        self, topic: Topic, subscription: Subscription
    ) -> None:
        bodies = {f"m-{i}".encode() for i in range(25)}
        ids = {topic.publish(b) for b in sorted(bodies)}
        assert len(ids) == 25
        seen: dict[str, bytes] = {}
        until = time.monotonic() + self.delivery_timeout * 2
        while set(seen) != ids and time.monotonic() < until:
            got = subscription.receive(10, wait=1.0)
            for m in got:
                seen[m.id] = m.body
            subscription.ack_many(got)
        assert set(seen) == ids
        assert set(seen.values()) == bodies

    def test_publish_batch_returns_ids_in_order(self, topic: Topic, subscription: Subscription) -> None:
        n = min(topic.capabilities.max_batch * 2 + 3, 53)
        items: list[bytes | OutgoingMessage] = [f"b-{i}".encode() for i in range(n - 1)]
        items.append(OutgoingMessage(b"last", {"pos": "last"}, key="kb"))
        ids = topic.publish_batch(items)
        assert len(ids) == n and len(set(ids)) == n
        got = poll(subscription, n, self.delivery_timeout * 2, max_messages=10)
        by_id = {m.id: m for m in got}
        assert set(by_id) == set(ids)
        assert by_id[ids[0]].body == b"b-0"
        assert by_id[ids[-1]].body == b"last"
        assert by_id[ids[-1]].attributes["pos"] == "last"
        assert by_id[ids[-1]].key == "kb"
        subscription.ack_many(got)

    def test_receive_waits_then_returns_nothing_on_an_empty_queue(self, subscription: Subscription) -> None:
        started = time.monotonic()
        assert subscription.receive(5, wait=0.5) == []
        assert time.monotonic() - started < 0.5 + 20

    def test_receive_returns_as_soon_as_a_message_is_there(self, topic: Topic, subscription: Subscription) -> None:
        """``receive(max_messages, wait)`` answers once one message is there, not when it has
        ``max_messages`` or when ``wait`` ends (engine=confluent asked librdkafka for
        max_messages with the whole wait, and held a ready message for all of it)."""
        self.empty(subscription)  # a consumer group member joins here
        mid = topic.publish(b"ready")
        wait = 30.0
        started = time.monotonic()
        got = subscription.receive(1000, wait=wait)
        took = time.monotonic() - started
        assert [m.id for m in got] == [mid]
        assert took < wait / 2, f"receive held a ready message {took:.1f} s of its {wait:.0f} s wait"
        subscription.ack_many(got)

    # -- leases -------------------------------------------------------------
    def test_unacked_message_is_delivered_again_after_its_lease(
        self, topic: Topic, subscription: Subscription
    ) -> None:
        mid = topic.publish(b"lease me")
        lease = self.lease_for(subscription)
        [first] = poll(subscription, 1, self.delivery_timeout, lease=lease)
        assert first.id == mid
        again = poll(subscription, 1, lease * 3 + self.delivery_timeout, lease=lease)
        assert [m.id for m in again] == [mid]
        if subscription.capabilities.delivery_count:
            assert again[0].delivery_attempt == 2
        else:
            assert again[0].delivery_attempt >= 1
        again[0].ack()

    def test_leased_message_is_not_delivered_to_another_consumer(
        self, topic: Topic, subscription: Subscription, queue_url: str
    ) -> None:
        topic.publish(b"mine")
        lease = self.lease_for(subscription, 3)
        [m] = poll(subscription, 1, self.delivery_timeout, lease=lease)
        other = self.open_subscription(queue_url, profile=contract_profile(queue_url))
        try:
            assert other.receive(10, wait=min(1.0, lease / 3)) == []
        finally:
            self.close(other)
        m.ack()

    def test_extend_lease_prevents_redelivery(self, topic: Topic, subscription: Subscription) -> None:
        self.require(subscription, "lease_extension")
        topic.publish(b"long job")
        lease = self.lease_for(subscription, 2)
        [m] = poll(subscription, 1, self.delivery_timeout, lease=lease)
        until = time.monotonic() + lease * 1.75
        while time.monotonic() < until:
            m.extend_lease(lease)
            assert subscription.receive(10, wait=lease / 4) == [], "an extended lease ran out"
        m.ack()

    def test_extend_lease_without_the_capability_is_unsupported(
        self, topic: Topic, subscription: Subscription
    ) -> None:
        if subscription.capabilities.lease_extension:
            pytest.skip(f"{subscription.provider}:// extends leases (tested above)")
        topic.publish(b"x")
        [m] = poll(subscription, 1, self.delivery_timeout)
        with pytest.raises(Unsupported):
            m.extend_lease(self.lease_for(subscription))
        m.ack()

    def test_nack_gives_the_message_back_at_once(self, topic: Topic, subscription: Subscription) -> None:
        mid = topic.publish(b"retry me")
        lease = self.lease_for(subscription, 5)
        [m] = poll(subscription, 1, self.delivery_timeout, lease=lease)
        m.nack()
        [again] = poll(subscription, 1, self.delivery_timeout, lease=lease)
        assert again.id == mid
        again.ack()

    def test_nack_with_delay_holds_the_message_back(self, topic: Topic, subscription: Subscription) -> None:
        self.require(subscription, "nack_delay")
        mid = topic.publish(b"later")
        delay = self.lease_for(subscription, 1.5)
        [m] = poll(subscription, 1, self.delivery_timeout, lease=delay * 4)
        nacked_at = time.monotonic()
        m.nack(delay=delay)
        early = subscription.receive(10, wait=delay * 0.5)
        assert early == [], "a message nacked with a delay came back before the delay"
        [again] = poll(subscription, 1, delay * 2 + self.delivery_timeout)
        assert again.id == mid
        assert time.monotonic() - nacked_at >= delay * 0.9
        again.ack()

    def test_ack_after_the_lease_was_lost_fails(self, topic: Topic, subscription: Subscription) -> None:
        self.require(subscription, "exactly_once")
        topic.publish(b"contended")
        lease = self.lease_for(subscription)
        [stale] = poll(subscription, 1, self.delivery_timeout, lease=lease)
        [fresh] = poll(subscription, 1, lease * 3 + self.delivery_timeout, lease=lease * 3)
        with pytest.raises(PreconditionFailed):
            stale.ack()
        fresh.ack()
        assert subscription.receive(10, wait=0.5) == []

    def test_settling_twice(self, topic: Topic, subscription: Subscription) -> None:
        topic.publish(b"twice")
        [m] = poll(subscription, 1, self.delivery_timeout)
        m.ack()
        m.ack()  # a second ack is a no-op
        with pytest.raises(InvalidArgument):
            m.nack()

    # -- ordering and dedup ---------------------------------------------
    def test_messages_with_one_key_are_handled_in_publish_order(
        self, topic: Topic, subscription: Subscription
    ) -> None:
        self.require(subscription, "ordering")
        keys = ["k-a", "k-b", "k-c"]
        for i in range(8):
            for k in keys:
                topic.publish(f"{k}:{i}".encode(), key=k)
        handled: dict[str, list[int]] = {k: [] for k in keys}
        lock = threading.Lock()

        def handler(m: Message) -> None:
            k, _, i = m.body.decode().partition(":")
            with lock:
                handled[k].append(int(i))
            time.sleep(0.005)

        runner = _Runner(subscription, handler, concurrency=4, lease=self.lease_for(subscription, 5), poll=0.5)
        wait_for(lambda: sum(map(len, handled.values())) >= 24, self.delivery_timeout * 3, "24 messages")
        stats = runner.finish()
        for k in keys:
            firsts = list(dict.fromkeys(handled[k]))
            assert firsts == list(range(8)), f"key {k} was handled out of order: {handled[k]}"
        assert stats.acked >= 24

    def test_idempotency_key_travels_as_an_attribute(self, topic: Topic, subscription: Subscription) -> None:
        topic.publish(b"order-1", idempotency_key="order-1")
        [m] = poll(subscription, 1, self.delivery_timeout)
        assert m.idempotency_key == "order-1"
        assert m.attributes[IDEMPOTENCY_ATTRIBUTE] == "order-1"
        m.ack()

    def test_publish_dedup_drops_a_repeat_within_the_window(
        self, topic: Topic, subscription: Subscription
    ) -> None:
        self.require(topic, "publish_dedup")
        first = topic.publish(b"pay 10", idempotency_key="pay-77")
        second = topic.publish(b"pay 10", idempotency_key="pay-77")
        assert second == first
        got = poll(subscription, 1, self.delivery_timeout)
        assert [m.id for m in got] == [first]
        got[0].ack()
        assert subscription.receive(10, wait=1.0) == []

    # -- dead letters and the consumer loop ------------------------------
    def _always_fails(self, calls: list[Message]) -> Callable[[Message], None]:
        def handler(m: Message) -> None:
            calls.append(m)
            raise RuntimeError(f"poison {m.body!r}")

        return handler

    def test_poison_message_goes_to_the_native_dead_letter_queue(
        self, topic: Topic, subscription: Subscription
    ) -> None:
        self.require(subscription, "native_dead_letter")
        dlq_url = subscription.dead_letter_url
        assert dlq_url, "a provider with native_dead_letter must name its dead-letter URL"
        mid = topic.publish(b"poison", key="pk", attributes={"origin": "contract"})
        calls: list[Message] = []
        runner = _Runner(
            subscription, self._always_fails(calls), max_deliveries=self.max_deliveries, backoff=0.0,
            lease=self.lease_for(subscription, 3), poll=0.5,
        )
        dlq = self.open_subscription(dlq_url, profile=contract_profile(dlq_url))
        try:
            dead = poll(dlq, 1, self.delivery_timeout * 3 + self.max_deliveries * self.lease_for(subscription))
            stats = runner.finish()
            assert len(dead) == 1
            assert dead[0].body == b"poison"
            assert dead[0].attributes.get("origin") == "contract"
            reason = dead[0].attributes.get(DEAD_LETTER_REASON)
            if reason is not None:
                assert "RuntimeError" in reason
            dead[0].ack()
        finally:
            self.close(dlq)
        assert len(calls) == self.max_deliveries
        assert stats.dead_lettered == 1
        assert self.empty(subscription)
        del mid

    def test_poison_message_is_republished_to_the_configured_dead_letter_topic(
        self, topic: Topic, subscription: Subscription, unique_name: str
    ) -> None:
        dlq_url = f"mem://{unique_name}-dlq"
        mid = topic.publish(b"poison", key="pk", attributes={"origin": "contract"})
        calls: list[Message] = []
        runner = _Runner(
            subscription, self._always_fails(calls), max_deliveries=self.max_deliveries, backoff=0.0,
            lease=self.lease_for(subscription, 3), poll=0.5, dead_letter=dlq_url,
        )
        dlq = self.open_subscription(dlq_url)
        dead = poll(dlq, 1, self.delivery_timeout * 3 + self.max_deliveries * self.lease_for(subscription))
        stats = runner.finish()
        assert len(dead) == 1
        d = dead[0]
        assert d.body == b"poison"
        assert d.key == "pk"
        assert d.attributes["origin"] == "contract"
        assert "RuntimeError: poison" in d.attributes[DEAD_LETTER_REASON]
        assert d.attributes[DELIVERY_ATTEMPTS] == str(self.max_deliveries)
        assert d.attributes[ORIGINAL_ID] == mid
        assert len(calls) == self.max_deliveries
        assert stats.failed == self.max_deliveries and stats.dead_lettered == 1
        assert self.empty(subscription)

    def test_run_acks_what_succeeds_and_retries_what_fails_once(
        self, topic: Topic, subscription: Subscription
    ) -> None:
        ids = set(topic.publish_batch([f"job-{i}".encode() for i in range(12)]))
        attempts: dict[str, int] = {}
        lock = threading.Lock()

        def handler(m: Message) -> None:
            with lock:
                attempts[m.id] = attempts.get(m.id, 0) + 1
                first = attempts[m.id] == 1
            if first and m.body.endswith(b"3"):
                raise ValueError("transient")

        runner = _Runner(subscription, handler, concurrency=3, max_deliveries=5, backoff=0.0, poll=0.5)
        wait_for(lambda: set(attempts) == ids and sum(attempts.values()) >= 13,
                 self.delivery_timeout * 3, "every message to be handled")
        stats = runner.finish()
        assert stats.acked == 12
        assert stats.failed == 1 and stats.nacked == 1
        assert self.empty(subscription)

    def test_run_skips_a_message_whose_idempotency_key_is_completed(
        self, topic: Topic, subscription: Subscription
    ) -> None:
        store = MemoryStore()
        claim = store.claim("done-1", fingerprint(b"charge"), lease=30, ttl=600)
        assert claim.token is not None
        store.complete("done-1", claim.token, None)
        topic.publish(b"charge", idempotency_key="done-1")
        topic.publish(b"charge", idempotency_key="new-2")
        handled: list[str | None] = []
        runner = _Runner(subscription, lambda m: handled.append(m.idempotency_key), idempotency=store, poll=0.5)
        wait_for(lambda: handled == ["new-2"], self.delivery_timeout * 2, "the new message to be handled")
        wait_for(lambda: self.empty(subscription, 0.2), self.delivery_timeout, "the queue to drain")
        stats = runner.finish()
        assert handled == ["new-2"]
        assert stats.skipped == 1 and stats.acked == 2
        assert store.claim("new-2", fingerprint(b"charge"), lease=30, ttl=600).status == "completed"

    def test_run_stops_gracefully_and_never_acks_unhandled_messages(
        self, topic: Topic, subscription: Subscription
    ) -> None:
        ids = topic.publish_batch([f"s-{i}".encode() for i in range(6)])
        started = threading.Event()
        release = threading.Event()
        handled: list[str] = []

        def handler(m: Message) -> None:
            started.set()
            release.wait(30)
            handled.append(m.id)

        runner = _Runner(subscription, handler, concurrency=1, lease=self.lease_for(subscription, 5), poll=0.5)
        assert started.wait(self.delivery_timeout * 2), "the handler never started"
        runner.stop.set()
        release.set()
        stats = runner.finish()
        assert len(handled) >= 1
        assert stats.acked == len(handled)
        assert stats.unfinished == 0
        rest = poll(subscription, len(ids) - len(handled), self.delivery_timeout * 2, lease=self.lease_for(subscription, 5))
        assert {m.id for m in rest} | set(handled) == set(ids)
        assert not {m.id for m in rest} & set(handled), "a handled (acked) message came back"
        subscription.ack_many(rest)

    # -- CloudEvents -----------------------------------------------------
    @pytest.mark.parametrize("mode", ["binary", "structured"])
    def test_cloudevents_round_trip(self, topic: Topic, subscription: Subscription, mode: str) -> None:
        event = CloudEvent(
            id=str(uuid.uuid4()), source="/contract/orders", type="order.created", data=b'{"n":1}',
            datacontenttype="application/json", subject="o-1",
            time=dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), extensions={"tenant": "t1"},
        )
        topic.publish_event(event, mode=mode)  # type: ignore[arg-type]
        [m] = poll(subscription, 1, self.delivery_timeout)
        assert m.event() == event
        assert m.idempotency_key == event.dedup_key()
        m.ack()

    # -- bad input -------------------------------------------------------
    def test_too_large_message_is_refused_before_sending(self, topic: Topic, subscription: Subscription) -> None:
        limit = topic.capabilities.max_message_bytes
        with pytest.raises(TooLarge):
            topic.publish(b"x" * (limit + 1))
        with pytest.raises(TooLarge):
            topic.publish(b"x" * (limit - 4), attributes={"pad": "12345678"})
        with pytest.raises(TooLarge):
            topic.publish_batch([b"ok", b"x" * (limit + 1)])
        assert self.empty(subscription)

    def test_the_largest_message_is_delivered(self, topic: Topic, subscription: Subscription) -> None:
        size = min(topic.capabilities.max_message_bytes, 256 * 1024)
        body = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
        topic.publish(body)
        [m] = poll(subscription, 1, self.delivery_timeout)
        assert m.body == body
        m.ack()

    @pytest.mark.parametrize(
        ("kwargs", "error"),
        [
            ({"body": "text"}, InvalidArgument),
            ({"body": 42}, InvalidArgument),
            ({"body": None}, InvalidArgument),
            ({"attributes": {"": "v"}}, InvalidKey),
            ({"attributes": {"has space": "v"}}, InvalidKey),
            ({"attributes": {"a..b": "v"}}, InvalidKey),
            ({"attributes": {"trailing.": "v"}}, InvalidKey),
            ({"attributes": {"portable.mine": "v"}}, InvalidKey),
            ({"attributes": {"googThing": "v"}}, InvalidKey),
            ({"attributes": {"AWS.trace": "v"}}, InvalidKey),
            ({"attributes": {"x" * 129: "v"}}, InvalidKey),
            ({"attributes": {1: "v"}}, InvalidKey),
            ({"attributes": {"n": 1}}, InvalidArgument),
            ({"attributes": {"n": ""}}, InvalidArgument),
            ({"attributes": {"n": "a\x00b"}}, InvalidArgument),
            ({"attributes": {"n": "v" * 1025}}, InvalidArgument),
            ({"attributes": ["n", "v"]}, InvalidArgument),
            ({"attributes": {f"a{i}": "v" for i in range(1001)}}, InvalidArgument),
            ({"key": ""}, InvalidKey),
            ({"key": "has space"}, InvalidKey),
            ({"key": "k" * 129}, InvalidKey),
            ({"key": 7}, InvalidKey),
            ({"idempotency_key": "\u00e9"}, InvalidKey),
            ({"idempotency_key": ""}, InvalidKey),
        ],
    )
    def test_bad_publish_input_raises_a_typed_error_before_sending(
        self, topic: Topic, subscription: Subscription, kwargs: dict[str, Any], error: type[Exception]
    ) -> None:
        args = {"body": b"ok", **kwargs}
        body = args.pop("body")
        with pytest.raises(error) as info:
            topic.publish(body, **args)
        assert str(info.value)
        with pytest.raises(error):
            topic.publish_batch([b"fine", OutgoingMessage(body, args.get("attributes") or {}, args.get("key"),
                                                          args.get("idempotency_key"))])

    def test_bad_input_sends_nothing(self, topic: Topic, subscription: Subscription) -> None:
        for body, attributes in ((b"ok", {"bad name": "v"}), ("text", None), (b"ok", {"n": 1})):
            with pytest.raises(InvalidArgument):
                topic.publish(body, attributes=attributes)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument):
                topic.publish_batch([b"first is fine", OutgoingMessage(body, attributes or {})])  # type: ignore[arg-type]
        assert self.empty(subscription)

    def test_bad_receive_and_settle_input_raises_typed_errors(
        self, topic: Topic, subscription: Subscription
    ) -> None:
        for bad in (0, -1, 1001, 2.0, "3"):
            with pytest.raises(InvalidArgument):
                subscription.receive(bad)  # type: ignore[arg-type]
        for wait in (-1, float("nan"), "1"):
            with pytest.raises(InvalidArgument):
                subscription.receive(1, wait=wait)  # type: ignore[arg-type]
        for lease in (0, -5, subscription.capabilities.max_lease_seconds + 1, float("inf")):
            with pytest.raises(InvalidArgument):
                subscription.receive(1, lease=lease)
        with pytest.raises(InvalidArgument):
            subscription.run("not callable")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            subscription.run(lambda m: None, concurrency=0)
        with pytest.raises(InvalidArgument):
            subscription.run(lambda m: None, max_deliveries=0)
        topic.publish(b"settle")
        [m] = poll(subscription, 1, self.delivery_timeout)
        with pytest.raises(InvalidArgument):
            m.nack(delay=-1)
        with pytest.raises(InvalidArgument):
            m.nack(delay=subscription.capabilities.max_lease_seconds + 1)
        if subscription.capabilities.lease_extension:
            with pytest.raises(InvalidArgument):
                m.extend_lease(0)
        with pytest.raises(InvalidArgument):
            m.dead_letter("")
        m.ack()

    def test_run_without_any_dead_letter_destination_fails_at_start(self, queue_url: str) -> None:
        sub = self.open_subscription(queue_url, profile=contract_profile(queue_url))
        try:
            if sub.capabilities.native_dead_letter:
                pytest.skip(f"{sub.provider}:// has a native dead-letter queue")
            from ..errors import ConfigError

            with pytest.raises(ConfigError):
                sub.run(lambda m: None, max_deliveries=3, handle_signals=False)
        finally:
            self.close(sub)

