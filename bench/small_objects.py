"""The small-object path, focused: portable[obstore] against obstore and OpenDAL (both idioms each) and raw HTTP.

    .venv/bin/python bench/small_objects.py                 # 2,000 x 1 KiB, 9 rounds, put and get
    .venv/bin/python bench/small_objects.py --quick         # 500 objects, 3 rounds
    .venv/bin/python bench/small_objects.py --profile get   # cProfile of portable's get_many (both threads)
    .venv/bin/python bench/small_objects.py --size 8388608 --count 20 --rounds 5   # the large-object path

One s3s-fs server (bench/s3s-server, as bench/compare.py starts it); every
contestant moves the same batch with 16 objects in flight, in interleaved
rounds (each round starts one contestant later). Per contestant: the median
rate with its min-max, and CPU microseconds per object (this process's CPU
time, which the client spends; the server runs in another process), and per
peer the paired ratio portable/peer, one per round, as median (min-max): a
ratio of two figures taken seconds apart in the same round, so a noisy
neighbour moves both.

Writes bench/results/small_objects.json and .md (small_objects-quick.* with --quick).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import _compare_clients as cc  # noqa: E402
from bench._common import table, write  # noqa: E402
from bench.compare import start_s3s  # noqa: E402

KIB = 1024
PORTABLE = "portable[obstore]"


def contestants(t: cc.Target, run: str) -> list[cc.Client]:
    os.environ.update(AWS_ACCESS_KEY_ID=t.access_key, AWS_SECRET_ACCESS_KEY=t.secret_key, AWS_REGION=t.region)
    q = f"endpoint_url={t.endpoint}&region={t.region}&concurrency={cc.IN_FLIGHT}"
    return [
        cc.portable_client(PORTABLE, f"s3://{t.bucket}/{run}-po?engine=obstore&sign_payload=false&{q}"),
        cc.obstore_client(t, f"{run}-obt/", "tasks"),
        cc.obstore_client(t, f"{run}-obp/", "pool"),
        cc.opendal_client(t, f"{run}-odt/", "tasks"),
        cc.opendal_client(t, f"{run}-odp/", "pool"),
        cc.blocking_client(t, f"{run}-obw/", "obstore", "16 worker threads"),
        cc.blocking_client(t, f"{run}-odw/", "OpenDAL", "16 worker threads"),
        cc.raw_http_client(t, f"{run}-raw/"),
    ]


def rounds_of(runs: dict[str, Callable[[], None]], count: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    """(objects/s, CPU us per object) of each contestant per round, interleaved, rotating the start."""
    out: dict[str, list[tuple[float, float]]] = {n: [] for n in runs}
    names = list(runs)
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            c0, t0 = time.process_time(), time.perf_counter()
            runs[name]()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            out[name].append((count / wall, cpu / count * 1e6))
    return out


def summary(samples: dict[str, list[tuple[float, float]]], base: str) -> list[dict[str, Any]]:
    rows = []
    mine = [rate for rate, _ in samples[base]]
    for name, values in sorted(samples.items(), key=lambda kv: -statistics.median(v[0] for v in kv[1])):
        rates = [rate for rate, _ in values]
        cpus = [cpu for _, cpu in values]
        paired = [a / b for a, b in zip(mine, rates, strict=True)]
        rows.append({
            "client": name,
            "median_ops_per_s": round(statistics.median(rates), 1),
            "min": round(min(rates), 1),
            "max": round(max(rates), 1),
            "cpu_us_per_obj": round(statistics.median(cpus), 1),
            "portable_over_this": "" if name == base else
            f"{statistics.median(paired):.3f} ({min(paired):.3f}-{max(paired):.3f})",
        })
    return rows


def profile(client: cc.Client, op: str, items: dict[str, bytes], repeat: int) -> str:
    """cProfile of ``repeat`` batches of portable, on the calling thread and on obstore's loop thread."""
    from portable_obstore._loop import _loop

    loop = _loop()
    on_loop = cProfile.Profile()
    here = cProfile.Profile()
    loop.call_soon_threadsafe(on_loop.enable)
    time.sleep(0.05)
    here.enable()
    for _ in range(repeat):
        client.put(items) if op == "put" else client.get(list(items))
    here.disable()
    loop.call_soon_threadsafe(on_loop.disable)
    time.sleep(0.05)
    text = io.StringIO()
    for title, prof in (("calling thread", here), ("obstore loop thread", on_loop)):
        text.write(f"\n==== {title}\n")
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(18)
    return text.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--count", type=int, default=None)
    parser.add_argument("--size", type=int, default=KIB)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--profile", choices=["get", "put"], default=None)
    args = parser.parse_args()
    count = args.count or (500 if args.quick else 2000)
    rounds = args.rounds or (3 if args.quick else 9)
    payload = os.urandom(args.size)
    items = {f"s/{i:05d}": payload for i in range(count)}
    keys = list(items)
    target, stop = start_s3s()
    clients: list[cc.Client] = []
    try:
        clients = contestants(target, os.urandom(3).hex())
        for c in clients:
            c.put(items)  # warm every connection pool; get reads these
        if args.profile:
            print(profile(clients[0], args.profile, items, max(2, rounds)))
            return 0
        load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
        sections: dict[str, list[dict[str, Any]]] = {}
        for op in ("put", "get"):
            runs: dict[str, Callable[[], None]] = {}
            for c in clients:
                runs[c.name] = (lambda c=c: c.put(items)) if op == "put" else (lambda c=c: c.get(keys))
            title = f"s3s-fs {count} x {args.size} B {op}"
            sections[title] = summary(rounds_of(runs, count, rounds), PORTABLE)
            print(table(title, sections[title]), flush=True)
        after = Path("/proc/loadavg").read_text().split()[:3] if load else []
        print(f"load before {load}, after {after}")
        name = "small_objects" if args.size == KIB else f"small_objects-{args.size}"
        write(f"{name}-quick" if args.quick else name, sections,
              {"load_before": load, "load_after": after, "count": count, "size": args.size, "rounds": rounds})
    finally:
        for c in clients:
            c.close()
        stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
