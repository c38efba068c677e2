"""portable against every peer, for object storage, in one run: the one benchmark command.

    .venv/bin/python bench/compare.py            # full run (about 15 minutes on a busy 2-core machine), updates docs/performance.md
    .venv/bin/python bench/compare.py --quick    # smoke test, under a minute; writes nothing under docs/

Needs ``pip install -r bench/requirements-compare.txt`` and the emulators
(``bash scripts/install-emulators.sh``). The S3 server is bench/s3s-server: the
s3s-fs 0.14.1 store (Rust, crates.io) behind our own accept loop that sets
TCP_NODELAY, which the stock s3s-fs binary does not (its 1 KiB GETs waited
15-40 ms for a delayed ACK, so small-GET figures measured a timer). It is built
once with ``cargo build --release --locked`` into ``~/.cache/portable/s3s-server-0.14.1``
(``--build-server`` builds it: about 3 minutes of CPU; nothing else is
downloaded at run time).

What it measures, each in interleaved rounds (every contestant once per round,
round-robin, so a noisy neighbour slows all of them alike), medians with
min-max and ratios:

* stores: s3s-fs on 127.0.0.1 (a fast, real S3 server, well under a
  millisecond per request: the clients, not the server, are the bottleneck),
  Azurite and fake-gcs-server (started through tests/emulators);
* workloads: 2,000 x 1 KiB and 20 x 8 MiB objects, put then get, 16 in flight
  for every contestant (fewer objects on the emulators, which are slower);
* contestants: portable ``Bucket.put_many`` / ``get_many`` on each engine
  (``?engine=obstore``, ``?engine=fsspec``, and on S3 ``?engine=opendal``); obstore's and OpenDAL's async APIs,
  each in both idioms (a task per object behind a semaphore, and a fixed pool of
  16 worker coroutines, as portable uses); the tuned fsspec file system (s3fs
  with retries off, no HEAD before GET, batch_size 16; gcsfs; adlfs), the SDK
  with 16 threads (boto3, azure-storage-blob), and raw HTTP (http.client with
  SigV4 by hand, S3 only).

Ratios are paired: per round, portable's rate over the peer's from the same
round, reported as median (min-max) over the rounds.

Targets (issue 24; checked and printed at the end, S3 only): portable's best
engine >= 1.0x the best peer on 1 KiB put and get, >= 0.95x on 8 MiB put and
get; portable[fsspec] >= 0.95x tuned s3fs on 1 KiB. Each is decided by a
paired run after the tables: the two contestants alone, alternating.

Writes bench/results/compare.json and compare.md (compare-quick.* with
``--quick``); a full run also writes docs/performance.png and the figures
section of docs/performance.md.
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
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import _compare_clients as cc  # noqa: E402
from bench._common import table, write  # noqa: E402

S3S_CRATE = ROOT / "bench" / "s3s-server"  # s3s-fs 0.14.1, the newest that builds with rustc 1.95 (0.17 needs 1.96)
S3S_ROOT = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "portable" / "s3s-server-0.14.1"  # as scripts/install-emulators.sh builds it
S3S_BIN = S3S_ROOT / "target" / "release" / "portable-s3s-server"
DOC = ROOT / "docs" / "performance.md"
PLOT = ROOT / "docs" / "performance.png"
KIB, MIB = 1024, 1024 * 1024
TARGETS = {"small_vs_best_peer": 1.0, "fsspec_vs_s3fs": 0.95, "large_vs_best_peer": 0.95}
PORTABLE = ("portable[obstore]", "portable[fsspec]", "portable[opendal]")


# ------------------------------------------------------------------ servers
def build_s3s() -> None:
    cmd = ["cargo", "build", "--release", "--locked", "--target-dir", str(S3S_ROOT / "target")]
    print(f"building bench/s3s-server: {' '.join(cmd)} (in {S3S_CRATE})", flush=True)
    subprocess.run(cmd, check=True, cwd=S3S_CRATE)


def start_s3s() -> tuple[cc.Target, Callable[[], None]]:
    """bench/s3s-server (s3s-fs with TCP_NODELAY) on a free loopback port, storing in a fresh folder (tmpfs when there is one)."""
    from tests.emulators.harness import free_port, is_listening

    if not S3S_BIN.exists():
        raise SystemExit(f"the S3 server is not built: run bench/compare.py --build-server (or, in {S3S_CRATE}: cargo build --release --locked --target-dir {S3S_ROOT / 'target'})")
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    data = Path(tempfile.mkdtemp(prefix="portable-s3s-", dir=base))
    bucket = "bench"
    (data / bucket).mkdir()
    port = free_port()
    key, secret = "benchaccesskey", "benchsecretkey"
    log = open(S3S_ROOT / "s3s-server.log", "wb")  # noqa: SIM115 (closed by stop())
    proc = subprocess.Popen(
        [str(S3S_BIN), "--host", "127.0.0.1", "--port", str(port), "--access-key", key, "--secret-key", secret, str(data)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    deadline = time.monotonic() + 20
    while not is_listening(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the S3 server did not start; see {S3S_ROOT / 's3s-server.log'}")
        time.sleep(0.05)

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(data, ignore_errors=True)

    return cc.Target("s3", f"http://127.0.0.1:{port}", bucket, access_key=key, secret_key=secret), stop


def start_emulator(name: str) -> tuple[Any, Callable[[], None]]:
    from tests.emulators import create

    emulator = create(name)
    ok, reason = emulator.available()
    if not ok:
        raise SystemExit(f"{name} is not installed: {reason} (bash scripts/install-emulators.sh)")
    return emulator.start(), emulator.stop


def azure_target(info: Any) -> cc.Target:
    from azure.storage.blob import BlobServiceClient

    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    BlobServiceClient.from_connection_string(info.endpoints["connection_string"]).create_container(bucket)
    os.environ["PORTABLE_BENCH_AZ_CONNECTION"] = info.endpoints["connection_string"]
    return cc.Target("azure", info.endpoints["blob_endpoint"], bucket, account=info.endpoints["account_name"],
                     account_key=info.endpoints["account_key"])


def gcs_target(info: Any) -> cc.Target:
    import json

    endpoint = info.endpoints["endpoint_url"].rstrip("/")
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    req = urllib.request.Request(f"{endpoint}/storage/v1/b?project=bench", data=json.dumps({"name": bucket}).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    urllib.request.urlopen(req, timeout=30).close()
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    return cc.Target("gcs", endpoint, bucket)


# ------------------------------------------------------------------ contestants
def clients(t: cc.Target) -> list[cc.Client]:
    """Every contestant for store ``t``, each writing under its own prefix."""
    run = uuid.uuid4().hex[:6]
    out: list[cc.Client] = []
    if t.kind == "s3":
        os.environ.update(AWS_ACCESS_KEY_ID=t.access_key, AWS_SECRET_ACCESS_KEY=t.secret_key, AWS_REGION=t.region)
        q = f"endpoint_url={t.endpoint}&region={t.region}&concurrency={cc.IN_FLIGHT}"
        out += [
            cc.portable_client("portable[obstore]", f"s3://{t.bucket}/{run}-po?engine=obstore&sign_payload=false&{q}"),
            cc.portable_client("portable[fsspec]", f"s3://{t.bucket}/{run}-pf?engine=fsspec&{q}"),
            # reads on OpenDAL's blocking read, writes on obstore (as portable[obstore] sends them)
            cc.portable_client("portable[opendal]", f"s3://{t.bucket}/{run}-pd?engine=opendal&sign_payload=false&{q}"),
            *_async_peers(t, run),
            *(cc.blocking_client(t, f"{run}-{lib[:2]}b{i}/", lib, idiom)
              for lib in ("obstore", "OpenDAL") for i, idiom in enumerate(cc.THREAD_IDIOMS)),
            cc.s3fs_client(t, f"{run}-fs/"),
            cc.boto3_client(t, f"{run}-b3/"),
            cc.raw_http_client(t, f"{run}-raw/"),
        ]
    elif t.kind == "azure":
        q = f"connection_string_env=PORTABLE_BENCH_AZ_CONNECTION&max_concurrency={cc.IN_FLIGHT}"
        out += [
            cc.portable_client("portable[obstore]", f"az://{t.bucket}/{run}-po?engine=obstore&{q}"),
            cc.portable_client("portable[fsspec]", f"az://{t.bucket}/{run}-pf?engine=fsspec&{q}"),
            *_async_peers(t, run),
            cc.adlfs_client(t, f"{run}-fs/"),
            cc.azure_sdk_client(t, f"{run}-sdk/"),
        ]
    else:
        q = f"endpoint_url={t.endpoint}&concurrency={cc.IN_FLIGHT}"
        shared = f"{run}-pf"  # fake-gcs-server cannot take object_store's uploads: obstore reads these
        reader = cc.portable_client("portable[obstore]", f"gs://{t.bucket}/{shared}?engine=obstore&{q}")
        reader.can_put = False
        out += [
            reader,
            cc.portable_client("portable[fsspec]", f"gs://{t.bucket}/{shared}?engine=fsspec&{q}"),
            *(cc.obstore_client(t, f"{shared}/", idiom) for idiom in cc.ASYNC_IDIOMS),
            *(cc.opendal_client(t, f"{run}-od{idiom[0]}/", idiom) for idiom in cc.ASYNC_IDIOMS),
            cc.gcsfs_client(t, f"{run}-fs/"),
        ]
    return out


def _async_peers(t: cc.Target, run: str) -> list[cc.Client]:
    """obstore and OpenDAL, each in both idioms (a task per object; a pool of 16 workers)."""
    out = [cc.obstore_client(t, f"{run}-ob{idiom[0]}/", idiom) for idiom in cc.ASYNC_IDIOMS]
    return out + [cc.opendal_client(t, f"{run}-od{idiom[0]}/", idiom) for idiom in cc.ASYNC_IDIOMS]


# ------------------------------------------------------------------ measuring
def measure(t: cc.Target, label: str, count: int, size: int, rounds: int, contestants: list[cc.Client]) -> dict[str, list[dict[str, Any]]]:
    payload = os.urandom(size)
    items = {f"{label}/{i:05d}": payload for i in range(count)}
    keys = list(items)
    sections: dict[str, list[dict[str, Any]]] = {}
    for op in ("put", "get"):
        runs: dict[str, Callable[[], int]] = {}
        for c in contestants:
            if op == "put" and not c.can_put:
                continue
            fn = c.put if op == "put" else c.get
            arg: Any = items if op == "put" else keys
            runs[c.name] = _again_once(c.name, fn, arg, count)
        if op == "get":
            for c in contestants:
                if c.can_put:
                    c.put(items)  # every reader reads objects of its own
        rates = interleave(runs, rounds)
        title = f"{t.kind} {count} x {_size(size)} {op}"
        RUNS[title] = runs
        RATES[title] = rates
        sections[title] = rows(rates, size)
        print(table(title, sections[title]), flush=True)
    return sections


RETRIED: dict[str, int] = {}
#: title -> contestant -> its timed batch, kept for the paired checks
RUNS: dict[str, dict[str, Callable[[], int]]] = {}
#: title -> contestant -> its rate per round in the table
RATES: dict[str, dict[str, list[float]]] = {}


def interleave(contestants: dict[str, Callable[[], int]], rounds: int) -> dict[str, list[float]]:
    """bench._common.interleave, but each round starts one contestant later (A B C, B C A, C A B, ...),
    so that no contestant always runs right after the same neighbour."""
    rates: dict[str, list[float]] = {name: [] for name in contestants}
    names = list(contestants)
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            t0 = time.perf_counter()
            ops = contestants[name]()
            rates[name].append(ops / (time.perf_counter() - t0))
    return rates


def _again_once(name: str, fn: Callable[[Any], None], arg: Any, count: int) -> Callable[[], int]:
    """The contestant's batch; a failed batch (an emulator resetting a kept-alive connection,
    which clients without retries report) is run once more and its time counts."""

    def run() -> int:
        try:
            fn(arg)
        except Exception as exc:
            RETRIED[name] = RETRIED.get(name, 0) + 1
            first = (str(exc).splitlines() or [""])[0][:120]
            print(f"  {name}: {type(exc).__name__}: {first} - running the batch again", flush=True)
            fn(arg)
        return count

    return run


def paired(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Per-round ratios a/b (rounds taken side by side): median, min, max."""
    ratios = [x / y for x, y in zip(a, b, strict=True) if y]
    return statistics.median(ratios), min(ratios), max(ratios)


