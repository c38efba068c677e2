"""open_store: one registry (portable.urls) and the opener signature every domain has."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from portable.config import Profile
from portable.errors import MissingDependency, Unavailable, UnknownScheme
from portable.idempotency import BucketStore, MemoryStore, SqliteStore, open_store
from portable.resilience import ResiliencePolicy, RetryPolicy
from portable.testing.chaos import chaos_of
from portable.urls import parse_url

from .conftest import uninstall_stores


def _policy(attempts: int) -> ResiliencePolicy:
    return ResiliencePolicy(retry=RetryPolicy(max_attempts=attempts, initial_backoff=0.001, max_backoff=0.001), breaker=None)


def _profile(**urls: str) -> Profile:
    return Profile(name="idem", storage="mem://", queue="mem://q", jobs="local://", **urls)  # type: ignore[arg-type]


def _attempts_of_one_claim(store: BucketStore) -> int:
    """How many requests the store's bucket made for one claim during an outage."""
    chaos = chaos_of(store.bucket)
    with chaos.outage(), pytest.raises(Unavailable):
        store.claim("k", "fp", lease=1, ttl=10)
    return sum(chaos.stats.calls.values())


def test_an_unknown_scheme_suggests_the_closest_store() -> None:
    with pytest.raises(UnknownScheme) as info:
        open_store("reddis://127.0.0.1:6379/0")
    msg = str(info.value)
    assert msg.startswith("no idempotency store for reddis://. Did you mean redis://?")
    assert "mem://" in msg and "sqlite://" in msg and "or any storage URL" in msg and "file://" in msg


def test_a_bucket_scheme_may_be_the_closest_match() -> None:
    with pytest.raises(UnknownScheme, match=r"no idempotency store for s4://\. Did you mean s3://\?"):
        open_store("s4://bucket/records")


def test_a_store_of_a_missing_distribution_names_the_pip_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    uninstall_stores(monkeypatch, "portable_redis", "portable_redis.store", "portable_aws", "portable_aws.dynamodb")
    with pytest.raises(MissingDependency, match=r"^redis:// needs the redis adapter: pip install 'portable-cloud\[redis\]'$"):
        open_store("redis://127.0.0.1:6379/0")
    with pytest.raises(MissingDependency, match=r"pip install 'portable-cloud\[aws\]'"):
        open_store("dynamodb://table")


def test_the_call_forms_of_today_still_work(tmp_path: Path) -> None:
    name = uuid.uuid4().hex
    assert open_store(parse_url(f"mem://{name}")) is open_store(f"mem://{name}")
    assert isinstance(open_store("mem://"), MemoryStore)
    assert isinstance(open_store(parse_url(f"sqlite://{tmp_path}/x.db")), SqliteStore)
    store = open_store(parse_url(f"file://{tmp_path}/records?max_result_bytes=10"))
    assert isinstance(store, BucketStore) and store.max_result_bytes == 10


def test_without_a_url_the_named_profile_gives_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "portable.toml"
    config.write_text(f'[profiles.idem]\nidempotency = "sqlite://{tmp_path}/named.db"\n')
    monkeypatch.setenv("PORTABLE_CONFIG", str(config))
    monkeypatch.delenv("PORTABLE_IDEMPOTENCY_URL", raising=False)
    monkeypatch.delenv("PORTABLE_PROFILE", raising=False)
    store = open_store(profile="idem")
    assert isinstance(store, SqliteStore) and store.path == tmp_path / "named.db"
    loaded = open_store(profile=_profile(idempotency=f"sqlite://{tmp_path}/loaded.db"))
    assert isinstance(loaded, SqliteStore) and loaded.path == tmp_path / "loaded.db"


def test_a_bucket_store_runs_under_the_profiles_policy_or_the_one_given() -> None:
    url = f"chaos+mem://{uuid.uuid4().hex}?error_rate=0"
    profile = _profile(resilience=_policy(3))  # type: ignore[arg-type]
    under_profile = open_store(url, profile=profile)
    assert isinstance(under_profile, BucketStore)
    assert _attempts_of_one_claim(under_profile) == 3
    given = open_store(url, profile=profile, policy=_policy(2))
    assert isinstance(given, BucketStore)
    assert _attempts_of_one_claim(given) == 2


def test_the_policy_given_applies_without_a_profile() -> None:
    store = open_store(f"chaos+mem://{uuid.uuid4().hex}?error_rate=0", policy=_policy(1))
    assert isinstance(store, BucketStore)
    assert _attempts_of_one_claim(store) == 1


def test_importing_the_package_alone_works_and_storage_does_not_import_it() -> None:
    code = (
        "import sys, portable.idempotency\n"
        "import portable.storage\n"
        "print(sorted(m for m in sys.modules if m.startswith('portable.idempotency')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "portable.idempotency._bucket" in out.stdout
    code = "import sys, portable.storage\nprint(any(m.startswith('portable.idempotency') for m in sys.modules))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
