"""``portable_kafka._speedups`` (``_speedups.c``): the per-message loops of tracking consumed
messages, leasing and acking, in C. Each test runs the same input through the C loop and the
Python loop it follows, and compares every slot of every delivery and the bookkeeping after.
Messages are made by confluent-kafka (its ``Message`` constructor), no broker."""

from __future__ import annotations

import heapq
from typing import Any

import pytest

pytest.importorskip("confluent_kafka", reason="engine=confluent needs confluent-kafka (the [confluent] extra)")

import confluent_kafka
from kafka.structs import TopicPartition
from portable_kafka._confluent import ConfluentSubscription
from portable_kafka._progress import PartitionProgress
from portable_kafka._receive import (
    _NO_ATTRIBUTES,
    _NO_DELIVERIES,
    LocalLeases,
    _Delivery,
    _LeaseBatch,
    _LostLease,
    speedups,
)
from portable_kafka._records import ATTEMPT_HEADER, DUE_HEADER, ORIGINAL_ID_HEADER, epoch_ms

Message = confluent_kafka.Message
SLOTS = [n for cls in _Delivery.__mro__ for n in getattr(cls, "__slots__", ())]


def test_the_extension_is_built() -> None:
    """The distribution compiles it (setup.py); a machine without a C compiler installs without it
    and runs the Python loops, which is not what this suite ships."""
    assert speedups() is not None, "portable_kafka._speedups did not build: reinstall adapters/kafka with gcc and the Python headers"


def subscription(fast: bool, assigned: list[tuple[str, int]]) -> ConfluentSubscription:
    """A ConfluentSubscription's bookkeeping alone (no client), with ``assigned`` partitions."""
    sub = ConfluentSubscription.__new__(ConfluentSubscription)
    LocalLeases.__init__(sub)
    sub._tp, sub._tps = TopicPartition, {}
    sub._not_before = {}
    sub._speedups = speedups() if fast else None
    sub._untracking = fast  # as ConfluentSubscription.__init__ sets it
    assert (sub._speedups is not None) == fast
    for topic, partition in assigned:
        sub._progress[sub._tp_of(topic, partition)] = PartitionProgress(epoch=1)
    return sub


def state(delivery: _Delivery) -> dict[str, Any]:
    """Every slot that is set (publish_time read first: the C loop makes it when asked)."""
    assert delivery.publish_time.tzinfo is not None
    return {n: getattr(delivery, n) for n in SLOTS if hasattr(delivery, n) and n != "_stamped"}


def bookkeeping(sub: ConfluentSubscription) -> dict[str, Any]:
    return {
        "progress": {tp: repr(p) for tp, p in sub._progress.items()},
        "last": {tp: p.last_fetched() for tp, p in sub._progress.items()},
        "held": [(d.offset, d._attempt, d._id) for _, _, d in sorted(sub._held)],
        "leased": sorted(sub._leased),
        "busy": sorted(sub._busy_keys),
        "blocked": {k: [d._handle for d in q] for k, q in sub._key_blocked.items()},
    }


def messages() -> list[Any]:
    """One fetch as librdkafka could hand it out: two partitions interleaved, a refetch, a revoked
    partition, a partition's end, keys (one not UTF-8), a tombstone, headers of the application
    (one not text, one null), retry copies (due and not yet due)."""
    future, past = str(epoch_ms() + 3_600_000).encode(), str(epoch_ms() - 1000).encode()
    eof = confluent_kafka.KafkaError(confluent_kafka.KafkaError._PARTITION_EOF)
    return [
        Message(topic="t", partition=0, offset=5, key=b"a", value=b"v5", timestamp=(1, 1_700_000_000_001)),
        Message(topic="t", partition=0, offset=6, key=None, value=b"v6", timestamp=(1, 1_700_000_000_001)),
        Message(topic="t", partition=1, offset=0, key=b"a", value=None, timestamp=(1, 1_700_000_000_002)),
        Message(topic="t", partition=0, offset=6, key=None, value=b"again", timestamp=(1, 1_700_000_000_001)),
        Message(topic="t", partition=0, offset=7, key=b"k\xff", value=b"", timestamp=(1, 0),
                headers=[("x", b"1"), ("bin", b"\xff"), ("x", b"2")]),
        Message(topic="t", partition=0, offset=8, key=b"a", value=b"n", headers=[("x", b"1"), ("null", None)],
                timestamp=(1, 1_700_000_000_003)),
        Message(topic="gone", partition=0, offset=1, value=b"revoked"),
        Message(topic="t", partition=1, offset=1, error=eof),
        Message(topic="t.retry", partition=0, offset=3, key=b"b", value=b"copy", timestamp=(1, 1_700_000_000_004),
                headers=[(ATTEMPT_HEADER, b"2"), (ORIGINAL_ID_HEADER, b"t/0/2"), (DUE_HEADER, past), ("x", b"y")]),
        Message(topic="t.retry", partition=0, offset=4, key=b"b", value=b"later", timestamp=(1, 1_700_000_000_004),
                headers=[(ATTEMPT_HEADER, b"3"), (DUE_HEADER, future)]),
        Message(topic="t", partition=1, offset=2, key="é".encode(), value=b"w", timestamp=(1, -5)),
    ]  # fmt: skip


