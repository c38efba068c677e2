"""portable.aio messaging: AsyncTopic, AsyncSubscription, AsyncMessage on real embedded queues.

The whole messaging contract runs on the async face in tests/messaging/test_contract.py and the
adapters' contract tests (the ``[async]`` ids); this file checks what is particular to the face:
the same typed errors as sync before any request, ``from_sync`` sharing the guard, lifetimes,
``async for`` (leases kept while held, given back on leaving) and cancelled receives.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import portable.aio as aio
import portable.messaging as pm
from portable.driver.aio_messaging import (
    AsyncQueueDriver,
    AsyncSubscriptionDriver,
    AsyncTopicDriver,
    async_subscription_of,
    async_topic_of,
)
from portable.driver.messaging import OutgoingMessage
from portable.errors import InvalidArgument, InvalidKey, PortableError, TooLarge, Unsupported


@pytest.fixture
def sqlite_url(tmp_path: Path, unique_name: str) -> str:
    return f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"


class CountingTopicDriver(AsyncTopicDriver):
    """The thread-adapted async side, counting the requests that reach it."""

    def __init__(self, sync: Any) -> None:
        super().__init__(sync)
        self.calls = 0

    async def publish(self, message: OutgoingMessage) -> str:
        self.calls += 1
        return await super().publish(message)

    async def publish_batch(self, messages: Iterable[OutgoingMessage]) -> list[str | BaseException]:
        self.calls += 1
        return await super().publish_batch(messages)


BAD_PUBLISH = [
    ({"body": "text"}, InvalidArgument),
    ({"body": None}, InvalidArgument),
    ({"attributes": {"has space": "v"}}, InvalidKey),
    ({"attributes": {"portable.mine": "v"}}, InvalidKey),
    ({"attributes": {"n": 1}}, InvalidArgument),
    ({"attributes": {"n": "a\x00b"}}, InvalidArgument),
    ({"key": "has space"}, InvalidKey),
    ({"idempotency_key": ""}, InvalidKey),
    ({"body": b"x" * (16 * 1024 * 1024 + 1)}, TooLarge),
]


@pytest.mark.parametrize(("kwargs", "error"), BAD_PUBLISH)
def test_bad_publish_input_raises_what_sync_raises_before_any_request(
    sqlite_url: str, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    args = {"body": b"ok", **kwargs}
    body = args.pop("body")
    with pm.open_topic(sqlite_url) as sync_topic, pytest.raises(error) as sync_info:
        sync_topic.publish(body, **args)

    async def main() -> tuple[BaseException, BaseException, int]:
        async with aio.open_topic(sqlite_url) as topic:
            counting = CountingTopicDriver(topic.sync._side)
            topic._aside = counting
            with pytest.raises(error) as one:
                await topic.publish(body, **args)
            with pytest.raises(error) as batch:
                await topic.publish_batch([b"fine", OutgoingMessage(body, args.get("attributes") or {}, args.get("key"),
                                                                   args.get("idempotency_key"))])
            return one.value, batch.value, counting.calls

    one, batch, calls = asyncio.run(main())
    assert type(one) is type(sync_info.value) and str(one) == str(sync_info.value)
    assert isinstance(batch, error)
    assert calls == 0, "bad input reached the driver"
    with pm.open_subscription(sqlite_url) as sub:
        assert sub.receive(10) == []


def test_bad_receive_settle_and_run_input_raises_what_sync_raises(sqlite_url: str) -> None:
    async def main() -> None:
        async with aio.open_topic(sqlite_url) as topic, aio.open_subscription(sqlite_url) as sub:
            for bad in (0, 1001, 2.0, "3"):
                with pytest.raises(InvalidArgument, match="max_messages"):
                    await sub.receive(bad)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument, match="wait"):
                await sub.receive(1, wait=float("nan"))
            with pytest.raises(InvalidArgument, match="lease"):
                await sub.receive(1, lease=0)
            with pytest.raises(InvalidArgument, match="handler must be a callable"):
                await sub.run("not callable")  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument, match="concurrency"):
                await sub.run(_noop, concurrency=0)
            with pytest.raises(InvalidArgument, match="coroutine function"):
                await sub.run(lambda m: None, handle_signals=False)
            with pytest.raises(InvalidArgument, match="stop_event"):
                await sub.run(_noop, stop_event=object(), handle_signals=False)  # type: ignore[arg-type]
            for options in ({"prefetch": 0}, {"prefetch": 10**6}, {"poll": -1}, {"poll": 21}, {"lease": 0}):
                with pytest.raises(InvalidArgument):
                    sub.messages(**options)
            await topic.publish(b"settle")
            [m] = await sub.receive(1, wait=2)
            with pytest.raises(InvalidArgument, match="delay"):
                await m.nack(delay=-1)
            with pytest.raises(InvalidArgument, match="lease"):
                await m.extend_lease(0)
            with pytest.raises(InvalidArgument, match="reason"):
                await m.dead_letter("")
            await m.ack()
            await m.ack()  # a second ack is a no-op, as on the sync face
            with pytest.raises(InvalidArgument, match="already acked"):
                await m.nack()

    asyncio.run(main())


async def _noop(message: aio.AsyncMessage) -> None:
    return None


def test_from_sync_shares_the_guard_and_the_settlement_state(sqlite_url: str) -> None:
    sync_topic = pm.open_topic(sqlite_url)
    sync_sub = pm.open_subscription(sqlite_url)
    topic = aio.AsyncTopic.from_sync(sync_topic)
    sub = aio.AsyncSubscription.from_sync(sync_sub)
    assert topic._guard is sync_topic._guard and sub._guard is sync_sub._guard
    assert topic.sync is sync_topic and sub.sync is sync_sub
    assert (topic.url, topic.provider, topic.capabilities) == (sync_topic.url, "sqlite", sync_topic.capabilities)

    async def main() -> None:
        mid = await topic.publish(b"shared", key="k", attributes={"a": "b"})
        [m] = await sub.receive(1, wait=2)
        sync_m = m.message
        for name in ("id", "body", "attributes", "headers", "key", "key_bytes", "tombstone", "publish_time",
                     "delivery_attempt", "idempotency_key", "settled"):
            assert getattr(m, name) == getattr(sync_m, name), name
        assert m.id == mid and m.key == "k" and m.attributes == {"a": "b"}
        assert 0 < m.lease_remaining <= sub.lease
        sync_m.ack()  # settled on the sync face: the async face sees it
        assert m.settled
        with pytest.raises(InvalidArgument):
            await m.nack()
        await topic.aclose()
        await sub.aclose()

    asyncio.run(main())
    with pytest.raises(InvalidArgument, match=r"portable\.messaging\.Topic"):
        aio.AsyncTopic.from_sync(sub)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"portable\.messaging\.Subscription"):
        aio.AsyncSubscription.from_sync(sync_topic)  # type: ignore[arg-type]


def test_a_queue_driver_gets_an_async_side_of_each_kind(sqlite_url: str) -> None:
    with pm.open_subscription(sqlite_url) as sub:
        side = sub._side
        # a queue driver is a TopicDriver and a SubscriptionDriver: its one async_driver() hook
        # answers for one side, and the other is adapted through the pool
        assert isinstance(async_subscription_of(side), AsyncSubscriptionDriver)
        assert isinstance(async_topic_of(side), AsyncTopicDriver)
        both = AsyncQueueDriver(side)
        assert isinstance(both, AsyncTopicDriver) and isinstance(both, AsyncSubscriptionDriver)
        assert not async_subscription_of(side).native


def test_async_with_closes_the_async_driver_then_the_sync_driver(sqlite_url: str) -> None:
    order: list[str] = []

    class Recording(AsyncTopicDriver):
        async def aclose(self) -> None:
            order.append("async driver")

    sync_topic = pm.open_topic(sqlite_url)
    real_close = sync_topic.close

    def close() -> None:
        order.append("sync driver")
        real_close()

    sync_topic.close = close  # type: ignore[method-assign]

    async def main() -> None:
        topic = aio.AsyncTopic.from_sync(sync_topic)
        topic._aside = Recording(sync_topic._side)
        async with topic as entered:
            assert entered is topic

    asyncio.run(main())
    assert order == ["async driver", "sync driver"]


def test_extend_lease_without_the_capability_is_unsupported_on_both_faces(unique_name: str) -> None:
    url = f"mem://{unique_name}"
    sync_sub = pm.open_subscription(url)
    sync_sub.capabilities = replace(sync_sub.capabilities, lease_extension=False)
    sync_sub._settler._capabilities = sync_sub.capabilities
    pm.open_topic(url).publish(b"x")
    [sync_m] = sync_sub.receive(1)
    with pytest.raises(Unsupported) as sync_info:
        sync_m.extend_lease(5)

    async def main() -> None:
        sub = aio.AsyncSubscription.from_sync(sync_sub)
        sync_m.nack(0)
        [m] = await sub.receive(1, wait=1)
        with pytest.raises(Unsupported) as info:
            await m.extend_lease(5)
        assert str(info.value) == str(sync_info.value)
        assert "cannot extend" in str(info.value)
        await m.ack()

    asyncio.run(main())


def test_a_cancelled_receive_gives_back_what_it_got(sqlite_url: str) -> None:
    """A receive cancelled mid-wait leases nothing for long: what arrives is released at once."""

    async def main() -> None:
        async with aio.open_topic(sqlite_url) as topic, aio.open_subscription(sqlite_url, lease=60) as sub:
            waiting = asyncio.ensure_future(sub.receive(1, wait=3))
            await asyncio.sleep(0.2)
            waiting.cancel()  # the thread-adapted long poll goes on in its thread...
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await topic.publish(b"in flight")  # ...and takes this
            await asyncio.sleep(0.5)
            started = time.monotonic()
            got = await sub.receive(1, wait=5)
            assert [m.body for m in got] == [b"in flight"]
            assert got[0].delivery_attempt == 2, "the cancelled receive never took it: nothing was tested"
            assert time.monotonic() - started < 3, "the cancelled receive's message stayed leased"
            await got[0].ack()

    asyncio.run(main())


def test_async_for_yields_as_messages_arrive_and_gives_back_the_unsettled_on_break(sqlite_url: str) -> None:
    async def main() -> None:
        async with aio.open_topic(sqlite_url) as topic, aio.open_subscription(sqlite_url, lease=60) as sub:
            await topic.publish_batch([b"one", b"two", b"three"])
            seen: list[bytes] = []
            async with contextlib.aclosing(sub.messages(prefetch=2, poll=0.5)) as messages:
                async for m in messages:
                    seen.append(m.body)
                    if m.body == b"one":
                        await m.ack()
                    if len(seen) == 2:
                        break  # "two" is held unsettled
            assert seen == [b"one", b"two"]
            started = time.monotonic()
            rest = await sub.receive(10, wait=2)
            assert sorted(m.body for m in rest) == [b"three", b"two"], "an unsettled message was kept leased"
            assert time.monotonic() - started < 2
            await sub.ack_many(rest)
            assert await sub.receive(10, wait=0.3) == []

    asyncio.run(main())


def test_async_for_gives_back_when_the_task_is_cancelled(sqlite_url: str) -> None:
    async def main() -> None:
        async with aio.open_topic(sqlite_url) as topic, aio.open_subscription(sqlite_url, lease=60) as sub:
            await topic.publish(b"held")
            holding = asyncio.Event()

            async def consume() -> None:
                async for _m in sub:
                    holding.set()
                    await asyncio.sleep(60)  # the holder never settles it

            task = asyncio.ensure_future(consume())
            await asyncio.wait_for(holding.wait(), 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            [again] = await sub.receive(1, wait=2)
            assert again.body == b"held" and again.delivery_attempt == 2
            await again.ack()

    asyncio.run(main())


def test_async_for_keeps_the_lease_of_a_message_held_long(sqlite_url: str) -> None:
    """A slow holder keeps its message: no other consumer gets it while it is held, past its lease."""
    lease = 1.0

    async def main() -> None:
        async with aio.open_topic(sqlite_url) as topic, aio.open_subscription(sqlite_url) as sub, \
                aio.open_subscription(sqlite_url) as other:  # fmt: skip
            await topic.publish(b"slow")
            async with contextlib.aclosing(sub.messages(lease=lease, poll=0.5)) as messages:
                async for m in messages:
                    until = time.monotonic() + lease * 3.5
                    while time.monotonic() < until:
                        assert await other.receive(10, wait=0.25, lease=lease) == [], "the held lease ran out"
                    assert m.lease_remaining > 0
                    await m.ack()
                    break
            assert await other.receive(10, wait=lease + 0.5) == []

    asyncio.run(main())


def test_publish_event_and_the_idempotency_key_travel_as_on_the_sync_face(sqlite_url: str) -> None:
    from portable.cloudevents import CloudEvent

    event = CloudEvent(id="e-1", source="/aio/test", type="t.created", data=b"{}")

    async def main() -> None:
        async with aio.open_topic(sqlite_url) as topic, aio.open_subscription(sqlite_url) as sub:
            first = await topic.publish_event(event, mode="structured")
            again = await topic.publish_event(event, mode="structured")
            assert again == first  # sqlite deduplicates on the idempotency key, as from the sync face
            [m] = await sub.receive(10, wait=2)
            assert m.event() == event and m.idempotency_key == event.dedup_key()
            await m.ack()

    asyncio.run(main())


def test_a_failing_driver_raises_the_same_wrapped_error_on_both_faces(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}?name=q"  # a directory: sqlite cannot open it as a database
    with pm.open_topic(url) as sync_topic, pytest.raises(PortableError) as sync_info:
        sync_topic.publish(b"x")

    async def main() -> PortableError:
        async with aio.open_topic(url) as topic:
            with pytest.raises(PortableError) as info:
                await topic.publish(b"x")
            return info.value

    err = asyncio.run(main())
    assert type(err) is type(sync_info.value)
    assert str(err) == str(sync_info.value)
    assert err.__cause__ is not None and type(err.__cause__) is type(sync_info.value.__cause__)
