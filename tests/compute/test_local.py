"""local:// behaviour beyond the contract: jobs outlive their submitter, one job per
idempotency key across processes, the concurrency limit, supervisor restarts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from portable.compute import Job, JobSpec, JobState, open_launcher
from portable.config import Profile
from portable.embedded.localjobs import LocalLauncher
from portable.errors import InvalidURL, MissingCapability
from portable.resilience import ResiliencePolicy, RetryPolicy
from portable.testing.compute_suite import poll_until

from .conftest import process_gone

GATED = "import os, time\nwhile not os.path.exists(os.environ['GATE']): time.sleep(0.01)"

SUBMITTER = f"""
import os, signal, sys
import portable.compute as compute
url, key, gate, mode = sys.argv[1:5]
launcher = compute.open_launcher(url)
spec = compute.JobSpec(
    name="survivor",
    command=[sys.executable, "-c", {GATED!r}],
    env={{"GATE": gate}},
    idempotency_key=key or None,
    labels={{"test": "kill9"}},
)
if mode == "die-mid-submit":
    # die right after the record lands, before the supervisor hears of it
    real_rename = os.rename
    def rename(src, dst):
        real_rename(src, dst)
        os.kill(os.getpid(), signal.SIGKILL)
    os.rename = rename
job = launcher.submit(spec)
print(job.id, flush=True)
signal.pause()
"""


def _url(root: Path, **options: object) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"workers": 4, "grace": 1, **options}.items())
    return f"local://{root}?{query}"


def _spec(gate: Path, key: str | None = None) -> JobSpec:
    return JobSpec(
        name="survivor",
        command=[sys.executable, "-c", GATED],
        env={"GATE": str(gate)},
        idempotency_key=key,
        labels={"test": "kill9"},
    )


def test_kill_9_of_the_submitter_then_resubmit_yields_one_job(jobs_dir: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    child = subprocess.Popen(
        [sys.executable, "-c", SUBMITTER, _url(jobs_dir), "the-key", str(gate), "normal"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    first_id = child.stdout.readline().strip()
    child.kill()
    child.wait()
    launcher = open_launcher(_url(jobs_dir))
    job = launcher.submit(_spec(gate, "the-key"))
    assert job.id == first_id
    poll_until(lambda: job.status().state is JobState.RUNNING, 60, "the job to run without its submitter")
    gate.write_text("go")
    status = job.wait(timeout=60)
    assert status.state is JobState.SUCCEEDED and status.attempts == 1
    assert [s.job_id for s in launcher.list({"test": "kill9"})] == [first_id]


def test_submitter_killed_inside_submit_then_resubmit_yields_one_job(jobs_dir: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.write_text("go")
    child = subprocess.run(
        [sys.executable, "-c", SUBMITTER, _url(jobs_dir), "mid-key", str(gate), "die-mid-submit"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL
    assert child.stdout == ""  # it never returned from submit
    records = os.listdir(jobs_dir / "jobs")
    assert len(records) == 1
    launcher = open_launcher(_url(jobs_dir))
    job = launcher.submit(_spec(gate, "mid-key"))
    assert job.id == records[0]
    status = job.wait(timeout=60)
    assert status.state is JobState.SUCCEEDED and status.attempts == 1
    assert len(launcher.list({"test": "kill9"})) == 1


def test_a_record_whose_submitter_died_runs_even_if_nobody_resubmits(jobs_dir: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.write_text("go")
    subprocess.run(
        [sys.executable, "-c", SUBMITTER, _url(jobs_dir), "orphan-key", str(gate), "die-mid-submit"],
        capture_output=True,
        timeout=60,
    )
    (job_id,) = os.listdir(jobs_dir / "jobs")
    launcher = open_launcher(_url(jobs_dir))
    # any other job wakes the supervisor, whose periodic scan finds the orphaned record
    launcher.submit(JobSpec(command=[sys.executable, "-c", "pass"])).wait(timeout=60)
    assert launcher.get(job_id).wait(timeout=60).state is JobState.SUCCEEDED


def test_concurrent_submitters_with_one_key_make_one_job(jobs_dir: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.write_text("go")
    children = [
        subprocess.Popen(
            [sys.executable, "-c", SUBMITTER, _url(jobs_dir), "race-key", str(gate), "normal"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    ids = set()
    for child in children:
        assert child.stdout is not None
        ids.add(child.stdout.readline().strip())
        child.kill()
        child.wait()
    assert len(ids) == 1
    launcher = open_launcher(_url(jobs_dir))
    (job_id,) = ids
    status = launcher.get(job_id).wait(timeout=60)
    assert status.state is JobState.SUCCEEDED and status.attempts == 1
    assert len(launcher.list({"test": "kill9"})) == 1


def test_status_from_another_process(jobs_dir: Path) -> None:
    launcher = open_launcher(_url(jobs_dir))
    job = launcher.submit(JobSpec(command=[sys.executable, "-c", "print('from afar')"], labels={"who": "cli"}))
    job.wait(timeout=60)
    out = subprocess.run(
        [sys.executable, "-m", "portable", "jobs", "status", job.id, "--jobs", _url(jobs_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["job_id"] == job.id and data["state"] == "SUCCEEDED" and data["exit_code"] == 0


def test_concurrency_limit(jobs_dir: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    launcher = open_launcher(_url(jobs_dir, workers=2))
    jobs = [
        launcher.submit(JobSpec(command=[sys.executable, "-c", GATED], env={"GATE": str(gate)}, labels={"n": str(i)}))
        for i in range(5)
    ]

    def states() -> list[JobState]:
        return [j.status().state for j in jobs]

    poll_until(lambda: states().count(JobState.RUNNING) == 2, 60, "two jobs to run")
    time.sleep(0.3)  # a third would have started by now if the limit leaked
    assert states().count(JobState.RUNNING) == 2
    assert states().count(JobState.PENDING) == 3
    gate.write_text("go")
    assert all(j.wait(timeout=60).state is JobState.SUCCEEDED for j in jobs)


def test_cancel_a_pending_job(jobs_dir: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    launcher = open_launcher(_url(jobs_dir, workers=1))
    blocker = launcher.submit(JobSpec(command=[sys.executable, "-c", GATED], env={"GATE": str(gate)}))
    waiting = launcher.submit(JobSpec(command=[sys.executable, "-c", "print('never')"]))
    poll_until(lambda: blocker.status().state is JobState.RUNNING, 60, "the blocker to run")
    waiting.cancel()
    status = waiting.wait(timeout=60)
    assert status.state is JobState.CANCELLED and status.attempts == 0
    gate.write_text("go")
    assert blocker.wait(timeout=60).state is JobState.SUCCEEDED
    assert list(waiting.logs()) == []


def test_what_a_job_leaves_behind_is_killed(jobs_dir: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    code = (
        "import subprocess, sys\n"
        "p = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
    )
    launcher = open_launcher(_url(jobs_dir))
    assert launcher.submit(JobSpec(command=[sys.executable, "-c", code])).wait(timeout=60).succeeded
    pid = int(pidfile.read_text())
    poll_until(lambda: process_gone(pid), 10, "the job's leftover child to be killed")


def _running_job_and_supervisor(jobs_dir: Path, gate: Path) -> tuple[Job, LocalLauncher, int]:
    """A job held RUNNING until ``gate`` exists, its driver, and the pid of the supervisor running it."""
    launcher = open_launcher(_url(jobs_dir))
    job = launcher.submit(JobSpec(command=[sys.executable, "-c", GATED], env={"GATE": str(gate)}))
    poll_until(lambda: job.status().state is JobState.RUNNING, 60, "the job to run")
    driver = launcher.driver
    assert isinstance(driver, LocalLauncher)
    pid = driver.supervisor_pid()
    assert pid is not None
    return job, driver, pid


def test_a_killed_supervisor_is_replaced_and_its_job_restarted(jobs_dir: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    job, driver, pid = _running_job_and_supervisor(jobs_dir, gate)
    os.kill(pid, signal.SIGKILL)
    poll_until(lambda: process_gone(pid), 10, "the supervisor to die")
    # the next look at a non-terminal job starts a new supervisor, which restarts the orphan
    poll_until(lambda: job.status().preemptions == 1, 60, "the job to be restarted")
    gate.write_text("go")
    status = job.wait(timeout=60)
    assert status.state is JobState.SUCCEEDED and status.attempts == 2
    assert driver.supervisor_pid() not in (None, pid)


def test_sigterm_to_the_supervisor_preempts_its_jobs(jobs_dir: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    job, _, pid = _running_job_and_supervisor(jobs_dir, gate)
    os.kill(pid, signal.SIGTERM)
    poll_until(lambda: process_gone(pid), 30, "the supervisor to exit")
    status = job.status()  # starts a new supervisor: the job goes on
    assert status.preemptions == 1
    gate.write_text("go")
    assert job.wait(timeout=60).state is JobState.SUCCEEDED


def test_an_idle_supervisor_exits_and_comes_back(jobs_dir: Path) -> None:
    launcher = open_launcher(_url(jobs_dir, idle=0.2))
    driver = launcher.driver
    assert isinstance(driver, LocalLauncher)
    assert launcher.submit(JobSpec(command=[sys.executable, "-c", "pass"])).wait(timeout=60).succeeded
    poll_until(lambda: driver.supervisor_pid() is None, 30, "the idle supervisor to exit")
    assert launcher.submit(JobSpec(command=[sys.executable, "-c", "pass"])).wait(timeout=60).succeeded


def test_open_from_the_profile(jobs_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PORTABLE_JOBS_URL", _url(jobs_dir))
    monkeypatch.delenv("PORTABLE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    launcher = open_launcher()
    assert isinstance(launcher.driver, LocalLauncher)
    assert launcher.driver.root == str(jobs_dir)
    config = tmp_path / "portable.toml"
    config.write_text('[profiles.gpu]\nrequires = ["gpus", "preempt"]\n[profiles.spot]\nrequires = ["preempt", "conditional_create"]\n')
    monkeypatch.setenv("PORTABLE_CONFIG", str(config))
    with pytest.raises(MissingCapability, match="gpus"):
        open_launcher(profile="gpu")
    assert open_launcher(profile="spot").capabilities.preempt


def test_a_policy_overrides_the_profiles_for_the_launcher_and_its_events(jobs_dir: Path, unique_name: str) -> None:
    mine = ResiliencePolicy(retry=RetryPolicy(max_attempts=1), breaker=None)
    profiles = Profile("p", storage="mem://", queue="mem://", jobs=_url(jobs_dir), resilience=ResiliencePolicy(deadline=30))
    with open_launcher(profile=profiles, policy=mine, events=f"mem://{unique_name}") as launcher:
        assert launcher._guard.policy is mine and launcher._guard_no_retry.policy is mine
        assert launcher._events is not None and launcher._events._topic._guard.policy is mine
    with open_launcher(profile=profiles) as launcher:
        assert launcher._guard.policy is profiles.resilience


def test_default_url_is_a_folder_under_the_working_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for url in ("local://", "local://./.portable/jobs?workers=4"):
        driver = open_launcher(url).driver
        assert isinstance(driver, LocalLauncher)
        assert driver.root == str(tmp_path / ".portable" / "jobs")


@pytest.mark.parametrize(
    "url", ["local:///tmp/x?workers=0", "local:///tmp/x?workers=many", "local:///tmp/x?grace=-1", "local:///tmp/x?colour=red"]
)
def test_bad_url_options(url: str) -> None:
    with pytest.raises(InvalidURL):
        open_launcher(url)
