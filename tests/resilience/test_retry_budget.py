"""The retry budget: one token bucket per endpoint caps retries across calls (fake clock, no sleeps)."""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
from collections.abc import Callable

import pytest

from portable.config import Profile
from portable.errors import Unavailable
from portable.resilience import (
    EndpointRetryBudget,
    Guard,
    ResiliencePolicy,
    RetryBudget,
    RetryPolicy,
    add_retry_budget_listener,
    retry_budget_for,
)
from portable.storage import open_bucket
from portable.testing.chaos import chaos_of

from .helpers import Clock, Driver, Script, Sleeps, guard


class Flaky:
    """A driver call that fails with a connection reset ``rate`` of the time (seeded); counts what reaches it."""

    def __init__(self, rate: float, seed: int = 0) -> None:
        self.rate = rate
        self.random = random.Random(seed)
        self.requests = 0

    def __call__(self, key: str) -> str:
        self.requests += 1
        if self.random.random() < self.rate:
            raise ConnectionResetError(f"reset while writing {key}")
        return "ok"


_RUNS = itertools.count()  # each load run has an endpoint, and so a budget, of its own


def load(policy: ResiliencePolicy, rate: float, calls: int = 5000, seed: int = 1) -> tuple[float, int, Guard]:
    """``calls`` calls at 1,000 a second of fake time, ``rate`` of the attempts failing.

    The clock stands for many concurrent callers: it moves by the arrival interval, and a
    call's own backoffs are recorded, not slept (they overlap with the other callers' calls).

    Returns:
        Requests that reached the driver per call, calls that failed, and the guard.
    """
    clock = Clock()
    g = Guard("fake", f"load-{next(_RUNS)}", Driver(), policy, clock=clock, sleep=Sleeps(), rng=random.Random(seed))
    driver = Flaky(rate, seed)
    failed = 0
    for i in range(calls):
        clock.advance(0.001)
        try:
            g.call("write", f"put k{i}", driver, f"k{i}")
        except Unavailable:
            failed += 1
    return driver.requests / calls, failed, g


def test_with_30_percent_errors_the_default_budget_holds_requests_at_or_under_1_3x_per_call() -> None:
    with_budget, failed, g = load(ResiliencePolicy(breaker=None), 0.3)
    without, failed_without, _ = load(ResiliencePolicy(breaker=None, retry_budget=None), 0.3)
    print(f"30% errors: {with_budget:.3f} requests per call with the default budget, {without:.3f} without")
    assert with_budget <= 1.3
    assert without > 1.38  # each call retries on its own: 1 + 0.3 + 0.09 + 0.027
    budget = g.retry_budget
    assert budget is not None
    stats = budget.stats()
    assert stats.calls == 5000 and stats.refused > 0 and stats.retries == round((with_budget - 1) * 5000)
    assert failed > failed_without  # the price: calls that would have been retried fail fast


def test_in_an_outage_the_budget_holds_requests_near_1_25x_where_each_call_would_make_max_attempts() -> None:
    with_budget, failed, _ = load(ResiliencePolicy(breaker=None), 1.0)
    without, _, _ = load(ResiliencePolicy(breaker=None, retry_budget=None), 1.0)
    print(f"outage: {with_budget:.3f} requests per call with the default budget, {without:.3f} without")
    assert with_budget <= 1.3 and failed == 5000
    assert without == RetryPolicy().max_attempts
    with_five, _, _ = load(ResiliencePolicy(retry=RetryPolicy(max_attempts=5), breaker=None), 1.0)
    without_five, _, _ = load(ResiliencePolicy(retry=RetryPolicy(max_attempts=5), breaker=None, retry_budget=None), 1.0)
    assert with_five <= 1.3 and without_five == 5


def test_with_no_errors_the_budget_never_refuses_a_call() -> None:
    ratio, failed, g = load(ResiliencePolicy(), 0.0, calls=10_000)
    assert ratio == 1.0 and failed == 0
    budget = g.retry_budget
    assert budget is not None and budget.stats().refused == 0 and budget.stats().calls == 10_000


def test_an_exhausted_budget_fails_retries_fast_with_the_last_error_and_never_refuses_a_first_attempt() -> None:
    g = guard(attempts=4, budget=RetryBudget(ratio=0, min_per_second=0, max_tokens=2), endpoint="tiny")
    first = Script(*(ConnectionResetError(f"reset {n}") for n in range(4)))
    with pytest.raises(Unavailable) as info:
        g.call("write", "put k", first)
    assert first.calls == 3  # the first attempt and the budget's two retries
    message = str(info.value)
    assert "reset 2" in message and "retry budget of fake:tiny is exhausted" in message
    assert isinstance(info.value.__cause__, ConnectionResetError) and info.value.retryable
    second = Script(ConnectionResetError("reset again"))
    with pytest.raises(Unavailable, match="retry budget"):
        g.call("write", "put k", second)
    assert second.calls == 1  # no retry at all
    assert g.call("write", "put k", Script(value="fine")) == "fine"  # a first attempt is never refused
    budget = g.retry_budget
    assert budget is not None
    assert (budget.stats().retries, budget.stats().refused, budget.stats().calls) == (2, 2, 3)


