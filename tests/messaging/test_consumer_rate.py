"""The consumer loop at rate (issue 22, item 2): batch claims, batched settlement, crash mid-batch.

``Subscription.run(concurrency=1)`` receives in batches, claims a window of keys at once
(``claim_many``), runs the handler inline, then writes the window's completions at once
(``complete_many``) and acks it at once. These tests run it on real parts (the sqlite://
queue, ``SqliteStore`` files, other processes, SIGKILL) and check what must still hold:
each key handled once under contention, a crash re-handling only what was not completed,
the loop's counters, the claim observers hearing of every claim.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import portable.messaging as pm
from portable.idempotency import MemoryStore, SqliteStore, fingerprint
from portable.idempotency._batch import claim_many, complete_many, unclaim
from portable.messaging import _claims, _consumer
from portable.telemetry import _observe

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.idempotency.rate_worker", *args],
        cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _publish(url: str, keys: list[str]) -> None:
    """Each key as a message body, with no publisher's key (the queue would drop a repeated one):
    the loops here claim each message under its body (:func:`_body`)."""
    topic = pm.open_topic(url)
    for start in range(0, len(keys), 500):
        topic.publish_batch([k.encode() for k in keys[start : start + 500]])
    topic.close()


def _body(message: pm.Message) -> str:
    return message.body.decode()


def _run_until(sub: pm.Subscription, handler: Any, done: Any, timeout: float = 30, **kwargs: Any) -> pm.RunStats:
    stop = threading.Event()
    box: dict[str, pm.RunStats] = {}
    thread = threading.Thread(
        target=lambda: box.setdefault("stats", sub.run(handler, stop_event=stop, handle_signals=False, poll=0.1, **kwargs)),
        daemon=True,
    )
    thread.start()
    until = time.monotonic() + timeout
    while not done() and time.monotonic() < until:
        time.sleep(0.02)
    stop.set()
    thread.join(30)
    assert done(), "the loop did not get there in time"
    return box["stats"]


def _empty(sub: pm.Subscription) -> bool:
    stats = sub.stats()
    return (stats.available, stats.in_flight, stats.delayed) == (0, 0, 0)


# ---------------------------------------------------------------- the store's batch calls
def test_two_processes_claiming_overlapping_keys_in_batches_each_win_a_key_once(tmp_path: Path) -> None:
    """Two processes claim_many keys 0-599 and 300-899 of one SqliteStore at once: every key is
    acquired exactly once, the overlap split between them."""
    db = tmp_path / "idem.db"
    SqliteStore(db)  # the schema, before both race
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    procs = [_worker("claim", str(db), "0", "600", str(a)), _worker("claim", str(db), "300", "900", str(b))]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    won = Counter(a.read_text().split() + b.read_text().split())
    assert set(won) == {f"key-{i}" for i in range(900)}
    assert max(won.values()) == 1
    store = SqliteStore(db)
    answers = claim_many(store, [(f"key-{i}", "fp") for i in range(900)], lease=5, ttl=60)
    assert {c.status for c in answers if not isinstance(c, Exception)} == {"completed"}


@pytest.mark.parametrize("make", [lambda p: SqliteStore(p / "s.db"), lambda p: MemoryStore()], ids=["sqlite", "memory"])
def test_claim_many_answers_like_claim_and_unclaim_takes_the_start_back(tmp_path: Path, make: Any) -> None:
    store = make(tmp_path)
    first = claim_many(store, [("a", "f1"), ("b", "f1"), ("a", "f1")], lease=30, ttl=600)
    assert [c.status for c in first] == ["acquired", "acquired", "in_progress"]  # type: ignore[union-attr]
    assert complete_many(store, [("a", first[0].token, b"done"), ("b", "not-the-token", None)])[0] is None  # type: ignore[union-attr]
    again = claim_many(store, [("a", "f1"), ("a", "f2"), ("c", "f1")], lease=30, ttl=600)
    assert again[0].status == "completed" and again[0].result == b"done"  # type: ignore[union-attr]
    assert type(again[1]).__name__ == "IdempotencyConflict"  # returned in its place, not raised
    c = again[2]
    assert c.status == "acquired" and c.starts == 1  # type: ignore[union-attr]
    unclaim(store, "c", c.token)  # type: ignore[union-attr]
    retaken = store.claim("c", "f1", lease=30, ttl=600)
    assert retaken.status == "acquired" and retaken.starts == 1 and retaken.failures == 0


def test_a_result_over_the_limit_fails_only_its_own_completion(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", max_result_bytes=4)
    a, b = claim_many(store, [("a", "f"), ("b", "f")], lease=30, ttl=600)
    errors = complete_many(store, [("a", a.token, b"too large"), ("b", b.token, b"ok")])  # type: ignore[union-attr]
    assert type(errors[0]).__name__ == "TooLarge" and errors[1] is None
    assert store.claim("b", "f", lease=30, ttl=600).result == b"ok"
    assert store.claim("a", "f", lease=30, ttl=600).status == "in_progress"  # its claim is kept


# ---------------------------------------------------------------- the loop
def test_two_consumer_processes_with_duplicated_keys_handle_each_key_once(tmp_path: Path, unique_name: str) -> None:
    """400 keys published twice each onto one sqlite:// queue, two consumer processes sharing one
    SqliteStore: every key's effect happens exactly once (the copy meets "completed" or is
    deferred while the other's claim runs, then skipped)."""
    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    keys = [f"order-{i}" for i in range(400)]
    _publish(url, keys + keys)
    db, out = tmp_path / "idem.db", tmp_path / "out.txt"
    SqliteStore(db)
    procs = [_worker("consume", url, str(db), str(out)) for _ in range(2)]
    sub = pm.open_subscription(url)
    try:
        until = time.monotonic() + 90
        while time.monotonic() < until:
            if out.exists() and len(set(out.read_text().split())) == len(keys) and _empty(sub):
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.communicate(timeout=30)
    effects = Counter(out.read_text().split())
    assert set(effects) == set(keys)
    assert max(effects.values()) == 1, [k for k, n in effects.items() if n > 1]


