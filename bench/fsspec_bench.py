"""pandas through ``portable://`` (BucketFileSystem) against s3fs, on the bench S3 server, in one run.

    .venv/bin/python bench/fsspec_bench.py            # full run: 9 rounds (a few minutes on 2 busy cores)
    .venv/bin/python bench/fsspec_bench.py --quick    # smoke test: 2 rounds, a quarter of the data, under a minute

Needs the dev dependencies (pandas, pyarrow, fsspec), the AWS adapter (s3fs) and
the obstore adapter (``pip install -r bench/requirements-fsspec.txt``), and the
bench S3 server, bench/s3s-server (s3s-fs 0.14.1 with TCP_NODELAY, built by
``bash scripts/install-emulators.sh`` into ``~/.cache/portable/s3s-server-0.14.1``).
The server stores its files on /dev/shm when there is one.

What it measures: ``pd.read_parquet`` of

* one 64 MiB Parquet file (8 float64 columns, row groups of 128 Ki rows), and
* a hive-partitioned dataset of 200 files (10 ``day=`` folders of 20 files,
  about 64 MiB in all), read as a directory,

by three contestants, each in its best documented idiom:

* ``s3fs``: ``pd.read_parquet("s3://bench/...", storage_options={"key", "secret",
  "client_kwargs": {"endpoint_url", "region_name"}})``, s3fs's defaults otherwise;
* ``portable[fsspec]``: ``pd.read_parquet("portable://PROFILE/...")``, the
  profile's bucket ``s3://bench?engine=fsspec`` (s3fs underneath, its retries
  off, portable's on);
* ``portable[obstore]``: the same with ``?engine=obstore``.

Every contestant reads the same objects. Rounds interleave the contestants,
each round starting one contestant later (A B C, B C A, C A B), so a noisy
neighbour slows all alike. Before every timed read the contestant's listing
cache is dropped (``fs.invalidate_cache()``): each round reads as a fresh
process would, with warm connection pools (instances stay cached, as fsspec
caches them for a user). A warm-up round, not timed, checks that all three
return equal frames and counts the requests each read makes (botocore's events
for s3fs, the driver's calls for portable). Reported: median seconds per read with min-max, MiB/s, and
the paired ratio per round (s3fs seconds / contestant seconds in the same
round: above 1 is faster than s3fs), median with min-max.

Targets: portable[fsspec] >= 0.95x s3fs, portable[obstore] >= 1.0x s3fs, on both.

Writes bench/results/fsspec.json and fsspec.md (a ``--quick`` or ``--only`` run writes nothing).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fsspec  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench._common import RESULTS, table  # noqa: E402

MIB = 1024 * 1024
BUCKET = "bench"
#: the dataset is a bucket of its own: s3s-fs answers a HEAD of a "folder" key (a directory on its disk)
#: with 500 InternalError, where S3 answers 404, and s3fs and pyarrow HEAD a dataset's path first
DATASET_BUCKET = "events"
ACCESS_KEY, SECRET_KEY, REGION = "benchaccesskey", "benchsecretkey", "us-east-1"
TARGETS = {"portable[fsspec]": 0.95, "portable[obstore]": 1.0}
BASELINE = "s3fs"
#: rows of the one file (x 8 float64 columns, plain-encoded, uncompressed: 64 MiB), and the
#: dataset's folders x files per folder x rows per file (4 x 8-byte columns: 64 MiB in all)
FULL = {"big_rows": 1_048_576, "dataset": (10, 20, 10_486)}
#: --quick: the same shapes, a quarter of the size (16 MiB; 50 files)
QUICK = {"big_rows": 262_144, "dataset": (5, 10, 10_486)}


# ------------------------------------------------------------------ the server
@contextmanager
def s3s_server() -> Iterator[str]:
    """bench/s3s-server on a free loopback port, storing in a fresh folder (tmpfs when there is one)."""
    from tests.emulators.harness import free_port, is_listening
    from tests.emulators.s3s_server import binary, cache_dir

    exe = binary()
    if not exe.is_file():
        raise SystemExit(f"{exe} is not built: bash scripts/install-emulators.sh (needs cargo)")
    data = Path(tempfile.mkdtemp(prefix="portable-fsspec-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    (data / BUCKET).mkdir()
    (data / DATASET_BUCKET).mkdir()
    port = free_port()
    log_path = cache_dir() / "fsspec-bench-server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(exe), "--host", "127.0.0.1", "--port", str(port), "--access-key", ACCESS_KEY,
             "--secret-key", SECRET_KEY, str(data)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 20
            while not is_listening(port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the S3 server did not start; see {log_path}")
                time.sleep(0.05)
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            shutil.rmtree(data, ignore_errors=True)


# ------------------------------------------------------------------ the data
def big_table(rows: int) -> pa.Table:
    rng = np.random.default_rng(18)
    return pa.table({f"c{i}": rng.standard_normal(rows) for i in range(8)})


def dataset_tables(folders: int, files: int, rows: int) -> Iterator[tuple[str, pa.Table]]:
    rng = np.random.default_rng(24)
    n = 0
    for d in range(folders):
        for f in range(files):
            ids = np.arange(n, n + rows, dtype="int64")
            n += rows
            table = pa.table({"id": ids, "x": rng.standard_normal(rows), "y": rng.standard_normal(rows),
                              "z": rng.integers(0, 1 << 40, rows)})
            yield f"day=2026-01-{d + 1:02d}/part-{f:03d}.parquet", table


def parquet_bytes(table: pa.Table, row_group_size: int | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    # random numbers do not compress: plain and uncompressed, so the file is the size of its values
    pq.write_table(table, sink, row_group_size=row_group_size, compression="none", use_dictionary=False)
    return sink.getvalue().to_pybytes()


def upload(s3: Any, shape: dict[str, Any]) -> dict[str, int]:
    """Write the file and the dataset (not timed); return their sizes in bytes."""
    big = parquet_bytes(big_table(shape["big_rows"]), row_group_size=131_072)
    s3.pipe_file(f"{BUCKET}/big.parquet", big)
    folders, files, rows = shape["dataset"]
    total = 0
    items = {}
    for key, part in dataset_tables(folders, files, rows):
        items[f"{DATASET_BUCKET}/{key}"] = data = parquet_bytes(part)
        total += len(data)
    s3.pipe(items)
    return {"big.parquet": len(big), "dataset": total, "dataset_files": len(items)}


# ------------------------------------------------------------------ the contestants
def s3fs_options(endpoint: str) -> dict[str, Any]:
    return {"key": ACCESS_KEY, "secret": SECRET_KEY, "client_kwargs": {"endpoint_url": endpoint, "region_name": REGION}}


def write_config(endpoint: str) -> Path:
    """A portable.toml with one profile per engine, both naming the bench bucket."""
    path = Path(tempfile.mkdtemp(prefix="portable-fsspec-bench-")) / "portable.toml"
    query = f"region={REGION}&endpoint_url={endpoint}"
    path.write_text(
        f'[profiles.bench_fsspec]\nstorage = "s3://{BUCKET}?engine=fsspec&{query}"\n\n'
        f'[profiles.bench_obstore]\nstorage = "s3://{BUCKET}?engine=obstore&{query}"\n\n'
        f'[profiles.events_fsspec]\nstorage = "s3://{DATASET_BUCKET}?engine=fsspec&{query}"\n\n'
        f'[profiles.events_obstore]\nstorage = "s3://{DATASET_BUCKET}?engine=obstore&{query}"\n'
    )
    return path


def contestants(endpoint: str, what: str) -> dict[str, tuple[str, dict[str, Any] | None]]:
    """name -> (URL, storage_options) of ``what``: ``big.parquet`` or the dataset (a whole bucket)."""
    if what == "dataset":
        return {
            "s3fs": (f"s3://{DATASET_BUCKET}", s3fs_options(endpoint)),
            "portable[fsspec]": ("portable://events_fsspec/", None),
            "portable[obstore]": ("portable://events_obstore/", None),
        }
    return {
        "s3fs": (f"s3://{BUCKET}/{what}", s3fs_options(endpoint)),
        "portable[fsspec]": (f"portable://bench_fsspec/{what}", None),
        "portable[obstore]": (f"portable://bench_obstore/{what}", None),
    }


def drop_empty_delimiter(params: dict[str, Any], **_: Any) -> None:
    """s3s-fs takes ``delimiter=`` (empty) for a delimiter, where S3 takes it for none; s3fs's
    recursive ``find`` sends it, so without this s3fs finds no files in a dataset on s3s-fs."""
    if params.get("Delimiter") == "":
        del params["Delimiter"]


def reader(url: str, options: dict[str, Any] | None) -> Callable[[], pd.DataFrame]:
    fs, _ = fsspec.core.url_to_fs(url, **(options or {}))  # the instance pandas gets from fsspec's cache
    if url.startswith("s3://"):
        fs.connect()
        fs.s3.meta.events.register("before-parameter-build.s3.ListObjectsV2", drop_empty_delimiter)

    def read() -> pd.DataFrame:
        fs.invalidate_cache()
        return pd.read_parquet(url, storage_options=options)

    return read


#: request names, as botocore (s3fs) and a portable driver call them, in one vocabulary
REQUESTS = {"ListObjectsV2": "LIST", "HeadObject": "HEAD", "HeadBucket": "HEAD bucket", "GetObject": "GET",
            "list_page": "LIST", "head": "HEAD", "get_range": "GET", "get": "GET"}


def counted_read(name: str, url: str, options: dict[str, Any] | None,
                 read: Callable[[], pd.DataFrame]) -> tuple[pd.DataFrame, str]:
    """One read (the warm-up, not timed) and the requests it made: botocore's events for s3fs,
    the portable driver's calls (one request each, when nothing fails) for portable."""
    fs, _ = fsspec.core.url_to_fs(url, **(options or {}))
    counts: Counter[str] = Counter()
    if name == BASELINE:
        def on_call(model: Any, **_: Any) -> None:
            counts[REQUESTS.get(model.name, model.name)] += 1

        fs.s3.meta.events.register("before-call.s3", on_call)
        try:
            df = read()
        finally:
            fs.s3.meta.events.unregister("before-call.s3", on_call)
    else:
        driver = fs.bucket.driver
        ops = ("get", "get_range", "head", "list_page")

        def counting(op: str, call: Callable[..., Any]) -> Callable[..., Any]:
            def run(*args: Any, **kwargs: Any) -> Any:
                counts[REQUESTS[op]] += 1
                return call(*args, **kwargs)
            return run

        for op in ops:
            setattr(driver, op, counting(op, getattr(driver, op)))
        try:
            df = read()
        finally:
            for op in ops:
                delattr(driver, op)
    return df, ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


