"""mem:// and sqlite://, the executable specification, give the lossless fields the way the
providers do: ``headers`` are the attributes as ``(name, UTF-8 bytes)`` in publish order,
``key_bytes`` is the UTF-8 of the key, nothing is a tombstone; and every copy of a delivery
(``ReceivedMessage.like``, a dead-lettered message) carries them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

import portable.messaging as pm
from portable.driver.messaging import Delivery, ReceivedMessage


@pytest.fixture(params=["mem", "sqlite"])
def queue(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> Iterator[str]:
    yield f"mem://{unique_name}" if request.param == "mem" else f"sqlite://{tmp_path}/q.db?name={unique_name}"


def test_headers_mirror_attributes_in_publish_order(queue: str) -> None:
    with pm.open_topic(queue) as topic:
        topic.publish(b"body", key="k-1", attributes={"z": "last letter", "a": "é"}, idempotency_key="idem-1")
        topic.publish(b"")
    with pm.open_subscription(queue, lease=30) as sub:
        first, second = sub.receive(2, wait=2)
        assert first.headers == (("z", b"last letter"), ("a", "é".encode()), ("portable.idempotency_key", b"idem-1"))
        assert (first.key, first.key_bytes, first.tombstone) == ("k-1", b"k-1", False)
        assert (second.body, second.headers, second.key_bytes, second.tombstone) == (b"", (), None, False)
        first.dead_letter("poison")
        second.ack()
        dead_url = sub.dead_letter_url
    assert dead_url is not None
    with pm.open_subscription(dead_url, lease=30) as dead:
        (moved,) = dead.receive(1, wait=2)
        assert moved.headers[:3] == first.headers, "the moved copy keeps the headers, then adds the reason"
        assert [name for name, _ in moved.headers[3:]] == [
            "portable.dead_letter_reason", "portable.dead_letter_source", "portable.delivery_attempts",
            "portable.original_id",
        ]  # fmt: skip
        moved.ack()


def test_a_copy_of_a_delivery_carries_headers_key_bytes_and_the_tombstone_flag() -> None:
    now = dt.datetime.now(dt.UTC)
    record = ReceivedMessage(
        "id-1", b"", {"h": "2"}, "\ufffd", now, 1, "handle", (("h", b"\xff"), ("h", b"2")), b"\xff", True
    )
    delivery = Delivery(record)
    assert (delivery.headers, delivery.key_bytes, delivery.tombstone) == (record.headers, b"\xff", True)
    for source in (record, delivery):
        copy = ReceivedMessage.like(source, "other handle", 3)
        assert (copy.headers, copy.key_bytes, copy.tombstone) == ((("h", b"\xff"), ("h", b"2")), b"\xff", True)
        assert (copy.handle, copy.delivery_attempt) == ("other handle", 3)
    plain = Delivery(ReceivedMessage("id-2", b"x", {}, "k", now, 1, None))
    assert (plain.headers, plain.key_bytes, plain.tombstone) == ((), b"k", False)
    assert ReceivedMessage.like(plain, None).key_bytes == b"k"