ASSIGNED = [("t", 0), ("t", 1), ("t.retry", 0)]


def test_tracking_in_c_makes_what_python_makes() -> None:
    made = {}
    fetched = messages()  # once: the due headers hold the time
    for fast in (False, True):
        sub = subscription(fast, ASSIGNED)
        sub._track_consumed(fetched)
        sub._track_consumed(fetched)  # all refetches now: nothing new
        made[fast] = ([state(d) for d in sub._ready], bookkeeping(sub))
    deliveries, kept = made[True]
    assert made[True] == made[False]
    assert [d["_id"] for d in deliveries] == ["t/0/5", "t/0/6", "t/1/0", "t/0/7", "t/0/8", "t/0/2", "t/1/2"]
    assert [d["_handle"] for d in deliveries] == [1, 2, 3, 4, 5, 6, 8]  # 7: the copy held until due
    assert deliveries[2]["_tombstone"] and deliveries[2]["_body"] == b""
    assert deliveries[3]["_key"] == "k\ufffd" and deliveries[3]["_key_bytes"] == b"k\xff"
    assert deliveries[3]["_attributes"] == {"x": "2"}
    assert deliveries[3]["_headers"] == (("x", b"1"), ("bin", b"\xff"), ("x", b"2"))
    assert deliveries[4]["_headers"] == (("x", b"1"), ("null", b""))  # the full path: a null value
    assert deliveries[5]["_attempt"] == 2 and deliveries[5]["_attributes"] == {"x": "y"}
    assert deliveries[6]["_key"] == "é" and deliveries[6]["_published"].timestamp() == 0
    assert kept["held"] == [(4, 3, "t.retry/0/4")]
    assert kept["last"] == {TopicPartition("t", 0): 8, TopicPartition("t", 1): 2, TopicPartition("t.retry", 0): 4}


@pytest.mark.parametrize("fast", [False, True], ids=["python", "c"])
def test_an_error_message_raises_after_the_deliveries_before_it_are_tracked(fast: bool) -> None:
    sub = subscription(fast, ASSIGNED)
    broken = confluent_kafka.KafkaError(confluent_kafka.KafkaError._TRANSPORT)
    with pytest.raises(confluent_kafka.KafkaException):
        sub._track_consumed([
            Message(topic="t", partition=0, offset=0, value=b"a"),
            Message(topic="t", partition=0, offset=1, value=b"b"),
            Message(topic="t", partition=0, offset=2, error=broken),
        ])  # fmt: skip
    assert [d.offset for d in sub._ready] == [0, 1]
    assert sub._progress[TopicPartition("t", 0)].last_fetched() == 1  # their offsets are tracked too


