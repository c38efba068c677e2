"""Every IdempotencyStore keeps the same promises (memory, sqlite, buckets, chaos bucket, redis).

Each test runs on two faces (``[sync]``: the store; ``[async]``: its
:class:`portable.aio.AsyncIdempotencyStore`, through ``blocking``): see
``on_both_faces`` at the end.
"""

from __future__ import annotations

import threading

import pytest

from portable.errors import IdempotencyConflict, InvalidArgument, PreconditionFailed, TooLarge
from portable.idempotency import Claim, IdempotencyStore, fingerprint

from .conftest import Kit, on_both_faces

FP = fingerprint(b"payload")
OTHER = fingerprint(b"another payload")


def test_every_store_satisfies_the_protocol(kit: Kit) -> None:
    assert isinstance(kit.store, IdempotencyStore)


def test_first_claim_acquires_and_a_second_sees_it_in_progress(kit: Kit) -> None:
    first = kit.store.claim("order-1", FP, lease=10, ttl=100)
    assert first.status == "acquired" and first.token
    again = kit.store.claim("order-1", FP, lease=10, ttl=100)
    assert again == Claim("in_progress", None, None)
    assert kit.store.claim("order-2", FP, lease=10, ttl=100).status == "acquired"


def test_a_completed_key_returns_the_stored_result(kit: Kit) -> None:
    claim = kit.store.claim("k", FP, lease=10, ttl=100)
    assert claim.token is not None
    kit.store.complete("k", claim.token, b"\x00result\xff")
    assert kit.store.claim("k", FP, lease=10, ttl=100) == Claim("completed", None, b"\x00result\xff")


def test_a_completion_without_result_and_an_empty_result_differ(kit: Kit) -> None:
    a = kit.store.claim("none", FP, lease=10, ttl=100)
    b = kit.store.claim("empty", FP, lease=10, ttl=100)
    assert a.token and b.token
    kit.store.complete("none", a.token, None)
    kit.store.complete("empty", b.token, b"")
    assert kit.store.claim("none", FP, lease=10, ttl=100) == Claim("completed", None, None)
    assert kit.store.claim("empty", FP, lease=10, ttl=100) == Claim("completed", None, b"")


def test_completing_twice_with_the_same_token_is_a_no_op(kit: Kit) -> None:
    claim = kit.store.claim("k", FP, lease=10, ttl=100)
    assert claim.token
    kit.store.complete("k", claim.token, b"one")
    kit.store.complete("k", claim.token, b"two")  # a retried call
    assert kit.store.claim("k", FP, lease=10, ttl=100).result == b"one"


def test_a_different_payload_under_the_same_key_is_a_conflict(kit: Kit) -> None:
    claim = kit.store.claim("k", FP, lease=10, ttl=100)
    with pytest.raises(IdempotencyConflict, match="different payload"):
        kit.store.claim("k", OTHER, lease=10, ttl=100)
    assert claim.token
    kit.store.complete("k", claim.token, b"r")
    with pytest.raises(IdempotencyConflict):
        kit.store.claim("k", OTHER, lease=10, ttl=100)


def test_release_lets_the_next_caller_run(kit: Kit) -> None:
    first = kit.store.claim("k", FP, lease=10, ttl=100)
    assert first.token
    kit.store.release("k", first.token)
    second = kit.store.claim("k", FP, lease=10, ttl=100)
    assert second.status == "acquired" and second.token != first.token
    with pytest.raises(PreconditionFailed, match="lost"):
        kit.store.complete("k", first.token, b"late")


def test_an_expired_lease_is_taken_over_and_the_old_token_is_stale(kit: Kit) -> None:
    lease = 0.3 if kit.name == "redis" else 10
    crashed = kit.store.claim("k", FP, lease=lease, ttl=1000)
    assert crashed.token
    assert kit.store.claim("k", FP, lease=lease, ttl=1000).status == "in_progress"
    kit.clock.advance(lease + 0.05)
    taker = kit.store.claim("k", FP, lease=lease * 10, ttl=1000)
    assert taker.status == "acquired" and taker.token not in (None, crashed.token)
    with pytest.raises(PreconditionFailed):
        kit.store.complete("k", crashed.token, b"from the crashed claimer")
    with pytest.raises(PreconditionFailed):
        kit.store.release("k", crashed.token)
    assert taker.token
    kit.store.complete("k", taker.token, b"taker")
    assert kit.store.claim("k", FP, lease=10, ttl=1000).result == b"taker"


def test_an_expired_lease_of_another_payload_is_still_a_conflict(kit: Kit) -> None:
    lease = 0.3 if kit.name == "redis" else 10
    kit.store.claim("k", FP, lease=lease, ttl=1000)
    kit.clock.advance(lease + 0.05)
    with pytest.raises(IdempotencyConflict):
        kit.store.claim("k", OTHER, lease=lease, ttl=1000)


def test_records_expire_after_their_ttl(kit: Kit) -> None:
    lease, ttl = (0.2, 0.4) if kit.name == "redis" else (10, 100)
    claim = kit.store.claim("k", FP, lease=lease, ttl=ttl)
    assert claim.token
    kit.store.complete("k", claim.token, b"old")
    kit.clock.advance(ttl + 0.1)
    fresh = kit.store.claim("k", OTHER, lease=lease, ttl=ttl)  # the old record is gone: no conflict
    assert fresh.status == "acquired"


