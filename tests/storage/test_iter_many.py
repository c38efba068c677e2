"""``Bucket.iter_many``: streamed batch reads on mem://, file:// and s3:// (moto, both engines).

The bucket under test wraps the real driver in a :class:`ChaosStorage` (the
shipped fault-injection driver, no faults unless a test asks) whose ``get``
counts the bodies that exist: one from the moment a fetch starts until the
consumer lets go of it. The consumer's ``release`` marks that moment, since
only the test knows when it is done with a body.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from portable.errors import InvalidArgument, InvalidKey, NotFound, Unavailable
from portable.resilience import ResiliencePolicy, RetryPolicy, deadline
from portable.storage import Bucket, open_driver
from portable.testing.chaos import ChaosController, ChaosStorage

QUICK = ResiliencePolicy(retry=RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.05), breaker=None)


class CountingStorage(ChaosStorage):
    """ChaosStorage whose ``get`` counts bodies in existence and may be slowed per key."""

    def __init__(self, inner: Any, controller: ChaosController) -> None:
        super().__init__(inner, controller)
        self.lock = threading.Lock()
        self.started = 0
        self.alive = 0
        self.peak = 0
        self.delay: dict[str, float] = {}

    def get(self, key: str) -> bytes:
        with self.lock:
            self.started += 1
            self.alive += 1
            self.peak = max(self.peak, self.alive)
        try:
            time.sleep(self.delay.get(key, 0.0))
            return super().get(key)
        except BaseException:
            self.release()  # a failed fetch holds no body
            raise

    def release(self) -> None:
        with self.lock:
            self.alive -= 1


@pytest.fixture(scope="module")
def moto_s3(moto_server: Any) -> Iterator[tuple[str, str]]:
    """A moto bucket and the query string that reaches it (credentials set in the environment)."""
    import boto3

    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
            mp.setenv(name, moto_server.env[name])
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            mp.delenv(name, raising=False)
        endpoint, region = moto_server.endpoints["endpoint_url"], moto_server.endpoints["region"]
        name = f"im-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=endpoint, region_name=region).create_bucket(Bucket=name)
        yield name, f"region={region}&endpoint_url={endpoint}"


@pytest.fixture(params=["mem", "file", "s3-fsspec", "s3-obstore"])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    run = uuid.uuid4().hex[:10]
    if request.param == "mem":
        return f"mem://iter-{run}"
    if request.param == "file":
        return f"file://{tmp_path / 'bucket'}"
    bucket, query = request.getfixturevalue("moto_s3")
    engine = request.param.split("-")[1]
    return f"s3://{bucket}/{run}?engine={engine}&{query}"


@pytest.fixture
def counting(url: str) -> Iterator[tuple[Bucket, CountingStorage]]:
    driver = CountingStorage(open_driver(url), ChaosController(error_rate=0.0))
    bucket = Bucket(driver, url=url, policy=QUICK)
    try:
        yield bucket, driver
    finally:
        bucket.close()


def fill(bucket: Bucket, n: int, size: int = 64) -> dict[str, bytes]:
    items = {f"obj/{i:03d}": i.to_bytes(2, "big") * (size // 2) for i in range(n)}
    bucket.put_many(items)
    return items


def threads_named(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def test_yields_every_object_once(counting: tuple[Bucket, CountingStorage]) -> None:
    bucket, driver = counting
    items = fill(bucket, 40)
    got: dict[str, bytes] = {}
    for key, data in bucket.iter_many(items, concurrency=4):
        assert key not in got
        got[key] = data
        driver.release()
    assert got == items


def test_yields_in_completion_order(counting: tuple[Bucket, CountingStorage]) -> None:
    bucket, driver = counting
    items = fill(bucket, 4)
    keys = list(items)
    driver.delay = {keys[0]: 0.6, keys[1]: 0.3}  # the first two keys finish last, the slowest last of all
    order = []
    for key, _ in bucket.iter_many(keys, concurrency=4):
        order.append(key)
        driver.release()
    assert order[-2:] == [keys[1], keys[0]], order
    assert set(order[:2]) == {keys[2], keys[3]}


def test_a_slow_consumer_holds_at_most_concurrency_bodies(counting: tuple[Bucket, CountingStorage]) -> None:
    bucket, driver = counting
    items = fill(bucket, 30)
    taken = 0
    for _key, _data in bucket.iter_many(items, concurrency=3):
        taken += 1
        time.sleep(0.02)  # slower than a fetch: unbounded prefetching would run far ahead
        assert driver.started - (taken - 1) <= 3, "a fetch ran ahead of the consumer"
        driver.release()
    assert taken == 30
    assert driver.peak <= 3, driver.peak
    assert driver.alive == 0


def test_the_bound_defaults_to_the_drivers_batch_concurrency(counting: tuple[Bucket, CountingStorage]) -> None:
    bucket, driver = counting
    driver.batch_concurrency = 2
    items = fill(bucket, 12)
    for _ in bucket.iter_many(items):
        time.sleep(0.01)
        driver.release()
    assert driver.peak <= 2


def test_a_missing_key_raises_not_found_naming_it(counting: tuple[Bucket, CountingStorage]) -> None:
    bucket, driver = counting
    fill(bucket, 2)
    with pytest.raises(NotFound, match="obj/lack"):
        for _ in bucket.iter_many(["obj/000", "obj/lack", "obj/001"], concurrency=1):
            driver.release()


def test_missing_ok_skips_missing_keys(counting: tuple[Bucket, CountingStorage]) -> None:
    bucket, driver = counting
    items = fill(bucket, 3)
    got = {}
    for key, data in bucket.iter_many([*items, "obj/lack"], missing_ok=True):
        got[key] = data
        driver.release()
    assert got == items


def test_bad_arguments_raise_before_any_request(counting: tuple[Bucket, CountingStorage]) -> None:
    bucket, driver = counting
    with pytest.raises(InvalidKey):
        bucket.iter_many(["fine", "a/../b"])
    with pytest.raises(InvalidArgument, match="pass \\[key\\]"):
        bucket.iter_many("obj/000")
    for bad in (0, -1, 513, 2.0, True, "4"):
        with pytest.raises(InvalidArgument, match="concurrency"):
            bucket.iter_many(["fine"], concurrency=bad)  # type: ignore[arg-type]
    assert driver.started == 0


def test_nothing_to_fetch_yields_nothing(counting: tuple[Bucket, CountingStorage]) -> None:
    bucket, driver = counting
    assert list(bucket.iter_many([])) == []
    assert driver.started == 0


def test_retryable_faults_are_retried_per_object(counting: tuple[Bucket, CountingStorage]) -> None:
    bucket, driver = counting
    items = fill(bucket, 20)
    driver.chaos.error_rate = 0.2
    driver.chaos.faults = frozenset({"unavailable", "reset"})
    got = {}
    for key, data in bucket.iter_many(items, concurrency=4):
        got[key] = data
        driver.release()
    assert got == items
    assert sum(driver.chaos.stats.injected.values()) > 0, "the test injected no fault"


def test_a_final_failure_raises_typed_and_stops(counting: tuple[Bucket, CountingStorage]) -> None:
    bucket, driver = counting
    items = fill(bucket, 20)
    it = bucket.iter_many(items, concurrency=2)
    next(it)
    driver.release()
    with driver.chaos.outage("unavailable"), pytest.raises(Unavailable):
        for _ in it:
            driver.release()
    assert driver.started < 20
    assert not threads_named("portable-iter-many")


def test_closing_early_cancels_the_rest_and_leaks_no_thread(counting: tuple[Bucket, CountingStorage]) -> None:
    bucket, driver = counting
    items = fill(bucket, 50)
    before = len(threads_named("portable-iter-many"))
    it = bucket.iter_many(items, concurrency=4)
    next(it)
    next(it)
    it.close()
    started = driver.started
    assert started <= 2 + 4, started
    assert len(threads_named("portable-iter-many")) == before == 0
    time.sleep(0.1)
    assert driver.started == started, "a fetch started after close"


def test_breaking_out_of_a_for_loop_cleans_up(counting: tuple[Bucket, CountingStorage]) -> None:
    bucket, driver = counting
    items = fill(bucket, 30)
    for i, _ in enumerate(bucket.iter_many(items, concurrency=5)):
        if i == 2:
            break
    assert driver.started <= 3 + 5
    assert not threads_named("portable-iter-many")


def test_a_deadline_in_force_applies_to_every_fetch(counting: tuple[Bucket, CountingStorage]) -> None:
    bucket, driver = counting
    items = fill(bucket, 6)
    keys = list(items)
    driver.delay = {k: 0.3 for k in keys}
    from portable.errors import DeadlineExceeded

    with deadline(0.4):
        it = bucket.iter_many(keys, concurrency=1)
    with pytest.raises(DeadlineExceeded):  # the deadline was taken at the call, not per next()
        for _ in it:
            driver.release()


def test_bodies_of_every_size_class_round_trip(counting: tuple[Bucket, CountingStorage]) -> None:
    """Empty, small, either side of 64 KiB (the obstore engine's first ranged read) and large."""
    bucket, driver = counting
    items = {f"size/{n}": bytes(range(256)) * (n // 256) + bytes(n % 256) for n in (0, 1, 65535, 65536, 65537, 300_000)}
    bucket.put_many(items)
    got = {}
    for key, data in bucket.iter_many(items, concurrency=3):
        assert type(data) is bytes
        got[key] = data
        driver.release()
    assert got == items
    assert bucket.get_many(items) == items
    assert all(bucket.get(k) == v for k, v in items.items())
