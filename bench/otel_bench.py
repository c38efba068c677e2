"""What OpenTelemetry costs per portable call: off (no SDK), SDK with no provider, full tracing.

    .venv/bin/python bench/otel_bench.py [--calls 20000] [--rounds 9] [--baseline REF] [--quick]

The global tracer provider can be set once per process, and "opentelemetry is not
importable" is a property of a process, so each configuration runs in a worker
process of its own, started once; the parent drives them round-robin (every
round, every operation, every configuration, the order rotated each round), so a
noisy neighbour slows them all alike. Each worker times ``--calls`` calls of one
operation with ``perf_counter`` and answers over a pipe; the pipe's cost is outside
the timed loop. Configurations:

    base     (only with ``--baseline REF``) portable as of git REF, e.g. the commit
             before the guard's observers were wired in, opentelemetry blocked: the
             uninstrumented code the "off" figure is measured against.
    off      this tree; opentelemetry is not importable (an import blocker on
             ``sys.meta_path`` refuses ``opentelemetry*``): what a user without the
             ``otel`` extra pays.
    no-sdk   this tree; opentelemetry-api and -sdk installed and imported, but no
             tracer or meter provider set (the API's proxies): "off" for a user who
             has the extra but did not configure OpenTelemetry.
    tracing  this tree; the SDK's ``TracerProvider`` with a ``BatchSpanProcessor``
             exporting to a no-op exporter that counts spans (the export thread's
             work is real, the network is not).
    tracing+metrics  as ``tracing``, plus the SDK's ``MeterProvider`` with an
             ``InMemoryMetricReader`` (instruments record into the SDK's aggregations).

Operations, all per call: ``Bucket.get`` and ``Bucket.put`` of 1 KiB on mem://,
``Topic.publish`` of 100 bytes on mem:// and (a tenth as many calls) on a sqlite://
queue in a temporary folder; the tracing configurations run a tenth as many calls as
the others (they are tens of times slower), so every round is about as long. Each worker reports, at the end, how many spans its
exporter received per call (0 where tracing is off; ~1 where a span per call is
made): a tracing configuration that made no spans is flagged, not reported as cheap.

Results: medians with min-max over rounds, ratios against ``off`` (or ``base``),
and the absolute overhead per call in microseconds against that reference, three ways:
of the medians, of the fastest rounds, and the median of the round-by-round differences
(``paired``: one round's runs of an operation are within about a second, so a slow phase cancels;
the summary uses it); the load
average before and after. Written to bench/results/otel.{json,md}
(``otel-quick`` with ``--quick``). Target: ``off`` and ``no-sdk`` within 1 us per call
of ``base`` (and of each other).
"""

from __future__ import annotations

import sys

# The import blocker goes in before anything imports opentelemetry (or portable).
if "--block-otel" in sys.argv:
    import importlib.abc

    class _BlockOpenTelemetry(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname: str, path: object, target: object = None) -> None:
            if fullname == "opentelemetry" or fullname.startswith("opentelemetry."):
                raise ModuleNotFoundError(f"No module named {fullname!r} (blocked by otel_bench)")
            return None

    sys.meta_path.insert(0, _BlockOpenTelemetry())

import argparse
import json
import os
import statistics
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

PAYLOAD = os.urandom(1024)
MESSAGE = os.urandom(100)
#: operation -> fraction of --calls it runs (sqlite writes a file: fewer calls)
OPERATIONS = {
    "Bucket.get mem": 1.0,
    "Bucket.put mem": 1.0,
    "Topic.publish mem": 1.0,
    "Topic.publish sqlite": 0.1,
}
CONFIGS = ("off", "no-sdk", "tracing", "tracing+metrics")
#: spans of the untimed work between rounds (draining the mem:// queue), not counted
DRAIN_SPANS = ("receive ", "ack ")
#: the tracing configurations' share of the calls per round (see `calls_of`)
TRACED_SHARE = 0.1


# --- the worker -------------------------------------------------------------------------------


