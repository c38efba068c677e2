"""CircuitBreaker on a fake clock (no sleeps): opening, failing fast, probing, closing."""

from __future__ import annotations

import random
import threading
import time

import pytest

from portable.errors import (
    CircuitOpen,
    ConfigError,
    DeadlineExceeded,
    NotFound,
    Throttled,
    Unavailable,
)
from portable.resilience import (
    BreakerPolicy,
    BreakerState,
    CircuitBreaker,
    Guard,
    ResiliencePolicy,
    add_breaker_listener,
    breaker_for,
)

from .helpers import Clock, Driver, Script, Sleeps, guard


class Outage:
    """A provider that is down while ``down`` is set."""

    def __init__(self) -> None:
        self.down = False
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.down:
            raise ConnectionError("503 Service Unavailable")
        return "ok"


POLICY = BreakerPolicy(failure_rate=0.5, window=10, min_calls=5, open_seconds=30, half_open_probes=1)


def test_an_outage_opens_the_breaker_fails_fast_and_a_probe_closes_it() -> None:
    clock, sleeps, provider = Clock(), Sleeps(), Outage()
    g = guard(attempts=1, breaker=POLICY, clock=clock, sleeps=sleeps)
    changes: list[tuple[str, str]] = []
    breaker = g.breaker("read")
    assert breaker is not None
    breaker.add_listener(lambda b, old, new: changes.append((old, new)))

    for _ in range(20):  # healthy traffic fills the window
        assert g.call("read", "get k", provider) == "ok"
    provider.down = True
    failures = 0
    with pytest.raises(CircuitOpen):
        while True:
            with pytest.raises(Unavailable) as info:
                g.call("read", "get k", provider)
            if isinstance(info.value, CircuitOpen):
                raise info.value
            failures += 1
            assert failures <= POLICY.window, "the breaker did not open within its window"
    assert failures == 5  # 5 failures of the last 10 calls reach 50%
    assert breaker.state == BreakerState.OPEN and changes == [("closed", "open")]

    calls_before = provider.calls
    started = time.perf_counter()
    for _ in range(1000):
        with pytest.raises(CircuitOpen) as info:
            g.call("read", "get k", provider)
    per_call = (time.perf_counter() - started) / 1000
    assert per_call < 1e-3  # fails fast (typically a few microseconds; bench/ measures it)
    assert provider.calls == calls_before and sleeps == []
    err = info.value
    assert err.breaker == "fake:test-endpoint:read" and err.breaker in str(err)
    assert "next probe in 30.0s" in str(err) and err.probe_at == clock.now + 30
    assert err.retryable is False and err.retry_after == pytest.approx(30)

    clock.advance(10)
    with pytest.raises(CircuitOpen, match=r"next probe in 20\.0s"):
        g.call("read", "get k", provider)
    clock.advance(20)  # the probe is due; the outage is still on: the probe fails and reopens it
    with pytest.raises(Unavailable) as info:
        g.call("read", "get k", provider)
    assert not isinstance(info.value, CircuitOpen)
    assert breaker.state == BreakerState.OPEN
    assert changes[-2:] == [("open", "half_open"), ("half_open", "open")]

    provider.down = False  # the outage ends
    with pytest.raises(CircuitOpen):
        g.call("read", "get k", provider)
    clock.advance(30)
    assert g.call("read", "get k", provider) == "ok"  # the probe succeeds
    assert breaker.state == BreakerState.CLOSED
    assert changes[-2:] == [("open", "half_open"), ("half_open", "closed")]
    assert g.call("read", "get k", provider) == "ok"


def test_it_does_not_open_below_min_calls_or_below_the_rate() -> None:
    clock = Clock()
    breaker = CircuitBreaker("b", POLICY, clock)
    for _ in range(4):
        breaker.record(False)
    assert breaker.state == BreakerState.CLOSED  # 4 of 4 failed, but min_calls is 5
    for _ in range(6):
        breaker.record(True)
    breaker.record(False)  # the oldest failure slid out: 4 failures in the last 10 calls
    assert breaker.failure_rate() == pytest.approx(0.4)
    assert breaker.state == BreakerState.CLOSED


