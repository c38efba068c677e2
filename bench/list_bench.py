"""Listing at scale: portable ``Bucket.list`` against the obvious idiom of each store, time and peak RSS.

    .venv/bin/python bench/list_bench.py            # 100,000 and 1,000,000 keys (file://, mem://), 100,000 (S3)
    .venv/bin/python bench/list_bench.py --quick    # 10,000 keys everywhere, one round: a smoke run

Every listing runs in a fresh subprocess, so each contestant's peak RSS (``VmHWM``) is its own;
rounds are interleaved (A, B, C, A, B, C, ...) and each figure is the median with min-max.
Every contestant reads each key's size (and where it is cheap, its modification time), as a
listing must. The contestants:

* file:// (one folder of N empty files): ``sorted scandir`` (``os.scandir`` of the tree, stat of
  each entry, ``sorted`` by key: the fair peer for a sorted listing; a sorted *recursive* scandir
  is the same code on a tree), ``scandir, unsorted`` (the floor: no order promised), and
  ``portable`` (``Bucket.list`` of 1,000-key pages). ``portable, again`` is a second listing in
  the same process: the folder's sorted snapshot is reused.
* mem:// (N keys): ``sorted(dict)`` (keys of a dict sorted, each value's length read) and
  ``portable``. RSS here is the listing's own: the peak above the filled store (the peak is reset
  through ``/proc/self/clear_refs`` before listing).
* S3, moto and the bench S3 server (bench/s3s-server, s3s-fs; prebuilt in
  ``~/.cache/portable/s3s-server-0.14.1``): ``boto3 paginator`` (``list_objects_v2``, 1,000 per
  page) and ``portable[fsspec]`` / ``portable[obstore]`` (``Bucket.list``).

The file:// trees are made once (``os.open`` relative to the folder, not through portable) and
kept under ``~/.cache/portable/list-bench/flat-N``; the time it took is recorded beside them. The
s3s-fs store is a folder too: its objects are written there directly, the same way. moto is
filled with 16 threads of ``put_object``.

Writes bench/results/list.json and list.md (list-quick.* with ``--quick``), with the load
(``/proc/loadavg``) before and after.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fcntl
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS  # noqa: E402

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "portable"
TREES = CACHE / "list-bench"
S3S_BIN = CACHE / "s3s-server-0.14.1" / "target" / "release" / "portable-s3s-server"
S3S_KEY, S3S_SECRET = "benchaccesskey", "benchsecretkey"


def key_of(i: int) -> str:
    return f"obj-{i:07d}"


# ------------------------------------------------------------------ fixtures
def make_files(folder: Path, count: int) -> float:
    """``count`` empty files in ``folder``, written with os.open relative to it; the seconds it took."""
    folder.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(count):
            os.close(os.open(key_of(i), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    return time.perf_counter() - began


def flat_tree(count: int) -> tuple[Path, float | None]:
    """The cached folder of ``count`` files, and the seconds making it took now (None: it was cached)."""
    folder = TREES / f"flat-{count}"
    done = TREES / f"flat-{count}.made"
    if done.exists():
        return folder, None
    shutil.rmtree(folder, ignore_errors=True)
    took = make_files(folder, count)
    done.write_text(f"{took:.1f} s to create {count} files\n")
    return folder, took


# ------------------------------------------------------------------ the children: one listing each
def vm(field: str) -> int:
    """A ``/proc/self/status`` figure in KiB (VmHWM: peak RSS; VmRSS: now)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def cpu_now() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS


