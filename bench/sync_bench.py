"""``portable.transfer.sync`` (the library call) against rclone, bucket to bucket on the bench S3 server.

    python bench/sync_bench.py            # 10,000 x 4 KiB and 20 x 64 MiB, 3 interleaved rounds
    python bench/sync_bench.py --quick    # 1,000 x 4 KiB and 4 x 64 MiB, 2 rounds

What runs: bench/s3s-server (s3s-fs, as bench/compare.py starts it) with two buckets, ``bench``
(the source, seeded once) and ``bench2`` (the destinations: a fresh prefix per contestant and
round, deleted after it). Each contestant is a process of its own, timed from start to exit, its
peak RSS read from ``/proc/PID/status`` (VmHWM):

* ``portable sync``: ``python -c 'portable.transfer.sync(SRC_URL, DST_URL, concurrency=C)'`` on
  the obstore engine (``--engines obstore,fsspec`` adds fsspec). It is the library call: the CLI ``portable sync`` is being
  rewritten on another branch and will call the same function.
* ``rclone sync``: rclone (pinned, built by bench/install-rclone.sh) with ``--transfers C
  --checkers C``, ``--metadata`` (so it too copies content type, headers and user metadata) and
  ``--disable Copy`` (no server-side copy: portable cannot copy between two buckets server-side,
  so neither does), ``--s3-no-check-bucket``.

Like for like: the same concurrency C (8, portable's default) on both; both list both sides; both
verify each copy by MD5: rclone compares the source's MD5 (its listed etag) with the uploaded
object's (the upload's etag); portable compares the MD5 it computed while streaming with the
destination's etag (the put's or commit's reply, or a ``head``). Both send a 64 MiB object as ONE
PutObject streamed from the source's body (rclone: under its --s3-upload-cutoff of 200 MiB;
portable: ``open(key, "wb", size=...)`` under the same cutoff, read by 4 MiB ranged GETs, two
ahead, where rclone reads one GET's body); a 4 KiB object is one GET and one PUT on both, plus, on
portable, a HEAD of the source for its headers and metadata. rclone hashes nothing locally here
(it compares the source's listed MD5 with the upload's etag); portable MD5s every byte it sends.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import compare  # noqa: E402
from bench._common import RESULTS, table  # noqa: E402

KIB, MIB = 1024, 1024 * 1024
CONCURRENCY = 8
TARGETS = {"objects_per_s": 1.0, "mib_per_s": 0.9}

PORTABLE_CHILD = """
import json, sys, time
import portable.transfer
t0 = time.monotonic()
report = portable.transfer.sync(sys.argv[1], sys.argv[2], concurrency=int(sys.argv[3]))
print(json.dumps({"copied": report.copied, "failed": report.failed, "bytes": report.bytes_copied,
                  "verified": sorted({str(r.verified) for r in report.results}),
                  "seconds_in_call": time.monotonic() - t0}))
