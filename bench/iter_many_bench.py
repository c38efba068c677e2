"""``Bucket.iter_many`` against ``get_many`` on large objects: rate and peak memory.

    .venv/bin/python bench/iter_many_bench.py            # 24 x 8 MiB, 3 rounds
    .venv/bin/python bench/iter_many_bench.py --quick    # 8 x 8 MiB, 1 round

One s3s-fs server (as bench/compare.py starts it), portable[obstore]. Each
contestant reads the same objects in a fresh child process (so that its peak
RSS, ``ru_maxrss``, is its own; allocations made by obstore's Rust code count
too, which tracemalloc would miss), consuming each body as it arrives (a
checksum), and reports objects/s and its peak RSS minus the RSS before the
read. Rounds alternate the order. Writes bench/results/iter_many.json and .md
(iter_many-quick.* with --quick).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import table, write  # noqa: E402

MIB = 1024 * 1024


def child(url: str, keys: list[str], how: str) -> dict[str, float]:
    """Run in the child: read ``keys`` one way, return the rate and the peak RSS growth in MiB."""
    import resource
    import time

    from portable.storage import open_bucket

    bucket = open_bucket(url)
    bucket.get(keys[0])  # connections up, modules loaded: not part of the measure
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    crc = 0
    t0 = time.perf_counter()
    if how == "get_many":
        for data in bucket.get_many(keys).values():
            crc = zlib.crc32(data, crc)
    else:
        limit = int(how.rsplit("=", 1)[1])
        for _key, data in bucket.iter_many(keys, concurrency=limit):
            crc = zlib.crc32(data, crc)
            del data
    elapsed = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"rate": len(keys) / elapsed, "peak_mib": peak - base}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        spec = json.loads(sys.argv[2])
        print(json.dumps(child(spec["url"], spec["keys"], spec["how"])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    count, rounds = (8, 1) if args.quick else (24, 3)
    from bench.compare import start_s3s

    target, stop = start_s3s()
    try:
        env = dict(os.environ, AWS_ACCESS_KEY_ID=target.access_key, AWS_SECRET_ACCESS_KEY=target.secret_key,
                   AWS_REGION=target.region)
        os.environ.update(env)
        url = f"s3://{target.bucket}/im?engine=obstore&sign_payload=false&endpoint_url={target.endpoint}&region={target.region}"
        from portable.storage import open_bucket

        payload = os.urandom(8 * MIB)
        keys = [f"big/{i:03d}" for i in range(count)]
        with open_bucket(url) as bucket:
            bucket.put_many({k: payload for k in keys})
        ways = ["get_many", "iter_many concurrency=16", "iter_many concurrency=4"]
        samples: dict[str, list[dict[str, float]]] = {w: [] for w in ways}
        for r in range(rounds):
            for how in ways if r % 2 == 0 else ways[::-1]:
                spec = json.dumps({"url": url, "keys": keys, "how": how})
                out = subprocess.run([sys.executable, __file__, "--child", spec], env=env, check=True,
                                     capture_output=True, text=True).stdout
                samples[how].append(json.loads(out.strip().splitlines()[-1]))
        rows: list[dict[str, Any]] = []
        for how, got in samples.items():
            rates = [g["rate"] for g in got]
            peaks = [g["peak_mib"] for g in got]
            rows.append({
                "how": how,
                "median_objects_per_s": round(statistics.median(rates), 2),
                "min": round(min(rates), 2),
                "max": round(max(rates), 2),
                "peak_rss_growth_MiB": round(statistics.median(peaks), 1),
                "peak_max": round(max(peaks), 1),
            })
        title = f"s3s-fs {count} x 8 MiB, portable[obstore], body consumed as it arrives"
        print(table(title, rows))
        load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "unknown"
        write("iter_many-quick" if args.quick else "iter_many", {title: rows}, {"load_at_end": load, "rounds": rounds})
    finally:
        stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
