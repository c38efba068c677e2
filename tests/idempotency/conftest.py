"""Store fixtures: every IdempotencyStore, each with a clock the test can move.

``store_kit`` yields (store, clock); ``clock.advance(seconds)`` moves the
store's clock (a fake one for the embedded stores; for Redis, whose leases run
on the server's clock, it polls the server until that much time has passed).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import inspect
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from portable.aio import AsyncIdempotencyStore
from portable.idempotency import BucketStore, IdempotencyStore, MemoryStore, SqliteStore
from portable.storage import open_bucket
from portable.testing.faces import blocking
from portable.testing.fault_suite import fault_profile


def uninstall_stores(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make the idempotency stores of ``modules`` look uninstalled: no entry points, nothing to import."""
    installed = importlib.metadata.entry_points
    monkeypatch.setattr(
        importlib.metadata, "entry_points",
        lambda group: [] if group == "portable.idempotency" else installed(group=group),
    )
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class RedisClock:
    """Leases run on the Redis server's clock: wait (polling it) until ``seconds`` have passed there."""

    def __init__(self, store: object) -> None:
        self.store = store

    def advance(self, seconds: float) -> None:
        target = self.store.server_time() + seconds  # type: ignore[attr-defined]
        limit = time.monotonic() + seconds + 5.0
        while self.store.server_time() < target:  # type: ignore[attr-defined]
            assert time.monotonic() < limit, "the redis server's clock did not advance"
            time.sleep(0.01)


@dataclass
class Kit:
    name: str
    store: IdempotencyStore
    clock: FakeClock | RedisClock
    url: str | None = None  # a URL other processes can open, if the store is shared

    def on(self, face: str) -> Kit:
        """This kit on ``face``: itself on "sync"; on "async" its store's portable.aio twin behind blocking()."""
        if face == "sync":
            return self
        assert face == "async", face
        twin = blocking(AsyncIdempotencyStore.from_sync(self.store))
        return dataclasses.replace(self, store=twin)


#: the faces every store contract test runs on
FACES = ("sync", "async")


def on_both_faces(test: Callable[..., None]) -> Callable[..., None]:
    """Run a store contract test once per face: ``test_x[sync]``, ``test_x[async]``.

    The test's ``kit`` becomes ``kit.on(face)``, so one body serves both faces;
    the marks travel with the function, so modules that collect the contract's
    tests again (tests/adapters/aws, gcp) run both faces too.
    """
    sig = inspect.signature(test)

    @functools.wraps(test)
    def run(*args: Any, face: str, **kwargs: Any) -> None:
        kwargs["kit"] = kwargs["kit"].on(face)
        test(*args, **kwargs)

    run.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[*sig.parameters.values(), inspect.Parameter("face", inspect.Parameter.KEYWORD_ONLY)]
    )
    return pytest.mark.parametrize("face", FACES)(run)


# sqlite-without-rowid: a file whose table an earlier version made (WITHOUT ROWID): the store keeps it as it is
STORES = ["memory", "sqlite", "sqlite-without-rowid", "file-bucket", "mem-bucket", "chaos-bucket", "redis"]


def make_kit(name: str, tmp_path: Path, request: pytest.FixtureRequest, unique_name: str) -> Kit:
    clock = FakeClock()
    if name == "memory":
        return Kit(name, MemoryStore(clock=clock), clock)
    if name in ("sqlite", "sqlite-without-rowid"):
        path = tmp_path / "idem.db"
        if name == "sqlite-without-rowid":
            old_layout(path)
        return Kit(name, SqliteStore(path, clock=clock), clock, f"sqlite://{path}")
    if name == "file-bucket":
        url = f"file://{tmp_path}/records"
        return Kit(name, BucketStore(open_bucket(url), prefix="idem", clock=clock), clock, url)
    if name == "mem-bucket":
        return Kit(name, BucketStore(open_bucket(f"mem://{unique_name}"), clock=clock), clock)
    if name == "chaos-bucket":
        # The store's own writes meet faults, lost replies included: every step must be safe to repeat.
        url = f"chaos+mem://{unique_name}?seed=11&error_rate=0.3&retry_after=0"
        return Kit(name, BucketStore(open_bucket(url, profile=fault_profile()), clock=clock), clock)
    if name == "redis":
        from portable.idempotency import open_store

        info = request.getfixturevalue("redis_server")
        url = f"{info.endpoints['url']}?prefix={unique_name}:"
        store = open_store(url)
        return Kit(name, store, RedisClock(store), url)
    raise AssertionError(name)


def old_layout(path: Path) -> None:
    """Make ``path`` a database whose idempotency table has the layout of versions before the rowid
    table (WITHOUT ROWID), as a file of such a version would be."""
    import sqlite3

    from portable.idempotency._sqlite import _SCHEMA_WITHOUT_ROWID

    conn = sqlite3.connect(path)
    conn.execute(_SCHEMA_WITHOUT_ROWID)
    conn.close()


@pytest.fixture(params=STORES)
def kit(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> Iterator[Kit]:
    yield make_kit(request.param, tmp_path, request, unique_name)
