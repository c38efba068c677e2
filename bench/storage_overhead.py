"""The portable layer's cost per call: Bucket.put/get on mem:// against the raw driver.

    .venv/bin/python bench/storage_overhead.py [--objects 2000] [--rounds 15]

Both sides store the same 2,000 x 1 KiB objects in the same in-memory store
class; the difference per call is what validation, the retry guard and the
breaker tally cost. Target: <= 5 us per call.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(__file__))

from _common import interleave, summarise, write

from portable.driver.storage import WriteOptions
from portable.embedded.memory import MemoryStorage
from portable.storage import Bucket


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    keys = [f"objects/{i:05d}.bin" for i in range(args.objects)]
    payload = os.urandom(1024)
    raw = MemoryStorage()
    bucket = Bucket(MemoryStorage())
    plain = WriteOptions()

    def raw_put() -> int:
        for k in keys:
            raw.put(k, payload, plain)
        return len(keys)

    def portable_put() -> int:
        for k in keys:
            bucket.put(k, payload)
        return len(keys)

    def raw_get() -> int:
        for k in keys:
            raw.get(k)
        return len(keys)

    def portable_get() -> int:
        for k in keys:
            bucket.get(k)
        return len(keys)

    puts = interleave({"raw driver put": raw_put, "Bucket.put": portable_put}, args.rounds)
    gets = interleave({"raw driver get": raw_get, "Bucket.get": portable_get}, args.rounds)
    overhead = {
        "put_us_per_call": round(1e6 / statistics.median(puts["Bucket.put"]) - 1e6 / statistics.median(puts["raw driver put"]), 3),
        "get_us_per_call": round(1e6 / statistics.median(gets["Bucket.get"]) - 1e6 / statistics.median(gets["raw driver get"]), 3),
        "target_us": 5.0,
    }
    write(
        "storage_overhead",
        {
            f"put {args.objects} x 1 KiB on mem://": summarise(puts, "raw driver put"),
            f"get {args.objects} x 1 KiB on mem://": summarise(gets, "raw driver get"),
        },
        {"overhead": overhead},
    )
    print("portable layer overhead per call (us):", overhead)


if __name__ == "__main__":
    main()