def child(spec: dict[str, Any]) -> dict[str, Any]:
    kind, who, count = spec["kind"], spec["who"], spec["count"]
    out: dict[str, Any] = {}
    if kind == "s3":
        listing = s3_lister(who, spec)  # clients made and libraries imported before the baseline
    cpu_before = cpu_now()
    if kind == "file":
        root = spec["root"]
        if who == "portable":
            from portable.storage import open_bucket

            bucket = open_bucket(f"file://{root}")
            before = vm("VmRSS")
            t0 = time.perf_counter()
            n = sum(1 for e in bucket.list() if e.size >= 0)
            out["seconds"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            again = sum(1 for e in bucket.list() if e.size >= 0)
            out["again_seconds"] = time.perf_counter() - t0
            assert again == n
        else:
            before = vm("VmRSS")
            t0 = time.perf_counter()
            n = scandir_listing(root, sort=(who == "sorted scandir"))
            out["seconds"] = time.perf_counter() - t0
    elif kind == "mem":
        n, before, seconds = mem_listing(who, count, out)
        out["seconds"] = seconds
    else:
        before = vm("VmRSS")
        t0 = time.perf_counter()
        n = listing()
        out["seconds"] = time.perf_counter() - t0
    assert n == count, f"{who} listed {n} keys, not {count}"
    out["cpu_s"] = cpu_now() - out.pop("cpu_at_listing", cpu_before)  # mem://: from after the fill
    peak = out.pop("first_peak_kib", None) or vm("VmHWM")
    out["peak_rss_mb"] = peak / 1024
    out["listing_rss_mb"] = (peak - before) / 1024
    return out


def scandir_listing(root: str, sort: bool) -> int:
    """Every file under ``root`` with its size and mtime: sorted by key, or in directory order."""
    found: list[tuple[str, int, int]] = []

    def walk(folder: str, rel: str) -> None:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    walk(entry.path, rel + entry.name + "/")
                elif entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    found.append((rel + entry.name, st.st_size, st.st_mtime_ns))

    if not sort:  # the floor: directory order, nothing kept
        n = 0
        with os.scandir(root) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    n += entry.stat(follow_symlinks=False).st_size >= 0
        return n
    walk(root, "")
    found.sort()
    return sum(1 for _key, size, _mtime in found if size >= 0)


def mem_listing(who: str, count: int, out: dict[str, Any]) -> tuple[int, int, float]:
    """Fill ``count`` keys, reset the peak, list; returns (keys, RSS before listing, seconds).

    portable lists twice: the first listing also sorts the keys into the index (as ``sorted``
    does for the dict); the second (``again_*`` in ``out``, its own peak) reads the index as is.
    """
    if who == "portable":
        from portable.driver.storage import WriteOptions
        from portable.embedded.memory import MemoryStorage
        from portable.storage import Bucket

        driver = MemoryStorage()
        options = WriteOptions()
        for i in range(count):
            driver.put(key_of(count - 1 - i), b"", options)  # written out of order, as a real bucket is
        bucket = Bucket(driver)
        out["cpu_at_listing"] = cpu_now()
        reset_peak()
        before = vm("VmRSS")
        t0 = time.perf_counter()
        n = sum(1 for e in bucket.list() if e.size >= 0)
        seconds = time.perf_counter() - t0
        first_peak = vm("VmHWM")
        reset_peak()
        again_before = vm("VmRSS")
        t0 = time.perf_counter()
        assert sum(1 for e in bucket.list() if e.size >= 0) == n
        out["again_seconds"] = time.perf_counter() - t0
        out["again_listing_rss_mb"] = (vm("VmHWM") - again_before) / 1024
        Path("/proc/self/clear_refs").write_text("5")
        out["first_peak_kib"] = first_peak  # the caller's VmHWM reading would see the second listing's
        return n, before, seconds
    store = {key_of(count - 1 - i): b"" for i in range(count)}
    out["cpu_at_listing"] = cpu_now()
    reset_peak()
    before = vm("VmRSS")
    t0 = time.perf_counter()
    n = sum(1 for k in sorted(store) if len(store[k]) >= 0)
    return n, before, time.perf_counter() - t0


def s3_lister(who: str, spec: dict[str, Any]) -> Callable[[], int]:
    """A function that lists the bucket once with ``who``'s client (made here), returning the key count."""
    os.environ.update(AWS_ACCESS_KEY_ID=spec["access_key"], AWS_SECRET_ACCESS_KEY=spec["secret_key"])
    endpoint, bucket_name = spec["endpoint"], spec["bucket"]
    if who == "boto3 paginator":
        import boto3
        from botocore.config import Config

        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          config=Config(s3={"addressing_style": "path"}))

        s3.list_objects_v2(Bucket=bucket_name, MaxKeys=1)  # warm: connection made, lazy imports done

        def paginate() -> int:
            pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket_name, PaginationConfig={"PageSize": 1000})
            return sum(sum(1 for item in page.get("Contents", ()) if item["Size"] >= 0) for page in pages)

        return paginate
    from portable.config import Profile
    from portable.storage import open_bucket

    engine = "obstore" if "obstore" in who else "fsspec"
    url = f"s3://{bucket_name}?engine={engine}&endpoint_url={endpoint}&region=us-east-1"
    bucket = open_bucket(url, profile=Profile(name="bench", storage=url, queue="mem://bench", jobs="local://"))
    bucket.list_page(page_size=1)  # warm, as for boto3
    return lambda: sum(1 for e in bucket.list() if e.size >= 0)


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"{spec['who']} on {spec['kind']} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ S3 servers
def start_s3s(data: Path) -> tuple[str, subprocess.Popen[bytes]]:
    from tests.emulators.harness import free_port, is_listening

    if not S3S_BIN.exists():
        raise SystemExit(f"{S3S_BIN} is not built: bash scripts/install-emulators.sh (or bench/compare.py --build-server)")
    port = free_port()
    proc = subprocess.Popen(
        [str(S3S_BIN), "--host", "127.0.0.1", "--port", str(port), "--access-key", S3S_KEY, "--secret-key",
         S3S_SECRET, str(data)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    deadline = time.monotonic() + 20
    while not is_listening(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the S3 server did not start")
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", proc


def fill_moto(endpoint: str, bucket: str, count: int) -> float:
    import boto3
    from botocore.config import Config

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}, max_pool_connections=16))
    s3.create_bucket(Bucket=bucket)
    began = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: s3.put_object(Bucket=bucket, Key=key_of(i), Body=b""), range(count), chunksize=256))
    return time.perf_counter() - began