@pytest.mark.parametrize("fast", [False, True], ids=["python", "c"])
def test_a_delivery_tracked_inline_has_every_field_its_constructor_sets(fast: bool) -> None:
    """Both loops build the common delivery without _Delivery.__init__ (a hot path): every slot
    must hold what the constructor would put there, so a slot added to one and not the other
    fails here, not on some later read. publish_time is made when first read, from the record
    kept in ``_stamped``."""
    sub = subscription(fast, [("t", 2)])
    tp = TopicPartition("t", 2)
    sub._track_consumed([
        Message(topic="t", partition=2, offset=7, key=b"k\xff", value=b"v", timestamp=(1, 1_700_000_000_123)),
        Message(topic="t", partition=2, offset=8, value=None, headers=[("a", b"1"), ("a", b"2")],
                timestamp=(1, 1_700_000_000_124)),
    ])  # fmt: skip
    inline = list(sub._ready)
    assert not hasattr(inline[0], "_published")  # until read
    expected = [
        _Delivery("t/2/7", b"v", _NO_ATTRIBUTES, "k\ufffd", inline[0].publish_time, 1, inline[0]._handle, tp, 7,
                  b"k\xff", 0.0, ()),
        _Delivery("t/2/8", None, {"a": "2"}, None, inline[1].publish_time, 1, inline[1]._handle, tp, 8, None, 0.0,
                  (("a", b"1"), ("a", b"2"))),
    ]  # fmt: skip
    set_by_init = [n for n in SLOTS if hasattr(expected[0], n)]
    assert {"_id", "_body", "_tombstone", "_key_bytes", "tp", "offset", "due"} <= set(set_by_init)
    for got, want in zip(inline, expected, strict=True):
        assert {n: getattr(got, n) for n in set_by_init} == {n: getattr(want, n) for n in set_by_init}
    assert inline[0].publish_time.timestamp() == 1_700_000_000.123
    assert inline[1].publish_time.timestamp() == 1_700_000_000.124
    assert sub._progress[tp].last_fetched() == 8


def test_bind_refuses_types_it_does_not_recognise_and_keeps_what_it_had() -> None:
    """bind() writes slots by the offsets of Python's member descriptors and calls Message's
    methods through their C functions: a type whose names are something else is refused, and
    a refused bind changes nothing."""
    fast = speedups()

    class NotSlots:
        _body = _tombstone = _key = _key_bytes = _id = _attributes = _stamped = _attempt = None
        _handle = _headers = tp = offset = due = batch = lease_ends = None

    class NotMessage:
        def error(self) -> None: ...

        topic = partition = offset = headers = value = key = error

    with pytest.raises(TypeError, match="not a writable object slot"):
        fast.bind(NotSlots, _LeaseBatch, Message)
    with pytest.raises(TypeError, match="not a method without arguments"):
        fast.bind(_Delivery, _LeaseBatch, NotMessage)
    sub = subscription(True, [("t", 0)])
    sub._track_consumed([Message(topic="t", partition=0, offset=3, value=b"still")])
    assert [d._body for d in sub._ready] == [b"still"]


def test_tracking_refuses_what_is_not_a_librdkafka_message() -> None:
    fast = speedups()
    with pytest.raises(TypeError, match="not a"):
        fast.track([object()], [], iter(range(3)), None, None, None, {}, "portable.kafka.", True)


def test_untracked_deliveries_go_back_to_the_cycle_collector_wherever_they_are() -> None:
    """The C tracking leaves its deliveries untracked; _hand_back_to_gc (at close, and when the
    Subscription is collected) hands back every one the member refers to: ready, leased, blocked
    behind a key, and settled but still in a lease batch. Those made in Python (a retry copy's
    full path) are tracked from the start."""
    import gc

    sub = subscription(True, [("t", 0), ("t", 1)])
    sub._commit_soon = lambda: None  # type: ignore[method-assign]  # no client here
    keys = ["a", None, "a", "b", None, "b", None]
    sub._track_consumed([
        Message(topic="t", partition=i % 2, offset=i, key=None if k is None else k.encode(), value=b"x")
        for i, k in enumerate(keys)
    ])  # fmt: skip
    made = list(sub._ready)
    assert len(made) == 7 and not any(gc.is_tracked(d) for d in made)
    leased = sub._lease_ready(3, 30.0)
    sub.ack_many([leased[1]._handle])  # settled (no key); its batch holds it while the others are in flight
    assert sub._key_blocked and sub._ready and len(sub._leased) == 2
    sub._hand_back_to_gc()
    assert all(gc.is_tracked(d) for d in made), "every delivery the member refers to is tracked again"
    assert not sub._untracking
    sub._track_consumed([Message(topic="t", partition=0, offset=9, value=b"late")])
    assert gc.is_tracked(sub._ready[-1]), "after the hand-back, deliveries are made tracked"
    assert speedups().retrack([object(), made[0], 3]) == 0, "only untracked deliveries are touched"