def test_a_consumer_killed_mid_batch_re_handles_only_the_keys_it_had_not_completed(tmp_path: Path, unique_name: str) -> None:
    """SIGKILL inside the handler of message 301 (window 2 of 256, its completions not yet
    written): a second consumer handles again only keys whose completion the first had not
    committed, at most one window of them, and every key is handled."""
    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    keys = [f"k-{i}" for i in range(600)]
    _publish(url, keys)
    db, out = tmp_path / "idem.db", tmp_path / "out.txt"
    first = _worker("consume", url, str(db), str(out), "--kill-after", "300")
    first.communicate(timeout=60)
    assert first.returncode == -9
    completed_at_kill = {
        key for key, in sqlite3.connect(db).execute(
            "SELECT key FROM portable_idempotency WHERE completed = 1"
        )
    }  # fmt: skip
    before = out.read_text().split()
    assert len(before) == 301
    assert 0 < len(completed_at_kill) < 301  # earlier windows committed, the killed one not
    second = _worker("consume", url, str(db), str(out))
    sub = pm.open_subscription(url)
    try:
        until = time.monotonic() + 60
        while time.monotonic() < until:
            if len(set(out.read_text().split())) == len(keys) and _empty(sub):
                break
            time.sleep(0.2)
    finally:
        second.terminate()
        second.communicate(timeout=30)
    effects = Counter(out.read_text().split())
    assert set(effects) == set(keys)
    twice = {k for k, n in effects.items() if n > 1}
    assert twice, "the killed window's handled keys come again (at least once)"
    assert not twice & completed_at_kill, "a key completed before the kill was handled again"
    assert len(twice) <= _consumer.CLAIM_WINDOW
    assert max(effects.values()) == 2


