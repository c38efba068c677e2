"""portable.aio against the native async clients, side by side on the bench S3 server (s3s-fs).

    .venv/bin/python bench/aio_bench.py            # full run: 2,000 x 1 KiB, 7 rounds (a few minutes)
    .venv/bin/python bench/aio_bench.py --quick    # smoke test: 300 x 1 KiB, 2 rounds, 2,000 concurrent gets
    .venv/bin/python bench/aio_bench.py --group fsspec --op put   # one section again (writes aio-partial.*)

Needs bench/s3s-server built (bench/compare.py --build-server) and
``pip install -r bench/requirements-compare.txt`` (obstore, aiobotocore via s3fs).

What it measures, in interleaved rounds (each contestant once per round, the
order rotating every round), medians with min-max and paired ratios (per
round, portable's rate over the peer's of the same round):

* 1 KiB objects, put then get, 16 in flight for everyone, each in its best
  documented idiom:

  - ``AsyncBucket.put_many`` / ``get_many`` and a plain ``asyncio.gather`` over
    ``AsyncBucket.put`` / ``get`` behind a semaphore of 16, on each engine:
    obstore (``?engine=obstore``: obstore's coroutines on the caller's loop)
    and fsspec (``?engine=fsspec``: aiobotocore's coroutines on the caller's
    loop, a client per loop; and, as a third contestant, the former design,
    each single call hopping to s3fs's loop thread and back, ``hop_to_s3fs``);
  - obstore's async API: ``obstore.put_async`` / ``get_async`` +
    ``bytes_async`` with a semaphore of 16 (its documented idiom);
  - aiobotocore: one client (a pool of 16 connections, retries off),
    ``put_object`` / ``get_object`` + ``Body.read()`` with a semaphore of 16.

* 10,000 concurrent ``AsyncBucket.get`` calls (one ``asyncio.gather``, no
  semaphore) on ``file://`` (thread-adapted: the bounded pool), ``mem://``
  (awaited inline: its driver never blocks) and on the obstore engine (native), with the peak OS thread count (``Threads`` of
  /proc/self/status, obstore's runtime included) and the peak RSS sampled on
  the loop every 5 ms. The native engine hands at most 64 requests to obstore
  at once (``portable_obstore._aio.MAX_IN_FLIGHT``).

Each table also gives the CPU microseconds per operation of this process (all
its threads), which a busy machine disturbs less than the rates.

Instruction counts (load-independent, for comparing code changes on a busy machine): one
contestant's ``--op`` once, ``--count`` objects, under callgrind, which collects only that op::

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.out \
        .venv/bin/python bench/aio_bench.py --instructions "gather(AsyncBucket.put/get) [obstore]" --count 1000

valgrind's "Collected" line divided by the count is the instructions per operation (all threads, user
space only: the kernel's share of a request and cross-thread wake-ups are not in it).

Targets (issue 16): the obstore engine's AsyncBucket >= 1.0x obstore's async
API; the fsspec engine's >= 0.95x aiobotocore. Each is decided by a paired
run after its table: the two contestants alone, alternating, twice the rounds. Writes bench/results/aio.md and
aio.json (aio-quick.* with ``--quick``). The load average is recorded: on a
shared 2-core machine the ratios, not the rates, are the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import _compare_clients as cc  # noqa: E402
from bench._common import write  # noqa: E402
from bench.compare import loadavg, paired, spread, start_s3s  # noqa: E402

KIB = 1024
IN_FLIGHT = 16
#: group -> (the peer, the target ratio, our contestants judged against it: both idioms of the issue)
TARGETS = {"obstore": ("obstore async", 1.0, ("AsyncBucket.*_many [obstore]", "gather(AsyncBucket.put/get) [obstore]")),
           "fsspec": ("aiobotocore", 0.95, ("AsyncBucket.*_many [fsspec]", "gather(AsyncBucket.put/get) [fsspec]"))}


class Contestant:
    """A named pair of batch operations, run on the contestant's own event loop."""

    def __init__(self, name: str, put: Callable[[dict[str, bytes]], Awaitable[None]],
                 get: Callable[[list[str]], Awaitable[None]], close: Callable[[], Awaitable[None]] | None = None) -> None:
        self.name, self._put, self._get, self._close = name, put, get, close
        self.loop = asyncio.new_event_loop()

    def put(self, items: dict[str, bytes]) -> None:
        self.loop.run_until_complete(self._put(items))

    def get(self, keys: list[str]) -> None:
        self.loop.run_until_complete(self._get(keys))

    def close(self) -> None:
        if self._close is not None:
            self.loop.run_until_complete(self._close())
        self.loop.close()


