"""``await AsyncSubscription.run(handler)``: cancellation, drain and SIGTERM on real sqlite:// queues.

The consumer loop's contract (ack, backoff, dead letters, idempotency skip, order per key) runs on
both faces in the messaging contract suite; these tests check what tasks add: a handler cancelled
mid-way is given back (never dead-lettered) with its claim released, the drain on cancel and on
SIGTERM (a subprocess running ``asyncio.run(sub.run(...))``), and the stop events.

Run as a script, this file is the SIGTERM test's worker:
``python tests/aio/test_consumer.py URL OUT`` consumes from URL, writing ``start <id>`` and
``done <id>`` lines to OUT, and prints its RunStats as JSON when it stops.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

import portable.aio as aio
import portable.messaging as pm
from portable.driver.messaging import OutgoingMessage
from portable.idempotency import MemoryStore, fingerprint

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def sqlite_url(tmp_path: Path, unique_name: str) -> str:
    return f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"


def test_a_handler_cancelled_mid_way_is_given_back_and_never_dead_lettered(sqlite_url: str, unique_name: str) -> None:
    """Cancel run() while its handler runs: the handler is cancelled, the message goes back at
    once with its idempotency claim released, and a later run handles it; nothing is dead-lettered."""
    dlq = f"mem://{unique_name}-dlq"
    store = MemoryStore()

    async def main() -> None:
        async with aio.open_topic(sqlite_url) as topic, aio.open_subscription(sqlite_url, lease=60) as sub:
            await topic.publish(b"work", idempotency_key="job-1")
            entered = asyncio.Event()
            cancelled: list[str] = []

            async def stuck(m: aio.AsyncMessage) -> None:
                entered.set()
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    cancelled.append(m.id)
                    raise

            run = asyncio.ensure_future(sub.run(
                stuck, max_deliveries=1, idempotency=store, dead_letter=dlq, drain_timeout=0.2,
                poll=0.2, handle_signals=False,
            ))  # fmt: skip
            await asyncio.wait_for(entered.wait(), 10)
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
            assert len(cancelled) == 1
            # the claim was released, not left IN_PROGRESS until its lease ends
            probe = store.claim("job-1", fingerprint(b"work"), lease=30, ttl=600)
            assert probe.status == "acquired"
            assert probe.token is not None
            store.release("job-1", probe.token)
            # the message is back at once (its lease was 60 s)
            handled: list[bytes] = []

            async def works(m: aio.AsyncMessage) -> None:
                handled.append(m.body)

            stop = asyncio.Event()
            second = asyncio.ensure_future(sub.run(
                works, max_deliveries=3, idempotency=store, dead_letter=dlq, poll=0.2, stop_event=stop,
                handle_signals=False,
            ))  # fmt: skip
            until = time.monotonic() + 5
            while not handled and time.monotonic() < until:
                await asyncio.sleep(0.05)
            stop.set()
            stats = await asyncio.wait_for(second, 10)
            assert handled == [b"work"]
            assert stats.acked == 1 and stats.dead_lettered == 0 and stats.failed == 0
        async with aio.open_subscription(dlq) as dead:
            assert await dead.receive(10, wait=0.2) == []
        assert store.claim("job-1", fingerprint(b"work"), lease=30, ttl=600).status == "completed"

    asyncio.run(main())


def test_a_handler_that_raises_cancelled_error_is_given_back_not_failed(sqlite_url: str, unique_name: str) -> None:
    async def main() -> None:
        async with aio.open_topic(sqlite_url) as topic, aio.open_subscription(sqlite_url, lease=60) as sub:
            await topic.publish(b"once cancelled")
            calls: list[int] = []

            async def handler(m: aio.AsyncMessage) -> None:
                calls.append(m.delivery_attempt)
                if len(calls) == 1:
                    raise asyncio.CancelledError  # e.g. a task the handler awaited was cancelled

            stop = threading.Event()
            run = asyncio.ensure_future(sub.run(
                handler, max_deliveries=2, dead_letter=f"mem://{unique_name}-dlq", poll=0.2, stop_event=stop,
                handle_signals=False,
            ))  # fmt: skip
            until = time.monotonic() + 10
            while len(calls) < 2 and time.monotonic() < until:
                await asyncio.sleep(0.05)
            stop.set()
            stats = await asyncio.wait_for(run, 10)
            assert calls == [1, 2]
            assert stats.released == 1 and stats.failed == 0 and stats.acked == 1 and stats.dead_lettered == 0

    asyncio.run(main())


def test_the_drain_lets_running_handlers_finish_and_cancels_the_rest(sqlite_url: str) -> None:
    async def main() -> None:
        async with aio.open_topic(sqlite_url) as topic, aio.open_subscription(sqlite_url, lease=60) as sub:
            await topic.publish_batch([b"quick", b"slow"])
            started: list[bytes] = []
            finished: list[bytes] = []

            async def handler(m: aio.AsyncMessage) -> None:
                started.append(m.body)
                await asyncio.sleep(0.3 if m.body == b"quick" else 30)
                finished.append(m.body)

            stop = asyncio.Event()
            run = asyncio.ensure_future(sub.run(
                handler, concurrency=2, poll=0.2, drain_timeout=1.0, stop_event=stop, handle_signals=False,
            ))  # fmt: skip
            until = time.monotonic() + 10
            while len(started) < 2 and time.monotonic() < until:
                await asyncio.sleep(0.02)
            stop.set()
            began = time.monotonic()
            stats = await asyncio.wait_for(run, 10)
            assert time.monotonic() - began < 5
            assert finished == [b"quick"]
            assert stats.acked == 1 and stats.unfinished == 1 and stats.released == 1
            [back] = await sub.receive(10, wait=1)  # given back at once, not after its 60 s lease
            assert back.body == b"slow"
            await back.ack()

    asyncio.run(main())


def test_subscription_stop_stops_an_async_run(sqlite_url: str) -> None:
    async def main() -> None:
        async with aio.open_subscription(sqlite_url) as sub:
            run = asyncio.ensure_future(sub.run(_nothing, poll=0.2, handle_signals=False))
            await asyncio.sleep(0.3)
            sub.sync.stop()  # the sync twin's stop() reaches the async loop too
            stats = await asyncio.wait_for(run, 5)
            assert stats.received == 0

    asyncio.run(main())


async def _nothing(message: aio.AsyncMessage) -> None:
    return None


def test_lease_is_kept_while_a_slow_coroutine_handler_runs(sqlite_url: str) -> None:
    lease = 1.0

    async def main() -> None:
        async with aio.open_topic(sqlite_url) as topic, aio.open_subscription(sqlite_url) as sub, \
                aio.open_subscription(sqlite_url) as other:  # fmt: skip
            await topic.publish(b"long")
            seen_elsewhere: list[int] = []
            done = asyncio.Event()

            async def slow(m: aio.AsyncMessage) -> None:
                until = time.monotonic() + lease * 3.5
                while time.monotonic() < until:
                    seen_elsewhere.extend(x.delivery_attempt for x in await other.receive(10, wait=0.2, lease=lease))
                done.set()

            stop = asyncio.Event()
            run = asyncio.ensure_future(sub.run(slow, lease=lease, poll=0.2, stop_event=stop, handle_signals=False))
            await asyncio.wait_for(done.wait(), 15)
            stop.set()
            stats = await asyncio.wait_for(run, 10)
            assert seen_elsewhere == [], "the lease ran out while the handler ran"
            assert stats.acked == 1

    asyncio.run(main())


def test_run_takes_an_async_idempotency_store_and_claims_on_its_sync_store(sqlite_url: str) -> None:
    from portable.aio import AsyncIdempotencyStore

    store = MemoryStore()
    claim = store.claim("done-1", fingerprint(b"pay"), lease=30, ttl=600)
    assert claim.token is not None
    store.complete("done-1", claim.token, None)

    async def main() -> None:
        async with aio.open_topic(sqlite_url) as topic, aio.open_subscription(sqlite_url) as sub:
            await topic.publish(b"pay", idempotency_key="done-1")
            await topic.publish(b"pay", idempotency_key="new-2")
            handled: list[str | None] = []

            async def handler(m: aio.AsyncMessage) -> None:
                handled.append(m.idempotency_key)

            stop = asyncio.Event()
            run = asyncio.ensure_future(sub.run(
                handler, idempotency=AsyncIdempotencyStore.from_sync(store), poll=0.2, stop_event=stop,
                handle_signals=False,
            ))  # fmt: skip
            until = time.monotonic() + 10
            while not handled and time.monotonic() < until:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            stop.set()
            stats = await asyncio.wait_for(run, 10)
            assert handled == ["new-2"] and stats.skipped == 1 and stats.acked == 2

    asyncio.run(main())
    assert store.claim("new-2", fingerprint(b"pay"), lease=30, ttl=600).status == "completed"


def test_run_cancelled_at_random_points_handles_every_message_once(sqlite_url: str) -> None:
    """Seeded cancels of run() mid-receive, mid-claim, mid-handler and mid-settle: with an idempotency
    store every message's effect happens once, none is lost, and no claim is left IN_PROGRESS."""
    rng = random.Random(1616)
    total = 40
    store = MemoryStore()
    effects: list[int] = []

    async def handler(m: aio.AsyncMessage) -> None:
        await asyncio.sleep(rng.choice((0, 0.001, 0.01)))
        effects.append(int(m.body))  # the effect: no await after it

    async def main() -> None:
        async with aio.open_topic(sqlite_url) as topic, aio.open_subscription(sqlite_url, lease=5) as sub:
            await topic.publish_batch([OutgoingMessage(str(i).encode(), idempotency_key=f"k-{i}") for i in range(total)])
            for _ in range(120):
                run = asyncio.ensure_future(sub.run(
                    handler, concurrency=rng.choice((1, 4)), idempotency=store, poll=0.05, backoff=0.0,
                    drain_timeout=rng.choice((0.0, 0.01)), max_deliveries=None, handle_signals=False,
                ))  # fmt: skip
                await asyncio.sleep(rng.uniform(0, 0.05))
                run.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await run
            stop = asyncio.Event()
            final = asyncio.ensure_future(sub.run(
                handler, concurrency=4, idempotency=store, poll=0.05, stop_event=stop, max_deliveries=None,
                handle_signals=False,
            ))  # fmt: skip
            until = time.monotonic() + 30
            while len(set(effects)) < total and time.monotonic() < until:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            stop.set()
            await final
            assert await sub.receive(10, wait=0.2) == []

    asyncio.run(main())
    counts = collections.Counter(effects)
    assert sorted(counts) == list(range(total)), "a message was lost"
    assert [i for i, n in counts.items() if n > 1] == [], "a message's effect happened twice"
    statuses = {store.claim(f"k-{i}", fingerprint(str(i).encode()), lease=30, ttl=600).status for i in range(total)}
    assert statuses == {"completed"}