def test_the_counters_of_a_batched_run(tmp_path: Path, unique_name: str) -> None:
    """One batch holding a completed key (skipped), a key in progress elsewhere (deferred), a
    key repeated in the batch (its copy skipped after the first completes), a failing key and
    a poison one (dead-lettered); every count exact."""
    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    dlq = f"mem://{unique_name}-dlq"
    store = SqliteStore(tmp_path / "idem.db")
    done = store.claim("done", fingerprint(b"done"), lease=30, ttl=600)
    store.complete("done", done.token, None)  # type: ignore[arg-type]
    store.claim("busy", fingerprint(b"busy"), lease=30, ttl=600)  # held by "another consumer"
    plain = [f"p-{i}" for i in range(50)]
    _publish(url, ["done", "busy", *plain, "twice", "twice", "fails", "poison"])
    calls: Counter[str] = Counter()

    def handler(m: pm.Message) -> None:
        calls[m.body.decode()] += 1
        if m.body == b"poison":
            raise ValueError("never works")
        if m.body == b"fails" and calls["fails"] == 1:
            raise RuntimeError("once")

    sub = pm.open_subscription(url)
    stats = _run_until(
        sub, handler, lambda: calls["fails"] >= 2 and calls["poison"] >= 2, idempotency=store, idempotency_key=_body,
        max_deliveries=2, dead_letter=dlq, backoff=0.05, max_backoff=0.05,
    )  # fmt: skip
    assert calls["done"] == 0 and calls["busy"] == 0 and calls["twice"] == 1
    assert all(calls[k] == 1 for k in plain)
    assert stats.skipped == 2  # "done", the second "twice"
    assert stats.deferred >= 1  # "busy"
    assert stats.failed == 3  # fails once, poison twice
    assert stats.dead_lettered == 1
    assert stats.acked == len(plain) + 2 + 2  # the plain ones, "twice" x2 (one skipped), "fails", "done"
    assert stats.lost == 0 and stats.released == 0 and stats.unfinished == 0
    [dead] = pm.open_subscription(dlq).receive(10, wait=1)
    assert dead.body == b"poison"


def test_claim_observers_hear_of_every_claim_of_a_batch(tmp_path: Path, unique_name: str) -> None:
    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    keys = [f"o-{i}" for i in range(300)]
    _publish(url, keys)
    heard: list[tuple[str, str]] = []

    class Observer:
        def claimed(self, store: object, key: str, claim: Any, error: Any, started: int, ended: int) -> None:
            heard.append((key, claim.status))

    observer = Observer()
    _observe.CLAIM_OBSERVERS.append(observer)  # type: ignore[arg-type]
    try:
        handled: list[str] = []
        _run_until(pm.open_subscription(url), lambda m: handled.append(m.body.decode()), lambda: len(handled) == 300,
                   idempotency=SqliteStore(tmp_path / "idem.db"), idempotency_key=_body)  # fmt: skip
    finally:
        _observe.CLAIM_OBSERVERS.remove(observer)  # type: ignore[arg-type]
    assert sorted(k for k, _ in heard) == sorted(keys)
    assert {s for _, s in heard} == {"acquired"}