async def bounded(fn: Callable[[Any], Awaitable[Any]], items: list[Any]) -> None:
    """``asyncio.gather`` of one task per item behind a semaphore of 16: the documented idiom."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(item: Any) -> None:
        async with gate:
            await fn(item)

    await asyncio.gather(*(one(i) for i in items))


# ---------------------------------------------------------------- contestants
def profile_for(url: str) -> Any:
    from portable.config import Profile

    return Profile(name="bench", storage=url, queue="mem://bench", jobs="local://./.portable/jobs")


def portable_pair(label: str, url: str, driver: Callable[[Any], Any] | None = None,
                  idioms: tuple[str, ...] = ("many", "gather")) -> list[Contestant]:
    """``AsyncBucket.*_many`` and ``gather(AsyncBucket.put/get)`` on one engine (each its own bucket)."""
    import portable.aio

    out = []
    for idiom in idioms:
        path, _, query = url.partition("?")
        mine = f"{path}-{idiom}?{query}"
        bucket = portable.aio.open_bucket(mine, profile=profile_for(mine))
        if driver is not None:
            bucket = type(bucket)(bucket.sync, driver(bucket.driver))

        async def put(items: dict[str, bytes], b: Any = bucket, idiom: str = idiom) -> None:
            if idiom == "many":
                await b.put_many(items)
            else:
                await bounded(lambda kv: b.put(kv[0], kv[1]), list(items.items()))

        async def get(keys: list[str], b: Any = bucket, idiom: str = idiom) -> None:
            if idiom == "many":
                got = await b.get_many(keys)
                assert len(got) == len(keys)
            else:
                await bounded(b.get, keys)

        name = f"AsyncBucket.*_many [{label}]" if idiom == "many" else f"gather(AsyncBucket.put/get) [{label}]"
        out.append(Contestant(name, put, get, bucket.aclose))
    return out


def hop_to_s3fs(sync: Any) -> Any:
    """The fsspec engine's former design, measured against the shipped one: each single call hops to
    s3fs's loop thread (``run_on_loop``, batched wake-ups) and its outcome hops back; the shipped
    engine awaits it on the caller's loop with that loop's own client."""
    from portable_aws._s3_aio import S3AsyncStorage

    from portable.driver.threads import run_on_loop

    class Hop(S3AsyncStorage):
        def get(self, key: str) -> Any:
            return run_on_loop(self._loop, self.sync._get, key)

        def put(self, key: str, data: bytes, options: Any) -> Any:
            return run_on_loop(self._loop, self.sync._put, key, data, options)

    return Hop(sync)


def obstore_peer(t: cc.Target, prefix: str) -> Contestant:
    import obstore

    store = cc.obstore_store(t)

    async def put_one(item: tuple[str, bytes]) -> None:
        await obstore.put_async(store, prefix + item[0], item[1], use_multipart=False)

    async def get_one(key: str) -> None:
        result = await obstore.get_async(store, prefix + key)
        await result.bytes_async()

    async def put(items: dict[str, bytes]) -> None:
        await bounded(put_one, list(items.items()))

    async def get(keys: list[str]) -> None:
        await bounded(get_one, keys)

    return Contestant("obstore async", put, get)


def aiobotocore_peer(t: cc.Target, prefix: str) -> Contestant:
    from aiobotocore.config import AioConfig
    from aiobotocore.session import get_session

    state: dict[str, Any] = {}

    async def client() -> Any:
        if "client" not in state:
            config = AioConfig(max_pool_connections=IN_FLIGHT, retries={"total_max_attempts": 1},
                               s3={"addressing_style": "path"}, signature_version="s3v4")
            state["cm"] = get_session().create_client(
                "s3", endpoint_url=t.endpoint, region_name=t.region, aws_access_key_id=t.access_key,
                aws_secret_access_key=t.secret_key, config=config)
            state["client"] = await state["cm"].__aenter__()
        return state["client"]

    async def put(items: dict[str, bytes]) -> None:
        s3 = await client()

        async def one(item: tuple[str, bytes]) -> None:
            await s3.put_object(Bucket=t.bucket, Key=prefix + item[0], Body=item[1])

        await bounded(one, list(items.items()))

    async def get(keys: list[str]) -> None:
        s3 = await client()

        async def one(key: str) -> None:
            resp = await s3.get_object(Bucket=t.bucket, Key=prefix + key)
            async with resp["Body"] as body:
                await body.read()

        await bounded(one, keys)

    async def close() -> None:
        if "cm" in state:
            await state["cm"].__aexit__(None, None, None)

    return Contestant("aiobotocore", put, get, close)


# ---------------------------------------------------------------- the 1 KiB batches
CPU: dict[str, list[float]] = {}


def interleave(contestants: dict[str, Callable[[], int]], rounds: int) -> dict[str, list[float]]:
    """bench.compare.interleave (the order rotates every round), also keeping each run's CPU
    microseconds per operation in :data:`CPU` (this process, all its threads: the loop, obstore's
    runtime, s3fs's loop thread), a figure that a busy machine disturbs less than the rate."""
    rates: dict[str, list[float]] = {name: [] for name in contestants}
    names = list(contestants)
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            t0, c0 = time.perf_counter(), time.process_time()
            ops = contestants[name]()
            rates[name].append(ops / (time.perf_counter() - t0))
            CPU.setdefault(name, []).append((time.process_time() - c0) / ops * 1e6)
    return rates


def measure(contestants: list[Contestant], count: int, rounds: int,
            ops: tuple[str, ...] = ("put", "get")) -> dict[str, dict[str, list[float]]]:
    items = {f"obj-{i:05d}": os.urandom(KIB) for i in range(count)}
    keys = list(items)
    for c in contestants:  # every contestant's objects exist before the first timed get
        c.put(items)

    def timed(c: Contestant, op: str) -> Callable[[], int]:
        def run() -> int:
            c.put(items) if op == "put" else c.get(keys)
            return count

        return run

    out = {}
    for op in ops:
        CPU.clear()
        out[op] = interleave({c.name: timed(c, op) for c in contestants}, rounds)
        out[op + " cpu"] = {k: list(v) for k, v in CPU.items()}  # a copy of each list: the decisive run appends to CPU later
    return out


def decide(ours: Contestant, peer: Contestant, op: str, count: int, rounds: int) -> tuple[float, float, float]:
    """A target's verdict: the two contestants alone, alternating, ``2 * rounds`` times; the paired ratio."""
    items = {f"obj-{i:05d}": os.urandom(KIB) for i in range(count)}
    keys = list(items)

    def timed(c: Contestant) -> Callable[[], int]:
        def run() -> int:
            c.put(items) if op == "put" else c.get(keys)
            return count

        return run

    rates = interleave({ours.name: timed(ours), peer.name: timed(peer)}, 2 * rounds)
    return paired(rates[ours.name], rates[peer.name])


def rows(rates: dict[str, list[float]], cpu: dict[str, list[float]], mine: list[str]) -> list[dict[str, Any]]:
    medians = {name: statistics.median(v) for name, v in rates.items()}
    out = []
    for name, values in sorted(rates.items(), key=lambda kv: -medians[kv[0]]):
        row: dict[str, Any] = {"contestant": name, "median_ops_per_s": round(medians[name], 1),
                               "min": round(min(values), 1), "max": round(max(values), 1),
                               "cpu_us_per_op": round(statistics.median(cpu[name]), 1)}
        for m in mine:
            row[f"{m} / this"] = "" if name == m else spread(paired(rates[m], values))
        out.append(row)
    return out


# ---------------------------------------------------------------- 10,000 concurrent gets
def status(field: str) -> int:
    """A number from /proc/self/status: ``VmRSS`` (kB) or ``Threads`` (OS threads, obstore's runtime included)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def rss_bytes() -> int:
    return status("VmRSS") * 1024


async def concurrent_gets(bucket: Any, n: int) -> dict[str, Any]:
    await bucket.put("one", os.urandom(KIB))
    await bucket.get("one")  # connections and pools warm
    peak = {"threads": status("Threads"), "rss": rss_bytes()}
    before = dict(peak)
    stop = asyncio.Event()

    async def sample() -> None:
        while not stop.is_set():
            peak["threads"] = max(peak["threads"], status("Threads"))
            peak["rss"] = max(peak["rss"], rss_bytes())
            await asyncio.sleep(0.005)

    sampler = asyncio.ensure_future(sample())
    t0 = time.perf_counter()
    got = await asyncio.gather(*(bucket.get("one") for _ in range(n)))
    elapsed = time.perf_counter() - t0
    stop.set()
    await sampler
    assert len(got) == n and all(len(g) == KIB for g in got)
    return {"calls": n, "seconds": round(elapsed, 2), "calls_per_s": round(n / elapsed, 1),
            "threads_before": before["threads"], "threads_peak": peak["threads"],
            "rss_before_MiB": round(before["rss"] / 2**20, 1), "rss_peak_MiB": round(peak["rss"] / 2**20, 1),
            "native": bucket.async_driver.native}


def fan_out(urls: dict[str, str], n: int) -> list[dict[str, Any]]:
    import portable.aio

    out = []
    for label, url in urls.items():
        async def main(url: str = url) -> dict[str, Any]:
            async with portable.aio.open_bucket(url, profile=profile_for(url)) as bucket:
                return await concurrent_gets(bucket, n)

        out.append({"bucket": label, **asyncio.run(main())})
    return out


# ---------------------------------------------------------------- instruction counts
def instructions(groups: dict[str, list[Contestant]], name: str, op: str, count: int) -> int:
    """``name``'s ``op`` of ``count`` objects once, with callgrind collecting only it (``--instructions``)."""
    import subprocess

    everyone = {c.name: c for cs in groups.values() for c in cs}
    if name not in everyone:
        raise SystemExit(f"no contestant {name!r}; one of: {', '.join(everyone)}")
    chosen = everyone[name]
    items = {f"obj-{i:05d}": os.urandom(KIB) for i in range(count)}
    chosen.put(items)  # connections warm, the objects there for a get

    def collect(state: str) -> None:
        subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], check=True, stdout=subprocess.DEVNULL)
        time.sleep(0.5)  # callgrind reads the command at its next check

    collect("on")
    chosen.put(items) if op == "put" else chosen.get(list(items))
    collect("off")
    for c in everyone.values():
        c.close()
    print(f"{name} {op} x {count}: valgrind's 'Collected' / {count} = instructions per operation", flush=True)
    return 0