# ------------------------------------------------------------------ measuring
def rounds_of(readers: dict[str, Callable[[], pd.DataFrame]], rounds: int) -> dict[str, list[float]]:
    """Seconds per read, per contestant, in ``rounds`` rotated rounds (A B C, B C A, C A B, ...)."""
    times: dict[str, list[float]] = {name: [] for name in readers}
    names = list(readers)
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            t0 = time.perf_counter()
            readers[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def warm_up(readers: dict[str, Callable[[], pd.DataFrame]], urls: dict[str, tuple[str, dict[str, Any] | None]],
            title: str, rows: int) -> dict[str, str]:
    """One untimed read per contestant: the frames must be equal; returns the requests each made."""
    frames, requests = {}, {}
    for name, read in readers.items():
        frames[name], requests[name] = counted_read(name, *urls[name], read)
    base = frames[BASELINE]
    if len(base) != rows:
        raise SystemExit(f"{title}: {BASELINE} read {len(base)} rows, not {rows}")
    for name, df in frames.items():
        if name != BASELINE:
            pd.testing.assert_frame_equal(df, base, obj=f"{title}: {name} vs {BASELINE}")
    return requests


def rows(times: dict[str, list[float]], size: int, requests: dict[str, str]) -> list[dict[str, Any]]:
    base = times[BASELINE]
    out = []
    for name, values in times.items():
        med = statistics.median(values)
        paired = [b / t for b, t in zip(base, values, strict=True)]
        out.append({
            "contestant": name,
            "median_s": round(med, 4),
            "min_s": round(min(values), 4),
            "max_s": round(max(values), 4),
            "MiB_per_s": round(size / MIB / med, 1),
            "paired_vs_s3fs": round(statistics.median(paired), 3),
            "paired_min": round(min(paired), 3),
            "paired_max": round(max(paired), 3),
            "requests_per_read": requests.get(name, ""),
        })
    return out


def verdicts(sections: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for title, rws in sections.items():
        for r in rws:
            goal = TARGETS.get(r["contestant"])
            if goal is not None:
                out.append({"check": f"{title}: {r['contestant']} / s3fs", "paired_ratio": r["paired_vs_s3fs"],
                            "spread": f"{r['paired_min']}-{r['paired_max']}", "target": goal,
                            "met": r["paired_vs_s3fs"] >= goal})
    return out


def write_results(name: str, sections: dict[str, list[dict[str, Any]]], checks: list[dict[str, Any]],
                  meta: dict[str, Any]) -> None:
    import json

    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps({"meta": meta, "targets": checks, "results": sections}, indent=2))
    lines = [f"# {name}", "", METHOD, "", f"Run: {meta}", "", "### targets (paired ratio per round: s3fs s / contestant s)", "",
             "| check | paired ratio (median) | min-max | target | met |", "|---|---|---|---|---|"]
    lines += [f"| {c['check']} | {c['paired_ratio']} | {c['spread']} | {c['target']} | {'yes' if c['met'] else 'NO'} |"
              for c in checks]
    lines.append("")
    lines += [table(title, rws) for title, rws in sections.items()]
    lines += ["", NOTES, ""]
    (RESULTS / f"{name}.md").write_text("\n".join(lines))


METHOD = (
    "Method: bench/fsspec_bench.py. `pd.read_parquet` on the bench S3 server (bench/s3s-server, s3s-fs "
    "0.14.1, loopback, files on tmpfs), three contestants in one process: s3fs in its documented pandas "
    "idiom (`storage_options` with `client_kwargs.endpoint_url`), and `portable://PROFILE/...` on the "
    "fsspec engine and on the obstore engine. Rotated interleaved rounds; each read starts with the "
    "contestant's listing cache dropped and its connection pool warm; a warm-up round checks that all "
    "three frames are equal and counts the requests of one read. Ratios are paired per round (s3fs seconds / contestant seconds), median and "
    "min-max; above 1 is faster than s3fs."
)


NOTES = (
    "Notes. The dataset is a bucket of its own (`s3://events`, `portable://PROFILE/`): s3s-fs answers a "
    "HEAD of a \"folder\" key with 500 InternalError where S3 answers 404, and both s3fs and portable HEAD "
    "a dataset's path before listing it. s3s-fs also takes an empty `delimiter=` for a delimiter (S3: none), "
    "which empties s3fs's recursive `find`; the s3fs contestant drops an empty Delimiter in a botocore "
    "`before-parameter-build` hook (a dict lookup per LIST). `requests_per_read` counts one untimed read: "
    "botocore's `before-call` events for s3fs, the portable driver's get/get_range/head/list_page calls "
    "for portable (one request each when nothing is retried). Absolute times on this shared 2-core machine "
    "mean little; the paired ratios do, and the load is in the run line."
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke test: 2 rounds of a quarter of the data, under a minute")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds (default 9; 2 with --quick)")
    parser.add_argument("--only", default="", help="comma-separated contestants to run (default all; s3fs always runs)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: stop the server
    rounds = args.rounds or (2 if args.quick else 9)
    started = time.monotonic()
    load_before = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    with s3s_server() as endpoint:
        os.environ.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_REGION=REGION,
                          AWS_DEFAULT_REGION=REGION)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                     "PORTABLE_PROFILE", "PORTABLE_STORAGE_URL", "PORTABLE_STORAGE_ENGINE"):
            os.environ.pop(name, None)
        os.environ["PORTABLE_CONFIG"] = str(write_config(endpoint))
        s3 = fsspec.filesystem("s3", **s3fs_options(endpoint))
        shape = QUICK if args.quick else FULL
        sizes = upload(s3, shape)
        print(f"uploaded: {sizes}", flush=True)
        plan = {
            f"one {sizes['big.parquet'] / MIB:.0f} MiB Parquet file": ("big.parquet", sizes["big.parquet"], shape["big_rows"]),
            f"{sizes['dataset_files']}-file partitioned dataset ({sizes['dataset'] / MIB:.0f} MiB)":
                ("dataset", sizes["dataset"], shape["dataset"][0] * shape["dataset"][1] * shape["dataset"][2]),
        }
        sections: dict[str, list[dict[str, Any]]] = {}
        for title, (path, size, nrows) in plan.items():
            chosen = {n.strip() for n in args.only.split(",") if n.strip()} | {BASELINE}
            urls = {name: where for name, where in contestants(endpoint, path).items() if not args.only or name in chosen}
            readers = {name: reader(url, opts) for name, (url, opts) in urls.items()}
            requests = warm_up(readers, urls, title, nrows)
            sections[title] = rows(rounds_of(readers, rounds), size, requests)
            print(table(title, sections[title]), flush=True)
    checks = verdicts(sections)
    for c in checks:
        print(f"  {c['check']}: {c['paired_ratio']}x ({c['spread']}), target {c['target']}x: {'met' if c['met'] else 'NOT MET'}")
    load_after = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    import platform

    meta = {"python": platform.python_version(), "machine": platform.machine(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rounds": rounds, "quick": args.quick,
            "loadavg_before": " ".join(load_before), "loadavg_after": " ".join(load_after),
            "seconds": round(time.monotonic() - started, 1), "sizes": sizes,
            "versions": {m.__name__: m.__version__ for m in (pd, pa, fsspec)}}
    if args.quick or args.only:
        print(f"not written (--quick / --only runs are smoke tests); {meta['seconds']} s")
    else:
        write_results("fsspec", sections, checks, meta)
        print(f"wrote {RESULTS / 'fsspec'}.md and .json ({meta['seconds']} s)")
    return 0 if all(c["met"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
