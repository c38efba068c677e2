"""``python -m tests.emulators up k8s`` prints a PORTABLE_K8S_URL that works from another process,
and ``down`` stops exactly what ``up`` started (a cluster of its own, with its own state file)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.emulators import create
from tests.emulators.fixtures import unavailable

ROOT = Path(__file__).resolve().parents[3]

_CLIENT = """
import os, sys
from portable.compute import JobSpec, open_launcher
with open_launcher(os.environ["PORTABLE_K8S_URL"]) as jobs:
    job = jobs.submit(JobSpec(command=["true"], image="python:3.11-slim"))
    print(job.id, job.wait(timeout=60).state.value, flush=True)
"""


@pytest.mark.slow
def test_up_prints_a_url_another_process_can_use(tmp_path: Path) -> None:
    ok, reason = create("k8s").available()
    if not ok:
        unavailable(f"emulator 'k8s' is not installed: {reason}")
    env = {
        **os.environ,
        "PORTABLE_EMULATOR_STATE": str(tmp_path / "state.json"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "adapters" / "k8s"), os.environ.get("PYTHONPATH", "")]),
    }
    up = subprocess.run([sys.executable, "-m", "tests.emulators", "up", "k8s"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=180, check=False)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        urls = [line.split("=", 1)[1] for line in up.stdout.splitlines() if line.startswith("PORTABLE_K8S_URL=")]
        assert len(urls) == 1 and urls[0].startswith("k8s://portable/default?kubeconfig="), up.stdout
        client = subprocess.run([sys.executable, "-c", _CLIENT], cwd=tmp_path, env={**env, "PORTABLE_K8S_URL": urls[0]},
                                capture_output=True, text=True, timeout=120, check=False)
        assert client.returncode == 0, client.stderr
        assert client.stdout.split()[1] == "SUCCEEDED", client.stdout
    finally:
        down = subprocess.run([sys.executable, "-m", "tests.emulators", "down", "k8s"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
    assert down.returncode == 0 and "k8s: stopped" in down.stdout, down.stdout + down.stderr
