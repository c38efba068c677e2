"""portable.driver.fanout: blocking calls over a few worker threads, both faces.

Real threads and real blocking (sleeps, events); the functions here stand in
for a library's blocking request, which releases the GIL the same way.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from portable.driver import fanout
from portable.driver.fanout import amap_blocking, map_blocking, relay_blocking

WHO = contextvars.ContextVar("WHO", default="nobody")


class Recorder:
    """Counts calls in flight and remembers the most seen at once."""

    def __init__(self, pause: float = 0.0) -> None:
        self.pause = pause
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.started: list[int] = []
        self.ended: list[int] = []
        self.threads: set[int] = set()

    def __call__(self, item: int) -> int:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.started.append(item)
            self.threads.add(threading.get_ident())
        try:
            time.sleep(self.pause)
            if item % 7 == 3:
                raise ValueError(f"item {item} fails")
            return item * 10
        finally:
            with self.lock:
                self.now -= 1
                self.ended.append(item)


async def tick(count: list[int]) -> None:
    """Count the loop's turns (every millisecond) until cancelled: the loop was free while they ran."""
    while True:
        await asyncio.sleep(0.001)
        count[0] += 1


def check_outcomes(items: list[int], out: list[int | Exception]) -> None:
    assert len(out) == len(items)
    for item, outcome in zip(items, out, strict=True):
        if item % 7 == 3:
            assert isinstance(outcome, ValueError) and str(outcome) == f"item {item} fails"
        else:
            assert outcome == item * 10


def test_map_blocking_returns_each_outcome_in_order_with_the_bound_kept() -> None:
    rec = Recorder(pause=0.002)
    items = list(range(200))
    out = map_blocking(rec, items, 8)
    check_outcomes(items, out)
    assert sorted(rec.started) == items  # each item exactly once
    assert 2 <= rec.most <= 8
    assert threading.get_ident() in rec.threads  # the caller is one of the workers


def test_map_blocking_of_one_item_or_one_worker_starts_no_thread() -> None:
    rec = Recorder()
    assert map_blocking(rec, [5], 16) == [50]
    assert map_blocking(rec, [1, 2, 4], 1) == [10, 20, 40]
    assert rec.threads == {threading.get_ident()}
    assert map_blocking(rec, [], 16) == []


def test_workers_see_the_callers_context_variables() -> None:
    WHO.set("caller")
    seen: list[str] = []
    lock = threading.Lock()

    def look(_: int) -> None:
        time.sleep(0.001)
        with lock:
            seen.append(WHO.get())

    map_blocking(look, list(range(40)), 8)
    assert seen == ["caller"] * 40


def test_amap_blocking_does_not_block_the_loop_and_keeps_the_bound() -> None:
    rec = Recorder(pause=0.005)
    items = list(range(120))

    async def main() -> tuple[list[int | Exception], int]:
        ticks = [0]
        task = asyncio.create_task(tick(ticks))
        out = await amap_blocking(rec, items, 6)
        task.cancel()
        return out, ticks[0]

    out, ticks = asyncio.run(main())
    check_outcomes(items, out)
    assert rec.most <= 6
    assert ticks >= 10  # the loop ran while the workers blocked (120 x 5 ms / 6 = 100 ms)
    assert threading.main_thread().ident not in rec.threads


def test_cancelling_amap_blocking_starts_nothing_more_and_waits_for_the_calls_in_flight() -> None:
    rec = Recorder(pause=0.02)
    items = list(range(400))

    async def main() -> tuple[int, int]:
        task = asyncio.create_task(amap_blocking(rec, items, 4))
        await asyncio.sleep(0.07)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with rec.lock:
            return len(rec.started), len(rec.ended)

    started, ended = asyncio.run(main())
    assert 0 < started < len(items)
    assert started == ended  # every call that began had ended when the cancellation was raised
    time.sleep(0.1)
    assert len(rec.started) == started  # and none began afterwards


def test_a_keyboard_interrupt_in_the_callers_thread_stops_the_batch() -> None:
    calls: list[int] = []
    lock = threading.Lock()
    main = threading.get_ident()

    def fn(item: int) -> int:
        with lock:
            calls.append(item)
        if threading.get_ident() == main and len(calls) > 4:
            raise KeyboardInterrupt
        time.sleep(0.01)
        return item

    with pytest.raises(KeyboardInterrupt):
        map_blocking(fn, list(range(1000)), 4)
    done = len(calls)
    assert done < 100
    time.sleep(0.05)
    assert len(calls) == done  # the helpers stopped with the caller