def spread(ratio: tuple[float, float, float]) -> str:
    return f"{ratio[0]:.3f} ({ratio[1]:.3f}-{ratio[2]:.3f})"


def rows(rates: dict[str, list[float]], size: int) -> list[dict[str, Any]]:
    """One row per contestant: median rate, min-max, and each portable engine's paired ratio to it."""
    medians = {name: statistics.median(v) for name, v in rates.items()}
    mine = [name for name in PORTABLE if name in rates]
    out = []
    for name, values in sorted(rates.items(), key=lambda kv: -medians[kv[0]]):
        med = medians[name]
        row: dict[str, Any] = {
            "client": name,
            "median_ops_per_s": round(med, 1),
            "min": round(min(values), 1),
            "max": round(max(values), 1),
            "MiB_per_s": round(med * size / MIB, 1),
        }
        for engine in mine:
            row[f"{engine} / this"] = "" if name in PORTABLE else spread(paired(rates[engine], values))
        out.append(row)
    return out


def _size(size: int) -> str:
    return f"{size // MIB} MiB" if size >= MIB else f"{size // KIB} KiB"


def verdicts(sections: dict[str, list[dict[str, Any]]], small: int, large: int, rounds: int) -> list[dict[str, Any]]:
    """Each target, decided by a paired run: the two contestants alone, alternating, ``2 * rounds`` times.

    portable's best engine (the faster in the table) against the best peer
    (the fastest peer in the table, whichever library and idiom), and
    portable[fsspec] against tuned s3fs. The main tables interleave many
    contestants, so a ratio there pairs runs taken seconds apart; a pair
    alternating back to back sees the same background load. Each ratio is the
    median of the per-round ratios, with their min-max.
    """

    def best(title: str, ours: bool) -> str | None:
        found = [r for r in sections.get(title, []) if (r["client"] in PORTABLE) == ours]
        return max(found, key=lambda r: r["median_ops_per_s"])["client"] if found else None

    out = []
    for op in ("put", "get"):
        checks = []
        for size, count, goal in ((KIB, small, TARGETS["small_vs_best_peer"]), (8 * MIB, large, TARGETS["large_vs_best_peer"])):
            title = f"s3 {count} x {_size(size)} {op}"
            a, b = best(title, True), best(title, False)
            if a and b:
                checks.append((f"{_size(size)} {op}: {a} / best peer ({b})", title, a, b, goal, rounds))
        title = f"s3 {small} x 1 KiB {op}"
        checks.append((f"1 KiB {op}: portable[fsspec] / s3fs (tuned)", title, "portable[fsspec]", "s3fs (tuned)",
                       TARGETS["fsspec_vs_s3fs"], max(1, rounds // 2)))
        for what, title, a, b, goal, n in checks:
            runs = RUNS.get(title, {})
            if a not in runs or b not in runs:
                continue
            in_table = spread(paired(RATES[title][a], RATES[title][b]))
            alone = interleave({a: runs[a], b: runs[b]}, 2 * n)
            ratio = paired(alone[a], alone[b])
            out.append({"check": what, "paired_ratio": round(ratio[0], 3), "paired_min": round(ratio[1], 3),
                        "paired_max": round(ratio[2], 3), "table_ratio": in_table,
                        "paired_rounds": 2 * n, "target": goal, "met": ratio[0] >= goal})
            print(f"  {what}: {spread(ratio)} paired, {in_table} in the table (target {goal}x)", flush=True)
    return out


# ------------------------------------------------------------------ reporting
def plot(sections: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[str, dict[str, dict[str, float]]] = {}
    for title, rws in sections.items():
        store, count, _x, n, unit, op = title.split()
        key = f"{store}  {count} x {n} {unit}"
        for r in rws:
            value = r["median_ops_per_s"] if unit == "KiB" else r["MiB_per_s"]
            groups.setdefault(key, {}).setdefault(r["client"], {})[op] = value
    fig, axes = plt.subplots(len(groups), 1, figsize=(10, 2.6 * len(groups)), squeeze=False)
    for ax, (key, per_client) in zip(axes[:, 0], groups.items(), strict=True):
        names = list(per_client)
        y = range(len(names))
        puts = [per_client[n].get("put", 0) for n in names]
        gets = [per_client[n].get("get", 0) for n in names]
        ax.barh([i - 0.2 for i in y], puts, height=0.4, label="put", color="#4C72B0")
        ax.barh([i + 0.2 for i in y], gets, height=0.4, label="get", color="#DD8452")
        ax.set_yticks(list(y), names, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(key, fontsize=10, loc="left")
        ax.set_xlabel("objects/s (median)" if "KiB" in key else "MiB/s (median)", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("portable vs peers: 16 objects in flight, loopback, 2 cores", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def update_doc(sections: dict[str, list[dict[str, Any]]], checks: list[dict[str, Any]], meta: str) -> None:
    begin, end = "<!-- compare:begin -->", "<!-- compare:end -->"
    text = DOC.read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"{DOC} lacks the {begin} / {end} markers")
    body = [meta, "", "| check | paired ratio, median (min-max) | in the table | target | met |", "|---|---|---|---|---|"]
    body += [
        f"| {c['check']} | {c['paired_ratio']:.3f} ({c['paired_min']:.3f}-{c['paired_max']:.3f}), {c['paired_rounds']} rounds "
        f"| {c['table_ratio']} | {c['target']} | {'yes' if c['met'] else 'NO'} |"
        for c in checks
    ]
    body.append("")
    body += [table(title, rws) for title, rws in sections.items()]
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    DOC.write_text(f"{head}{begin}\n{chr(10).join(body)}\n{end}{tail}")


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke test: few objects, 2 rounds, under a minute")
    parser.add_argument("--rounds", type=int, default=None, help="rounds on s3s-fs (default 7; 2 with --quick)")
    parser.add_argument("--stores", default="s3,azure,gcs", help="comma-separated subset of s3,azure,gcs")
    parser.add_argument("--build-server", action="store_true", help="build bench/s3s-server with cargo first if missing")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: stop the servers
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    if args.build_server and not S3S_BIN.exists():
        build_s3s()
    if args.quick:
        plan = {"s3": (200, 4, args.rounds or 2), "azure": (60, 2, 1), "gcs": (60, 2, 1)}
    else:
        plan = {"s3": (2000, 20, args.rounds or 7), "azure": (200, 5, 3), "gcs": (300, 5, 3)}
    started = time.monotonic()
    load_before = loadavg()
    sections: dict[str, list[dict[str, Any]]] = {}
    checks: list[dict[str, Any]] = []
    for store in stores:
        small, large, rounds = plan[store]
        contestants: list[cc.Client] = []
        if store == "s3":
            target, stop = start_s3s()
        else:
            info, stop = start_emulator("azurite" if store == "azure" else "fake-gcs")
        try:  # from here on the server is stopped whatever fails (a missing peer library included)
            if store != "s3":
                target = azure_target(info) if store == "azure" else gcs_target(info)
            contestants = clients(target)
            sections |= measure(target, "small", small, KIB, rounds, contestants)
            sections |= measure(target, "large", large, 8 * MIB, rounds, contestants)
            if store == "s3":
                print("### targets (paired runs)\n", flush=True)
                checks = verdicts(sections, small, large, 1 if args.quick else 9)
        finally:
            for c in contestants:
                c.close()
            stop()
    print("### targets\n")
    for c in checks:
        print(f"  {c['check']}: {c['paired_ratio']:.3f}x ({c['paired_min']:.3f}-{c['paired_max']:.3f}) "
              f"(target {c['target']}x) {'met' if c['met'] else 'NOT MET'}")
    name = "compare-quick" if args.quick else "compare"
    sections["targets"] = checks
    load = f"load average (1 min) {load_before} at the start, {loadavg()} at the end"
    print(load)
    write(name, sections, {"load": load, "retried_batches": RETRIED, "plan": {k: {"small": v[0], "large": v[1], "rounds": v[2]} for k, v in plan.items() if k in stores}})
    if not args.quick and stores == ["s3", "azure", "gcs"]:
        results = {k: v for k, v in sections.items() if k != "targets"}
        plot(results, PLOT)
        meta = f"Measured {time.strftime('%Y-%m-%d')} on this 2-core machine, Python {sys.version.split()[0]}, in {time.monotonic() - started:.0f} s; {load}."
        update_doc(results, checks, meta)
    print(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