def test_answers_such_as_not_found_are_healthy() -> None:
    g = guard(attempts=1, breaker=POLICY)
    for _ in range(30):
        with pytest.raises(NotFound):
            g.call("read", "get k", Script(FileNotFoundError("no such key")))
    breaker = g.breaker("read")
    assert breaker is not None and breaker.state == BreakerState.CLOSED


def test_half_open_admits_a_bounded_number_of_probes() -> None:
    clock = Clock()
    breaker = CircuitBreaker("b", BreakerPolicy(window=4, min_calls=2, open_seconds=5, half_open_probes=2), clock)
    breaker.force(BreakerState.OPEN)
    clock.advance(5)
    first, second = breaker.before_call(), breaker.before_call()
    assert first and second and breaker.state == BreakerState.HALF_OPEN
    with pytest.raises(CircuitOpen, match="half-open and its probe is still running"):
        breaker.before_call()
    breaker.record(True, first)
    assert breaker.state == BreakerState.HALF_OPEN  # one success of two needed
    breaker.record(True, second)
    assert breaker.state == BreakerState.CLOSED


def test_outcomes_from_before_a_state_change_are_ignored() -> None:
    clock = Clock()
    breaker = CircuitBreaker("b", BreakerPolicy(window=4, min_calls=2, open_seconds=5), clock)
    stale = breaker.before_call()  # admitted while closed
    breaker.force(BreakerState.OPEN)
    clock.advance(5)
    probe = breaker.before_call()
    breaker.record(False, stale)  # the slow call from before the outage reports late
    assert breaker.state == BreakerState.HALF_OPEN
    breaker.force(BreakerState.OPEN)
    clock.advance(5)
    fresh = breaker.before_call()
    breaker.record(False, probe)  # a probe of the previous half-open spell
    assert breaker.state == BreakerState.HALF_OPEN
    breaker.record(True, fresh)
    assert breaker.state == BreakerState.CLOSED


def test_a_hung_probe_stops_blocking_after_open_seconds() -> None:
    clock = Clock()
    breaker = CircuitBreaker("b", BreakerPolicy(window=4, min_calls=2, open_seconds=5), clock)
    breaker.force(BreakerState.OPEN)
    clock.advance(5)
    assert breaker.before_call()  # this probe never reports
    with pytest.raises(CircuitOpen):
        breaker.before_call()
    clock.advance(5)
    probe = breaker.before_call()
    breaker.record(True, probe)
    assert breaker.state == BreakerState.CLOSED


def test_a_cancelled_probe_gives_its_slot_back() -> None:
    clock = Clock()
    g = guard(attempts=1, breaker=BreakerPolicy(window=4, min_calls=2, open_seconds=5), clock=clock)
    breaker = g.breaker("read")
    assert breaker is not None
    breaker.force(BreakerState.OPEN)
    clock.advance(5)

    class Interrupted(BaseException):
        pass

    with pytest.raises(Interrupted):
        g.call("read", "get k", Script(Interrupted()))
    assert g.call("read", "get k", Script(value="ok")) == "ok"  # admitted as the next probe
    assert breaker.state == BreakerState.CLOSED


def test_no_lock_is_held_while_the_protected_call_runs() -> None:
    clock = Clock()
    g = guard(attempts=1, breaker=BreakerPolicy(window=4, min_calls=2, open_seconds=5, half_open_probes=2), clock=clock)
    breaker = g.breaker("read")
    assert breaker is not None
    breaker.force(BreakerState.OPEN)
    clock.advance(5)
    other_done = threading.Event()

    def other() -> None:
        g.call("read", "get k", Script(value="b"))
        breaker.add_listener(lambda *a: None)
        other_done.set()

    def first() -> str:
        thread = threading.Thread(target=other)
        thread.start()
        assert other_done.wait(10), "the second call blocked on the breaker while the first ran"
        return "a"

    assert g.call("read", "get k", first) == "a"


