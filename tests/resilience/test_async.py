"""Guard.acall: the same breaker, retries, deadline and wrapping for coroutine functions."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from portable.errors import CircuitOpen, DeadlineExceeded, NotFound, Unavailable
from portable.resilience import (
    BreakerPolicy,
    BreakerState,
    Guard,
    ResiliencePolicy,
    RetryPolicy,
    attempt_timeout,
    deadline,
)

from .helpers import Clock, SlowDown


class ASleeps(list[float]):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def aguard(*, attempts: int = 4, timeout: float | None = None, breaker: BreakerPolicy | None = None,
           clock: Clock | None = None, sleeps: ASleeps | None = None, deadline_s: float | None = None) -> Guard:
    policy = ResiliencePolicy(retry=RetryPolicy(max_attempts=attempts, timeout=timeout), breaker=breaker,
                              deadline=deadline_s)
    from .helpers import Driver

    return Guard("fake", "aio", Driver(), policy, clock=clock or Clock(),
                 asleep=sleeps if sleeps is not None else ASleeps(), rng=random.Random(3))


class AScript:
    def __init__(self, *errors: BaseException, value: Any = "ok", hang: float = 0.0) -> None:
        self.errors = list(errors)
        self.value = value
        self.calls = 0
        self.hang = hang

    async def __call__(self) -> Any:
        self.calls += 1
        if self.hang:
            await asyncio.sleep(self.hang)
        if self.errors:
            raise self.errors.pop(0)
        return self.value


def test_acall_returns_and_retries_like_call() -> None:
    sleeps = ASleeps()
    fn = AScript(ConnectionError("reset"), SlowDown(retry_after=0.5), value=9)
    assert asyncio.run(aguard(sleeps=sleeps).acall("read", "get k", fn)) == 9
    assert fn.calls == 3 and len(sleeps) == 2 and sleeps[1] >= 0.5


def test_acall_raises_non_retryable_errors_at_once_wrapped() -> None:
    fn = AScript(FileNotFoundError("missing"))
    with pytest.raises(NotFound) as info:
        asyncio.run(aguard().acall("read", "get k", fn))
    assert fn.calls == 1 and isinstance(info.value.__cause__, FileNotFoundError)


def test_the_per_attempt_timeout_is_enforced_and_retried() -> None:
    fn = AScript(hang=30)
    with pytest.raises(DeadlineExceeded, match="no answer within") as info:
        asyncio.run(aguard(attempts=2, timeout=0.05).acall("read", "get k", fn))
    assert fn.calls == 2 and info.value.retryable


def test_the_overall_deadline_stops_a_hanging_call() -> None:
    async def main() -> None:
        with deadline(0.1):
            await aguard(attempts=5).acall("read", "get k", AScript(hang=30))

    with pytest.raises(DeadlineExceeded):
        asyncio.run(main())


def test_attempt_timeout_is_visible_inside_the_coroutine() -> None:
    seen: list[float | None] = []

    async def fn() -> None:
        seen.append(attempt_timeout())

    asyncio.run(aguard(timeout=3.0).acall("read", "get k", fn))
    assert seen == [3.0]


def test_an_open_breaker_fails_async_calls_fast() -> None:
    clock = Clock()
    g = aguard(attempts=1, breaker=BreakerPolicy(window=4, min_calls=2, open_seconds=10), clock=clock)

    async def main() -> None:
        for _ in range(2):
            with pytest.raises(Unavailable):
                await g.acall("read", "get k", AScript(ConnectionError("down")))
        fn = AScript()
        with pytest.raises(CircuitOpen):
            await g.acall("read", "get k", fn)
        assert fn.calls == 0
        clock.advance(10)
        assert await g.acall("read", "get k", fn) == "ok"

    asyncio.run(main())
    breaker = g.breaker("read")
    assert breaker is not None and breaker.state == BreakerState.CLOSED


def test_cancelling_a_probe_gives_its_slot_back() -> None:
    clock = Clock()
    g = aguard(attempts=1, breaker=BreakerPolicy(window=4, min_calls=2, open_seconds=10), clock=clock)
    breaker = g.breaker("read")
    assert breaker is not None
    breaker.force(BreakerState.OPEN)
    clock.advance(10)

    async def main() -> str:
        task = asyncio.create_task(g.acall("read", "get k", AScript(hang=30)))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await g.acall("read", "get k", AScript(value="probe"))  # type: ignore[no-any-return]

    assert asyncio.run(main()) == "probe"
    assert breaker.state == BreakerState.CLOSED


def test_many_tasks_share_one_breaker() -> None:
    g = aguard(breaker=BreakerPolicy(window=100, min_calls=10))

    async def main() -> list[str]:
        return await asyncio.gather(*(g.acall("read", "get k", AScript(value=str(i))) for i in range(500)))

    assert asyncio.run(main()) == [str(i) for i in range(500)]
