"""The compute contract: what every :class:`~portable.compute.Launcher` provider must do.

Use it by subclassing :class:`ComputeContract` and providing one fixture::

    class TestMyLauncher(ComputeContract):
        xfail = {"test_logs_follow": "the provider delivers logs only after the job ends"}

        @pytest.fixture
        def launcher_url(self, tmp_path):
            return f"mylauncher://queue-1?grace=1"

Fixture contract:
    ``launcher_url`` (required) returns the URL of a launcher the test may
    submit jobs to. The launcher need not be empty: every test labels its
    jobs ``suite=<unique_name>`` and lists only those. The fixture owns
    whatever the URL needs (a folder, a cluster) and tears it down after
    the test; a cancel or timeout test finishes faster if the URL sets a
    short grace period (1 s).

    ``job_python`` (optional) returns the argv prefix that runs Python in a
    job: ``[sys.executable]`` by default, right for launchers that run jobs
    on this machine. A container backend overrides it (``["python3"]``) and
    ``job_image``.

    ``job_image`` (optional) returns the image for container backends;
    None by default.

    ``checkpoint_url`` (optional) returns a bucket URL that both the test and
    the job can reach: ``file://<tmp_path>/ckpt`` by default.

Two faces: every test runs twice, ``test_x[sync]`` on :class:`~portable.compute.Launcher`
and ``test_x[async]`` on :class:`portable.aio.AsyncLauncher` (through
:func:`portable.testing.faces.blocking`, so one test body serves both). Set
``faces = ("sync",)`` on a subclass to run one face; an ``xfail`` entry applies
to both (it is looked up by the test's name).

Tests of optional features are skipped, naming the capability, when the
provider does not claim it (``timeouts``, ``cancel``, ``logs``, ``retries``,
``idempotent_submit``, ``checkpoints``, ``preempt``, ``gpus``); a provider
that claims a capability and fails its test fails the suite. Jobs use only
the Python standard library, except the checkpoint test, which needs
``portable`` importable in the job.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ..aio._compute import AsyncLauncher
from ..compute import Job, JobSpec, JobState, JobStatus, Launcher, open_launcher
from ..config import Profile
from ..errors import (
    DeadlineExceeded,
    IdempotencyConflict,
    InvalidArgument,
    InvalidURL,
    NotFound,
    Unsupported,
)
from ..resilience import ResiliencePolicy, RetryPolicy
from .faces import blocking

__all__ = ["BAD_SPECS", "ComputeContract", "FACES", "contract_profile", "poll_until"]

#: the faces a suite runs on: the sync types and their portable.aio twins
FACES = ("sync", "async")

#: Keyword arguments of JobSpec that every launcher must refuse before any request.
BAD_SPECS: dict[str, dict[str, Any]] = {
    "empty_command": {"command": []},
    "empty_program": {"command": ["", "x"]},
    "command_as_string": {"command": "echo hi"},
    "non_str_argument": {"command": ["echo", 3]},
    "nul_in_argument": {"command": ["echo", "a\x00b"]},
    "bad_name": {"command": ["true"], "name": "no spaces please"},
    "negative_cpu": {"command": ["true"], "resources": {"cpu": -1}},
    "zero_cpu": {"command": ["true"], "resources": {"cpu": 0}},
    "unparsable_cpu": {"command": ["true"], "resources": {"cpu": "two"}},
    "negative_memory": {"command": ["true"], "resources": {"memory": -512}},
    "unparsable_memory": {"command": ["true"], "resources": {"memory": "lots"}},
    "unknown_memory_unit": {"command": ["true"], "resources": {"memory": "2parsecs"}},
    "negative_gpu": {"command": ["true"], "resources": {"gpu": -1}},
    "unknown_resource": {"command": ["true"], "resources": {"disk": "10Gi"}},
    "negative_retries": {"command": ["true"], "retries": -1},
    "too_many_retries": {"command": ["true"], "retries": 100},
    "zero_timeout": {"command": ["true"], "timeout": 0},
    "negative_timeout": {"command": ["true"], "timeout": -5},
    "bad_env_name": {"command": ["true"], "env": {"1BAD": "x"}},
    "non_str_env_value": {"command": ["true"], "env": {"A": 1}},
    "reserved_env": {"command": ["true"], "env": {"PORTABLE_JOB_ID": "x"}},
    "bad_label_key": {"command": ["true"], "labels": {"Upper": "x"}},
    "bad_label_value": {"command": ["true"], "labels": {"k": "Has Space"}},
    "empty_idempotency_key": {"command": ["true"], "idempotency_key": ""},
    "bad_checkpoint_url": {"command": ["true"], "checkpoint_url": "not a url"},
    "checkpoint_url_not_a_bucket": {"command": ["true"], "checkpoint_url": "nosuchstore://x"},
}


def contract_profile(url: str) -> Profile:
    """A profile for contract tests: a few quick retries, no breaker, no requirements."""
    return Profile(
        name="contract",
        storage="mem://contract",
        queue="mem://contract",
        jobs=url,
        resilience=ResiliencePolicy(
            retry=RetryPolicy(max_attempts=3, initial_backoff=0.05, max_backoff=0.5), breaker=None
        ),
    )


def poll_until(fn: Callable[[], Any], timeout: float, what: str, interval: float = 0.01) -> Any:
    """Call ``fn`` until it returns something truthy; fail the test after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
        interval = min(interval * 1.5, 0.1)


