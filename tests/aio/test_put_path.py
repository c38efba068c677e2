"""The short paths of single async calls (bench/aio_bench.py's gather over AsyncBucket.put), held to the contract.

The obstore engine bounds its requests in flight with a gate of its own (not an
``asyncio.Semaphore``) and keeps obstore's arguments of a plain put; the
Guard writes a closed breaker's admit and record out. These tests check that
what the shortcuts skip still holds: the bound, no slot lost to a cancel, the
options of every put that is not plain, and a breaker that still opens.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import portable.aio
from portable.errors import AlreadyExists, CircuitOpen, PreconditionFailed
from portable.resilience import BreakerPolicy, ResiliencePolicy, RetryPolicy


# ---------------------------------------------------------------- the obstore engine's gate
def test_the_gate_bounds_requests_in_flight_and_serves_waiters_in_order() -> None:
    from portable_obstore._aio import _Gate

    gate = _Gate(3)
    running = 0
    peak = 0
    order: list[int] = []

    async def request(i: int) -> None:
        nonlocal running, peak
        async with gate:
            order.append(i)
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.001)
            running -= 1

    async def main() -> None:
        await asyncio.gather(*(request(i) for i in range(40)))

    asyncio.run(main())
    assert peak == 3
    assert order == list(range(40)), "slots are handed out first come, first served"
    assert gate.free == 3 and not gate.waiters


def test_a_cancelled_waiter_never_loses_a_slot() -> None:
    """Waiters cancelled while waiting, and one cancelled just after it was handed a slot, give every slot back."""
    from portable_obstore._aio import _Gate

    gate = _Gate(2)

    async def hold(release: asyncio.Event) -> None:
        async with gate:
            await release.wait()

    async def main() -> None:
        release = asyncio.Event()
        holders = [asyncio.ensure_future(hold(release)) for _ in range(2)]
        await asyncio.sleep(0)
        assert gate.free == 0
        waiters = [asyncio.ensure_future(hold(release)) for _ in range(4)]
        await asyncio.sleep(0)
        waiters[0].cancel()  # cancelled while waiting
        await asyncio.sleep(0)
        release.set()
        await asyncio.sleep(0)  # the holders finish: their slots go to waiters[1] and waiters[2]
        holders_done = await asyncio.gather(*holders, return_exceptions=True)
        assert holders_done == [None, None]
        waiters[1].cancel()  # handed a slot, cancelled before it ran: the slot passes on
        results = await asyncio.gather(*waiters, return_exceptions=True)
        assert isinstance(results[0], asyncio.CancelledError)
        assert gate.free == 2, "every slot is back"
        # and the gate still bounds: two at once, no more
        release2 = asyncio.Event()
        again = [asyncio.ensure_future(hold(release2)) for _ in range(3)]
        await asyncio.sleep(0)
        assert gate.free == 0 and len([w for w in gate.waiters if not w.done()]) == 1
        release2.set()
        await asyncio.gather(*again)
        assert gate.free == 2

    asyncio.run(main())


# ---------------------------------------------------------------- puts on both S3 engines (moto)
@pytest.fixture(params=["obstore", "fsspec"])
def s3_url(request: pytest.FixtureRequest, moto_s3: str, unique_name: str) -> str:
    return moto_s3.replace("{prefix}", unique_name).replace("engine=fsspec", f"engine={request.param}")


def test_a_plain_put_between_others_keeps_their_options(s3_url: str) -> None:
    """The plain put's kept arguments never leak into a put with metadata, headers or a condition."""

    async def main() -> None:
        async with portable.aio.open_bucket(s3_url) as bucket:
            first = await bucket.put("k", b"one")
            await bucket.put("meta", b"m", metadata={"owner": "ada"}, content_type="text/plain")
            await bucket.put("plain", b"p")
            info = await bucket.head("meta")
            assert info.metadata == {"owner": "ada"} and info.content_type == "text/plain"
            plain = await bucket.head("plain")
            assert plain.metadata == {}
            with pytest.raises(AlreadyExists):
                await bucket.put("k", b"two", if_none_match="*")
            with pytest.raises(PreconditionFailed):
                await bucket.put("k", b"two", if_match='"not-the-etag"')
            assert await bucket.get("k") == b"one"
            assert await bucket.put("k", b"three", if_match=first) is not None
            await bucket.put("k", b"four")  # plain again after conditional puts: unconditional
            assert await bucket.get("k") == b"four"

    asyncio.run(main())


def test_gathered_puts_beyond_the_in_flight_bound_all_land(s3_url: str) -> None:
    """More concurrent puts than the obstore engine hands to obstore at once (64): every one lands, none lost."""

    async def main() -> None:
        async with portable.aio.open_bucket(s3_url) as bucket:
            items = {f"g/{i:03d}": bytes([i]) * 16 for i in range(150)}
            etags = await asyncio.gather(*(bucket.put(k, v) for k, v in items.items()))
            assert len(etags) == 150
            got = await asyncio.gather(*(bucket.get(k) for k in items))
            assert dict(zip(items, got, strict=True)) == items

    asyncio.run(main())


# ---------------------------------------------------------------- the Guard's closed-breaker path
def test_a_breaker_still_opens_and_refuses_through_acall() -> None:
    """With the closed breaker's admit and record written out in acall, failures still open it."""
    from portable.resilience import Guard

    class Classifier:
        def code_of(self, exc: BaseException) -> Any:
            from portable.errors import ErrorCode

            return ErrorCode.UNAVAILABLE

        def is_retryable(self, exc: BaseException) -> bool:
            return False

        def retry_after(self, exc: BaseException) -> float | None:
            return None

    policy = ResiliencePolicy(
        retry=RetryPolicy(max_attempts=1),
        breaker=BreakerPolicy(failure_rate=0.5, window=4, min_calls=1, open_seconds=60),
    )
    guard = Guard("test", f"acall-breaker-{id(policy)}", Classifier(), policy)

    async def ok() -> str:
        return "ok"

    async def down() -> str:
        raise ConnectionError("down")

    async def main() -> None:
        for _ in range(3):
            assert await guard.acall("write", "ok", ok) == "ok"
        with pytest.raises(Exception) as caught:
            await guard.acall("write", "down", down)
        assert not isinstance(caught.value, CircuitOpen)
        # 1 failure in 4: the three successes were counted (alone, the failure would be 100%)
        breaker = guard.breaker("write")
        assert breaker is not None and breaker.failure_rate() == 0.25
        assert await guard.acall("write", "ok", ok) == "ok"
        with pytest.raises(Exception) as caught:
            await guard.acall("write", "down", down)
        assert not isinstance(caught.value, CircuitOpen)  # the failure that takes the window to 50%: it opens
        with pytest.raises(CircuitOpen):
            await guard.acall("write", "ok", ok)

    asyncio.run(main())