# ---------------------------------------------------------------- relay_blocking: single calls
def test_relayed_calls_give_each_caller_its_outcome_and_keep_the_loop_free() -> None:
    rec = Recorder(pause=0.005)
    items = list(range(150))

    async def main() -> tuple[list[int | Exception], int]:
        async def one(item: int) -> int | Exception:
            try:
                return await relay_blocking(rec, item)
            except ValueError as exc:
                return exc

        during = [0]  # the loop's turns taken while a relayed call was blocking on a worker

        async def tick_during_calls() -> None:
            while True:
                await asyncio.sleep(0.001)
                if rec.now:
                    during[0] += 1

        task = asyncio.create_task(tick_during_calls())
        out = await asyncio.gather(*(one(i) for i in items))
        task.cancel()
        return list(out), during[0]

    out, during = asyncio.run(main())
    check_outcomes(items, out)
    assert rec.most <= fanout.RELAY_THREADS
    assert rec.most > 1  # calls ran side by side
    assert threading.main_thread().ident not in rec.threads
    # the loop ran while the workers blocked (a count of turns, not a rate: under CI's load the loop
    # took 3 turns of 1 ms in this batch, where a quiet machine takes 10; a call run on the loop
    # itself would leave no turn while one is in flight)
    assert during >= 1


def test_relayed_calls_see_the_callers_context_and_reuse_their_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout, "RELAY_THREADS", 3)
    rec = Recorder(pause=0.002)

    def look(_: int) -> str:
        rec(0)
        return WHO.get()

    async def main() -> list[str]:
        async def one(i: int) -> str:
            WHO.set(f"task {i}")
            return await relay_blocking(look, i)

        return list(await asyncio.gather(*(one(i) for i in range(60))))

    assert asyncio.run(main()) == [f"task {i}" for i in range(60)]
    assert rec.most <= 3 and len(rec.threads) <= 3  # 60 calls, at most 3 threads served them


def test_a_burst_runs_at_once_even_when_a_few_workers_were_idle() -> None:
    """Eight calls that each wait for all eight: they end only if eight workers run them together.

    Two workers are idle when the burst comes; a relay that started workers only while none was
    idle would serve the burst with those two, and the barrier would break.
    """
    barrier = threading.Barrier(8, timeout=5)

    def meet(i: int) -> int:
        barrier.wait()
        return i

    async def main() -> tuple[int, list[int]]:
        await asyncio.gather(relay_blocking(time.sleep, 0.05), relay_blocking(time.sleep, 0.05))
        relay = fanout._relays[asyncio.get_running_loop()]
        before = relay.workers
        return before, list(await asyncio.gather(*(relay_blocking(meet, i) for i in range(8))))

    before, got = asyncio.run(main())
    assert before == 2
    assert got == list(range(8))


def test_a_relayed_call_cancelled_before_it_starts_never_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout, "RELAY_THREADS", 1)
    release = threading.Event()
    started: list[str] = []

    def blocker(name: str) -> str:
        started.append(name)
        release.wait(5)
        return name

    async def main() -> str:
        first = asyncio.ensure_future(relay_blocking(blocker, "first"))
        second = asyncio.ensure_future(relay_blocking(blocker, "second"))
        await asyncio.sleep(0.05)  # "first" holds the only worker; "second" waits in the queue
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        release.set()
        return await first

    assert asyncio.run(main()) == "first"
    time.sleep(0.05)
    assert started == ["first"]


def test_an_outcome_for_a_closed_loop_is_dropped_and_the_worker_serves_on() -> None:
    release = threading.Event()

    def slow(x: int) -> int:
        release.wait(5)
        return x

    loop = asyncio.new_event_loop()
    loop.run_until_complete(asyncio.sleep(0))
    abandoned = loop.run_until_complete(_start(slow, 1))
    loop.close()  # the call is still running; its outcome has nowhere to go
    release.set()
    time.sleep(0.05)
    assert not abandoned.done()

    async def again() -> int:
        return await relay_blocking(lambda x: x * 2, 21)

    assert asyncio.run(again()) == 42


async def _start(fn: object, arg: int) -> asyncio.Future[int]:
    future = relay_blocking(fn, arg)  # type: ignore[arg-type]
    await asyncio.sleep(0.02)  # it has started on a worker
    return future


def test_idle_relay_workers_give_their_threads_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout, "_RELAY_IDLE", 0.05)
    seen: set[int] = set()

    def who(_: int) -> None:
        time.sleep(0.01)
        seen.add(threading.get_ident())

    async def main() -> fanout._Relay:
        await asyncio.gather(*(relay_blocking(who, i) for i in range(8)))
        return fanout._relays[asyncio.get_running_loop()]

    relay = asyncio.run(main())
    busy_relays = [relay]
    deadline = time.monotonic() + 3
    while any(r.workers for r in busy_relays) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert seen and not any(r.workers for r in busy_relays)  # every idle worker ended
    time.sleep(0.05)
    alive = {t.ident for t in threading.enumerate()}
    assert not seen & alive  # their threads have ended


def test_an_idle_relay_worker_does_not_hold_up_the_interpreters_exit() -> None:
    """A worker waits 5 s for its next call; the process still exits at once (daemon threads)."""
    import subprocess
    import sys

    code = (
        "import asyncio, time\n"
        "from portable.driver.fanout import relay_blocking\n"
        "async def main():\n"
        "    return await relay_blocking(lambda x: x + 1, 41)\n"
        "assert asyncio.run(main()) == 42\n"
        "print(time.monotonic())\n"
    )
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    printed = float(out.stdout.strip())
    assert time.monotonic() - printed < 2.5, "the exit waited for an idle relay worker"
    assert time.monotonic() - started < 20
