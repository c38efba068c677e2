"""The receiving side's per-message shortcuts on pulsar:// keep the contract: fields read from
the native message after it was acked, ack_many over live and non-live deliveries, and a
lease shortened by extend_lease ending on time (the sweeper sleeps until its earliest deadline)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import portable.messaging as pm
from portable.errors import PreconditionFailed
from portable.testing.messaging_suite import temporary_url
from tests.emulators.harness import EmulatorInfo


@pytest.fixture
def url(pulsar_broker: EmulatorInfo, unique_name: str) -> Iterator[str]:
    base = f"{pulsar_broker.endpoints['service_url']}/public/default/hot?subscription=hot"
    yield from temporary_url(
        f"{base}&admin_url={pulsar_broker.endpoints['admin_url']}", unique_name
    )


def _receive(sub: pm.Subscription, n: int) -> list[pm.Message]:
    got: list[pm.Message] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        got += sub.receive(n - len(got), wait=5)
    assert len(got) == n
    return got


def test_fields_are_read_after_the_ack(url: str) -> None:
    with pm.open_topic(url) as topic, pm.open_subscription(url, lease=60) as sub:
        ids = topic.publish_batch(
            [pm.OutgoingMessage(b"one", {"b": "2", "a": "1"}, "k1"), pm.OutgoingMessage(b"two")]
        )
        got = sorted(_receive(sub, 2), key=lambda m: m.body)
        sub.ack_many(got)
        one, two = got
        assert (one.body, one.key, dict(one.attributes), one.delivery_attempt) == (
            b"one",
            "k1",
            {"a": "1", "b": "2"},
            1,
        )
        assert (
            one.headers == (("a", b"1"), ("b", b"2"))
            and one.key_bytes == b"k1"
            and not one.tombstone
        )
        assert (two.body, two.key, dict(two.attributes), two.headers) == (b"two", None, {}, ())
        assert sorted([one.id, two.id]) == sorted(ids)
        assert one.publish_time.tzinfo is not None and "one" not in repr(one) and "k1" in repr(one)
        with pytest.raises(AttributeError):
            one.no_such_field  # type: ignore[attr-defined]  # noqa: B018


def test_ack_many_skips_what_is_not_live(url: str) -> None:
    with pm.open_topic(url) as topic, pm.open_subscription(url, lease=60) as sub:
        topic.publish_batch([b"a", b"b", b"c"])
        a, b, c = _receive(sub, 3)
        side = sub._driver_sub
        b.nack(delay=30)  # held here for 30 s: an ack of its handle must not take it
        results = side.ack_many([a._handle, b._handle, c._handle, a._handle])
        assert results[0] is None and results[2] is None
        assert type(results[1]).__name__ == "LeaseLost" and type(results[3]).__name__ == "LeaseLost"
        assert sub.stats().delayed == 1  # b is still held, to be given back when its delay ends
        with pytest.raises(
            Exception, match="no lease any more"
        ):  # LeaseLost: PRECONDITION_FAILED above
            side.ack(a._handle)
        with pytest.raises(PreconditionFailed):
            c.nack()  # acked through the driver above: its lease is gone, PRECONDITION_FAILED


def test_a_shortened_lease_ends_on_time(url: str) -> None:
    with pm.open_topic(url) as topic, pm.open_subscription(url, lease=300) as sub:
        topic.publish(b"short")
        (first,) = _receive(sub, 1)
        first.extend_lease(1)  # earlier than the 300 s the sweeper sleeps until
        started = time.monotonic()
        (again,) = _receive(sub, 1)  # given back when the 1 s lease ends, and redelivered
        assert again.body == b"short" and again.delivery_attempt == 2
        assert time.monotonic() - started < 20
        again.ack()


def test_a_batch_of_plain_bodies_and_full_messages_arrives_whole(url: str) -> None:
    """publish_batch hands a body-only item to the driver as its bytes (plain_items): mixed with
    full messages, every body, key and attribute arrives, and the ids are in input order."""
    items: list[bytes | pm.OutgoingMessage] = []
    for i in range(40):
        if i % 3:
            items.append(f"plain-{i}".encode())
        else:
            items.append(pm.OutgoingMessage(f"full-{i}".encode(), {"i": str(i)}, f"k{i % 2}"))
    with pm.open_topic(url) as topic, pm.open_subscription(url, lease=60) as sub:
        ids = topic.publish_batch(items)
        assert len(ids) == len(set(ids)) == 40
        got = {m.body: m for m in _receive(sub, 40)}
        sub.ack_many(list(got.values()))
    for i, item in enumerate(items):
        if isinstance(item, bytes):
            m = got[item]
            assert (m.key, dict(m.attributes)) == (None, {})
        else:
            m = got[item.body]
            assert (m.key, dict(m.attributes)) == (item.key, {"i": str(i)})
        assert m.id == ids[i]
