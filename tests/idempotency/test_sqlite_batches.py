"""SqliteStore's batched statements: claim_many writes new keys with multi-row INSERTs (480 rows
a statement), all with one token, and complete_many marks claims without a result done with one
UPDATE per 480 keys of a token (key IN (...) AND token = ?). Each answer must equal what the one-key methods (and MemoryStore) give,
on either side of the chunk sizes, with keys seen before, keys twice in a batch and lost claims."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from portable.driver.idempotency import Claim
from portable.errors import IdempotencyConflict, PreconditionFailed
from portable.idempotency import MemoryStore, SqliteStore
from portable.idempotency._sqlite import _acquired


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