sys.exit(0 if report.failed == 0 and report.copied > 0 else 1)
"""


def run_timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """Run ``cmd``; return its wall seconds (0.02 s resolution), its peak RSS (KiB) and its stdout.

    Fails loudly on a non-zero exit."""
    with tempfile.TemporaryFile() as errors, tempfile.TemporaryFile() as output:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=output, stderr=errors)
        # VmHWM is the peak RSS of the program the child runs (its own address space since exec);
        # wait4's ru_maxrss would count the parent's pages the child had before its exec
        peak = 0
        while proc.poll() is None:
            try:
                for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
            except (FileNotFoundError, ProcessLookupError, ValueError):
                pass
            time.sleep(0.02)
        seconds = time.perf_counter() - t0
        output.seek(0)
        out = output.read()
        if proc.returncode != 0:
            errors.seek(0)
            raise SystemExit(f"{cmd[0]} exited {proc.returncode}:\n{out.decode()[-2000:]}\n"
                             f"{errors.read().decode(errors='replace')[-4000:]}")
    return seconds, peak, out.decode()


def seed(t: Any, count: int, size: int, prefix: str) -> None:
    """Put ``count`` objects of ``size`` bytes under ``prefix`` of the source bucket (portable, obstore engine)."""
    from portable.storage import open_bucket

    q = f"endpoint_url={t.endpoint}&region={t.region}&concurrency=16"
    bucket = open_bucket(f"s3://{t.bucket}/{prefix}?engine=obstore&sign_payload=false&{q}")
    base = os.urandom(size)
    meta = {"content_type": "application/x-bench", "metadata": {"set": prefix.strip("/")},
            "cache_control": "max-age=60"}
    step = 500 if size <= MIB else 2
    for start in range(0, count, step):
        # distinct bodies (both tools hash them), cheap to make; every object has headers and metadata
        batch = {f"obj-{i:05d}": i.to_bytes(8, "big") + base[8:] for i in range(start, min(count, start + step))}
        bucket.put_many(batch, **meta)  # type: ignore[arg-type]
    bucket.close()


def wipe(t: Any, prefix: str) -> None:
    """Delete everything under ``prefix`` of the destination bucket."""
    from portable.storage import open_bucket

    q = f"endpoint_url={t.endpoint}&region={t.region}&concurrency=16"
    bucket = open_bucket(f"s3://bench2/{prefix}?engine=obstore&sign_payload=false&{q}")
    keys = [i.key for i in bucket.list()]
    if keys:
        bucket.delete_many(keys)
    bucket.close()


def contestants(t: Any, rclone: str | None, engines: list[str]) -> dict[str, Callable[[str, str], list[str]]]:
    q = f"endpoint_url={t.endpoint}&region={t.region}"
    out: dict[str, Callable[[str, str], list[str]]] = {}
    for engine, extra in (("obstore", "&sign_payload=false"), ("fsspec", "")):
        if engine not in engines:
            continue
        def portable_cmd(src: str, dst: str, engine: str = engine, extra: str = extra) -> list[str]:
            return [sys.executable, "-c", PORTABLE_CHILD, f"s3://{t.bucket}/{src}?engine={engine}{extra}&{q}",
                    f"s3://bench2/{dst}?engine={engine}{extra}&{q}", str(CONCURRENCY)]
        out[f"portable sync [{engine}]"] = portable_cmd
    if rclone is not None:
        def rclone_cmd(src: str, dst: str) -> list[str]:
            return [rclone, "sync", f"bench:{t.bucket}/{src}", f"bench:bench2/{dst}",
                    "--transfers", str(CONCURRENCY), "--checkers", str(CONCURRENCY), "--metadata",
                    "--disable", "Copy", "--s3-no-check-bucket", "--stats", "0", "--use-json-log",
                    "--log-level", "ERROR"]
        out["rclone sync"] = rclone_cmd
    return out


def measure(t: Any, label: str, prefix: str, count: int, size: int, rounds: int,
            cmds: dict[str, Callable[[str, str], list[str]]], env: dict[str, str]) -> list[dict[str, Any]]:
    rates: dict[str, list[float]] = {name: [] for name in cmds}
    rss: dict[str, list[int]] = {name: [] for name in cmds}
    notes: dict[str, str] = {}
    inside: dict[str, list[float]] = {}  # portable: seconds in the sync call (the rest is Python's start)
    for r in range(rounds):
        order = list(cmds) if r % 2 == 0 else list(reversed(cmds))  # interleaved, alternating who goes first
        for name in order:
            dst = f"{label}-{r}-{uuid.uuid4().hex[:6]}/"
            seconds, peak, out = run_timed(cmds[name](prefix, dst), env)
            rates[name].append(count / seconds)
            rss[name].append(peak)
            if out.strip().startswith("{"):
                child = json.loads(out)
                notes[name] = f"verified by {', '.join(child['verified'])}"
                inside.setdefault(name, []).append(child["seconds_in_call"])
            wipe(t, dst)
            print(f"  {label} round {r + 1} {name}: {seconds:.2f} s, {count / seconds:.1f} objects/s, "
                  f"{count * size / MIB / seconds:.1f} MiB/s, peak RSS {peak / 1024:.0f} MiB", flush=True)
    base = statistics.median(rates["rclone sync"]) if "rclone sync" in rates else None
    rows = []
    for name, values in rates.items():
        med = statistics.median(values)
        # the paired ratio: this contestant over rclone in the same round (the rounds share the
        # machine's state, which drifts: the server's caches warm, the load moves), as every other
        # bench here reports it; the ratio of the two medians is kept beside it
        paired = [v / b for v, b in zip(values, rates["rclone sync"], strict=True)] if base else []
        rows.append({
            "contestant": name,
            "objects_per_s": round(med, 1),
            "MiB_per_s": round(med * size / MIB, 1),
            "min-max objects/s": f"{min(values):.1f}-{max(values):.1f}",
            "paired_ratio_vs_rclone": (f"{statistics.median(paired):.3f} ({min(paired):.3f}-{max(paired):.3f})"
                                       if paired else "-"),
            "ratio_of_medians": round(med / base, 3) if base else "-",
            "peak_RSS_MiB": round(max(rss[name]) / 1024),
            "note": notes.get(name, "") + (
                f"; {count / statistics.median(inside[name]):.1f} objects/s inside the call" if name in inside else ""),
        })
    return rows


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--no-rclone", action="store_true", help="portable only (profiling)")
    parser.add_argument("--engines", default="obstore", help="portable's S3 engines, comma-separated: obstore "
                        "(default), fsspec (5-8x slower here: --quick --engines obstore,fsspec shows it)")
    args = parser.parse_args()
    small_n, large_n = (1000, 4) if args.quick else (10_000, 20)
    rounds = args.rounds or (2 if args.quick else 3)
    rclone = None
    if not args.no_rclone:
        rclone = subprocess.run([str(ROOT / "bench" / "install-rclone.sh")], check=True, capture_output=True,
                                text=True).stdout.strip().splitlines()[-1]
    load_start = loadavg()
    target, stop = compare.start_s3s()
    try:
        import boto3

        boto3.client("s3", endpoint_url=target.endpoint, region_name=target.region,
                     aws_access_key_id=target.access_key, aws_secret_access_key=target.secret_key,
                     ).create_bucket(Bucket="bench2")
        env = dict(os.environ, AWS_ACCESS_KEY_ID=target.access_key, AWS_SECRET_ACCESS_KEY=target.secret_key,
                   AWS_REGION=target.region, AWS_DEFAULT_REGION=target.region,
                   # the caller's path after ROOT: in a worktree it names the worktree's adapters, which
                   # PYTHONPATH=ROOT alone would leave to the installed (main's) ones
                   PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
                   RCLONE_CONFIG_BENCH_TYPE="s3", RCLONE_CONFIG_BENCH_PROVIDER="Other",
                   RCLONE_CONFIG_BENCH_ENDPOINT=target.endpoint, RCLONE_CONFIG_BENCH_REGION=target.region,
                   RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=target.access_key,
                   RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=target.secret_key, RCLONE_CONFIG="/dev/null")
        os.environ.update(AWS_ACCESS_KEY_ID=target.access_key, AWS_SECRET_ACCESS_KEY=target.secret_key,
                          AWS_REGION=target.region)
        print(f"seeding {small_n} x 4 KiB and {large_n} x 64 MiB (load {load_start})", flush=True)
        seed(target, small_n, 4 * KIB, "small/")
        seed(target, large_n, 64 * MIB, "large/")
        cmds = contestants(target, rclone, args.engines.split(","))
        sections = {
            f"{small_n} x 4 KiB, bucket to bucket": measure(target, "small", "small/", small_n, 4 * KIB, rounds,
                                                             cmds, env),
            f"{large_n} x 64 MiB, bucket to bucket": measure(target, "large", "large/", large_n, 64 * MIB, rounds,
                                                              cmds, env),
        }
    finally:
        stop()
    load_end = loadavg()
    version = subprocess.run([rclone, "version"], capture_output=True, text=True).stdout.splitlines()[0] if rclone else "-"
    meta = {"rclone": version, "concurrency": CONCURRENCY, "rounds": rounds, "load_start": load_start,
            "load_end": load_end, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": sys.version.split()[0], "targets": TARGETS}
    name = "sync_bench-quick" if args.quick else "sync_bench"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps({"meta": meta, "results": sections}, indent=2))
    md = [f"# {name}", "", "`python bench/sync_bench.py" + (" --quick" if args.quick else "") + "`: "
          "portable.transfer.sync (the library call, in a process of its own) against rclone sync, between "
          "two buckets of bench/s3s-server; interleaved rounds, medians with min-max; the paired ratio is "
          "the median (min-max) of portable / rclone in the same round; each process timed "
          "start to exit; peak RSS is VmHWM. See the script's docstring for what each side checks.", "",
          f"{meta}", ""]
    md += [table(title, rows) for title, rows in sections.items()]
    (RESULTS / f"{name}.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