# ---------------------------------------------------------------- main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 objects, 2 rounds, 2,000 concurrent gets")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 7; 2 with --quick)")
    parser.add_argument("--count", type=int, default=None, help="objects per batch (default 2,000; 300 with --quick)")
    parser.add_argument("--group", action="append", choices=list(TARGETS), default=None,
                        help="only this engine's section (repeatable; default both); writes aio-partial.*")
    parser.add_argument("--op", action="append", choices=["put", "get"], default=None,
                        help="only this operation (repeatable; default both); writes aio-partial.*")
    parser.add_argument("--instructions", metavar="CONTESTANT", default=None,
                        help="run CONTESTANT's --op (default put) once, collected by callgrind (see above)")
    args = parser.parse_args()
    partial = bool(args.group or args.op)
    ops = tuple(args.op or ("put", "get"))
    rounds = args.rounds or (2 if args.quick else 7)
    count = args.count or (300 if args.quick else 2000)
    fan = 2000 if args.quick else 10_000
    load_before = loadavg()
    target, stop = start_s3s()
    os.environ.update(AWS_ACCESS_KEY_ID=target.access_key, AWS_SECRET_ACCESS_KEY=target.secret_key,
                      AWS_DEFAULT_REGION=target.region, AWS_REGION=target.region)
    sections: dict[str, list[dict[str, Any]]] = {}
    checks: list[dict[str, Any]] = []
    try:
        run = uuid.uuid4().hex[:6]
        q = f"endpoint_url={target.endpoint}&region={target.region}"
        base = f"s3://{target.bucket}/{run}"
        groups = {
            "obstore": [*portable_pair("obstore", f"{base}-po?engine=obstore&sign_payload=false&concurrency=16&{q}"),
                        obstore_peer(target, f"{run}-obstore/")],
            "fsspec": [*portable_pair("fsspec", f"{base}-pf?engine=fsspec&concurrency=16&{q}"),
                       *portable_pair("fsspec, hop to s3fs's loop", f"{base}-pc?engine=fsspec&concurrency=16&{q}",
                                      hop_to_s3fs, ("gather",)),
                       aiobotocore_peer(target, f"{run}-aiobotocore/")],
        }
        if args.instructions:
            return instructions(groups, args.instructions, ops[0], count)
        for group, contestants in groups.items():
            if args.group and group not in args.group:
                for c in contestants:
                    c.close()
                continue
            print(f"{group}: {count} x 1 KiB, {rounds} rounds ...", flush=True)
            rates = measure(contestants, count, rounds, ops)
            mine = [c.name for c in contestants if c.name.startswith(("AsyncBucket", "gather"))]
            by_name = {c.name: c for c in contestants}
            peer, goal, judged = TARGETS[group]
            for op in ops:
                sections[f"S3 {group} engine, {op} {count} x 1 KiB, 16 in flight"] = rows(
                    rates[op], rates[op + " cpu"], mine)
                for ours in judged:
                    table_ratio = paired(rates[op][ours], rates[op][peer])
                    print(f"  deciding {ours} {op} / {peer} ...", flush=True)
                    ratio = decide(by_name[ours], by_name[peer], op, count, rounds)
                    cpu_ratio = statistics.median(rates[op + " cpu"][peer]) / statistics.median(rates[op + " cpu"][ours])
                    checks.append({"check": f"{ours} {op} / {peer}", "paired_ratio (decisive run)": spread(ratio),
                                   "paired_ratio (table)": spread(table_ratio),
                                   "cpu_per_op peer / ours": round(cpu_ratio, 3), "target": goal,
                                   "met": ratio[0] >= goal})
            for c in contestants:
                c.close()
        if not partial:
            print(f"{fan} concurrent gets ...", flush=True)
            sections[f"{fan} concurrent AsyncBucket.get (one gather, no semaphore)"] = fan_out(
                {"s3 obstore engine (native)": f"{base}-fan?engine=obstore&sign_payload=false&{q}",
                 "mem:// (inline: it never blocks)": "mem://aio-bench",
                 "file:// (thread-adapted: the bounded pool)": f"file://{tempfile.mkdtemp(prefix='aio-bench-')}"}, fan)
    finally:
        stop()
    sections["targets"] = checks
    extra = {"load_before": load_before, "load_after": loadavg(), "rounds": rounds, "count": count,
             "cpus": os.cpu_count()}
    sections["run (load average: 1-minute, /proc/loadavg)"] = [extra]
    write("aio-partial" if partial else "aio-quick" if args.quick else "aio", sections, extra)
    print(f"load average: {load_before} before, {extra['load_after']} after")
    return 0 if all(c["met"] for c in checks) else 1  # each verdict is its decisive run


if __name__ == "__main__":
    raise SystemExit(main())
