"""What retries, breakers, deadlines and idempotency cost, side by side in one run.

    .venv/bin/uv pip install --python .venv/bin/python -r bench/requirements-resilience.txt
    .venv/bin/python bench/resilience_bench.py [--calls 100000] [--rounds 9] [--claims 2000]

1. Success-path overhead per call of ``Guard.call`` (breaker + retry policy +
   retry budget + deadline check) against calling the function bare; also
   without the retry budget (its cost is one counter a call), inside a
   ``deadline()`` block, with a profile deadline and per-attempt timeout,
   with tenacity strategies in the RetryPolicy, and tenacity's ``Retrying``
   for comparison. Target: <= 3 us (sync).
2. The same for ``Guard.acall`` against a bare ``await``; tenacity's
   ``AsyncRetrying`` for comparison. Target: <= 5 us (async).

Where ``RetryPolicy`` takes no tenacity strategies, or ``ResiliencePolicy`` no
retry budget (commits before they did), those contestants are left out, so one
copy of this script compares two commits.
3. Breaker throughput under 16 threads against the same Guard without a
   breaker, and pybreaker's for comparison. Each call is I/O-like (it sleeps
   0.2 ms, releasing the GIL as a network call does). Target: >= 0.95x. A
   CPU-bound variant (a 1 KiB hash, GIL held) is reported beside it.
4. How long an open breaker takes to refuse a call. Target: < 1 ms.
5. ``fingerprint`` of a 1 KiB payload (bytes and a dict). Target: <= 2 us.
6. The cost of a claim (claim + complete of a fresh key) in each store: memory,
   sqlite, a file bucket, a memory bucket, and Redis (a redis-server started by
   tests/emulators on 127.0.0.1, when installed).

Contestants run round-robin (A, B, A, B, ...) in one process; medians, min-max
and ratios are printed and written to bench/results/resilience.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import interleave, summarise, write

from portable.driver import Classifier
from portable.errors import CircuitOpen
from portable.idempotency import (
    BucketStore,
    IdempotencyStore,
    MemoryStore,
    SqliteStore,
    fingerprint,
    open_store,
)
from portable.resilience import (
    BreakerPolicy,
    BreakerState,
    Guard,
    ResiliencePolicy,
    RetryPolicy,
    deadline,
    reset_breakers,
)
from portable.storage import open_bucket

PAYLOAD = os.urandom(1024)


def work(x: int) -> int:
    return x


def hashing(x: int) -> bytes:
    return hashlib.sha256(PAYLOAD).digest()


def overhead_rows(rates: dict[str, list[float]], baseline: str) -> list[dict[str, Any]]:
    rows = summarise(rates, baseline)
    base_us = 1e6 / statistics.median(rates[baseline])
    for row in rows:
        row["overhead_us"] = round(row["us_per_op"] - base_us, 3)
    return rows


# ---------------------------------------------------------------- 1 + 2: success path
def strategies_policy(tenacity: Any) -> ResiliencePolicy | None:
    """A policy with tenacity wait, stop and retry strategies, or None where RetryPolicy takes none."""
    try:
        retry = RetryPolicy(
            max_attempts=10,
            wait=tenacity.wait_random_exponential(multiplier=0.1, max=5),
            stop=tenacity.stop_after_delay(10),
            retry=tenacity.retry_if_exception_type(Exception),
        )
    except TypeError:
        return None
    return ResiliencePolicy(retry=retry)


def unbudgeted_policy() -> ResiliencePolicy | None:
    """The default policy without its retry budget, or None where ResiliencePolicy has no budget."""
    try:
        return ResiliencePolicy(retry_budget=None)  # type: ignore[call-arg,unused-ignore]
    except TypeError:
        return None


def sync_success(calls: int, rounds: int) -> list[dict[str, Any]]:
    import tenacity

    guard = Guard("bench", "sync", Classifier())
    unbudgeted_policy_ = unbudgeted_policy()
    unbudgeted = Guard("bench", "sync-unbudgeted", Classifier(), unbudgeted_policy_) if unbudgeted_policy_ else None
    with_strategies = strategies_policy(tenacity)
    strategies = Guard("bench", "strategies", Classifier(), with_strategies) if with_strategies else None
    bounded = Guard("bench", "bounded", Classifier(), ResiliencePolicy(deadline=60, retry=RetryPolicy(timeout=5)))
    retrying = tenacity.Retrying(stop=tenacity.stop_after_attempt(4), wait=tenacity.wait_random_exponential(0.1, 20))
    rng = range(calls)

    def bare() -> int:
        for i in rng:
            work(i)
        return calls

    def guarded() -> int:
        call = guard.call
        for i in rng:
            call("read", "get k", work, i)
        return calls

    def guarded_unbudgeted() -> int:
        assert unbudgeted is not None
        call = unbudgeted.call
        for i in rng:
            call("read", "get k", work, i)
        return calls

    def guarded_in_deadline() -> int:
        call = guard.call
        with deadline(3600):
            for i in rng:
                call("read", "get k", work, i)
        return calls

    def guarded_profile_deadline() -> int:
        call = bounded.call
        for i in rng:
            call("read", "get k", work, i)
        return calls

    def guarded_strategies() -> int:
        assert strategies is not None
        call = strategies.call
        for i in rng:
            call("read", "get k", work, i)
        return calls

    def with_tenacity() -> int:
        for i in rng:
            retrying(work, i)
        return calls

    contestants: dict[str, Callable[[], int]] = {
        "bare call": bare,
        "Guard.call": guarded,
    }
    if unbudgeted is not None:
        contestants["Guard.call, no retry budget"] = guarded_unbudgeted
    contestants |= {
        "Guard.call in deadline()": guarded_in_deadline,
        "Guard.call, profile deadline + timeout": guarded_profile_deadline,
    }
    if strategies is not None:
        contestants["Guard.call, tenacity strategies"] = guarded_strategies
    contestants["tenacity.Retrying"] = with_tenacity
    return overhead_rows(interleave(contestants, rounds), "bare call")


def async_success(calls: int, rounds: int) -> list[dict[str, Any]]:
    import tenacity

    guard = Guard("bench", "async", Classifier())
    unbudgeted_policy_ = unbudgeted_policy()
    unbudgeted = Guard("bench", "async-unbudgeted", Classifier(), unbudgeted_policy_) if unbudgeted_policy_ else None
    bounded = Guard("bench", "abounded", Classifier(), ResiliencePolicy(retry=RetryPolicy(timeout=5)))
    with_strategies = strategies_policy(tenacity)
    strategies = Guard("bench", "astrategies", Classifier(), with_strategies) if with_strategies else None

    async def awork(x: int) -> int:
        return x

    rng = range(calls)

    async def bare() -> int:
        for i in rng:
            await awork(i)
        return calls

    async def guarded() -> int:
        acall = guard.acall
        for i in rng:
            await acall("read", "get k", awork, i)
        return calls

    async def guarded_unbudgeted() -> int:
        assert unbudgeted is not None
        acall = unbudgeted.acall
        for i in rng:
            await acall("read", "get k", awork, i)
        return calls

    async def guarded_timeout() -> int:
        acall = bounded.acall
        for i in rng:
            await acall("read", "get k", awork, i)
        return calls

    async def guarded_strategies() -> int:
        assert strategies is not None
        acall = strategies.acall
        for i in rng:
            await acall("read", "get k", awork, i)
        return calls

    async def with_tenacity() -> int:
        retrying = tenacity.AsyncRetrying(stop=tenacity.stop_after_attempt(4))
        for i in rng:
            await retrying(awork, i)
        return calls

    loop = asyncio.new_event_loop()
    try:
        contestants: dict[str, Callable[[], int]] = {
            "bare await": lambda: loop.run_until_complete(bare()),
            "Guard.acall": lambda: loop.run_until_complete(guarded()),
        }
        if unbudgeted is not None:
            contestants["Guard.acall, no retry budget"] = lambda: loop.run_until_complete(guarded_unbudgeted())
        contestants |= {
            "Guard.acall, per-attempt timeout": lambda: loop.run_until_complete(guarded_timeout()),
        }
        if strategies is not None:
            contestants["Guard.acall, tenacity strategies"] = lambda: loop.run_until_complete(guarded_strategies())
        contestants["tenacity.AsyncRetrying"] = lambda: loop.run_until_complete(with_tenacity())
        rates = interleave(contestants, rounds)
    finally:
        loop.close()
    return overhead_rows(rates, "bare await")


# ---------------------------------------------------------------- 3 + 4: breakers
def breaker_threads(calls: int, rounds: int, threads: int = 16, io_seconds: float = 0.0002) -> list[dict[str, Any]]:
    """16 threads calling through a breaker, against the same Guard without one.

    Each call is I/O-like: it sleeps ``io_seconds`` (releasing the GIL, as a
    network call does), so a breaker that held a lock across the call would
    serialise the threads (pybreaker: about 1/16 of the throughput). A
    CPU-bound variant (a 1 KiB hash, the GIL held) is shown too: there every
    nanosecond of bookkeeping shows as a ratio.
    """
    import pybreaker

    no_breaker = Guard("bench", "threads-off", Classifier(), ResiliencePolicy(breaker=None))
    with_breaker = Guard("bench", "threads-on", Classifier(), ResiliencePolicy(breaker=BreakerPolicy()))
    pyb = pybreaker.CircuitBreaker(fail_max=10, reset_timeout=30)
    per_thread = max(1, calls // threads)

    def io_call(x: int) -> int:
        time.sleep(io_seconds)
        return x

    def run(body: Callable[[Callable[[int], Any]], None], fn: Callable[[int], Any]) -> int:
        barrier = threading.Barrier(threads)

        def worker() -> None:
            barrier.wait()
            body(fn)

        pool = [threading.Thread(target=worker) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        return per_thread * threads

    def bare(fn: Callable[[int], Any]) -> None:
        for i in range(per_thread):
            fn(i)

    def guard_off(fn: Callable[[int], Any]) -> None:
        call = no_breaker.call
        for i in range(per_thread):
            call("read", "k", fn, i)

    def guard_on(fn: Callable[[int], Any]) -> None:
        call = with_breaker.call
        for i in range(per_thread):
            call("read", "k", fn, i)

    def py_breaker(fn: Callable[[int], Any]) -> None:
        for i in range(per_thread):
            pyb.call(fn, i)

    contestants: dict[str, Callable[[], int]] = {}
    for label, fn in (("I/O-like call", io_call), ("CPU-bound call", hashing)):
        contestants[f"{label}: Guard without breaker"] = lambda fn=fn: run(guard_off, fn)  # type: ignore[misc]
        contestants[f"{label}: Guard with breaker"] = lambda fn=fn: run(guard_on, fn)  # type: ignore[misc]
        contestants[f"{label}: pybreaker"] = lambda fn=fn: run(py_breaker, fn)  # type: ignore[misc]
        contestants[f"{label}: no guard"] = lambda fn=fn: run(bare, fn)  # type: ignore[misc]
    io_rates = interleave({k: v for k, v in contestants.items() if k.startswith("I/O")}, rounds)
    cpu_rates = interleave({k: v for k, v in contestants.items() if k.startswith("CPU")}, rounds)
    rows = summarise(io_rates, "I/O-like call: Guard without breaker")
    cpu_rows = summarise(cpu_rates, "CPU-bound call: Guard without breaker")
    for row in rows + cpu_rows:
        ratio = next(v for k, v in row.items() if k.startswith("ratio_vs_"))
        for k in [k for k in row if k.startswith("ratio_vs_")]:
            del row[k]
        row["ratio_vs_same_guard_without_breaker"] = ratio
    return rows + cpu_rows


def open_breaker_refusal(calls: int) -> dict[str, float]:
    guard = Guard("bench", "open", Classifier(), ResiliencePolicy(breaker=BreakerPolicy(open_seconds=3600)))
    breaker = guard.breaker("read")
    assert breaker is not None
    breaker.force(BreakerState.OPEN)
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            try:
                guard.call("read", "get k", work, 1)
            except CircuitOpen:
                pass
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return {"open_breaker_refusal_us": round(statistics.median(samples), 3)}


# ---------------------------------------------------------------- 5: fingerprints
def fingerprints(calls: int, rounds: int) -> list[dict[str, Any]]:
    record = {"order": "o-123", "amount": 500, "currency": "EUR", "lines": [{"sku": f"s{i}", "n": i} for i in range(20)]}
    rng = range(calls)

    def fp_bytes() -> int:
        for _ in rng:
            fingerprint(PAYLOAD)
        return calls

    def raw_blake2b() -> int:
        for _ in rng:
            hashlib.blake2b(PAYLOAD, digest_size=16).hexdigest()
        return calls

    def raw_sha256() -> int:
        for _ in rng:
            hashlib.sha256(PAYLOAD).hexdigest()
        return calls

    def fp_dict() -> int:
        for _ in rng:
            fingerprint(record)
        return calls

    rates = interleave(
        {
            "fingerprint(1 KiB bytes)": fp_bytes,
            "raw blake2b-128 of 1 KiB": raw_blake2b,
            "raw sha256 of 1 KiB": raw_sha256,
            "fingerprint(dict, ~600 B of JSON)": fp_dict,
        },
        rounds,
    )
    return summarise(rates, "fingerprint(1 KiB bytes)")


# ---------------------------------------------------------------- 6: claims per store
def claim_costs(claims: int, rounds: int, folder: Path, redis_url: str | None) -> list[dict[str, Any]]:
    stores: dict[str, IdempotencyStore] = {
        "MemoryStore": MemoryStore(),
        "SqliteStore": SqliteStore(folder / "idem.db"),
        "BucketStore(file://)": BucketStore(open_bucket(f"file://{folder}/records")),
        "BucketStore(mem://)": BucketStore(open_bucket("mem://bench-idem")),
    }
    if redis_url:
        stores["RedisStore"] = open_store(f"{redis_url}?prefix=bench:")
    counter = iter(range(10**9))
    fp = fingerprint(PAYLOAD)

    def one(store: IdempotencyStore) -> Callable[[], int]:
        def run() -> int:
            for _ in range(claims):
                key = f"k{next(counter)}"
                claim = store.claim(key, fp, lease=30, ttl=3600)
                assert claim.token is not None
                store.complete(key, claim.token, b"ok")
            return claims

        return run

    rates = interleave({name: one(s) for name, s in stores.items()}, rounds)
    rows = summarise(rates, "MemoryStore")
    for row in rows:
        row["us_per_claim+complete"] = row.pop("us_per_op")
    return rows


def start_redis() -> tuple[Any, str] | None:
    try:
        from tests.emulators import create
    except ImportError:
        return None
    emulator = create("redis")
    ok, reason = emulator.available()
    if not ok:
        print(f"(no Redis: {reason})")
        return None
    info = emulator.start()
    return emulator, info.endpoints["url"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--claims", type=int, default=2000)
    ap.add_argument("--redis-url", default=None, help="use this Redis instead of starting one")
    args = ap.parse_args()
    reset_breakers()
    load_before = os.getloadavg()[0]

    sections: dict[str, list[dict[str, Any]]] = {}
    sections["Sync success path (target: Guard.call overhead <= 3 us)"] = sync_success(args.calls, args.rounds)
    sections["Async success path (target: Guard.acall overhead <= 5 us)"] = async_success(args.calls, args.rounds)
    sections["Breaker throughput, 16 threads (target: >= 0.95x without breaker)"] = breaker_threads(
        args.calls // 10, args.rounds
    )
    refusal = open_breaker_refusal(args.calls // 10)
    sections["Fingerprints (target: 1 KiB <= 2 us)"] = fingerprints(args.calls, args.rounds)

    started = None if args.redis_url else start_redis()
    redis_url = args.redis_url or (started[1] if started else None)
    try:
        with tempfile.TemporaryDirectory(prefix="resilience-bench-") as tmp:
            sections["Claim + complete of a fresh key, per store"] = claim_costs(
                args.claims, max(3, args.rounds // 2), Path(tmp), redis_url
            )
    finally:
        if started:
            started[0].stop()

    def find(section: str, name: str, col: str) -> float:
        return next(r[col] for r in sections[section] if r["contestant"] == name)  # type: ignore[no-any-return]

    s1 = "Sync success path (target: Guard.call overhead <= 3 us)"
    s2 = "Async success path (target: Guard.acall overhead <= 5 us)"
    s3 = "Breaker throughput, 16 threads (target: >= 0.95x without breaker)"
    s4 = "Fingerprints (target: 1 KiB <= 2 us)"
    summary = {
        "sync_overhead_us": find(s1, "Guard.call", "overhead_us"),
        "sync_overhead_in_deadline_us": find(s1, "Guard.call in deadline()", "overhead_us"),
        "tenacity_overhead_us": find(s1, "tenacity.Retrying", "overhead_us"),
        "async_overhead_us": find(s2, "Guard.acall", "overhead_us"),
        "breaker_16_threads_ratio": find(s3, "I/O-like call: Guard with breaker", "ratio_vs_same_guard_without_breaker"),
        "pybreaker_16_threads_ratio": find(s3, "I/O-like call: pybreaker", "ratio_vs_same_guard_without_breaker"),
        "breaker_16_threads_cpu_bound_ratio": find(
            s3, "CPU-bound call: Guard with breaker", "ratio_vs_same_guard_without_breaker"
        ),
        "fingerprint_1kib_us": find(s4, "fingerprint(1 KiB bytes)", "us_per_op"),
        **refusal,
        "fingerprint_vs_raw_sha256": round(
            find(s4, "fingerprint(1 KiB bytes)", "us_per_op") / find(s4, "raw sha256 of 1 KiB", "us_per_op"), 3
        ),
        # Other work on the machine slows every contestant alike; the ratios hold, absolute times do not.
        "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }
    summary["targets_met"] = {
        "sync <= 3 us": summary["sync_overhead_us"] <= 3,
        "async <= 5 us": summary["async_overhead_us"] <= 5,
        "breaker >= 0.95x": summary["breaker_16_threads_ratio"] >= 0.95,
        "fingerprint <= 2 us": summary["fingerprint_1kib_us"] <= 2,
        "open breaker < 1 ms": summary["open_breaker_refusal_us"] < 1000,
    }
    write("resilience", sections, {"summary": summary})
    print("summary:", summary)


if __name__ == "__main__":
    main()
