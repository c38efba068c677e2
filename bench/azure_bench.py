"""Azure Blob get/put: portable ``az://`` against raw adlfs and the raw blob client, on Azurite.

    .venv/bin/python bench/azure_bench.py [--rounds 7] [--ops 150] [--sizes 1024,1048576]

Three contestants per operation and object size, run round-robin in one
process against one Azurite (started here on 127.0.0.1 through tests/emulators
and stopped by PID afterwards, or the one named by
``AZURE_STORAGE_CONNECTION_STRING`` if that is set):

* ``portable``: ``Bucket.get`` / ``Bucket.put`` on ``az://`` (validation, the
  retry guard and breaker, adlfs's loop and client with SDK retries off);
* ``adlfs``: ``AzureBlobFileSystem.cat_file`` / ``pipe_file``, as adlfs ships;
* ``blob-sdk``: the synchronous ``azure.storage.blob`` ContainerClient
  (``download_blob().readall()`` / ``upload_blob(overwrite=True)``).

Each round runs every contestant once, in an order that rotates; the ratio of
portable to each raw client is taken per round (paired) and its median
reported, so that load drifting between rounds cancels out. The verdict is
the lower of the two, i.e. portable against the faster raw client; the target
is >= 0.95. Client CPU per operation (this process, all threads) is shown too.
Results go to ``bench/results/azure_bench.json`` and ``.md``. Azurite (one Node.js process
on the same two cores) bounds every rate, so the figures compare clients,
not Azure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import write

TARGET = 0.95
RAW = ("adlfs", "blob-sdk")


def rotate(contestants: dict[str, Callable[[], int]], rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Run every contestant once per round, in an order that rotates each round.

    Returns per round: operations per second, and client CPU microseconds per
    operation (this process, all threads), per contestant.
    """
    names = list(contestants)
    rates: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            c0, t0 = time.process_time(), time.perf_counter()
            ops = contestants[name]()
            wall, used = time.perf_counter() - t0, time.process_time() - c0
            rates[name].append(ops / wall)
            cpu[name].append(used / ops * 1e6)
    return rates, cpu


def _azurite() -> tuple[str, Callable[[], None]]:
    """A connection string, and how to stop the emulator if this script started it."""
    existing = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    if existing:
        return existing, lambda: None
    from tests.emulators import create

    emulator = create("azurite")
    ok, reason = emulator.available()
    if not ok:
        raise SystemExit(f"Azurite is not installed: {reason}")
    info = emulator.start()
    return info.endpoints["connection_string"], emulator.stop