def test_listeners_run_outside_the_lock_and_their_errors_are_ignored() -> None:
    clock = Clock()
    breaker = CircuitBreaker("b", BreakerPolicy(window=2, min_calls=2, open_seconds=1), clock)
    seen: list[str] = []

    def reentrant(b: CircuitBreaker, old: str, new: str) -> None:
        seen.append(f"{new}:{b.failure_rate():.1f}")  # would deadlock if the lock were held

    def broken(b: CircuitBreaker, old: str, new: str) -> None:
        raise RuntimeError("listener bug")

    breaker.add_listener(broken)
    breaker.add_listener(reentrant)
    remove = add_breaker_listener(lambda b, old, new: seen.append(f"global {old}->{new}"))
    try:
        breaker.record(False)
        breaker.record(False)
    finally:
        remove()
    assert seen == ["open:1.0", "global closed->open"]


def test_breakers_are_shared_per_provider_endpoint_and_operation_class() -> None:
    a = guard(breaker=POLICY, endpoint="e1")
    b = guard(breaker=POLICY, endpoint="e1")
    c = guard(breaker=POLICY, endpoint="e2")
    assert a.breaker("read") is b.breaker("read")
    assert a.breaker("read") is not a.breaker("write")
    assert a.breaker("read") is not c.breaker("read")
    assert breaker_for("fake", "e1", "read", POLICY) is a.breaker("read")
    assert guard(breaker=None).breaker("read") is None


def test_bad_breaker_policies_are_refused() -> None:
    for kwargs in ({"failure_rate": 0}, {"window": 0}, {"min_calls": 30, "window": 20}, {"open_seconds": -1}):
        with pytest.raises(ConfigError):
            BreakerPolicy(**kwargs)  # type: ignore[arg-type]