class _CountingExporter:
    """A span exporter that keeps nothing and counts what it is given (a stand-in for OTLP)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        # the untimed drain of the mem:// queue (receive, ack) is not what is measured
        self.spans += sum(1 for span in spans if not span.name.startswith(DRAIN_SPANS))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _set_up_telemetry(config: str) -> tuple[_CountingExporter | None, Callable[[], None]]:
    """Install what `config` says; return the span exporter (if any) and a flush function."""
    if config in ("base", "off"):
        try:
            import opentelemetry
        except ModuleNotFoundError:
            return None, lambda: None
        raise SystemExit(f"worker {config}: opentelemetry is importable; the blocker failed")
    from opentelemetry import metrics, trace

    if config == "no-sdk":
        import opentelemetry.sdk.trace  # noqa: F401  (installed and imported, not configured)

        assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"
        return None, lambda: None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter = _CountingExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "otel-bench"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))  # type: ignore[arg-type]
    trace.set_tracer_provider(provider)
    if config == "tracing+metrics":
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))

    def flush() -> None:
        provider.force_flush()

    return exporter, flush


def worker(config: str) -> None:
    """Answer ``{"op", "n"}`` lines with ``{"seconds"}``; ``{"stats": true}`` with span counts."""
    exporter, flush = _set_up_telemetry(config)
    import portable.messaging as pm
    from portable.storage import open_bucket

    bucket = open_bucket("mem://otel-bench")
    bucket.put("objects/0.bin", PAYLOAD)
    topic = pm.open_topic("mem://otel-bench")
    folder = tempfile.mkdtemp(prefix="otel-bench-")
    sqlite_topic = pm.open_topic(f"sqlite://{folder}/queue.db?name=bench")
    subscription = pm.open_subscription("mem://otel-bench")

    def get(n: int) -> None:
        for _ in range(n):
            bucket.get("objects/0.bin")

    def put(n: int) -> None:
        for _ in range(n):
            bucket.put("objects/0.bin", PAYLOAD)

    def publish(n: int) -> None:
        for _ in range(n):
            topic.publish(MESSAGE)

    def publish_sqlite(n: int) -> None:
        for _ in range(n):
            sqlite_topic.publish(MESSAGE)

    ops: dict[str, Callable[[int], None]] = {
        "Bucket.get mem": get,
        "Bucket.put mem": put,
        "Topic.publish mem": publish,
        "Topic.publish sqlite": publish_sqlite,
    }
    calls = 0
    for fn in ops.values():  # warm-up: imports, first spans, the SDK's lazy set-up
        fn(200)
        calls += 200
    print(json.dumps({"ready": config, "python": sys.version.split()[0]}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("stats"):
            flush()
            spans = exporter.spans if exporter is not None else 0
            print(json.dumps({"calls": calls, "spans": spans}), flush=True)
            continue
        op, n = request["op"], int(request["n"])
        t0 = time.perf_counter()
        ops[op](n)
        seconds = time.perf_counter() - t0
        calls += n
        if op == "Topic.publish mem":  # keep the queue from growing: every round starts empty
            while batch := subscription.receive(max_messages=1000):
                subscription.ack_many(batch)
        print(json.dumps({"seconds": seconds}), flush=True)


# --- the parent -------------------------------------------------------------------------------


class Worker:
    def __init__(self, config: str, root: Path) -> None:
        self.config = config
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", config]
        if config in ("base", "off"):
            argv.append("--block-otel")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
        env.pop("OTEL_SDK_DISABLED", None)
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=str(root)
        )
        self.hello = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"worker {self.config} exited with {self.process.wait()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)


def export_tree(ref: str, into: Path) -> Path:
    """``portable/`` as of git `ref`, unpacked into `into` (a baseline to import from)."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", ref, "portable"],
        check=True,
        capture_output=True,
    ).stdout
    tar_path = into / "base.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into, filter="data")
    return into