def lease_and_settle(fast: bool) -> tuple[Any, ...]:
    sub = subscription(fast, [("t", 0), ("t", 1)])
    sub._commit_soon = lambda: None  # type: ignore[method-assign]  # no client here
    for offset, (partition, key) in enumerate([(0, "a"), (0, None), (1, "a"), (1, "b"), (0, "b"), (0, None), (1, "c")]):
        m = Message(topic="t", partition=partition, offset=offset, key=None if key is None else key.encode(), value=b"x")
        sub._track_consumed([m])
    first = sub._lease_ready(4, 30.0)
    after_first = bookkeeping(sub)
    batch = first[0].batch
    assert all(d.batch is batch for d in first) and batch.left == len(first)
    errors = sub.ack_many([first[0]._handle, 999, first[2]._handle])
    assert isinstance(errors[1], _LostLease) and errors[0] is None and errors[2] is None
    left_after_two = batch.left
    second = sub._lease_ready(10, 30.0)
    sub.ack_many([d._handle for d in first[1:2] + first[3:] + second])
    return (
        [(d._id, d.lease_ends > 0) for d in first], after_first, left_after_two, [d._id for d in second],
        bookkeeping(sub), batch.items is _NO_DELIVERIES, batch.left,
    )  # fmt: skip


def test_leasing_and_acking_in_c_do_what_python_does() -> None:
    got = {fast: lease_and_settle(fast) for fast in (False, True)}
    assert got[True] == got[False]
    first, after_first, left_after_two, second, after, released, left = got[True]
    # one in flight per key: the second "a" and "b" wait behind the first
    assert [i for i, _ in first] == ["t/0/0", "t/0/1", "t/1/3", "t/0/5"]
    assert after_first["blocked"] == {"a": [3], "b": [5]}
    assert left_after_two == 2
    assert second == ["t/0/4", "t/1/2", "t/1/6"]  # a key's next one goes first once it is settled
    assert after["leased"] == [] and after["busy"] == [] and after["blocked"] == {}
    assert released and left == 0
    assert all(p.startswith("PartitionProgress(epoch=1, safe=") and "open=0" in p for p in after["progress"].values())


def test_the_environment_switch_turns_the_c_loops_off_or_requires_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from portable_kafka import _receive

    from portable.errors import ConfigError, MissingDependency

    sub = ConfluentSubscription.__new__(ConfluentSubscription)
    for value, expected in (("0", None), ("1", speedups()), (None, speedups())):
        if value is None:
            monkeypatch.delenv("PORTABLE_KAFKA_SPEEDUPS", raising=False)
        else:
            monkeypatch.setenv("PORTABLE_KAFKA_SPEEDUPS", value)
        LocalLeases.__init__(sub)
        assert sub._speedups is expected
    monkeypatch.setenv("PORTABLE_KAFKA_SPEEDUPS", "yes")
    with pytest.raises(ConfigError, match="0 or 1"):
        LocalLeases.__init__(sub)
    monkeypatch.setenv("PORTABLE_KAFKA_SPEEDUPS", "1")
    monkeypatch.setattr(_receive, "speedups", lambda: None)  # as where no compiler built it
    with pytest.raises(MissingDependency, match="C compiler"):
        LocalLeases.__init__(sub)
    monkeypatch.delenv("PORTABLE_KAFKA_SPEEDUPS")
    LocalLeases.__init__(sub)
    assert sub._speedups is None  # not built, not asked for: the Python loops


def test_a_held_copy_keeps_its_place_in_the_heap() -> None:
    """The C loop hands a retry copy not yet due to the Python full path, which holds it."""
    sub = subscription(True, ASSIGNED)
    sub._track_consumed(messages())
    assert len(sub._held) == 1 and sub._held == heapq.nsmallest(1, sub._held)
    assert sub._held[0][2]._id == "t.retry/0/4"
