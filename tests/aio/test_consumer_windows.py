"""The async loop's shared window (issue 22): ``AsyncSubscription.run(concurrency=1)`` runs a window
whose keys all hold one new claim with each handler awaited in the batch's task
(``AsyncConsumerLoop._run_window``), its completions and acks held back in bulk.

On the real sqlite:// queue and SqliteStore files, as tests/messaging/test_consumer_windows.py
does for the sync face: a failed handler is retried with its claim given back, a bytes result is
kept, a message the handler settled itself is not settled again, a cancel mid-window gives the
rest back unstarted (their claims taken back).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import portable.aio as aio
import portable.messaging as pm
from portable.aio._consumer import AsyncConsumerLoop
from portable.idempotency import SqliteStore
from tests.messaging.consumer_support import publish_keyed as _publish
from tests.messaging.consumer_support import store_rows as _rows


def _empty(url: str) -> bool:
    stats = pm.open_subscription(url).stats()
    return (stats.available, stats.in_flight, stats.delayed) == (0, 0, 0)


async def _run_until(url: str, handler: Any, done: Any, **kwargs: Any) -> pm.RunStats:
    async with aio.open_subscription(url) as sub:
        stop = asyncio.Event()

        async def watch() -> None:
            for _ in range(1500):
                if done():
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)  # what the loop does after: settles the window, nothing more to receive
            stop.set()

        watcher = asyncio.ensure_future(watch())
        stats = await sub.run(handler, stop_event=stop, handle_signals=False, poll=0.05, **kwargs)
        await watcher
    assert done(), "the loop did not get there in time"
    return stats


@pytest.fixture
def windows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each window the async loop ran on a shared claim."""
    sizes: list[int] = []
    original = AsyncConsumerLoop._run_window

    async def spy(self: AsyncConsumerLoop, upcoming: list[Any], claim: Any, window: list[Any]) -> None:
        sizes.append(len(upcoming))
        await original(self, upcoming, claim, window)

    monkeypatch.setattr(AsyncConsumerLoop, "_run_window", spy)
    return sizes


def test_a_failed_handler_in_a_shared_window_is_retried_and_the_others_are_completed_once(
    tmp_path: Path, unique_name: str, windows: list[int]
) -> None:
    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    keys = _publish(url, 40)
    calls: Counter[str] = Counter()

    async def handler(m: aio.AsyncMessage) -> None:
        calls[m.idempotency_key] += 1  # type: ignore[index]
        if m.idempotency_key == "w-05" and calls["w-05"] == 1:
            raise ValueError("the first time")

    stats = asyncio.run(_run_until(url, handler, lambda: calls["w-05"] == 2 and _empty(url),
                                   idempotency=SqliteStore(tmp_path / "i.db"), backoff=0.05, max_backoff=0.05))  # fmt: skip
    assert windows and sum(windows) >= len(keys), windows
    assert calls == Counter({k: 2 if k == "w-05" else 1 for k in keys})
    assert (stats.acked, stats.failed, stats.nacked, stats.skipped, stats.lost) == (40, 1, 1, 0, 0)
    rows = _rows(tmp_path / "i.db")
    assert {k: (r[0], r[2], r[3]) for k, r in rows.items()} == {k: (1, 2, 1) if k == "w-05" else (1, 1, 0) for k in keys}


def test_a_shared_window_keeps_bytes_results_and_what_the_handler_settled_itself(
    tmp_path: Path, unique_name: str, windows: list[int]
) -> None:
    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    keys = _publish(url, 12)
    calls: Counter[str] = Counter()

    async def handler(m: aio.AsyncMessage) -> bytes | None:
        key = m.idempotency_key
        assert key is not None
        calls[key] += 1
        if key == "w-01":
            await m.ack()
        elif key == "w-03":
            await m.nack(0)
        return f"result of {key}".encode() if int(key[2:]) % 2 == 0 else None

    stats = asyncio.run(_run_until(url, handler, lambda: len(calls) == 12 and _empty(url), idempotency=SqliteStore(tmp_path / "i.db")))
    assert windows, "the shared window was not taken"
    assert calls == Counter(dict.fromkeys(keys, 1))  # w-03's redelivery skipped, not run
    assert (stats.acked, stats.skipped, stats.failed, stats.lost) == (12, 1, 0, 0)  # w-03 acked when skipped
    rows = _rows(tmp_path / "i.db")
    assert {k: (r[0], r[1]) for k, r in rows.items()} == {
        k: (1, f"result of {k}".encode() if int(k[2:]) % 2 == 0 else None) for k in keys
    }


