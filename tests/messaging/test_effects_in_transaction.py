"""Issue 25 item 5: effects that share the idempotency store's commit hold after a crash.

``SqliteStore.run_and_complete`` runs an effect in the transaction that also
completes the claim; ``BucketStore.run_and_complete`` hands it create-only puts
tagged with the key, which a re-run recognises; ``store.transactional()``
makes a ``Subscription.run`` handler of either. The SIGKILL test is in tests/crash/.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from portable.driver.idempotency import TransactionalHandler
from portable.errors import AlreadyExists, Internal, InvalidArgument, PreconditionFailed
from portable.idempotency import BucketStore, MemoryStore, SqliteStore, fingerprint
from portable.idempotency._bucket import EFFECT_METADATA, BucketEffects
from portable.idempotency._sqlite import SqliteTransaction
from portable.messaging import Message, open_topic
from portable.storage import open_bucket
from portable.testing.messaging_suite import wait_for
from tests.messaging.consumer_support import open_quick, quick_profile, run_in_thread


def _orders(path: Path) -> SqliteStore:
    store = SqliteStore(path)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, n INTEGER NOT NULL)")
    return store


def _order_count(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT COALESCE(SUM(n), 0) FROM orders").fetchone()[0])


def test_sqlite_commits_the_effect_and_the_completion_together(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    store = _orders(path)
    claim = store.claim("o1", fingerprint(b"o1"), lease=30, ttl=600)
    assert claim.token is not None

    def effect(tx: SqliteTransaction) -> bytes:
        tx.execute("INSERT INTO orders VALUES ('o1', 1)")
        return b"receipt"

    assert store.run_and_complete("o1", claim.token, effect) == b"receipt"
    assert _order_count(path) == 1
    assert store.claim("o1", fingerprint(b"o1"), lease=30, ttl=600).result == b"receipt"


def test_sqlite_rolls_the_effect_back_with_the_claim_left_held(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    store = _orders(path)
    claim = store.claim("o2", fingerprint(b"o2"), lease=30, ttl=600)
    assert claim.token is not None

    def effect(tx: SqliteTransaction) -> None:
        tx.execute("INSERT INTO orders VALUES ('o2', 1)")
        raise RuntimeError("payment declined")

    with pytest.raises(RuntimeError):
        store.run_and_complete("o2", claim.token, effect)
    assert _order_count(path) == 0
    assert store.claim("o2", fingerprint(b"o2"), lease=30, ttl=600).status == "in_progress"
    store.release("o2", claim.token)


def test_sqlite_runs_no_effect_for_a_lost_claim(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    clock = [1_800_000_000.0]
    store = SqliteStore(path, clock=lambda: clock[0])
    _orders(path)
    stale = store.claim("o3", fingerprint(b"o3"), lease=5, ttl=600)
    clock[0] += 6
    assert (
        store.claim("o3", fingerprint(b"o3"), lease=5, ttl=600).status == "acquired"
    )  # taken over
    ran: list[int] = []
    assert stale.token is not None
    with pytest.raises(PreconditionFailed, match="was lost"):
        store.run_and_complete("o3", stale.token, lambda tx: ran.append(1))
    assert ran == []


def test_sqlite_refuses_an_effect_that_ends_the_transaction_itself(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    store = _orders(path)
    claim = store.claim("o4", fingerprint(b"o4"), lease=30, ttl=600)
    assert claim.token is not None

    def effect(tx: SqliteTransaction) -> None:
        tx.execute("INSERT INTO orders VALUES ('o4', 1)")
        tx.execute("COMMIT")

    with pytest.raises(Internal, match=r"COMMIT inside SqliteStore\.run_and_complete"):
        store.run_and_complete("o4", claim.token, effect)
    assert _order_count(path) == 0


def test_a_transactional_handler_commits_each_message_once(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    store = _orders(path)
    url = "mem://transactional-sqlite"
    topic = open_topic(url, profile=quick_profile(url))
    for i in range(5):
        topic.publish(f"{i}".encode(), idempotency_key=f"order-{i}")
    topic.publish(b"3", idempotency_key="order-3")  # a duplicate (mem drops it; a copy anyway)
    topic.publish(b"no key")

    def handle(message: Message, tx: SqliteTransaction) -> None:
        tx.execute("INSERT INTO orders VALUES (?, 1)", (message.body.decode(),))

    handler = store.transactional(handle)
    assert isinstance(handler, TransactionalHandler)
    sub = open_quick(url)
    finish = run_in_thread(sub, handler, idempotency=store, poll=0.2)
    wait_for(lambda: sub.stats().available == 0 and sub.stats().in_flight == 0, 10, "every ack")
    stats = finish()
    assert _order_count(path) == 6
    assert stats.failed == 0
    with sqlite3.connect(path) as conn:
        assert (
            conn.execute(
                "SELECT COUNT(*) FROM portable_idempotency WHERE completed = 1"
            ).fetchone()[0]
            == 5
        )


def test_a_transactional_handler_needs_its_own_store(tmp_path: Path) -> None:
    store = _orders(tmp_path / "app.db")
    sub = open_quick("mem://transactional-mismatch")
    with pytest.raises(InvalidArgument, match="same store"):
        sub.run(
            store.transactional(lambda m, tx: None), idempotency=MemoryStore(), handle_signals=False
        )


def test_a_bucket_effect_put_is_made_once_per_key_across_a_crash() -> None:
    bucket = open_bucket("mem://effects-once")
    store = BucketStore(bucket, prefix="idem/")
    first = store.claim("ship-9", fingerprint(b"9"), lease=30, ttl=600)
    assert first.token is not None
    etag = BucketEffects(bucket, "ship-9").put(
        "shipments/9.json", b'{"n": 1}'
    )  # then the claimer is killed
    # a takeover re-runs the effect: the put finds its own earlier write and leaves it
    again = store.run_and_complete(
        "ship-9", first.token, lambda tx: tx.put("shipments/9.json", b'{"n": 2}')
    )
    assert again == etag
    assert bucket.get("shipments/9.json") == b'{"n": 1}'
    assert bucket.head("shipments/9.json").metadata[EFFECT_METADATA]
    assert store.claim("ship-9", fingerprint(b"9"), lease=30, ttl=600).status == "completed"


def test_a_bucket_effect_put_does_not_overwrite_another_keys_object() -> None:
    bucket = open_bucket("mem://effects-other")
    bucket.put("shipments/1.json", b"someone else's")
    with pytest.raises(AlreadyExists):
        BucketEffects(bucket, "ship-1").put("shipments/1.json", b"mine")
    assert bucket.get("shipments/1.json") == b"someone else's"