def test_calls_and_the_clock_refill_the_budget_up_to_max_tokens() -> None:
    clock = Clock()
    budget = EndpointRetryBudget("b", RetryBudget(ratio=0.5, min_per_second=2, max_tokens=10), clock)
    assert budget.tokens == 10
    for _ in range(10):
        assert budget.try_spend()
    assert not budget.try_spend()
    for _ in range(3):
        budget.note_call()
    assert budget.tokens == pytest.approx(1.5)  # three calls deposit half a token each
    clock.advance(1.0)
    assert budget.tokens == pytest.approx(3.5)  # and a second adds two
    for _ in range(1000):
        budget.note_call()
    clock.advance(100)
    assert budget.tokens == 10  # never more than max_tokens
    assert budget.stats().calls == 1003


def test_the_budget_is_one_per_endpoint_and_shared_by_the_sync_and_async_faces() -> None:
    policy = ResiliencePolicy(retry=RetryPolicy(max_attempts=3), retry_budget=RetryBudget(ratio=0, min_per_second=0,
                                                                                            max_tokens=3))
    clock = Clock()

    async def no_wait(_: float) -> None:
        return None

    sync = Guard("fake", "shared", Driver(), policy, clock=clock, sleep=Sleeps())
    other = Guard("fake", "shared", Driver(), policy, clock=clock, asleep=no_wait)
    elsewhere = Guard("fake", "another", Driver(), policy, clock=clock)
    assert sync.retry_budget is other.retry_budget is retry_budget_for("fake", "shared", RetryBudget())
    assert sync.retry_budget is not elsewhere.retry_budget

    with pytest.raises(Unavailable):
        sync.call("write", "put k", Script(*(ConnectionResetError("r") for _ in range(3))))  # two retries

    async def down() -> str:
        raise ConnectionResetError("still down")

    attempts = 0

    async def counted() -> str:
        nonlocal attempts
        attempts += 1
        return await down()

    with pytest.raises(Unavailable, match="retry budget"):
        asyncio.run(other.acall("write", "put k", counted))
    assert attempts == 2  # the async face had the one token the sync face left
    budget = sync.retry_budget
    assert budget is not None and budget.stats().calls == 2 and budget.stats().retries == 3


def test_listeners_hear_when_a_budget_runs_dry_and_when_it_recovers() -> None:
    clock = Clock()
    g = guard(attempts=2, budget=RetryBudget(ratio=0, min_per_second=1, max_tokens=1), clock=clock, endpoint="heard")
    budget = g.retry_budget
    assert budget is not None
    heard: list[tuple[str, bool]] = []
    mine: list[bool] = []
    budget.add_listener(lambda b, exhausted: mine.append(exhausted))
    remove = add_retry_budget_listener(lambda b, exhausted: heard.append((b.name, exhausted)))

    def fails() -> Callable[[], str]:
        return Script(ConnectionResetError("r"), value="ok")

    try:
        assert g.call("write", "put k", fails()) == "ok"  # spends the one token
        with pytest.raises(Unavailable, match="retry budget"):
            g.call("write", "put k", fails())
        with pytest.raises(Unavailable, match="retry budget"):
            g.call("write", "put k", fails())  # still dry: no second notice
        clock.advance(1.0)
        assert g.call("write", "put k", fails()) == "ok"  # a second later it has a token again
    finally:
        remove()
    assert heard == [("fake:heard", True), ("fake:heard", False)] and mine == [True, False]


def test_calls_are_counted_exactly_from_many_threads() -> None:
    g = guard(endpoint="threads")
    barrier = threading.Barrier(8)

    def hammer() -> None:
        barrier.wait()
        for _ in range(5000):
            g.call("read", "get k", Script(value=1))

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    budget = g.retry_budget
    assert budget is not None and budget.stats().calls == 40_000


def test_the_budget_counts_as_what_the_caller_sees_for_the_breaker() -> None:
    from portable.resilience import BreakerPolicy, BreakerState

    g = guard(attempts=4, breaker=BreakerPolicy(window=4, min_calls=4), budget=RetryBudget(ratio=0, min_per_second=0,
              max_tokens=1), endpoint="refused")
    for _ in range(4):
        with pytest.raises(Unavailable):
            g.call("write", "put k", Script(*(ConnectionResetError("r") for _ in range(4))))
    breaker = g.breaker("write")
    assert breaker is not None and breaker.state == BreakerState.OPEN  # four failed calls, refused retries or not


def test_a_profile_sets_the_budget_of_the_buckets_it_opens(unique_name: str) -> None:
    policy = ResiliencePolicy(
        retry=RetryPolicy(max_attempts=4, initial_backoff=0.001, max_backoff=0.001),
        breaker=None,
        retry_budget=RetryBudget(ratio=0, min_per_second=0, max_tokens=1),
    )
    profile = Profile(name="tight", storage="mem://", queue="mem://", jobs="local://", resilience=policy)
    bucket = open_bucket(f"chaos+mem://{unique_name}?error_rate=0", profile=profile)
    chaos = chaos_of(bucket)
    with chaos.outage("unavailable"), pytest.raises(Unavailable, match="retry budget"):
        bucket.put("k", b"v")
    assert chaos.stats.injected["unavailable"] == 2  # one retry, not three
