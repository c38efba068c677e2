"""The async face's batched loop with a blocking store (SqliteStore) and a sync driver run in the
thread pool (sqlite://): each window's completions go to a thread with the next window's claims,
and a batch's last completions with its ack, in one call each (docs/async.md); every trip to a
thread and back costs about 0.1 ms. The store and settlement calls go to the run's own thread
(``Pinned``: one warm sqlite connection), the rest to the pool. A spy counts the loop's calls to
either (the real ones run) and which store and ack calls each carried."""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import portable.aio as aio
import portable.messaging as pm
from portable.aio import _consumer as aio_consumer
from portable.driver.threads import Pinned
from portable.idempotency import SqliteStore
from portable.messaging._claims import RunClaims
from portable.messaging._consumer import CLAIM_WINDOW

N = 1300  # batches grow 8, 32, 128, 512, then 620 (of at most 1,000): windows of 256 in the larger ones


def test_each_window_is_one_trip_to_the_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite://{tmp_path / 'q.db'}?name=hops"
    with pm.open_topic(url) as topic:
        for start in range(0, N, 1000):
            topic.publish_batch([pm.OutgoingMessage(b"x", idempotency_key=f"k{i}") for i in range(start, min(N, start + 1000))])
    hop = [0]
    carried: dict[int, list[str]] = defaultdict(list)  # hop -> the store and ack calls made in it
    real_run_blocking = aio_consumer.run_blocking

    async def counting(fn: Any, *args: Any) -> Any:
        hop[0] += 1
        mine = hop[0]
        carried[mine].append(getattr(fn, "__name__", repr(fn)))
        return await real_run_blocking(fn, *args)

    def spy(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            carried[hop[0]].append(name)
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(aio_consumer, "run_blocking", counting)
    real_pinned_run = Pinned.run

    async def pinned_counting(self: Pinned, fn: Any, *args: Any) -> Any:  # the batched run's own thread
        hop[0] += 1
        carried[hop[0]].append(getattr(fn, "__name__", repr(fn)))
        return await real_pinned_run(self, fn, *args)

    monkeypatch.setattr(Pinned, "run", pinned_counting)
    monkeypatch.setattr(RunClaims, "claim_window", spy("claim_window", RunClaims.claim_window))
    monkeypatch.setattr(RunClaims, "complete_batch", spy("complete_batch", RunClaims.complete_batch))
    sizes: list[int] = []
    real_batch = aio_consumer.AsyncConsumerLoop._batch

    async def batch(self: Any, messages: list[Any]) -> None:
        sizes.append(len(messages))
        await real_batch(self, messages)

    monkeypatch.setattr(aio_consumer.AsyncConsumerLoop, "_batch", batch)

    async def main() -> pm.RunStats:
        async with aio.open_subscription(url) as sub:
            got, stop = [0], asyncio.Event()

            async def handler(message: aio.AsyncMessage) -> None:
                got[0] += 1
                if got[0] >= N:
                    stop.set()

            return await sub.run(
                handler, idempotency=SqliteStore(tmp_path / "idem.db"), stop_event=stop, handle_signals=False, poll=0.05
            )

    stats = asyncio.run(main())
    assert stats.acked == N and sum(sizes) == N
    hops = [carried[h] for h in range(1, hop[0] + 1)]
    windows = sum(math.ceil(size / CLAIM_WINDOW) for size in sizes)
    claim_hops = [h for h in hops if "claim_window" in h]
    ack_hops = [h for h in hops if "complete_and_ack" in h]
    assert len(claim_hops) == windows, "one trip a window: its claims, after the previous window's completions"
    assert len(ack_hops) == len(sizes), "one trip a batch: its last completions and its ack"
    assert len(hops) == windows + len(sizes), hops
    # every window's completions rode with the next window's claims or with the batch's ack
    assert all(h == ["complete_and_claim", "claim_window"] or h == ["complete_and_claim", "complete_batch", "claim_window"]
               for h in claim_hops), claim_hops  # fmt: skip
    assert all(h == ["complete_and_ack", "complete_batch"] for h in ack_hops), ack_hops
    assert sum(1 for h in claim_hops if "complete_batch" in h) == windows - len(sizes)
