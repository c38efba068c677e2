"""CircuitBreaker on a fake clock (no sleeps): opening, failing fast, probing, closing."""

from __future__ import annotations

import threading
import time

import pytest

from portable.errors import CircuitOpen, ConfigError, NotFound, Unavailable
from portable.resilience import (
    BreakerPolicy,
    BreakerState,
    CircuitBreaker,
    add_breaker_listener,
    breaker_for,
)

from .helpers import Clock, Script, Sleeps, guard


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