def test_a_stop_mid_batch_gives_back_the_unstarted_messages_and_their_claims(tmp_path: Path, unique_name: str) -> None:
    """Stopped while the handler of the first message of a received batch (the first batch: 8)
    runs: the other 7 go back at once, their claims taken back (no start counted), and a later
    run handles the other 99."""
    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    keys = [f"s-{i:03}" for i in range(100)]
    _publish(url, keys)
    store = SqliteStore(tmp_path / "idem.db")
    entered, gate = threading.Event(), threading.Event()
    first: list[str] = []

    def stuck(m: pm.Message) -> None:
        first.append(m.body.decode())
        entered.set()
        gate.wait(10)

    sub = pm.open_subscription(url, lease=60)
    stop = threading.Event()
    box: dict[str, pm.RunStats] = {}
    thread = threading.Thread(target=lambda: box.setdefault("s", sub.run(
        stuck, idempotency=store, idempotency_key=_body, stop_event=stop, handle_signals=False, drain_timeout=0.3, poll=0.1)), daemon=True)  # fmt: skip
    thread.start()
    assert entered.wait(10)
    stop.set()
    thread.join(10)
    gate.set()
    stats = box["s"]
    assert stats.received == 8 and stats.released == 7 and stats.unfinished == 1
    handled: list[str] = []
    _run_until(sub, lambda m: handled.append(m.body.decode()), lambda: len(set(handled)) == 99, idempotency=store,
               idempotency_key=_body)
    assert set(handled) == set(keys) - set(first) and len(handled) == 99
    starts = dict(sqlite3.connect(tmp_path / "idem.db").execute("SELECT key, starts FROM portable_idempotency"))
    assert all(starts[k] == 1 for k in handled), "a claim given back unstarted counted a start"


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_batch_is_acked_once_after_its_windows_and_a_repeated_key_is_skipped_not_deferred(
    tmp_path: Path, unique_name: str, face: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """700 messages, one key every 50th (the others their own): windows of 256 complete before the
    next window claims, so each repeat meets "completed" (skipped, never deferred), and each
    received batch is acked in one driver call after its last window's completions."""
    import asyncio

    from portable import aio
    from portable.embedded.sqlitequeue import SqliteMessaging as SqliteQueueDriver

    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    keys = ["again" if i % 50 == 0 else f"k-{i}" for i in range(700)]
    _publish(url, keys)
    calls = {"receive": 0, "ack_many": 0}
    receive, ack_many = SqliteQueueDriver.receive, SqliteQueueDriver.ack_many

    def counted_receive(self: Any, *args: Any) -> Any:
        got = receive(self, *args)
        calls["receive"] += bool(got)
        return got

    def counted_ack_many(self: Any, handles: Any) -> Any:
        calls["ack_many"] += 1
        return ack_many(self, handles)

    monkeypatch.setattr(SqliteQueueDriver, "receive", counted_receive)
    monkeypatch.setattr(SqliteQueueDriver, "ack_many", counted_ack_many)
    handled: Counter[str] = Counter()
    store = SqliteStore(tmp_path / "idem.db")
    options: dict[str, Any] = {"idempotency": store, "idempotency_key": _body}
    if face == "sync":
        stats = _run_until(pm.open_subscription(url), lambda m: handled.update([m.body.decode()]),
                           lambda: sum(handled.values()) == 700 - 13, **options)  # fmt: skip
    else:

        async def main() -> pm.RunStats:
            stop = asyncio.Event()

            async def handler(m: aio.AsyncMessage) -> None:
                handled.update([m.body.decode()])
                if sum(handled.values()) == 700 - 13:
                    asyncio.get_running_loop().call_later(0.3, stop.set)

            async with aio.open_subscription(url) as sub:
                return await sub.run(handler, stop_event=stop, handle_signals=False, poll=0.1, **options)

        stats = asyncio.run(asyncio.wait_for(main(), 60))
    assert handled["again"] == 1 and max(handled.values()) == 1 and len(handled) == 687
    assert stats.skipped == 13 and stats.deferred == 0
    assert stats.acked == 700
    assert calls["ack_many"] == calls["receive"] > 0, calls


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("loop_batch", [None, 40])
def test_the_batches_grow_to_the_drivers_loop_batch(
    tmp_path: Path, unique_name: str, face: str, loop_batch: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batched run's batches grow 4x from 8 up to the driver's ``loop_batch`` (1,000 unless the
    driver says less; Kafka's is 256): what it asks each receive for, and every message still
    handled once."""
    import asyncio

    from portable import aio
    from portable.embedded.sqlitequeue import SqliteMessaging as SqliteQueueDriver

    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    keys = [f"k-{i}" for i in range(600)]
    _publish(url, keys)
    asked: list[int] = []
    receive = SqliteQueueDriver.receive

    def recorded_receive(self: Any, max_messages: int, *args: Any) -> Any:
        got = receive(self, max_messages, *args)
        if got:
            asked.append(max_messages)
        return got

    monkeypatch.setattr(SqliteQueueDriver, "receive", recorded_receive)
    if loop_batch is not None:
        monkeypatch.setattr(SqliteQueueDriver, "loop_batch", loop_batch, raising=False)
    handled: Counter[str] = Counter()
    if face == "sync":
        _run_until(pm.open_subscription(url), lambda m: handled.update([m.body.decode()]), lambda: len(handled) == 600)
    else:

        async def main() -> None:
            stop = asyncio.Event()

            async def handler(m: aio.AsyncMessage) -> None:
                handled.update([m.body.decode()])
                if len(handled) == 600:
                    stop.set()

            async with aio.open_subscription(url) as sub:
                await sub.run(handler, stop_event=stop, handle_signals=False, poll=0.1)

        asyncio.run(asyncio.wait_for(main(), 60))
    assert sorted(handled) == sorted(keys) and max(handled.values()) == 1
    if loop_batch is None:
        assert asked == [8, 32, 128, 512], asked  # 680 asked for 600 messages: the 512 met the last 432
    else:
        assert asked[:2] == [8, 32] and max(asked) == loop_batch and asked[2:] == [40] * (len(asked) - 2), asked


def test_a_drivers_loop_batch_is_kept_within_1_and_max_receive_and_must_be_an_int() -> None:
    class Side:
        def __init__(self, size: object) -> None:
            self.loop_batch = size

    assert [_consumer.loop_batch(Side(n)) for n in (0, 1, 256, 1000, 5000)] == [1, 1, 256, 1000, 1000]
    assert _consumer.loop_batch(object()) == 1000  # a driver that says nothing: the largest
    with pytest.raises(TypeError, match=r"Side.loop_batch must be an int, got '256'"):
        _consumer.loop_batch(Side("256"))


def test_the_common_window_is_claimed_as_the_general_path_claims_it(tmp_path: Path, unique_name: str) -> None:
    """claim_window takes a shortcut for the common window (the default key function, every message
    keyed, no key twice, SqliteStore's one Claim for all new keys); a key function of the same
    answers takes the general path: both claim the same pairs and hold the same claims."""
    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    with pm.open_topic(url) as topic:
        topic.publish_batch([pm.OutgoingMessage(f"b{i}".encode(), idempotency_key=f"k-{i}") for i in range(300)])
    sub = pm.open_subscription(url)
    messages = sub.receive(300, wait=1.0)
    assert len(messages) == 300
    got = {}
    for name, key_of in (("shortcut", pm.default_idempotency_key), ("general", lambda m: m.idempotency_key)):
        claims = _claims.RunClaims(SqliteStore(tmp_path / f"{name}.db"), key_of, lease=30, ttl=600)
        owners, items = claims._window_items(messages)
        window = claims.claim_window(messages)
        ahead = window.table(messages) if isinstance(window, _claims.SharedClaim) else window
        got[name] = (
            [id(m) for m in owners], items, type(window).__name__,
            {mid: (key, claim.status, claim.starts, claim.failures) for mid, (key, claim) in ahead.items()},  # type: ignore[union-attr]
            {mid: (held[0], held[3]) for mid, held in claims._held.items()},
            {held[1] for held in claims._held.values()} == {claim.token for _, claim in ahead.values()},  # type: ignore[union-attr]
        )  # fmt: skip
    assert got["shortcut"] == got["general"]
    assert got["shortcut"][2] == "SharedClaim"  # every key new: one claim for the window, both paths
    assert len(got["shortcut"][3]) == 300 and got["shortcut"][5]
    sub.ack_many(messages)
