"""Cancels at random points leave nothing partial and lose or repeat no message (issue 16, the last "Done when").

Two scenarios, each on the embedded backends and on moto, with one seeded
random source (``PORTABLE_CANCEL_SEED`` overrides it, to replay a failure):

* storage (``file://``, ``s3://`` on moto): 200 writes, every other one a
  ``put`` and the rest a streamed ``open(key, "wb")``, each cancelled after a
  random delay drawn across the write's own measured duration. Then every
  object visible must be one of the writes, whole; a write that finished must
  be there; no multipart upload (or temporary part) may be left over.
* messages (``sqlite://``, ``sqs://`` on moto): 200 messages, each with an
  idempotency key, consumed by ``AsyncSubscription.run`` with an idempotency
  store; the run is cancelled at 200 random points (mid-receive, mid-handler,
  mid-settlement, mid-drain) and started again until every message is done.
  Every message's effect must have happened exactly once, the queue must be
  empty, and every key's record COMPLETED (none left IN_PROGRESS).

The handler's effect is its last step with no await after it, so the only
windows a cancel can split are the portable layer's own (between the
handler's return and the claim's completion and the ack): exactly what the
test holds the async face to.

Proved to fail (2026-12-01, by breaking the code on purpose and running this
file): an ``AsyncBucketWriter`` that commits instead of aborting when its
block is cancelled gave "22 partial objects after cancels" on file://; a
consumer loop that acks instead of giving back what it holds at a cancel gave
"lost [111, 127, 128]" on sqlite://.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import os
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import portable.aio
from portable.aio import AsyncBucket, AsyncMessage, AsyncSubscription, AsyncTopic
from portable.config import Profile
from portable.driver.idempotency import IdempotencyStore
from portable.driver.threads import run_blocking
from portable.errors import Unsupported
from portable.idempotency import SqliteStore, fingerprint, open_store
from portable.messaging import open_driver
from portable.resilience import ResiliencePolicy, RetryPolicy
from tests.adapters.aws.conftest import aws as aws  # moto's fixtures, for the s3 and sqs params
from tests.adapters.aws.conftest import s3_bucket as s3_bucket

SEED = int(os.environ.get("PORTABLE_CANCEL_SEED", "20261201"))
ROUNDS = 200
MESSAGES = 200
#: the idempotency claims' lease: a claim a cancel cut off (made, but its token never seen) frees itself after it
LEASE = 5.0

#: what AsyncSubscription.run does today (helper B's portable/aio/_consumer.py, 2026-12-01), found by this test
def quick_profile() -> Profile:
    """Quick retries and no breaker: a cancel test must not trip over one flaky moto reply."""
    return Profile(
        name="cancellation",
        storage="mem://cancellation",
        queue="mem://cancellation",
        jobs="local://",
        resilience=ResiliencePolicy(retry=RetryPolicy(max_attempts=5, initial_backoff=0.02, max_backoff=0.2), breaker=None),
    )


async def quiesce() -> None:
    """Wait until calls a cancel left running in the pool's threads are over (a thread cannot be stopped)."""
    await asyncio.sleep(0.3)
    await asyncio.gather(*(run_blocking(time.sleep, 0.05) for _ in range(64)))