# -- SIGTERM: a worker process ------------------------------------------------------------------


async def _worker(url: str, out: Path) -> None:
    lines = out.open("a", buffering=1)

    async def handler(m: aio.AsyncMessage) -> None:
        lines.write(f"start {m.id}\n")
        await asyncio.sleep(1.5)
        lines.write(f"done {m.id}\n")

    async with aio.open_subscription(url, lease=30) as sub:
        stats = await sub.run(handler, concurrency=4, poll=0.2, drain_timeout=20)
    print(json.dumps(asdict(stats)), flush=True)


@pytest.mark.slow
def test_sigterm_drains_a_worker_running_asyncio_run(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'q.db'}?name=work"
    out = tmp_path / "handled.txt"
    with pm.open_topic(url) as topic:
        ids = set(topic.publish_batch([f"m-{i}".encode() for i in range(20)]))
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), url, str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
    )  # fmt: skip
    try:
        until = time.monotonic() + 30
        while time.monotonic() < until:
            lines = out.read_text().splitlines() if out.exists() else []
            if sum(line.startswith("start") for line in lines) >= 4:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the worker never started 4 handlers")
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    stats = json.loads(stdout.strip().splitlines()[-1])
    lines = out.read_text().splitlines()
    started = {line.split()[1] for line in lines if line.startswith("start")}
    done = {line.split()[1] for line in lines if line.startswith("done")}
    assert started and started == done, "a handler in flight at SIGTERM did not finish"
    assert stats["acked"] == len(done) and stats["unfinished"] == 0 and stats["dead_lettered"] == 0
    with pm.open_subscription(url) as sub:
        rest: dict[str, pm.Message] = {}
        until = time.monotonic() + 10
        while len(rest) < len(ids) - len(done) and time.monotonic() < until:
            for m in sub.receive(10, wait=0.5):
                rest[m.id] = m
        assert set(rest) | done == ids, "a message was lost"
        assert not set(rest) & done, "a handled message came back"
        sub.ack_many(list(rest.values()))


if __name__ == "__main__":
    asyncio.run(_worker(sys.argv[1], Path(sys.argv[2])))
