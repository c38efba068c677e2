"""run_once, arun_once and @idempotent: the effect runs once; later calls get its result."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import threading
import uuid
from decimal import Decimal
from enum import Enum

import pytest

from portable.errors import IdempotencyConflict, InProgress, InvalidArgument, TooLarge
from portable.idempotency import MemoryStore, fingerprint, idempotent, open_store, run_once
from portable.resilience import deadline


def test_the_effect_runs_once_and_the_result_is_replayed() -> None:
    store = MemoryStore()
    calls: list[int] = []

    def effect() -> dict[str, int]:
        calls.append(1)
        return {"id": 7}

    assert run_once(store, "k", "fp", effect) == {"id": 7}
    assert run_once(store, "k", "fp", effect) == {"id": 7}
    assert len(calls) == 1


def test_a_failed_effect_releases_the_key_for_the_next_caller() -> None:
    store = MemoryStore()
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("boom")
        return "ok"

    with pytest.raises(RuntimeError, match="boom"):
        run_once(store, "k", "fp", flaky)
    assert run_once(store, "k", "fp", flaky) == "ok"
    assert len(attempts) == 2


def test_a_running_claim_raises_in_progress_or_is_waited_for() -> None:
    store = MemoryStore()
    started, release = threading.Event(), threading.Event()
    out: list[object] = []

    def slow() -> str:
        started.set()
        release.wait(10)
        return "first"

    worker = threading.Thread(target=lambda: out.append(run_once(store, "k", "fp", slow)))
    worker.start()
    assert started.wait(10)
    with pytest.raises(InProgress, match="still running"):
        run_once(store, "k", "fp", lambda: "second")
    threading.Timer(0.05, release.set).start()
    assert run_once(store, "k", "fp", lambda: "second", wait=10) == "first"
    worker.join()
    assert out == ["first"]


def test_waiting_stops_at_the_deadline() -> None:
    store = MemoryStore()
    claim = store.claim("k", "fp", lease=60, ttl=600)
    assert claim.status == "acquired"
    with deadline(0.05), pytest.raises(InProgress):
        run_once(store, "k", "fp", lambda: "never", wait=30)


def test_a_result_too_large_releases_the_key() -> None:
    store = MemoryStore(max_result_bytes=10)
    with pytest.raises(TooLarge):
        run_once(store, "k", "fp", lambda: "x" * 100)
    assert store.claim("k", "fp", lease=1, ttl=10).status == "acquired"


def test_the_decorator_keys_on_a_parameter_and_fingerprints_the_arguments() -> None:
    store = MemoryStore()
    charged: list[int] = []

    @idempotent(store, key="order_id")
    def charge(order_id: str, cents: int) -> dict[str, int]:
        charged.append(cents)
        return {"charged": cents}

    assert charge("o-1", 500) == {"charged": 500}
    assert charge(order_id="o-1", cents=500) == {"charged": 500}
    assert charged == [500]
    with pytest.raises(IdempotencyConflict):
        charge("o-1", 900)
    assert charge("o-2", 900) == {"charged": 900}


def test_the_decorator_takes_templates_callables_fields_and_namespaces() -> None:
    store = MemoryStore()
    runs: list[str] = []

    @idempotent(store, key="{user}:{order}", fields=("user", "order"))
    def place(user: str, order: int, requested_at: str) -> str:
        runs.append(requested_at)
        return f"{user}/{order}"

    assert place("ann", 1, "10:00") == "ann/1"
    assert place("ann", 1, "10:05") == "ann/1"  # differs only outside the chosen fields: a retry
    assert runs == ["10:00"]

    @idempotent(store, key=lambda body: body["id"], namespace="")
    def handle(body: dict[str, str]) -> None:
        runs.append("handled")

    handle({"id": "m-1", "x": "y"})
    handle({"id": "m-1", "x": "y"})
    assert runs.count("handled") == 1
    assert store.claim("m-1", fingerprint({"body": {"id": "m-1", "x": "y"}}), lease=1, ttl=10).status == "completed"


def test_methods_are_keyed_without_self() -> None:
    store = MemoryStore()

    class Service:
        def __init__(self) -> None:
            self.sent = 0

        @idempotent(store, key="message_id")
        def send(self, message_id: str, text: str) -> int:
            self.sent += 1
            return self.sent

    a, b = Service(), Service()
    assert a.send("m", "hi") == 1
    assert b.send("m", "hi") == 1  # another instance, same request: replayed, not run
    assert (a.sent, b.sent) == (1, 0)


def test_a_key_that_names_no_parameter_fails_at_decoration() -> None:
    with pytest.raises(InvalidArgument, match="has no parameter 'order'"):

        @idempotent(MemoryStore(), key="order")
        def f(order_id: str) -> None: ...


def test_async_functions_run_once() -> None:
    store = MemoryStore()
    runs: list[str] = []

    @idempotent(store, key="k")
    async def work(k: str) -> str:
        runs.append(k)
        await asyncio.sleep(0)
        return k.upper()

    async def main() -> list[str]:
        return [await work("a"), await work("a"), await work("b")]

    assert asyncio.run(main()) == ["A", "A", "B"]
    assert runs == ["a", "b"]


def test_the_decorator_opens_a_store_url_on_first_call(tmp_path: object) -> None:
    url = f"sqlite://{tmp_path}/d.db"
    runs: list[int] = []

    @idempotent(url, key="n")
    def f(n: int) -> int:
        runs.append(n)
        return n * 2

    assert f(2) == 4 and f(2) == 4 and runs == [2]


class Colour(Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: int


def test_fingerprints_are_stable_and_canonical() -> None:
    a = fingerprint({"b": 1, "a": [1, 2], "when": dt.date(2026, 1, 2), "amount": Decimal("1.10")})
    b = fingerprint({"amount": Decimal("1.10"), "when": dt.date(2026, 1, 2), "a": [1, 2], "b": 1})
    assert a == b and len(a) == 32
    assert fingerprint({"c": Colour.RED, "p": Point(1, 2), "s": {3, 1}, "raw": b"\x00"}) == fingerprint(
        {"raw": b"\x00", "s": {1, 3}, "p": Point(1, 2), "c": Colour.RED}
    )
    assert fingerprint(b"abc") == fingerprint(bytearray(b"abc")) == fingerprint(memoryview(b"abc"))
    assert fingerprint(b"abc") != fingerprint(b"abd")
    assert fingerprint({"a": 1, "b": 2}, fields=("a",)) == fingerprint({"a": 1, "b": 3}, fields=("a",))


def test_fingerprints_refuse_values_without_a_canonical_form() -> None:
    with pytest.raises(InvalidArgument, match="cannot fingerprint"):
        fingerprint({"obj": object()})  # its repr holds a memory address: never hashed
    with pytest.raises(InvalidArgument):
        fingerprint(42)  # type: ignore[arg-type]


def test_open_store_picks_the_store_by_url(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from portable.idempotency import BucketStore, SqliteStore

    name = uuid.uuid4().hex
    assert open_store(f"mem://{name}") is open_store(f"mem://{name}")
    assert open_store("mem://") is not open_store("mem://")
    assert isinstance(open_store(f"sqlite://{tmp_path}/x.db"), SqliteStore)
    bucket_store = open_store(f"file://{tmp_path}/b?max_result_bytes=100")
    assert isinstance(bucket_store, BucketStore) and bucket_store.max_result_bytes == 100
    monkeypatch.setenv("PORTABLE_IDEMPOTENCY_URL", f"sqlite://{tmp_path}/env.db")
    assert isinstance(open_store(), SqliteStore)


def test_open_store_explains_bad_urls(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    from portable.errors import ConfigError, InvalidURL

    with pytest.raises(InvalidURL, match="unknown option"):
        open_store("mem://?colour=blue")
    with pytest.raises(InvalidURL, match="names no file"):
        open_store("sqlite://")
    with pytest.raises(InvalidURL, match=r"no idempotency store for memory://.*Did you mean mem://"):
        open_store("memory://x")
    monkeypatch.chdir(str(tmp_path))
    monkeypatch.delenv("PORTABLE_IDEMPOTENCY_URL", raising=False)
    monkeypatch.delenv("PORTABLE_CONFIG", raising=False)
    with pytest.raises(ConfigError, match="no idempotency store is configured"):
        open_store()


def test_a_bucket_without_conditional_writes_cannot_hold_records() -> None:
    from portable.driver.storage import StorageCapabilities
    from portable.embedded.memory import MemoryStorage
    from portable.errors import MissingCapability
    from portable.idempotency import BucketStore
    from portable.storage import Bucket

    class Weak(MemoryStorage):
        capabilities = StorageCapabilities(conditional_update=False)

    with pytest.raises(MissingCapability, match="conditional writes"):
        BucketStore(Bucket(Weak()))
