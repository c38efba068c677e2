"""Job launch throughput: portable launchers against the raw way of running the same jobs.

    .venv/bin/python bench/jobs_bench.py [--jobs 200] [--rounds 3] [--workers 4]
    (needs bench/requirements-jobs.txt for the Dask half; without it only local:// runs)

Side by side, round-robin, in one run:

* local:// — ``Launcher.submit`` of N trivial jobs, then ``wait`` on each,
  against a plain ``subprocess.run`` loop running the same commands one after
  another. Two kinds of trivial job: ``/bin/true`` (the launcher's own cost
  dominates) and ``python -c pass`` (a realistic smallest job).
* Dask — a ``dask://`` launcher on a LocalCluster (2 worker processes, 1
  thread each) against raw ``client.submit`` on the same cluster:
  commands (``DaskLauncher`` runs them in a subprocess; raw submits
  ``subprocess.run``) and Python callables (``submit_callable`` against
  ``client.submit(fn)``).

Target: each portable contestant >= 0.8x of its raw counterpart's throughput.
Results: bench/results/jobs.json and jobs.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

from _common import interleave, summarise, write

from portable.compute import JobSpec, open_launcher
from portable.embedded.localjobs import LocalLauncher

TRUE = shutil.which("true") or "/bin/true"


def _noop(i: int) -> int:
    return i


def local_sections(n: int, rounds: int, workers: int) -> dict[str, list[dict[str, Any]]]:
    root = tempfile.mkdtemp(prefix="portable-jobs-bench-")
    launcher = open_launcher(f"local://{root}?workers={workers}&idle=60")
    sections: dict[str, list[dict[str, Any]]] = {}
    try:
        launcher.submit(JobSpec(command=[TRUE])).wait(timeout=60)  # start the supervisor
        for label, command in (("/bin/true", [TRUE]), ("python -c pass", [sys.executable, "-c", "pass"])):

            def raw(command: list[str] = command) -> int:
                for _ in range(n):
                    subprocess.run(command, check=True)
                return n

            def portable(command: list[str] = command) -> int:
                jobs = [launcher.submit(JobSpec(command=command)) for _ in range(n)]
                for job in jobs:
                    status = job.wait(timeout=600)
                    assert status.succeeded, status
                return n

            rates = interleave(
                {"subprocess.run loop": raw, f"local:// workers={workers}": portable}, rounds
            )
            sections[f"{n} x {label}: local:// vs a subprocess.run loop (jobs/s)"] = summarise(
                rates, "subprocess.run loop"
            )
    finally:
        driver = launcher.driver
        assert isinstance(driver, LocalLauncher)
        driver.stop_supervisor(grace=0)
        launcher.close()
        shutil.rmtree(root, ignore_errors=True)
    return sections


def dask_sections(n: int, rounds: int) -> dict[str, list[dict[str, Any]]]:
    try:
        from distributed import Client, LocalCluster
        from portable_dask import submit_callable
    except ModuleNotFoundError:
        print("portable-dask is not installed: skipping the Dask half", file=sys.stderr)
        return {}
    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        silence_logs=logging.ERROR,
    )
    client = Client(cluster, set_as_default=False)
    launcher = open_launcher(f"dask://{cluster.scheduler_address.removeprefix('tcp://')}")
    sections: dict[str, list[dict[str, Any]]] = {}
    try:

        def raw_commands() -> int:
            futures = [client.submit(subprocess.run, [TRUE], check=True, pure=False) for _ in range(n)]
            client.gather(futures)
            return n

        def portable_commands() -> int:
            jobs = [launcher.submit(JobSpec(command=[TRUE])) for _ in range(n)]
            for job in jobs:
                assert job.wait(timeout=600).succeeded
            return n

        def raw_callables() -> int:
            futures = [client.submit(_noop, i, pure=False) for i in range(n)]
            client.gather(futures)
            return n

        def portable_callables() -> int:
            jobs = [submit_callable(launcher, _noop, i) for i in range(n)]
            for job in jobs:
                assert job.wait(timeout=600).succeeded
            return n

        raw_commands()
        portable_commands()  # warm both paths up
        rates = interleave({"client.submit(subprocess.run)": raw_commands, "dask:// launcher": portable_commands}, rounds)
        sections[f"{n} x /bin/true on Dask (2 workers): launcher vs raw client.submit (jobs/s)"] = summarise(
            rates, "client.submit(subprocess.run)"
        )
        rates = interleave({"client.submit(fn)": raw_callables, "submit_callable": portable_callables}, rounds)
        sections[f"{n} x a Python callable on Dask (2 workers): launcher vs raw client.submit (jobs/s)"] = summarise(
            rates, "client.submit(fn)"
        )
    finally:
        launcher.close()
        client.close()
        cluster.close()
    return sections


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4, help="local:// workers")
    args = ap.parse_args()
    sections = local_sections(args.jobs, args.rounds, args.workers)
    sections.update(dask_sections(args.jobs, args.rounds))
    ratios = {}
    for title, rows in sections.items():
        base = rows[0]["median_ops_per_s"]
        for row in rows[1:]:
            ratios[f"{row['contestant']} | {title.split(':')[0]}"] = round(row["median_ops_per_s"] / base, 3)
    write("jobs", sections, {"ratios": ratios, "target": ">= 0.8 of raw", "cores": os.cpu_count()})
    for name, ratio in ratios.items():
        verdict = "meets" if ratio >= 0.8 else "MISSES"
        print(f"{ratio:6.2f}x  {verdict} the 0.8x target  {name}")
    print(f"median of ratios: {statistics.median(ratios.values()):.2f}x")


if __name__ == "__main__":
    main()