# ------------------------------------------------------------------ rounds and report
def rounds_of(specs: list[dict[str, Any]], rounds: int) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {s["who"]: [] for s in specs}
    for _ in range(rounds):
        for spec in specs:
            runs[spec["who"]].append(run_child(spec))
    return runs


def summary(runs: dict[str, list[dict[str, Any]]], peer: str, count: int) -> list[dict[str, Any]]:
    base = statistics.median(r["seconds"] for r in runs[peer])
    rows = []
    for who, results in runs.items():
        secs = [r["seconds"] for r in results]
        med = statistics.median(secs)
        row: dict[str, Any] = {
            "contestant": who,
            "keys": count,
            "median_s": round(med, 3),
            "min_s": round(min(secs), 3),
            "max_s": round(max(secs), 3),
            f"time_vs_{peer}": round(med / base, 2),
            "keys_per_s": round(count / med),
            "client_cpu_s": round(statistics.median(r["cpu_s"] for r in results), 2),
            "peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in results), 1),
            "listing_rss_mb": round(statistics.median(r["listing_rss_mb"] for r in results), 1),
        }
        rows.append(row)
        if "again_seconds" in results[0]:
            again = statistics.median(r["again_seconds"] for r in results)
            rows.append({**row, "contestant": who + ", again", "median_s": round(again, 3),
                         "min_s": round(min(r["again_seconds"] for r in results), 3),
                         "max_s": round(max(r["again_seconds"] for r in results), 3),
                         f"time_vs_{peer}": round(again / base, 2), "keys_per_s": round(count / again),
                         "client_cpu_s": ""})
            if "again_listing_rss_mb" in results[0]:
                rows[-1]["listing_rss_mb"] = round(statistics.median(r["again_listing_rss_mb"] for r in results), 1)
    return rows


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def table(title: str, rows: list[dict[str, Any]]) -> str:
    cols = list(rows[0])
    lines = [f"### {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 keys everywhere, one round")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per contestant (default 3; 1 with --quick)")
    parser.add_argument("--only", choices=["file", "mem", "s3s", "moto"], action="append", help="run only these stores")
    parser.add_argument("--s3-rounds", type=int, default=1,
                        help="rounds on the S3 servers (default 1: both answer each page in time that grows with the bucket)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    rounds = args.rounds or (1 if args.quick else 3)
    big = [10_000] if args.quick else [100_000, 1_000_000]
    s3_count = 10_000 if args.quick else 100_000
    only = set(args.only or ["file", "mem", "s3s", "moto"])
    sections: dict[str, list[dict[str, Any]]] = {}
    notes: dict[str, Any] = {"load_before": loadavg()}
    notes.update({"rounds": rounds} if only & {"file", "mem"} else {})
    notes.update({"s3_rounds": args.s3_rounds} if only & {"s3s", "moto"} else {})
    if "file" in only:
        for count in big:
            folder, took = flat_tree(count)
            notes[f"file_tree_{count}"] = f"made in {took:.1f} s" if took is not None else (
                (TREES / f"flat-{count}.made").read_text().strip() + " (cached)")
            specs = [{"kind": "file", "who": who, "count": count, "root": str(folder)}
                     for who in ("sorted scandir", "scandir, unsorted", "portable")]
            sections[f"file:// one folder of {count:,} keys"] = summary(rounds_of(specs, rounds), "sorted scandir", count)
            print(table(f"file:// {count:,}", sections[f"file:// one folder of {count:,} keys"]), flush=True)
    if "mem" in only:
        for count in big:
            specs = [{"kind": "mem", "who": who, "count": count} for who in ("sorted(dict)", "portable")]
            sections[f"mem:// {count:,} keys"] = summary(rounds_of(specs, rounds), "sorted(dict)", count)
            print(table(f"mem:// {count:,}", sections[f"mem:// {count:,} keys"]), flush=True)
    if "s3s" in only:
        sections.update(s3s_section(s3_count, args.s3_rounds, notes))
    if "moto" in only:
        sections.update(moto_section(s3_count, args.s3_rounds, notes))
    notes["load_after"] = loadavg()
    name = "list-quick" if args.quick else "list"
    RESULTS.mkdir(exist_ok=True)
    part = "+".join(sorted(only))
    meta: dict[str, Any] = {"python": sys.version.split()[0]}
    lock = open(Path(tempfile.gettempdir()) / f"portable-{name}-bench.lock", "w")  # noqa: SIM115 - closed below; partial runs may end together
    fcntl.flock(lock, fcntl.LOCK_EX)
    if args.only and (RESULTS / f"{name}.json").exists():  # a partial run updates its own sections only
        earlier = json.loads((RESULTS / f"{name}.json").read_text())
        meta.update(earlier["meta"])
        sections = {**earlier["results"], **sections}
    meta[part] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **notes}
    (RESULTS / f"{name}.json").write_text(json.dumps({"meta": meta, "results": sections}, indent=2))
    md = f"# {name}\n\n" + "\n".join(f"- {k}: {v}" for k, v in meta.items()) + "\n\n"
    md += "\n".join(table(t, rows) for t, rows in sections.items())
    (RESULTS / f"{name}.md").write_text(md)
    lock.close()
    print(md)
    return 0