def calls_of(calls: int, share: float, config: str) -> int:
    """Calls per round of an operation (its ``share`` of ``calls``) in ``config``.

    The tracing configurations cost tens of microseconds a call: a tenth as many calls
    gives them rounds of about the same length as the others'.
    """
    scale = TRACED_SHARE if config.startswith("tracing") else 1.0
    return max(100, int(calls * share * scale))


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "n/a"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000, help="calls per round and operation")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--baseline", metavar="REF", help="git ref of the uninstrumented baseline")
    ap.add_argument("--quick", action="store_true", help="3 rounds of 3000 calls; results *-quick")
    ap.add_argument(
        "--only",
        metavar="CONFIGS",
        help=f"comma-separated configurations to run, of {', '.join(CONFIGS)} (results otel-only-*)",
    )
    ap.add_argument("--worker", choices=("base", *CONFIGS), help=argparse.SUPPRESS)
    ap.add_argument("--block-otel", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return
    from _common import summarise, write

    if args.quick:
        args.calls, args.rounds = 3000, 3
    chosen = list(CONFIGS)
    if args.only:
        chosen = [c.strip() for c in args.only.split(",") if c.strip()]
        unknown = sorted(set(chosen) - set(CONFIGS))
        if unknown or not chosen:
            ap.error(f"--only: unknown configuration(s) {unknown}; known: {', '.join(CONFIGS)}")
    if not args.baseline and "off" not in chosen:
        ap.error("--only must include 'off' (the reference) unless --baseline is given")
    load_before = loadavg()
    with tempfile.TemporaryDirectory(prefix="otel-bench-base-") as tmp:
        configs: list[tuple[str, Path]] = []
        if args.baseline:
            configs.append(("base", export_tree(args.baseline, Path(tmp))))
        configs += [(name, REPO) for name in chosen]
        workers = {name: Worker(name, root) for name, root in configs}
        names = list(workers)
        rates: dict[str, dict[str, list[float]]] = {op: {n: [] for n in names} for op in OPERATIONS}
        started = time.monotonic()
        try:
            for round_no in range(args.rounds):
                order = names[round_no % len(names) :] + names[: round_no % len(names)]
                for op, share in OPERATIONS.items():
                    for name in order:
                        n = calls_of(args.calls, share, name)
                        seconds = workers[name].ask({"op": op, "n": n})["seconds"]
                        rates[op][name].append(n / seconds)
            stats = {name: w.ask({"stats": True}) for name, w in workers.items()}
        finally:
            for w in workers.values():
                w.close()
    elapsed = time.monotonic() - started
    load_after = loadavg()
    reference = "base" if args.baseline else "off"
    sections: dict[str, list[dict[str, Any]]] = {}
    overhead: dict[str, dict[str, float]] = {}
    spans_per_call = {
        name: round(s["spans"] / s["calls"], 3) if s["calls"] else 0.0 for name, s in stats.items()
    }
    for op, by_config in rates.items():
        rows = summarise(by_config, reference)
        ref_us = 1e6 / statistics.median(by_config[reference])
        ref_best_us = 1e6 / max(by_config[reference])
        for row in rows:
            row["overhead_us_vs_" + reference] = round(row["us_per_op"] - ref_us, 3)
            # the fastest rounds: least disturbed by neighbours on a shared machine
            row["best_round_overhead_us"] = round(1e6 / row["max"] - ref_best_us, 3)
            # round by round against the reference's run of the same round (about a second apart),
            # then the median: a slow phase of the machine cancels out
            paired = [
                1e6 / mine - 1e6 / theirs
                for mine, theirs in zip(
                    by_config[row["contestant"]], by_config[reference], strict=True
                )
            ]
            row["paired_overhead_us"] = round(statistics.median(paired), 3)
            row["spans_per_call"] = spans_per_call[row["contestant"]]
        untraced, traced = (calls_of(args.calls, OPERATIONS[op], c) for c in ("off", "tracing"))
        sections[f"{op} ({untraced} calls, tracing {traced}, x {args.rounds} rounds)"] = rows
        overhead[op] = {row["contestant"]: row["paired_overhead_us"] for row in rows}
    silent = [n for n in ("tracing", "tracing+metrics") if n in chosen and spans_per_call[n] < 0.5]
    mem_ops = [op for op in overhead if op.endswith(" mem")]  # the target is per call on mem://
    off_names = [n for n in ("off", "no-sdk") if n in chosen and n != reference]
    off_worst = max((abs(overhead[op][n]) for op in mem_ops for n in off_names), default=0.0)
    summary = {
        "reference": reference,
        "baseline_ref": args.baseline,
        "load_before": load_before,
        "load_after": load_after,
        "seconds": round(elapsed, 1),
        "cpus": os.cpu_count(),
        "spans_per_call": spans_per_call,
        "overhead_us": overhead,
        "off_worst_us": round(off_worst, 3),
        "target_off_us": 1.0,
        "tracing_made_no_spans": silent,
    }
    name = "otel-quick" if args.quick else "otel"
    if args.only:
        name += "-only-" + "-".join(c.replace("+", "-") for c in chosen)
    write(name, sections, {"summary": summary})
    notes = [
        "",
        f"reference: `{reference}`"
        + (f" (portable at `{args.baseline}`)" if args.baseline else ""),
        f"load average before: {load_before}; after: {load_after}; {os.cpu_count()} CPUs; {elapsed:.0f} s",
        f"spans per call: {spans_per_call}",
        f"worst |paired median overhead| of off / no-sdk vs {reference} on mem://: {off_worst:.3f} us per call (target <= 1 us)",
    ]
    if silent:
        notes.append(f"WARNING: {silent} exported no spans: tracing was not active in them")
    with (HERE / "results" / f"{name}.md").open("a") as md:
        md.write("\n".join(notes) + "\n")
    print("\n".join(notes))


if __name__ == "__main__":
    main()
