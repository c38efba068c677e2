"""``portable jobs submit|status|logs|cancel|preempt|list``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from portable.cli import main
from portable.compute import open_launcher


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_submit_wait_status_logs_list(jobs_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"local://{jobs_dir}?grace=1"
    code, out, _ = run(
        capsys, "jobs", "submit", "--jobs", url, "--name", "greet", "--label", "team=red", "--env", "WHO=world",
        "--memory", "512Mi", "--cpu", "0.5", "--wait", "--", sys.executable, "-c", "import os; print('hello', os.environ['WHO'])",
    )
    assert code == 0
    job_id = out.strip()
    code, out, _ = run(capsys, "jobs", "status", job_id, "--jobs", url, "--json")
    assert code == 0 and json.loads(out)["state"] == "SUCCEEDED"
    code, out, _ = run(capsys, "jobs", "logs", job_id, "--jobs", url)
    assert out == "hello world\n"
    code, out, _ = run(capsys, "jobs", "list", "--jobs", url, "--label", "team=red")
    assert job_id in out and "SUCCEEDED" in out and "greet" in out
    code, out, _ = run(capsys, "jobs", "list", "--jobs", url, "--label", "team=blue", "--json")
    assert json.loads(out) == []


def test_failed_job_exits_1_with_wait(jobs_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"local://{jobs_dir}"
    code, _, err = run(capsys, "jobs", "submit", "--jobs", url, "--wait", "--", sys.executable, "-c", "raise SystemExit(4)")
    assert code == 1 and "FAILED" in err and "exit code 4" in err


def test_cancel_and_preempt(jobs_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"local://{jobs_dir}?grace=0.5"
    _, out, _ = run(capsys, "jobs", "submit", "--jobs", url, "--", sys.executable, "-c", "import time; time.sleep(60)")
    job_id = out.strip()
    assert run(capsys, "jobs", "preempt", job_id, "--jobs", url)[0] == 0
    assert run(capsys, "jobs", "cancel", job_id, "--jobs", url)[0] == 0
    assert open_launcher(url).get(job_id).wait(timeout=30).state.value == "CANCELLED"


def test_bad_input_is_a_portable_error(jobs_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"local://{jobs_dir}"
    code, _, err = run(capsys, "jobs", "submit", "--jobs", url)
    assert code == 1 and "command" in err
    code, _, err = run(capsys, "jobs", "submit", "--jobs", url, "--memory", "lots", "--", "true")
    assert code == 1 and "memory" in err
    code, _, err = run(capsys, "jobs", "submit", "--jobs", url, "--env", "NOEQUALS", "--", "true")
    assert code == 1 and "KEY=VALUE" in err
    code, _, err = run(capsys, "jobs", "status", "job-000000000000000000000000", "--jobs", url)
    assert code == 1 and "NotFound" in err