S3_CONTESTANTS = ("boto3 paginator", "portable[fsspec]", "portable[obstore]")


def s3s_section(count: int, rounds: int, notes: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    sections: dict[str, list[dict[str, Any]]] = {}
    contestants = S3_CONTESTANTS
    data = Path(tempfile.mkdtemp(prefix="portable-list-s3s-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    try:
        notes["s3s_fill"] = f"{make_files(data / 'bench', count):.1f} s to write {count} files into its folder"
        endpoint, proc = start_s3s(data)
        try:
            specs = [{"kind": "s3", "who": who, "count": count, "endpoint": endpoint, "bucket": "bench",
                      "access_key": S3S_KEY, "secret_key": S3S_SECRET} for who in contestants]
            sections[f"S3 (s3s-fs) {count:,} keys"] = summary(rounds_of(specs, rounds), "boto3 paginator", count)
            print(table("s3s", sections[f"S3 (s3s-fs) {count:,} keys"]), flush=True)
        finally:
            proc.terminate()
            proc.wait(10)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    return sections


def moto_section(count: int, rounds: int, notes: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    sections: dict[str, list[dict[str, Any]]] = {}
    contestants = S3_CONTESTANTS
    from tests.emulators import create

    moto = create("moto")
    ok, reason = moto.available()
    if not ok:
        raise SystemExit(f"moto is not installed: {reason}")
    info = moto.start()
    try:
        endpoint = info.endpoints["endpoint_url"]
        key, secret = info.env.get("AWS_ACCESS_KEY_ID", "testing"), info.env.get("AWS_SECRET_ACCESS_KEY", "testing")
        os.environ.update(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret)
        notes["moto_fill"] = f"{fill_moto(endpoint, 'bench', count):.1f} s to put {count} objects (16 threads)"
        specs = [{"kind": "s3", "who": who, "count": count, "endpoint": endpoint, "bucket": "bench",
                  "access_key": key, "secret_key": secret} for who in contestants]
        sections[f"S3 (moto) {count:,} keys"] = summary(rounds_of(specs, rounds), "boto3 paginator", count)
    finally:
        moto.stop()
    return sections


if __name__ == "__main__":
    raise SystemExit(main())
