"""portable-cloud-redis: the Redis idempotency store against a real redis-server.

The shared contract (claim, complete, release, expiry, takeover, races between
processes, kill -9) runs on Redis in tests/idempotency; this module tests what
is particular to Redis. No __init__.py here on purpose: a package named
``redis`` under tests/contrib would shadow the redis client.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import redis
from portable_redis import RedisStore

from portable.errors import (
    IdempotencyConflict,
    InvalidURL,
    MissingDependency,
    PreconditionFailed,
    TooLarge,
    Unavailable,
)
from portable.idempotency import Claim, fingerprint, open_store, run_once
from portable.urls import parse_url
from tests.idempotency.conftest import uninstall_stores


@pytest.fixture
def store(redis_server: object, unique_name: str) -> Iterator[RedisStore]:
    url = f"{redis_server.endpoints['url']}?prefix={unique_name}:"  # type: ignore[attr-defined]
    found = open_store(url)
    assert isinstance(found, RedisStore)
    yield found
    found.close()


def test_open_store_finds_the_store_through_the_entry_point(store: RedisStore, unique_name: str) -> None:
    assert store.prefix == f"{unique_name}:"
    assert "redis://127.0.0.1" in repr(store)
    assert store.as_(redis.Redis) is store.client and store.as_(int) is None


def test_redis_py_retries_are_turned_off(store: RedisStore) -> None:
    retry = store.client.connection_pool.connection_kwargs["retry"]
    assert retry.get_retries() == 0  # only portable's Guard retries


def test_records_are_hashes_that_redis_expires(store: RedisStore) -> None:
    claim = store.claim("k", fingerprint(b"x"), lease=5, ttl=120)
    assert claim.token
    store.complete("k", claim.token, b"result")
    raw = store.client.hgetall(f"{store.prefix}k")
    assert raw[b"state"] == b"completed" and raw[b"result"] == b"result"
    assert 0 < store.client.pttl(f"{store.prefix}k") <= 120_000


def test_claim_many_pipelines_claims_and_reports_conflicts_per_key(store: RedisStore) -> None:
    done = store.claim("done", "fp", lease=5, ttl=60)
    assert done.token
    store.complete("done", done.token, b"r")
    store.claim("busy", "fp", lease=5, ttl=60)
    store.claim("other", "fp-a", lease=5, ttl=60)
    results = store.claim_many([("new", "fp"), ("done", "fp"), ("busy", "fp"), ("other", "fp-b")], lease=5, ttl=60)
    assert results[0].status == "acquired"  # type: ignore[union-attr]
    assert results[1] == Claim("completed", None, b"r")
    assert results[2] == Claim("in_progress")
    assert isinstance(results[3], IdempotencyConflict)


def test_complete_many_pipelines_completions_and_reports_each_failure_in_its_slot(store: RedisStore) -> None:
    mine = store.claim("mine", "fp", lease=5, ttl=60)
    lost = store.claim("lost", "fp", lease=5, ttl=60)
    big = store.claim("big", "fp", lease=5, ttl=60)
    assert mine.token and lost.token and big.token
    store.release("lost", lost.token)  # the token no longer holds the key
    too_large = b"x" * (store.max_result_bytes + 1)
    out = store.complete_many([("mine", mine.token, b"r"), ("lost", lost.token, None), ("big", big.token, too_large)])
    assert out[0] is None
    assert isinstance(out[1], PreconditionFailed)
    assert isinstance(out[2], TooLarge)
    assert store.claim("mine", "fp", lease=5, ttl=60) == Claim("completed", None, b"r")
    # the too-large result was never sent: the key is still held by its claim
    assert store.claim("big", "fp", lease=5, ttl=60) == Claim("in_progress")


def test_a_retried_claim_whose_reply_was_lost_is_still_ours(store: RedisStore) -> None:
    # What the Guard does after a lost reply: the same script, the same token, again.
    token = "t" * 32
    first = store._claim(keys=[f"{store.prefix}k"], args=["fp", token, 5000, 60000])
    again = store._claim(keys=[f"{store.prefix}k"], args=["fp", token, 5000, 60000])
    assert first == again == [b"acquired"]
    store.complete("k", token, None)
    assert store.claim("k", "fp", lease=5, ttl=60) == Claim("completed")


def test_run_once_over_redis(store: RedisStore) -> None:
    runs: list[int] = []
    assert run_once(store, "order", "fp", lambda: runs.append(1) or {"ok": True}) == {"ok": True}
    assert run_once(store, "order", "fp", lambda: runs.append(1) or {"ok": False}) == {"ok": True}
    assert runs == [1]


def test_an_unreachable_server_is_unavailable_after_the_retry_policy() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = RedisStore.from_url(parse_url(f"redis://127.0.0.1:{port}/0"))
    with pytest.raises(Unavailable) as info:
        store.claim("k", "fp", lease=1, ttl=10)
    assert isinstance(info.value.__cause__, redis.exceptions.ConnectionError)


def test_bad_urls_are_refused() -> None:
    with pytest.raises(InvalidURL):
        open_store("redis://127.0.0.1:6379/0?max_result_bytes=many")


def test_a_redis_url_without_the_distribution_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    uninstall_stores(monkeypatch, "portable_redis", "portable_redis.store")
    for scheme in ("redis", "rediss", "unix"):
        with pytest.raises(MissingDependency, match=rf"{scheme}:// needs the redis adapter: pip install 'portable-cloud\[redis\]'"):
            open_store(f"{scheme}://127.0.0.1:6379/0")


def test_unix_socket_urls_open_the_redis_store(tmp_path: object) -> None:
    store = open_store(f"unix://{tmp_path}/redis.sock?db=0&prefix=p:")
    assert isinstance(store, RedisStore) and store.prefix == "p:"
    store.close()
