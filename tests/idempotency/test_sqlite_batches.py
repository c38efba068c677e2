"""SqliteStore's batched statements: claim_many writes new keys with multi-row INSERTs (480 rows
a statement), all with one token, and complete_many marks claims without a result done with one
UPDATE per 480 keys of a token (key IN (...) AND token = ?). Each answer must equal what the one-key methods (and MemoryStore) give,
on either side of the chunk sizes, with keys seen before, keys twice in a batch and lost claims."""

from __future__ import annotations

import dataclasses
import sqlite3
import uuid
from pathlib import Path

import pytest

from portable.driver.idempotency import Claim
from portable.errors import IdempotencyConflict, PreconditionFailed
from portable.idempotency import MemoryStore, SqliteStore, fingerprint
from portable.idempotency._sqlite import _acquired

from .conftest import old_layout


def test_the_quick_acquired_claim_equals_the_constructed_one() -> None:
    quick, made = _acquired("tok", 12.5), Claim("acquired", "tok", None, 12.5, 1, 0)
    assert quick == made and repr(quick) == repr(made)
    assert all(getattr(quick, f.name) == getattr(made, f.name) for f in dataclasses.fields(Claim))


def answers(claims: list[Claim | IdempotencyConflict]) -> list[tuple[str, int | None] | str]:
    return [type(c).__name__ if isinstance(c, IdempotencyConflict) else (c.status, c.starts) for c in claims]


@pytest.mark.parametrize("n", [1, 479, 480, 481, 961])
def test_claim_many_answers_as_the_memory_store_does(tmp_path: Path, n: int) -> None:
    sqlite, memory = SqliteStore(str(tmp_path / "s.db")), MemoryStore()
    for store in (sqlite, memory):  # keys seen before: one done, one in progress, one of another payload
        done = store.claim("k0", "f", lease=30, ttl=600)
        store.complete("k0", done.token, b"r")  # type: ignore[arg-type]
        store.claim("k1", "f", lease=30, ttl=600)
        store.claim("k2", "other", lease=30, ttl=600)
    pairs = [(f"k{i}", "f") for i in range(n)] + [("k3", "f")]  # k3 twice when n > 3
    got = sqlite.claim_many(pairs, lease=30, ttl=600)
    assert answers(got) == answers(memory.claim_many(pairs, lease=30, ttl=600))
    acquired = [(key, c.token) for (key, _), c in zip(pairs, got, strict=True) if isinstance(c, Claim) and c.status == "acquired"]
    assert len(acquired) == max(0, n - 3) + (n <= 3)
    # the new keys of one call share one token; a key's claims never do (k3 twice: in progress the second time)
    assert len({token for _, token in acquired}) == 1
    assert len({key for key, _ in acquired}) == len(acquired)


@pytest.mark.parametrize("results", [True, False], ids=["some-results", "none"])
@pytest.mark.parametrize("n", [1, 479, 480, 481, 1000])
def test_complete_many_completes_every_claim_it_holds_and_names_the_lost_ones(tmp_path: Path, n: int, results: bool) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    claims = store.claim_many([(f"k{i}", "f") for i in range(n)], lease=30, ttl=600)
    tokens = [c.token for c in claims]  # type: ignore[union-attr]
    assert all(isinstance(t, str) for t in tokens)
    store.release(f"k{n - 1}", tokens[-1])  # type: ignore[arg-type]  # lost: given up before its completion
    kept = [b"kept" if results and i % 7 == 3 else None for i in range(n)]
    items = [(f"k{i}", tokens[i], kept[i]) for i in range(n)]
    items.append(("k0", tokens[0], None))  # twice: the second finds it completed by this token: fine
    errors = store.complete_many(items)  # type: ignore[arg-type]
    lost = [i for i, e in enumerate(errors) if e is not None]
    assert lost == ([0, 1] if n == 1 else [n - 1]), errors[-2:]
    again = store.claim_many([(f"k{i}", "f") for i in range(n)], lease=30, ttl=600)
    assert [c.status for c in again[:-1]] == ["completed"] * (n - 1)  # type: ignore[union-attr]
    assert [c.result for c in again[:-1]] == kept[:-1]  # type: ignore[union-attr]
    assert again[-1].status == "acquired"  # type: ignore[union-attr]  # the released key is free again