def test_sixteen_threads_share_a_closed_breaker_without_losing_tallies() -> None:
    g = guard(breaker=BreakerPolicy(window=1000, min_calls=10))
    barrier = threading.Barrier(16)

    def hammer() -> None:
        barrier.wait()
        for _ in range(2000):
            g.call("read", "get k", Script(value=1))

    threads = [threading.Thread(target=hammer) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    breaker = g.breaker("read")
    assert breaker is not None and breaker.state == BreakerState.CLOSED
    assert len(breaker._outcomes) == 1000 and breaker.failure_rate() == 0


# -- what the breaker counts: the calls its callers see, not the attempts ---------------------


def test_a_call_that_succeeds_after_retries_is_one_success_and_one_that_fails_after_them_one_failure() -> None:
    g = guard(attempts=4, breaker=BreakerPolicy(failure_rate=0.5, window=4, min_calls=4), budget=None)
    breaker = g.breaker("write")
    assert breaker is not None
    for _ in range(10):  # each call fails 3 times and then succeeds: 30 failed attempts in all
        assert g.call("write", "put k", Script(*(ConnectionError("reset") for _ in range(3)))) == "ok"
    assert breaker.state == BreakerState.CLOSED and breaker.failure_rate() == 0
    script = Script(*(ConnectionError("reset") for _ in range(4)))
    with pytest.raises(Unavailable):
        g.call("write", "put k", script)
    assert script.calls == 4  # four attempts ...
    assert breaker.failure_rate() == pytest.approx(1 / 4)  # ... one failed call in the window of four


class _Transient:
    """A driver call that fails with a connection reset ``rate`` of the time, from a seeded random source."""

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self.random = random.Random(seed)
        self.attempts = 0
        self.failed = 0

    def __call__(self, key: str) -> str:
        self.attempts += 1
        if self.random.random() < self.rate:
            self.failed += 1
            raise ConnectionResetError(f"reset while writing {key}")
        return "etag"


@pytest.mark.parametrize("seed", range(10))
def test_twenty_percent_transient_faults_never_open_the_default_breaker(seed: int) -> None:
    # The default policy (4 attempts, the default breaker and retry budget) at 1,000 calls a second of
    # fake time; the backoffs are recorded, not slept. Before breakers counted calls, every one of
    # these seeds opened the breaker on the failed attempts that the retries absorbed.
    clock, sleeps = Clock(), Sleeps()
    g = Guard("fake", f"transient-{seed}", Driver(), ResiliencePolicy(), clock=clock, sleep=sleeps, rng=random.Random(seed))
    changes: list[tuple[str, str]] = []
    for op in ("read", "write"):
        breaker = g.breaker(op)
        assert breaker is not None
        breaker.add_listener(lambda b, old, new: changes.append((old, new)))
    writes, reads = _Transient(0.2, seed), _Transient(0.2, seed + 100)
    failed_calls = 0
    for i in range(2000):
        for op, fn in (("write", writes), ("read", reads)):
            clock.advance(0.001)
            try:
                assert g.call(op, f"{op} k{i}", fn, f"k{i}") == "etag"
            except Unavailable as exc:
                assert not isinstance(exc, CircuitOpen), f"seed {seed}: the breaker opened at call {i}"
                failed_calls += 1  # all four attempts failed: 0.2**4 of the calls, about 6 in 4,000
    assert changes == []
    assert writes.failed + reads.failed > 700  # about 1,000 faults were injected, and retries absorbed them
    assert failed_calls < 30
    budget = g.retry_budget
    assert budget is not None and budget.stats().refused == 0  # the default budget absorbs 20% too


def test_twenty_percent_faults_from_the_chaos_driver_never_open_the_default_breaker(unique_name: str) -> None:
    from portable.driver.storage import WriteOptions
    from portable.testing.chaos import ChaosStorage
    from portable.urls import open_driver

    for seed in range(10):
        driver = open_driver("storage", f"chaos+mem://{unique_name}-{seed}?seed={seed}&error_rate=0.2&retry_after=0")
        assert isinstance(driver, ChaosStorage)
        clock = Clock()
        g = Guard(driver.scheme, driver.endpoint, driver, ResiliencePolicy(), clock=clock, sleep=Sleeps(),
                  rng=random.Random(seed))
        for i in range(1500):
            for op, fn, args in (("write", driver.put, (f"k{i}", b"x", WriteOptions())), ("read", driver.get, (f"k{i}",))):
                clock.advance(0.001)
                try:
                    g.call(op, f"{op} k{i}", fn, *args)
                except (Unavailable, Throttled, DeadlineExceeded, NotFound) as exc:  # every attempt failed, or its put did
                    assert not isinstance(exc, CircuitOpen), f"seed {seed}: the {op} breaker opened at call {i}"
        for op in ("read", "write"):
            breaker = g.breaker(op)
            assert breaker is not None and breaker.state == BreakerState.CLOSED, (seed, op)
        assert sum(driver.chaos.stats.injected.values()) > 400


def test_an_outage_still_opens_the_default_breaker_within_its_window() -> None:
    clock, sleeps, provider = Clock(), Sleeps(), Outage()
    g = Guard("fake", "outage", Driver(), ResiliencePolicy(), clock=clock, sleep=sleeps, rng=random.Random(1))
    breaker = g.breaker("write")
    assert breaker is not None
    default = BreakerPolicy()
    for _ in range(30):
        g.call("write", "put k", provider)  # healthy traffic first
    provider.down = True
    failed_calls = 0
    while breaker.state == BreakerState.CLOSED:
        with pytest.raises(Unavailable) as info:
            g.call("write", "put k", provider)
        assert not isinstance(info.value, CircuitOpen)
        failed_calls += 1
        assert failed_calls <= default.window, "an outage did not open the default breaker within its window"
    assert failed_calls == default.min_calls  # 10 failed calls of the last 20 reach 50%
    attempts = provider.calls
    with pytest.raises(CircuitOpen):
        g.call("write", "put k", provider)
    assert provider.calls == attempts  # refused without a request