_COUNT_JOB = """
import os, sys, time
import portable.checkpoint
ckpt = portable.checkpoint.from_env()
state = ckpt.load(default={"next": 1, "total": 0})
n, every, delay = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
print("resume", state["next"], "attempt", os.environ["PORTABLE_JOB_ATTEMPT"], flush=True)
for i in range(state["next"], n + 1):
    state["total"] += i
    state["next"] = i + 1
    if i % every == 0:
        ckpt.save(state)
    time.sleep(delay)
print("total", state["total"], flush=True)
"""


class ComputeContract:
    """Mix-in with the compute contract tests. Provide the ``launcher_url`` fixture."""

    xfail: dict[str, str] = {}
    #: the faces each test runs on (the ``face`` parameter, applied by portable's pytest plugin)
    faces: tuple[str, ...] = FACES

    # -- fixtures --------------------------------------------------------------
    @pytest.fixture
    def face(self, request: pytest.FixtureRequest) -> str:
        """``"sync"`` or ``"async"``: which face this run of a test goes through."""
        return str(getattr(request, "param", "sync"))

    @pytest.fixture
    def job_python(self) -> list[str]:
        return [sys.executable]

    @pytest.fixture
    def job_image(self) -> str | None:
        return None

    @pytest.fixture
    def checkpoint_url(self, tmp_path: Path) -> str:
        return f"file://{tmp_path / 'ckpt'}"

    @pytest.fixture
    def launcher(self, launcher_url: str, face: str) -> Iterator[Launcher]:
        """The launcher under test: a Launcher, or an AsyncLauncher behind :func:`blocking` (same calls)."""
        launcher = open_launcher(launcher_url, profile=contract_profile(launcher_url))
        if face == "sync":
            try:
                yield launcher
            finally:
                launcher.close()
            return
        twin = blocking(AsyncLauncher.from_sync(launcher))
        try:
            yield twin
        finally:
            twin.aclose()

    @pytest.fixture
    def spec(
        self, job_python: list[str], job_image: str | None, unique_name: str
    ) -> Callable[..., JobSpec]:
        """``spec(code, **fields)``: a JobSpec running Python ``code``, labelled for this test."""

        def make(code: str, *args: str, **fields: Any) -> JobSpec:
            labels = {"suite": unique_name, **fields.pop("labels", {})}
            fields.setdefault("image", job_image)
            return JobSpec(command=[*job_python, "-c", code, *args], labels=labels, **fields)

        return make

    @staticmethod
    def need(launcher: Launcher, capability: str) -> None:
        if not getattr(launcher.capabilities, capability):
            pytest.skip(f"the provider lacks the {capability} capability")

    @staticmethod
    def running(job: Job, timeout: float = 60) -> JobStatus:
        def check() -> JobStatus | None:
            st = job.status()
            assert not st.done, f"the job ended before it was seen running: {st}"
            return st if st.state is JobState.RUNNING else None

        return poll_until(check, timeout, f"{job.id} to run")  # type: ignore[no-any-return]

    # -- the basics ------------------------------------------------------------
    def test_submit_and_wait_succeeds(self, launcher: Launcher, spec: Callable[..., JobSpec]) -> None:
        job = launcher.submit(spec("print('ok')", name="hello"))
        status = job.wait(timeout=120)
        assert status.state is JobState.SUCCEEDED
        assert status.exit_code == 0
        assert status.done and status.succeeded
        assert status.job_id == job.id
        assert status.name == "hello"
        assert status.attempts == 1
        assert status.created is not None and status.finished is not None
        assert status.finished >= status.created

    def test_failing_exit_code_fails_with_the_code(self, launcher: Launcher, spec: Callable[..., JobSpec]) -> None:
        status = launcher.submit(spec("raise SystemExit(3)")).wait(timeout=120)
        assert status.state is JobState.FAILED
        assert status.exit_code == 3
        assert status.reason and "3" in status.reason

    def test_missing_program_fails_the_job(self, launcher: Launcher, unique_name: str, job_image: str | None) -> None:
        job = launcher.submit(
            JobSpec(command=[f"/nonexistent/{unique_name}"], labels={"suite": unique_name}, image=job_image)
        )
        status = job.wait(timeout=120)
        assert status.state is JobState.FAILED
        assert status.reason

    def test_get_returns_the_job(self, launcher: Launcher, spec: Callable[..., JobSpec]) -> None:
        job = launcher.submit(spec("pass"))
        again = launcher.get(job.id)
        assert again.id == job.id
        assert again.wait(timeout=120).state is JobState.SUCCEEDED
        assert job.status().state is JobState.SUCCEEDED

    def test_get_unknown_job_is_not_found(self, launcher: Launcher) -> None:
        with pytest.raises(NotFound):
            launcher.get("job-000000000000000000000000")

    def test_status_shows_running_then_done(self, launcher: Launcher, spec: Callable[..., JobSpec], tmp_path: Path) -> None:
        gate = tmp_path / "go"
        job = launcher.submit(
            spec("import os, time\nwhile not os.path.exists(os.environ['GATE']): time.sleep(0.01)", env={"GATE": str(gate)})
        )
        status = self.running(job)
        assert status.started is not None and status.finished is None
        gate.write_text("go")
        assert job.wait(timeout=120).state is JobState.SUCCEEDED

    def test_env_workdir_and_job_variables(
        self, launcher: Launcher, spec: Callable[..., JobSpec], tmp_path: Path
    ) -> None:
        self.need(launcher, "logs")
        code = (
            "import os; print(os.getcwd()); "
            "print(os.environ['GREETING']); print(os.environ['PORTABLE_JOB_ID']); "
            "print(os.environ['PORTABLE_JOB_NAME']); print(os.environ['PORTABLE_JOB_ATTEMPT'])"
        )
        job = launcher.submit(spec(code, name="envy", env={"GREETING": "hello there"}, workdir=str(tmp_path)))
        assert job.wait(timeout=120).state is JobState.SUCCEEDED
        lines = list(job.logs())
        assert lines[:5] == [str(tmp_path), "hello there", job.id, "envy", "1"]

    def test_wait_timeout_raises_and_the_job_goes_on(self, launcher: Launcher, spec: Callable[..., JobSpec], tmp_path: Path) -> None:
        gate = tmp_path / "go"
        job = launcher.submit(
            spec("import os, time\nwhile not os.path.exists(os.environ['GATE']): time.sleep(0.01)", env={"GATE": str(gate)})
        )
        with pytest.raises(DeadlineExceeded):
            job.wait(timeout=0.2)
        assert not job.status().done
        gate.write_text("go")
        assert job.wait(timeout=120).state is JobState.SUCCEEDED

    # -- retries, timeouts, cancel ------------------------------------------------
    def test_retries_until_an_attempt_succeeds(self, launcher: Launcher, spec: Callable[..., JobSpec]) -> None:
        self.need(launcher, "retries")
        code = "import os, sys; sys.exit(0 if os.environ['PORTABLE_JOB_ATTEMPT'] == '3' else 7)"
        status = launcher.submit(spec(code, retries=2)).wait(timeout=120)
        assert status.state is JobState.SUCCEEDED
        assert status.attempts == 3
        assert status.exit_code == 0

    def test_retries_run_out(self, launcher: Launcher, spec: Callable[..., JobSpec]) -> None:
        self.need(launcher, "retries")
        status = launcher.submit(spec("raise SystemExit(5)", retries=1)).wait(timeout=120)
        assert status.state is JobState.FAILED
        assert status.attempts == 2
        assert status.exit_code == 5

    def test_timeout_kills_the_job(self, launcher: Launcher, spec: Callable[..., JobSpec]) -> None:
        self.need(launcher, "timeouts")
        started = time.monotonic()
        status = launcher.submit(spec("import time; time.sleep(120)", timeout=1, retries=2)).wait(timeout=90)
        assert status.state is JobState.FAILED
        assert status.reason and "timed out" in status.reason
        assert status.attempts == 1, "a timed-out attempt is not retried"
        assert time.monotonic() - started < 60

    def test_cancel_a_running_job(self, launcher: Launcher, spec: Callable[..., JobSpec]) -> None:
        self.need(launcher, "cancel")
        job = launcher.submit(spec("import time; time.sleep(120)"))
        self.running(job)
        job.cancel()
        status = job.wait(timeout=60)
        assert status.state is JobState.CANCELLED
        job.cancel()  # cancelling an ended job does nothing
        assert job.status().state is JobState.CANCELLED

    def test_cancel_an_ended_job_changes_nothing(self, launcher: Launcher, spec: Callable[..., JobSpec]) -> None:
        job = launcher.submit(spec("pass"))
        assert job.wait(timeout=120).state is JobState.SUCCEEDED
        job.cancel()
        assert job.status().state is JobState.SUCCEEDED

    # -- idempotency ------------------------------------------------------------
    def test_idempotent_submit_returns_the_first_job(
        self, launcher: Launcher, spec: Callable[..., JobSpec], unique_name: str
    ) -> None:
        self.need(launcher, "idempotent_submit")
        first = launcher.submit(spec("pass", idempotency_key=f"key-{unique_name}"))
        second = launcher.submit(spec("pass", idempotency_key=f"key-{unique_name}"))
        assert second.id == first.id
        assert first.wait(timeout=120).state is JobState.SUCCEEDED
        third = launcher.submit(spec("pass", idempotency_key=f"key-{unique_name}"))
        assert third.id == first.id
        assert [s.job_id for s in launcher.list({"suite": unique_name})] == [first.id]
        assert first.status().attempts == 1

    def test_idempotency_key_with_another_spec_conflicts(
        self, launcher: Launcher, spec: Callable[..., JobSpec], unique_name: str
    ) -> None:
        self.need(launcher, "idempotent_submit")
        launcher.submit(spec("pass", idempotency_key=f"key-{unique_name}"))
        with pytest.raises(IdempotencyConflict):
            launcher.submit(spec("print('something else')", idempotency_key=f"key-{unique_name}"))

    # -- logs ---------------------------------------------------------------------
    def test_logs_hold_stdout_and_stderr(self, launcher: Launcher, spec: Callable[..., JobSpec]) -> None:
        self.need(launcher, "logs")
        code = "import sys\nprint('to stdout', flush=True)\nprint('to stderr', file=sys.stderr, flush=True)\nprint('é ünïcode')"
        job = launcher.submit(spec(code))
        assert job.wait(timeout=120).state is JobState.SUCCEEDED
        lines = list(job.logs())
        assert "to stdout" in lines and "to stderr" in lines and "é ünïcode" in lines
        assert lines.index("to stdout") < lines.index("to stderr")

    def test_logs_follow_streams_until_the_end(self, launcher: Launcher, spec: Callable[..., JobSpec]) -> None:
        self.need(launcher, "logs")
        code = "import time\nfor i in range(5):\n    print('line', i, flush=True)\n    time.sleep(0.05)"
        job = launcher.submit(spec(code))
        lines = [line for line in job.logs(follow=True) if line.startswith("line")]
        assert lines == [f"line {i}" for i in range(5)]
        assert job.status().done

    def test_logs_of_unknown_job_is_not_found(self, launcher: Launcher) -> None:
        with pytest.raises(NotFound):
            list(launcher.job("job-000000000000000000000000").logs())

    # -- listing ------------------------------------------------------------------
    def test_list_by_label(self, launcher: Launcher, spec: Callable[..., JobSpec], unique_name: str) -> None:
        a = launcher.submit(spec("pass", labels={"team": "red"}))
        b = launcher.submit(spec("pass", labels={"team": "blue"}))
        c = launcher.submit(spec("pass", labels={"team": "red"}))
        for job in (a, b, c):
            job.wait(timeout=120)
        red = launcher.list({"suite": unique_name, "team": "red"})
        assert [s.job_id for s in red] == [a.id, c.id]
        assert all(s.labels["team"] == "red" for s in red)
        everything = launcher.list({"suite": unique_name})
        assert {s.job_id for s in everything} == {a.id, b.id, c.id}
        assert launcher.list({"suite": unique_name}, states=[JobState.FAILED]) == []
        assert launcher.list({"suite": unique_name, "team": "green"}) == []

    # -- checkpoints and preemption ----------------------------------------------------
    def test_checkpoint_url_reaches_the_job(
        self, launcher: Launcher, spec: Callable[..., JobSpec], checkpoint_url: str
    ) -> None:
        self.need(launcher, "checkpoints")
        self.need(launcher, "logs")
        job = launcher.submit(
            spec("import os; print(os.environ['PORTABLE_CHECKPOINT_URL'])", checkpoint_url=checkpoint_url)
        )
        assert job.wait(timeout=120).state is JobState.SUCCEEDED
        assert checkpoint_url in list(job.logs())

    def test_preempted_job_resumes_from_its_checkpoint(
        self, launcher: Launcher, spec: Callable[..., JobSpec], checkpoint_url: str
    ) -> None:
        self.need(launcher, "preempt")
        self.need(launcher, "checkpoints")
        from ..checkpoint import open_checkpoint

        job = launcher.submit(spec(_COUNT_JOB, "60", "10", "0.02", checkpoint_url=checkpoint_url))
        ckpt = open_checkpoint(checkpoint_url)

        def saved() -> int:
            ckpt.load()
            return ckpt.step

        poll_until(lambda: saved() >= 2, 60, "the job's second checkpoint")
        launcher.preempt(job.id, grace=0.5)
        status = job.wait(timeout=120)
        assert status.state is JobState.SUCCEEDED, status
        assert status.preemptions == 1
        assert status.attempts == 2
        if launcher.capabilities.logs:
            lines = list(job.logs())
            resumes = [int(line.split()[1]) for line in lines if line.startswith("resume")]
            assert resumes[0] == 1 and resumes[1] > 20 and (resumes[1] - 1) % 10 == 0, lines
            assert f"total {sum(range(61))}" in lines

    def test_preempting_an_ended_job_changes_nothing(self, launcher: Launcher, spec: Callable[..., JobSpec]) -> None:
        self.need(launcher, "preempt")
        job = launcher.submit(spec("pass"))
        assert job.wait(timeout=120).state is JobState.SUCCEEDED
        launcher.preempt(job.id)
        status = job.status()
        assert status.state is JobState.SUCCEEDED and status.preemptions == 0

    def test_preempt_follows_the_capability(self, launcher: Launcher) -> None:
        """An unknown job: NotFound where preempt is supported, Unsupported where it is not."""
        with pytest.raises(NotFound if launcher.capabilities.preempt else Unsupported):
            launcher.preempt("job-000000000000000000000000")

    # -- bad input --------------------------------------------------------------------
    @pytest.mark.parametrize("case", sorted(BAD_SPECS))
    def test_bad_spec_is_refused_before_any_request(self, launcher: Launcher, unique_name: str, case: str) -> None:
        fields = dict(BAD_SPECS[case])
        fields["labels"] = {"suite": unique_name, **fields.get("labels", {})}
        with pytest.raises((InvalidArgument, InvalidURL)) as err:
            launcher.submit(JobSpec(**fields))
        assert str(err.value)
        assert launcher.list({"suite": unique_name}) == []

    def test_not_a_spec_is_refused(self, launcher: Launcher) -> None:
        with pytest.raises(InvalidArgument):
            launcher.submit({"command": ["true"]})  # type: ignore[arg-type]

    @pytest.mark.parametrize("job_id", ["", "../etc", "a/b", "with space", 7, None])
    def test_bad_job_id_is_refused(self, launcher: Launcher, job_id: Any) -> None:
        with pytest.raises(InvalidArgument):
            launcher.get(job_id)
        with pytest.raises(InvalidArgument):
            launcher.job(job_id)

    def test_a_job_handle_needs_no_request_and_finds_the_job(
        self, launcher: Launcher, spec: Callable[..., JobSpec]
    ) -> None:
        job = launcher.submit(spec("pass"))
        handle = launcher.job(job.id)
        assert handle.id == job.id
        assert handle.wait(timeout=120).state is JobState.SUCCEEDED
        with pytest.raises(NotFound):
            launcher.job("job-000000000000000000000000").status()

    def test_the_idempotency_key_argument_is_the_specs_key(
        self, launcher: Launcher, spec: Callable[..., JobSpec], unique_name: str
    ) -> None:
        self.need(launcher, "idempotent_submit")
        first = launcher.submit(spec("pass"), idempotency_key=f"arg-{unique_name}")
        again = launcher.submit(spec("pass", idempotency_key=f"arg-{unique_name}"))
        assert again.id == first.id
        with pytest.raises(InvalidArgument, match="differs"):
            launcher.submit(spec("pass", idempotency_key="one"), idempotency_key="another")
        assert [s.job_id for s in launcher.list({"suite": unique_name})] == [first.id]

    @pytest.mark.parametrize("states", ["FAILED", [b"x"], ["NOPE"], 3])
    def test_bad_states_are_refused(self, launcher: Launcher, states: Any) -> None:
        with pytest.raises(InvalidArgument):
            launcher.list(states=states)

    def test_gpus_need_the_capability(self, launcher: Launcher, spec: Callable[..., JobSpec]) -> None:
        if launcher.capabilities.gpus:
            pytest.skip("the provider has GPUs")
        with pytest.raises(Unsupported):
            launcher.submit(spec("pass", resources={"gpu": 1}))