def test_complete_many_marks_each_pair_of_key_and_token_and_no_other(tmp_path: Path) -> None:
    """Tokens shared by one call's claims, tokens of one key alone, and a stale token of a key
    that was claimed again (its lease ran out) in one call: only the pairs that still hold are
    completed, and the stale one is named lost, though its key's current token is in the call."""
    now = [1000.0]
    store = SqliteStore(str(tmp_path / "s.db"), clock=lambda: now[0])
    first = store.claim_many([("a", "f"), ("b", "f")], lease=10, ttl=600)
    now[0] += 11  # a's and b's leases run out
    again = store.claim_many([("a", "f"), ("c", "f")], lease=10, ttl=600)
    single = store.claim("d", "f", lease=10, ttl=600)
    assert again[0].token == again[1].token != first[0].token  # type: ignore[union-attr]
    items = [
        ("a", first[0].token, None),  # stale: "a" holds again's token now
        ("b", first[1].token, None),  # its lease ran out, nobody claimed it since: still its token
        ("c", again[1].token, None),
        ("d", single.token, None),
    ]
    errors = store.complete_many(items)  # type: ignore[arg-type]
    assert isinstance(errors[0], PreconditionFailed) and errors[1:] == [None, None, None]
    status = {k: store.claim(k, "f", lease=10, ttl=600).status for k in "abcd"}
    assert status["a"] == "in_progress", "the stale completion must not complete the current claim"
    assert status["c"] == status["d"] == "completed"


def _table_sql(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        [sql] = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'portable_idempotency'").fetchone()
    finally:
        conn.close()
    return str(sql)


def test_a_new_database_keeps_its_records_in_a_rowid_table(tmp_path: Path) -> None:
    """Records in claim order, keys in the primary-key index: random keys (UUIDs) rewrite few pages."""
    store = SqliteStore(tmp_path / "idem.db")
    keys = [str(uuid.uuid4()) for _ in range(300)]
    claims = store.claim_many([(key, fingerprint(key.encode())) for key in keys], lease=30, ttl=60)
    assert {claim.status for claim in claims if isinstance(claim, Claim)} == {"acquired"}
    assert "WITHOUT ROWID" not in _table_sql(tmp_path / "idem.db").upper()
    conn = sqlite3.connect(tmp_path / "idem.db")
    try:
        in_order = [key for (key,) in conn.execute("SELECT key FROM portable_idempotency ORDER BY rowid")]
    finally:
        conn.close()
    assert in_order == keys


def test_a_table_made_without_rowid_by_an_earlier_version_is_kept_and_shared(tmp_path: Path) -> None:
    """A file of an earlier version keeps its layout, and both layouts' statements agree: a key the old
    table holds is seen as held (its fingerprint checked), completed and skipped."""
    path = tmp_path / "idem.db"
    old_layout(path)
    store = SqliteStore(path)
    assert "WITHOUT ROWID" in _table_sql(path).upper()
    keys = [str(uuid.uuid4()) for _ in range(5)]
    first = store.claim_many([(key, "fp") for key in keys], lease=30, ttl=60)
    token = first[0].token if isinstance(first[0], Claim) else None
    assert token is not None
    assert store.claim(keys[0], "fp", lease=30, ttl=60).status == "in_progress"
    with pytest.raises(IdempotencyConflict):
        store.claim(keys[1], "another fp", lease=30, ttl=60)
    assert store.complete_many([(key, token, None) for key in keys]) == [None] * len(keys)
    assert SqliteStore(path).claim(keys[2], "fp", lease=30, ttl=60).status == "completed"


def test_the_documented_move_to_the_new_layout_keeps_every_record(tmp_path: Path) -> None:
    """docs/idempotency.md: copy an old file's rows into a new file's table; the records hold there."""
    old_path, new_path = tmp_path / "old.db", tmp_path / "new.db"
    old_layout(old_path)
    old = SqliteStore(old_path)
    token = old.claim("done", "fp", lease=30, ttl=60).token
    assert token is not None
    old.complete("done", token, b"result")
    assert old.claim("held", "fp", lease=30, ttl=60).status == "acquired"
    SqliteStore(new_path)  # makes the new file's table
    conn = sqlite3.connect(old_path)
    try:
        conn.execute("ATTACH DATABASE ? AS new", (str(new_path),))
        conn.execute("INSERT INTO new.portable_idempotency SELECT * FROM portable_idempotency")
        conn.commit()
    finally:
        conn.close()
    moved = SqliteStore(new_path)
    assert "WITHOUT ROWID" not in _table_sql(new_path).upper()
    assert moved.claim("done", "fp", lease=30, ttl=60) == Claim("completed", None, b"result")
    assert moved.claim("held", "fp", lease=30, ttl=60).status == "in_progress"
    with pytest.raises(IdempotencyConflict):
        moved.claim("done", "another fp", lease=30, ttl=60)