def run(rounds: int, ops: int, sizes: list[int]) -> dict[str, Any]:
    from adlfs import AzureBlobFileSystem
    from azure.storage.blob import BlobServiceClient

    from portable.config import Profile
    from portable.storage import open_bucket

    conn, stop = _azurite()
    env = "PORTABLE_BENCH_AZURE_CONNECTION_STRING"
    os.environ[env] = conn
    container = f"bench-{uuid.uuid4().hex[:10]}"
    service = BlobServiceClient.from_connection_string(conn)
    service.create_container(container)
    raw = service.get_container_client(container)
    fs = AzureBlobFileSystem(connection_string=conn, skip_instance_cache=True)
    url = f"az://{container}?engine=fsspec&connection_string_env={env}"
    bucket = open_bucket(url, profile=Profile(name="bench", storage=url, queue="mem://", jobs="local://"))
    sections: dict[str, list[dict[str, Any]]] = {}
    verdicts: dict[str, float] = {}
    try:
        scenarios = [(size, "hot") for size in sizes] + [(size, "cold") for size in sizes if size <= 64 * 1024]
        for size, keyspace in scenarios:
            data = os.urandom(size)
            n = max(3, ops if size <= 64 * 1024 else ops // 10)
            per_contestant = n * (rounds + 1)

            def key_source(
                name: str, op: str, size: int = size, keyspace: str = keyspace, per_contestant: int = per_contestant
            ) -> list[str]:
                # hot: 10 keys read and written over and over; cold: every operation a key never used before.
                if keyspace == "hot":
                    return [f"s{size}/hot/k{i % 10}" for i in range(per_contestant)]
                return [f"s{size}/cold/{op}/{name}/k{i}" for i in range(per_contestant)]

            seed = [seed_key for who in (*RAW, "portable") for seed_key in key_source(who, "get")]
            bucket.put_many(dict.fromkeys(seed, data))

            def many(fn: Callable[[str], object], keys: list[str], n: int = n) -> Callable[[], int]:
                position = iter(range(0, len(keys), n))

                def go() -> int:
                    start = next(position)
                    for key in keys[start : start + n]:
                        fn(key)
                    return n

                return go

            def put_with(fn: Callable[[str, bytes], object], data: bytes = data) -> Callable[[str], object]:
                def put(blob_key: str) -> object:
                    return fn(blob_key, data)

                return put

            contestants = {
                "get": {
                    "portable": many(bucket.get, key_source("portable", "get")),
                    "adlfs": many(lambda k: fs.cat_file(f"{container}/{k}"), key_source("adlfs", "get")),
                    "blob-sdk": many(lambda k: raw.download_blob(k).readall(), key_source("blob-sdk", "get")),
                },
                "put": {
                    "portable": many(put_with(bucket.put), key_source("portable", "put")),
                    "adlfs": many(put_with(lambda k, d: fs.pipe_file(f"{container}/{k}", d)), key_source("adlfs", "put")),
                    "blob-sdk": many(
                        put_with(lambda k, d: raw.upload_blob(k, d, overwrite=True)), key_source("blob-sdk", "put")
                    ),
                },
            }
            for op, fns in contestants.items():
                for fn in fns.values():  # warm connections and code paths (the spare round of keys)
                    fn()
                rates, cpu = rotate(fns, rounds)
                # Paired per round, so that load that drifts between rounds cancels out.
                paired = {
                    raw_name: statistics.median(p / q for p, q in zip(rates["portable"], rates[raw_name], strict=True))
                    for raw_name in RAW
                }
                rows = []
                for name, values in rates.items():
                    med = statistics.median(values)
                    rows.append(
                        {
                            "contestant": name,
                            "median_ops_per_s": round(med, 1),
                            "min": round(min(values), 1),
                            "max": round(max(values), 1),
                            "MiB_per_s": round(med * size / 2**20, 2),
                            "client_cpu_us_per_op": round(statistics.median(cpu[name])),
                            "portable_vs_this (paired median)": round(paired[name], 3) if name in RAW else "",
                        }
                    )
                title = f"{op} {size} B, {keyspace} keys ({n} ops x {rounds} rounds)"
                sections[title] = rows
                verdicts[title] = round(min(paired.values()), 3)
                print(
                    f"{title}: portable/adlfs = {paired['adlfs']:.3f}, portable/blob-sdk = {paired['blob-sdk']:.3f}",
                    flush=True,
                )
    finally:
        bucket.close()
        try:
            service.delete_container(container)
        finally:
            stop()
    return {"sections": sections, "verdicts": verdicts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=61)
    parser.add_argument("--ops", type=int, default=20, help="operations per round (a tenth for objects over 64 KiB)")
    parser.add_argument("--sizes", default="1024,1048576", help="object sizes in bytes, comma-separated")
    args = parser.parse_args()
    result = run(args.rounds, args.ops, [int(s) for s in args.sizes.split(",")])
    verdicts = result["verdicts"]
    write(
        "azure_bench",
        result["sections"],
        {"target_ratio_vs_fastest_raw": TARGET, "portable_vs_fastest_raw": verdicts},
    )
    worst = min(verdicts.values())
    print(f"worst portable/fastest-raw ratio: {worst:.3f} (target >= {TARGET})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