def test_extend_keeps_a_long_claim_exclusive(kit: Kit) -> None:
    lease = 0.4 if kit.name == "redis" else 10
    claim = kit.store.claim("k", FP, lease=lease, ttl=1000)
    assert claim.token
    kit.clock.advance(lease * 0.6)
    kit.store.extend("k", claim.token, lease)  # type: ignore[attr-defined]
    kit.clock.advance(lease * 0.6)
    assert kit.store.claim("k", FP, lease=lease, ttl=1000).status == "in_progress"


def test_a_result_over_the_limit_is_refused_and_the_claim_kept(kit: Kit) -> None:
    limit = kit.store.max_result_bytes  # type: ignore[attr-defined]
    claim = kit.store.claim("k", FP, lease=10, ttl=100)
    assert claim.token
    with pytest.raises(TooLarge, match="at most"):
        kit.store.complete("k", claim.token, b"x" * (limit + 1))
    assert kit.store.claim("k", FP, lease=10, ttl=100).status == "in_progress"
    kit.store.complete("k", claim.token, b"x" * limit)
    assert kit.store.claim("k", FP, lease=10, ttl=100).result == b"x" * limit


@pytest.mark.parametrize(
    ("key", "fp", "lease", "ttl", "message"),
    [
        ("", FP, 1, 10, "non-empty str"),
        ("k" * 1025, FP, 1, 10, "at most 1,024"),
        ("k", "", 1, 10, "fingerprint"),
        ("k", FP, 0, 10, "lease must be > 0"),
        ("k", FP, 10, 1, "must be >= lease"),
    ],
)
def test_bad_arguments_are_refused_before_any_request(kit: Kit, key: str, fp: str, lease: float, ttl: float, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        kit.store.claim(key, fp, lease=lease, ttl=ttl)


def test_keys_are_opaque_strings(kit: Kit) -> None:
    for key in ("a/b/../c", "ünïcode ключ", "with spaces and ?&=#", "x" * 1024):
        claim = kit.store.claim(key, FP, lease=10, ttl=100)
        assert claim.status == "acquired", key
        assert claim.token
        kit.store.complete(key, claim.token, key.encode())
        assert kit.store.claim(key, FP, lease=10, ttl=100).result == key.encode()


def test_sixteen_threads_racing_on_one_key_acquire_it_once(kit: Kit) -> None:
    barrier = threading.Barrier(16)
    claims: list[Claim] = []
    lock = threading.Lock()

    def race() -> None:
        barrier.wait()
        claim = kit.store.claim("contended", FP, lease=60, ttl=600)
        with lock:
            claims.append(claim)

    threads = [threading.Thread(target=race) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(c.status for c in claims) == ["acquired"] + ["in_progress"] * 15


# ---------------------------------------------------------------- issue 25.1: when a claim ends, how often it started
def test_an_in_progress_claim_says_when_its_lease_ends(kit: Kit) -> None:
    lease = 2.0 if kit.name == "redis" else 10.0
    kit.store.claim("k", FP, lease=lease, ttl=1000)
    kit.clock.advance(lease / 4)
    busy = kit.store.claim("k", FP, lease=lease, ttl=1000)
    assert busy.status == "in_progress"
    assert busy.lease_remaining is not None
    assert 0 < busy.lease_remaining <= lease * 3 / 4 + 0.01


def test_claims_count_the_starts_and_the_failures_of_a_key(kit: Kit) -> None:
    lease = 0.3 if kit.name == "redis" else 10
    first = kit.store.claim("k", FP, lease=lease, ttl=1000)
    assert (first.status, first.starts, first.failures) == ("acquired", 1, 0)
    assert first.token is not None
    kit.store.release("k", first.token)  # the effect failed
    second = kit.store.claim("k", FP, lease=lease, ttl=1000)
    assert (second.starts, second.failures) == (2, 1)
    kit.clock.advance(lease + 0.05)  # its claimer crashed: the lease ran out
    third = kit.store.claim("k", FP, lease=lease, ttl=1000)
    assert (third.status, third.starts, third.failures) == ("acquired", 3, 1)
    assert kit.store.claim("k", FP, lease=lease, ttl=1000).status == "in_progress"  # not a start


def test_forget_gives_a_claim_up_and_starts_the_count_again(kit: Kit) -> None:
    first = kit.store.claim("k", FP, lease=10, ttl=1000)
    assert first.token is not None
    kit.store.release("k", first.token)
    second = kit.store.claim("k", FP, lease=10, ttl=1000)
    assert second.token is not None and second.starts == 2
    kit.store.forget("k", second.token)  # type: ignore[attr-defined]
    again = kit.store.claim("k", FP, lease=10, ttl=1000)
    assert (again.status, again.starts, again.failures) == ("acquired", 1, 0)


def test_the_counts_start_again_when_the_record_expires(kit: Kit) -> None:
    lease, ttl = (0.2, 0.4) if kit.name == "redis" else (10, 100)
    claim = kit.store.claim("k", FP, lease=lease, ttl=ttl)
    assert claim.token is not None
    kit.store.release("k", claim.token)
    kit.clock.advance(ttl + 0.1)
    fresh = kit.store.claim("k", FP, lease=lease, ttl=ttl)
    assert (fresh.starts, fresh.failures) == (1, 0)


# One body, two faces: every test above runs on the sync store and on its async twin.
for _name, _test in list(globals().items()):
    if _name.startswith("test_") and callable(_test):
        globals()[_name] = on_both_faces(_test)