def test_a_stop_mid_window_gives_back_the_rest_unstarted_and_a_cancelled_handler_its_claim(
    tmp_path: Path, unique_name: str, windows: list[int]
) -> None:
    """Stopped while the 4th handler of the first window (8 messages) hangs: after the drain timeout
    its task is cancelled (its claim released, the message given back), the first three are
    completed and acked, the other four go back with their claims taken back; the next run
    handles the other 17, each once."""
    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    keys = _publish(url, 20)
    store_path = tmp_path / "i.db"
    first: list[str] = []

    async def main() -> pm.RunStats:
        async with aio.open_subscription(url, lease=60) as sub:
            stop = asyncio.Event()

            async def hangs(m: aio.AsyncMessage) -> None:
                first.append(m.idempotency_key)  # type: ignore[arg-type]
                if len(first) == 4:
                    stop.set()
                    await asyncio.sleep(30)

            return await sub.run(hangs, idempotency=SqliteStore(store_path), stop_event=stop, handle_signals=False,
                                 poll=0.05, drain_timeout=0.3)  # fmt: skip

    stats = asyncio.run(main())
    assert windows == [8] and first == keys[:4]
    assert (stats.acked, stats.unfinished, stats.released) == (3, 1, 5)  # the cancelled one given back too
    rows = _rows(store_path)
    assert {k: (r[0], r[4]) for k, r in rows.items() if k in keys[:4]} == {
        **{k: (1, 0) for k in keys[:3]}, keys[3]: (0, 1)
    }  # completed x3; the 4th released
    assert all(rows.get(k, (0, None, 0))[2] == 0 for k in keys[4:8]), rows  # given back unstarted
    again: list[str] = []

    async def collect(m: aio.AsyncMessage) -> None:
        again.append(m.idempotency_key)  # type: ignore[arg-type]

    asyncio.run(_run_until(url, collect, lambda: len(again) >= 17 and _empty(url), idempotency=SqliteStore(store_path)))
    assert sorted(again) == keys[3:]



def test_a_batched_runs_store_and_settlement_calls_run_on_one_thread_of_their_own(
    tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SqliteStore keeps a connection per thread (with its page and statement caches): the batched
    loop's claims, completions and acks all run on its one thread, not the event loop's, not the
    shared pool's (whose next idle thread has a cold connection: about 40% more a store call), and
    the thread ends with the run."""
    import threading

    from portable.embedded.sqlitequeue import SqliteMessaging

    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    _publish(url, 1500)  # batches of 8, 32, 128, 512, 820: 9 windows
    threads: dict[str, set[int]] = {"claim_many": set(), "complete_many": set(), "ack_many": set()}

    def spy(cls: Any, name: str) -> None:
        real = getattr(cls, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            threads[name].add(threading.get_ident())
            return real(*args, **kwargs)

        monkeypatch.setattr(cls, name, call)

    spy(SqliteStore, "claim_many")
    spy(SqliteStore, "complete_many")
    spy(SqliteMessaging, "ack_many")
    handled: list[str] = []
    loop_thread: list[int] = []

    async def handler(m: aio.AsyncMessage) -> None:
        if not loop_thread:
            loop_thread.append(threading.get_ident())
        handled.append(m.idempotency_key)  # type: ignore[arg-type]

    before = {t.ident for t in threading.enumerate()}
    asyncio.run(_run_until(url, handler, lambda: len(handled) == 1500 and _empty(url), idempotency=SqliteStore(tmp_path / "i.db")))
    used = set().union(*threads.values())
    assert len(used) == 1 and used != set(loop_thread), threads
    [pinned] = used
    assert pinned not in before
    for _ in range(100):  # the thread ends once the run is over
        if pinned not in {t.ident for t in threading.enumerate()}:
            break
        time.sleep(0.02)
    assert pinned not in {t.ident for t in threading.enumerate()}


def test_a_handler_raising_cancelled_error_of_its_own_gives_its_message_back_and_the_window_goes_on(
    tmp_path: Path, unique_name: str, windows: list[int]
) -> None:
    """A handler that raises CancelledError while the run is not stopping (its own, say an inner task's):
    its message goes back at once (released, its claim given back) and comes again; the rest of the
    window runs on."""
    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    keys = _publish(url, 12)
    calls: Counter[str] = Counter()

    async def handler(m: aio.AsyncMessage) -> None:
        key = m.idempotency_key
        assert key is not None
        calls[key] += 1
        if key == "w-02" and calls[key] == 1:
            raise asyncio.CancelledError

    stats = asyncio.run(_run_until(url, handler, lambda: calls["w-02"] == 2 and len(calls) == 12 and _empty(url),
                                   idempotency=SqliteStore(tmp_path / "i.db")))  # fmt: skip
    assert windows and calls == Counter({k: 2 if k == "w-02" else 1 for k in keys})
    assert (stats.acked, stats.released, stats.failed) == (12, 1, 0)