# ---------------------------------------------------------------- storage
@pytest.fixture(params=["file", "s3"])
def bucket_url(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/objects"
    moto = request.getfixturevalue("aws")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/{unique_name}?region={moto['region']}&endpoint_url={moto['endpoint_url']}"


async def put(bucket: AsyncBucket, key: str, data: bytes, _: random.Random) -> None:
    await bucket.put(key, data)


async def stream(bucket: AsyncBucket, key: str, data: bytes, rng: random.Random) -> None:
    async with bucket.open(key, "wb") as writer:
        view = memoryview(data)
        while view:
            step = rng.randint(1, 16 * 1024)
            await writer.write(bytes(view[:step]))
            view = view[step:]
            await asyncio.sleep(0)  # a cancel point between writes, as a producer reading a socket has


WRITES: dict[str, Callable[[AsyncBucket, str, bytes, random.Random], Awaitable[None]]] = {"put": put, "stream": stream}


async def cancel_point(rng: random.Random, span: float) -> None:
    """Return at a random point of an operation that takes about ``span`` seconds.

    Half the time after a few turns of the event loop (the first steps of a
    call, before its thread has answered: a fast local write is over before
    any timer fires), else after a random time across the span.
    """
    if rng.random() < 0.5:
        for _ in range(rng.randint(0, 6)):
            await asyncio.sleep(0)
    else:
        await asyncio.sleep(rng.uniform(0, span * 1.5))


async def timed(write: Callable[..., Awaitable[None]], *args: Any) -> float:
    started = time.perf_counter()
    await write(*args)
    return time.perf_counter() - started


async def cancel_writes(bucket: AsyncBucket, rng: random.Random) -> tuple[dict[str, bytes], set[str], collections.Counter[str]]:
    """ROUNDS writes, each cancelled at a random point; returns what each key was given, the finished keys, a tally."""
    spans: dict[str, float] = {}
    for name, write in WRITES.items():
        spans[name] = statistics.median(
            [await timed(write, bucket, f"probe-{name}-{i}", rng.randbytes(32 * 1024), rng) for i in range(5)]
        )
    for name in WRITES:
        for i in range(5):
            await bucket.delete(f"probe-{name}-{i}")
    expected: dict[str, bytes] = {}
    finished: set[str] = set()
    tally: collections.Counter[str] = collections.Counter()
    for i in range(ROUNDS):
        name = "put" if i % 2 == 0 else "stream"
        key = f"obj-{i:03d}"
        data = rng.randbytes(rng.randint(1, 64 * 1024))
        expected[key] = data
        task = asyncio.create_task(WRITES[name](bucket, key, data, rng))
        await cancel_point(rng, spans[name])
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            tally[f"{name} cancelled"] += 1
        else:
            finished.add(key)
            tally[f"{name} finished"] += 1
    return expected, finished, tally


def test_cancelled_writes_leave_nothing_partial(bucket_url: str) -> None:
    rng = random.Random(SEED)

    async def scenario() -> None:
        async with portable.aio.open_bucket(bucket_url, profile=quick_profile()) as bucket:
            expected, finished, tally = await cancel_writes(bucket, rng)
            await quiesce()
            visible = [entry.key async for entry in bucket.list()]
            assert set(visible) <= set(expected), f"objects nobody wrote: {sorted(set(visible) - set(expected))[:5]}"
            partial = [key for key in visible if await bucket.get(key) != expected[key]]
            assert partial == [], f"{len(partial)} partial objects after cancels, e.g. {partial[:5]} ({tally})"
            lost = sorted(finished - set(visible))
            assert lost == [], f"writes that finished but are not there: {lost[:5]}"
            try:
                leftovers = await bucket.list_incomplete(dt.timedelta(0))
            except Unsupported:
                leftovers = []
            assert leftovers == [], f"incomplete writes left behind: {leftovers[:5]}"
            # the cancels landed at every point: before anything was visible, and after the write was done
            for name in WRITES:
                assert tally[f"{name} cancelled"] >= ROUNDS // 20, tally
            assert tally["put finished"] + tally["stream finished"] >= 1, tally

    asyncio.run(scenario())


# ---------------------------------------------------------------- messages
@dataclass
class QueueKit:
    topic_url: str
    subscription_url: str
    store: IdempotencyStore


@pytest.fixture(params=["sqlite", "sqs"])
def queue(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> Iterator[QueueKit]:
    if request.param == "sqlite":
        url = f"sqlite://{tmp_path}/queue.db?name=events"
        store = SqliteStore(tmp_path / "idempotency.db")
        yield QueueKit(url, url, store)
        store.close()
        return
    moto = request.getfixturevalue("aws")
    bucket = request.getfixturevalue("s3_bucket")
    query = f"region={moto['region']}&endpoint_url={moto['endpoint_url']}"
    records = open_store(f"s3://{bucket}/{unique_name}-idem?{query}")
    driver = open_driver(f"sqs://base?{query}")
    try:
        with driver.temporary(unique_name) as url:
            yield QueueKit(url, url, records)
    finally:
        driver.close()
        close = getattr(records, "close", None)
        if close is not None:
            close()


async def cancel_consumers(
    sub: AsyncSubscription, store: IdempotencyStore, rng: random.Random, handled: list[int]
) -> collections.Counter[str]:
    """Run the consumer and cancel it at ROUNDS random points, then once more to the end; a tally."""

    async def handler(message: AsyncMessage) -> None:
        await asyncio.sleep(rng.choice((0, 0, rng.uniform(0, 0.02))))  # a cancel may land mid-handler
        handled.append(int(message.body))  # the effect: the last step, no await after it

    def run() -> Awaitable[Any]:
        return sub.run(
            handler, concurrency=rng.choice((1, 4, 8)), idempotency=store, drain_timeout=rng.choice((0.0, 0.005, 0.05)),
            poll=0.05, handle_signals=False, backoff=0.0, max_deliveries=None, idempotency_lease=LEASE,
        )  # fmt: skip

    tally: collections.Counter[str] = collections.Counter()
    for _ in range(ROUNDS):
        task = asyncio.create_task(run())
        await cancel_point(rng, 0.1)
        task.cancel()
        if rng.random() < 0.2:
            await asyncio.sleep(rng.uniform(0, 0.01))
            task.cancel()  # a second cancel: stop waiting for the drain
        try:
            await task
        except asyncio.CancelledError:
            tally["cancelled"] += 1
        else:
            tally["returned"] += 1
        if len(set(handled)) == MESSAGES:
            tally["all done at a cancel"] += 1
            break
    stop = asyncio.Event()
    final = asyncio.create_task(
        sub.run(
            handler, concurrency=4, idempotency=store, poll=0.05, handle_signals=False, stop_event=stop,
            max_deliveries=None, idempotency_lease=LEASE,
        )
    )
    # run on until every message is handled and every record COMPLETED: a claim a cancel left
    # IN_PROGRESS runs out after LEASE, and its message, if not done, is handled again by then
    completed: set[int] = set()
    deadline = time.monotonic() + 120 + 3 * LEASE
    while time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        if len(set(handled)) < MESSAGES:
            continue
        for i in sorted(set(range(MESSAGES)) - completed):
            claim = await run_blocking(store.claim, f"m-{i}", fingerprint(str(i).encode()), lease=30, ttl=600)
            if claim.status == "completed":
                completed.add(i)
            elif claim.status == "acquired" and claim.token:
                await run_blocking(store.release, f"m-{i}", claim.token)  # not ours to keep
        if len(completed) == MESSAGES:
            break
        await asyncio.sleep(1.0)
    await asyncio.sleep(0.5)  # let a duplicate show up, if one were coming
    stop.set()
    await final
    return tally


def test_cancelled_consumers_process_every_message_exactly_once(queue: QueueKit) -> None:
    rng = random.Random(SEED + 1)
    handled: list[int] = []

    async def scenario() -> None:
        async with (
            portable.aio.open_topic(queue.topic_url, profile=quick_profile()) as topic,
            portable.aio.open_subscription(queue.subscription_url, profile=quick_profile(), lease=5) as sub,
        ):
            assert isinstance(topic, AsyncTopic)
            for i in range(MESSAGES):
                await topic.publish(str(i).encode(), idempotency_key=f"m-{i}")
            tally = await cancel_consumers(sub, queue.store, rng, handled)
            counts = collections.Counter(handled)
            lost = sorted(set(range(MESSAGES)) - set(counts))
            twice = sorted(i for i, n in counts.items() if n > 1)
            assert lost == [] and twice == [], f"lost {lost[:10]}, processed more than once {twice[:10]} ({tally})"
            assert tally["cancelled"] >= ROUNDS // 2 or tally["all done at a cancel"], tally
            left = await sub.receive(max_messages=10, wait=0.5)
            assert left == [], f"{len(left)} messages still in the queue"
            await quiesce()  # before the close: no pool thread may still be in a receive of this queue
        stuck = []
        for i in range(MESSAGES):
            claim = await run_blocking(queue.store.claim, f"m-{i}", fingerprint(str(i).encode()), lease=30, ttl=600)
            if claim.status != "completed":
                stuck.append((i, claim.status))
        assert stuck == [], f"records not COMPLETED: {stuck[:10]}"

    asyncio.run(scenario())
