"""portable.outbox on file:// and mem://: each crash point set up by hand, the relay's decisions, bad input."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest

from portable.errors import IdempotencyConflict, InvalidArgument, InvalidKey
from portable.idempotency import SqliteStore
from portable.messaging import Message, Topic, open_subscription, open_topic
from portable.outbox import OBJECT_TAG, Outbox
from portable.storage import Bucket, open_bucket


@pytest.fixture
def bucket(tmp_path: Path) -> Bucket:
    return open_bucket(f"file://{tmp_path / 'b'}")


@pytest.fixture
def queue(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'q.db'}?name=events&dedup_window=0"


def drain(queue: str) -> list[Message]:
    sub = open_subscription(queue, lease=30)
    got: list[Message] = []
    while batch := sub.receive(max_messages=10, wait=0.2):
        for m in batch:
            m.ack()
        got += batch
    return got


def unmark(bucket: Bucket, outbox: Outbox) -> None:
    """Rewrite the one record as a writer killed before its mark leaves it (not committed)."""
    [record] = outbox.pending()
    bucket.put(record.record_key, record.to_bytes().replace(b'"committed": true', b'"committed": false'))


def test_put_then_relay_publishes_once_with_the_key_and_removes_the_record(bucket: Bucket, queue: str) -> None:
    outbox = Outbox(bucket)
    write = outbox.put("a/1", b"hello", event=b"e1", attributes={"kind": "made"}, event_key="a",
                       content_type="text/plain", metadata={"owner": "ops"})
    assert not write.resumed and write.record_key.startswith(".outbox/")
    info = bucket.head("a/1")
    assert info.metadata == {"owner": "ops", OBJECT_TAG: write.idempotency_key} and info.content_type == "text/plain"
    [record] = outbox.pending()
    assert (record.key, record.event, dict(record.attributes)) == ("a/1", b"e1", {"kind": "made"})
    stats = outbox.relay_once(open_topic(queue))
    assert (stats.published, stats.waiting) == (1, 0)
    assert list(outbox.pending()) == [] and not bucket.exists(write.record_key)
    [m] = drain(queue)
    assert (m.body, m.key, m.attributes["kind"], m.idempotency_key) == (b"e1", "a", "made", write.idempotency_key)
    assert outbox.relay_once(open_topic(queue)).published == 0


def test_the_default_event_names_the_object(bucket: Bucket, queue: str) -> None:
    outbox = Outbox(bucket)
    outbox.put("k", b"abc")
    outbox.relay_once(open_topic(queue))
    [m] = drain(queue)
    assert json.loads(m.body)["key"] == "k" and json.loads(m.body)["size"] == 3


def test_crash_after_the_record_before_the_object_waits_then_the_retry_finishes(bucket: Bucket, queue: str) -> None:
    outbox = Outbox(bucket)
    write = outbox.put("k", b"v1")
    unmark(bucket, outbox)
    bucket.delete("k")  # the state a writer killed between its record and its object leaves
    topic = open_topic(queue)
    assert outbox.relay_once(topic).waiting == 1 and drain(queue) == []
    again = outbox.put("k", b"v1")  # the writer, run again
    assert again.resumed and again.idempotency_key == write.idempotency_key
    assert outbox.relay_once(topic).published == 1 and len(drain(queue)) == 1


def test_a_writer_that_never_returns_is_abandoned_only_when_asked(bucket: Bucket, queue: str) -> None:
    outbox = Outbox(bucket)
    outbox.put("k", b"v1")
    unmark(bucket, outbox)
    bucket.delete("k")
    topic = open_topic(queue)
    assert outbox.relay_once(topic, abandon_after=3600).waiting == 1
    assert outbox.relay_once(topic, abandon_after=0).abandoned == 1
    assert list(outbox.pending()) == [] and drain(queue) == []


def test_a_committed_write_is_published_even_after_its_key_was_overwritten(bucket: Bucket, queue: str) -> None:
    outbox = Outbox(bucket)
    first = outbox.put("k", b"v1", event=b"first")
    [record] = outbox.pending()
    assert record.committed
    outbox.put("k", b"v2", event=b"second")  # the relay was down meanwhile
    assert outbox.relay_once(open_topic(queue)).published == 2
    bodies = sorted(m.body for m in drain(queue))
    assert bodies == [b"first", b"second"] and first.idempotency_key


def test_a_crash_before_the_mark_is_recognised_by_the_object_tag(bucket: Bucket, queue: str) -> None:
    outbox = Outbox(bucket)
    outbox.put("k", b"v1")
    unmark(bucket, outbox)  # the record as a writer killed after its object left it
    [record] = outbox.pending()
    assert not record.committed
    assert outbox.relay_once(open_topic(queue)).published == 1


def test_a_record_whose_key_holds_another_write_waits_then_is_published_as_uncertain(bucket: Bucket, queue: str) -> None:
    outbox = Outbox(bucket)
    outbox.put("k", b"v1")
    unmark(bucket, outbox)
    bucket.put("k", b"someone else")  # killed before its mark, then overwritten: whether it committed is unknown
    topic = open_topic(queue)
    assert outbox.relay_once(topic).waiting == 1
    assert outbox.relay_once(topic, abandon_after=0).uncertain == 1
    assert len(drain(queue)) == 1


def test_a_repeat_after_publishing_is_published_again_and_the_idempotent_consumer_handles_it_once(
    bucket: Bucket, queue: str, tmp_path: Path
) -> None:
    outbox = Outbox(bucket)
    topic = open_topic(queue)
    outbox.put("k", b"v1")
    outbox.relay_once(topic)
    outbox.put("k", b"v1")  # a writer that crashed after its put returned, run again
    outbox.relay_once(topic)
    handled: list[str | None] = []
    sub = open_subscription(queue, lease=30)
    stop = threading.Event()
    threading.Timer(2.0, stop.set).start()
    stats = sub.run(lambda m: handled.append(m.idempotency_key), idempotency=SqliteStore(tmp_path / "i.db"),
                    max_deliveries=None, handle_signals=False, poll=0.05, stop_event=stop)
    assert stats.received == 2 and stats.skipped == 1 and len(handled) == 1


def test_a_publish_that_fails_keeps_the_record_for_the_next_pass(bucket: Bucket, tmp_path: Path) -> None:
    outbox = Outbox(bucket)
    outbox.put("k", b"v")
    name = uuid.uuid4().hex
    broken: Topic = open_topic(f"chaos+mem://{name}?error_rate=1&faults=unavailable")
    stats = outbox.relay_once(broken)
    assert stats.failed == 1 and stats.errors[0].retryable and len(list(outbox.pending())) == 1
    assert outbox.relay_once(open_topic(f"mem://{name}")).published == 1


def test_reusing_an_idempotency_key_for_another_write_is_a_conflict(bucket: Bucket) -> None:
    outbox = Outbox(bucket)
    outbox.put("k", b"v1", idempotency_key="order-7")
    with pytest.raises(IdempotencyConflict, match="order-7"):
        outbox.put("k", b"v2", idempotency_key="order-7")
    assert bucket.get("k") == b"v1"


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"key": ".outbox/x"}, InvalidKey, "under the outbox prefix"),
        ({"key": "/bad"}, InvalidKey, "must not start"),
        ({"data": "text"}, InvalidArgument, "data must be bytes"),
        ({"event": "text"}, InvalidArgument, "event must be bytes"),
        ({"attributes": {"portable.x": "1"}}, InvalidArgument, "attribute name"),
        ({"attributes": {"a": ""}}, InvalidArgument, "non-empty"),
        ({"metadata": {OBJECT_TAG: "x"}}, InvalidArgument, "the outbox's own"),
        ({"idempotency_key": "has space"}, InvalidKey, "printable ASCII"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(bucket: Bucket, kwargs: dict[str, object],
                                                         error: type[Exception], says: str) -> None:
    args: dict[str, object] = {"key": "k", "data": b"v", **kwargs}
    with pytest.raises(error, match=says):
        Outbox(bucket).put(**args)  # type: ignore[arg-type]
    assert list(bucket.list()) == []


def test_bad_outbox_arguments(bucket: Bucket, queue: str) -> None:
    with pytest.raises(InvalidKey, match="ending with '/'"):
        Outbox(bucket, prefix=".outbox")
    with pytest.raises(InvalidArgument, match="abandon_after"):
        Outbox(bucket).relay_once(open_topic(queue), abandon_after=-1)
    with pytest.raises(InvalidArgument, match="must be a Bucket"):
        Outbox(3)  # type: ignore[arg-type]
