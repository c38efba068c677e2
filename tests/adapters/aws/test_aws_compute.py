"""batch:// on moto: the compute contract (the API flow: moto runs no container), plus Batch specifics."""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from portable.compute import Job, JobSpec, Launcher, open_launcher
from portable.errors import InvalidArgument, InvalidURL, NotFound
from portable.testing.compute_suite import ComputeContract, contract_profile

NO_CONTAINER = (
    "moto runs no container without Docker: every Batch job moves straight to SUCCEEDED with no "
    "exit code, output or log events"
)


class TestBatchContract(ComputeContract):
    xfail = {
        name: NO_CONTAINER
        for name in (
            "test_failing_exit_code_fails_with_the_code",
            "test_missing_program_fails_the_job",
            "test_status_shows_running_then_done",
            "test_env_workdir_and_job_variables",
            "test_wait_timeout_raises_and_the_job_goes_on",
            "test_retries_until_an_attempt_succeeds",
            "test_retries_run_out",
            "test_timeout_kills_the_job",
            "test_cancel_a_running_job",
            "test_logs_hold_stdout_and_stderr",
            "test_logs_follow_streams_until_the_end",
            "test_checkpoint_url_reaches_the_job",
        )
    }

    @pytest.fixture
    def launcher_url(self, batch_queue: dict[str, str], query: str) -> str:
        return f"batch://{batch_queue['queue']}?job_definition={batch_queue['definition']}&poll=0.1&{query}"

    @pytest.fixture
    def job_python(self) -> list[str]:
        return ["python3"]


# -- what only Batch has --------------------------------------------------------------------
@pytest.fixture
def launcher(batch_queue: dict[str, str], query: str) -> Iterator[Launcher]:
    url = f"batch://{batch_queue['queue']}?job_definition={batch_queue['definition']}&poll=0.1&{query}"
    with open_launcher(url, profile=contract_profile(url)) as launcher:
        yield launcher


def _raw(launcher: Launcher, job_id: str) -> dict[str, Any]:
    from botocore.client import BaseClient

    return launcher.as_(BaseClient).describe_jobs(jobs=[job_id])["jobs"][0]  # type: ignore[no-any-return]


def test_a_spec_becomes_a_batch_job(launcher: Launcher, unique_name: str) -> None:
    spec = JobSpec(
        command=["python3", "train.py", "--epochs", "3"],
        name="trainer",
        env={"MODE": "fast"},
        workdir="/srv/app",
        resources={"cpu": 0.5, "memory": "2Gi", "gpu": 1},
        retries=2,
        timeout=5,
        labels={"suite": unique_name, "team": "ml"},
        checkpoint_url="s3://ckpt-bucket/run-1",
    )
    job = launcher.submit(spec)
    raw = _raw(launcher, job.id)
    container = raw["container"]
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert "PORTABLE_JOB_ID=\"${AWS_BATCH_JOB_ID" in container["command"][2]
    assert "cd /srv/app" in container["command"][2]
    assert container["command"][3:] == ["portable-job", "python3", "train.py", "--epochs", "3"]
    env = {e["name"]: e["value"] for e in container["environment"]}
    assert env["MODE"] == "fast"
    assert env["PORTABLE_JOB_NAME"] == "trainer"
    assert env["PORTABLE_CHECKPOINT_URL"] == "s3://ckpt-bucket/run-1"
    assert raw["timeout"] == {"attemptDurationSeconds": 60}  # Batch's minimum
    assert raw["tags"]["label:team"] == "ml"
    status = job.status()
    assert (status.name, status.labels) == ("trainer", {"suite": unique_name, "team": "ml"})


def test_idempotency_keys_with_any_characters_round_trip(launcher: Launcher, unique_name: str) -> None:
    key = f"order #{unique_name} / ünïcode & more"
    job = launcher.submit(JobSpec(command=["true"], labels={"suite": unique_name}, idempotency_key=key))
    assert job.status().idempotency_key == key
    assert _raw(launcher, job.id)["jobName"].startswith("k")
    assert launcher.submit(JobSpec(command=["true"], labels={"suite": unique_name}, idempotency_key=key)).id == job.id


def test_racing_idempotent_submits_launch_one_job(launcher: Launcher, unique_name: str) -> None:
    spec = JobSpec(command=["true"], labels={"suite": unique_name}, idempotency_key=f"race-{unique_name}")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        ids = list(pool.map(lambda _: launcher.submit(spec).id, range(4)))
    assert len(set(ids)) == 1
    assert [s.job_id for s in launcher.list({"suite": unique_name})] == ids[:1]


def test_another_image_registers_a_derived_job_definition(launcher: Launcher, unique_name: str) -> None:
    first = launcher.submit(JobSpec(command=["true"], image="python:3.12-alpine", labels={"suite": unique_name}))
    second = launcher.submit(JobSpec(command=["true"], image="python:3.12-alpine", labels={"suite": unique_name}))
    base = launcher.submit(JobSpec(command=["true"], image="python:3.11-slim", labels={"suite": unique_name}))
    defs = [_raw(launcher, j.id)["jobDefinition"] for j in (first, second, base)]
    assert defs[0] == defs[1] != defs[2]
    assert ":" in defs[0] and "-" in defs[0].rsplit("/", 1)[1]


def test_logs_come_from_the_jobs_cloudwatch_stream(launcher: Launcher, aws: dict[str, str], unique_name: str) -> None:
    from tests.adapters.aws.conftest import boto3_client

    job = launcher.submit(JobSpec(command=["true"], labels={"suite": unique_name}))
    stream = _raw(launcher, job.id)["container"]["logStreamName"]
    logs = boto3_client(aws, "logs")
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName="/aws/batch/job")
    logs.create_log_stream(logGroupName="/aws/batch/job", logStreamName=stream)
    now = int(time.time() * 1000)
    events = [{"timestamp": now + i, "message": f"line {i}\n"} for i in range(3)]
    logs.put_log_events(logGroupName="/aws/batch/job", logStreamName=stream, logEvents=events)
    assert list(job.logs()) == ["line 0", "line 1", "line 2"]
    assert list(job.logs(follow=True)) == ["line 0", "line 1", "line 2"]  # the job has ended


def test_a_job_without_a_log_stream_has_no_lines(launcher: Launcher, unique_name: str) -> None:
    job = launcher.submit(JobSpec(command=["true"], labels={"suite": unique_name}))
    assert list(job.logs()) == []


def test_cancel_of_an_unknown_job_is_not_found(launcher: Launcher) -> None:
    with pytest.raises(NotFound):
        Job(launcher, "00000000-0000-0000-0000-000000000000").cancel()


def test_batch_reserved_env_is_refused_before_any_request(launcher: Launcher, unique_name: str) -> None:
    with pytest.raises(InvalidArgument, match="AWS_BATCH"):
        launcher.submit(JobSpec(command=["true"], env={"AWS_BATCH_X": "1"}, labels={"suite": unique_name}))
    assert launcher.list({"suite": unique_name}) == []


def test_sdk_retries_are_off(launcher: Launcher) -> None:
    from botocore.client import BaseClient

    assert launcher.as_(BaseClient).meta.config.retries["total_max_attempts"] == 1


@pytest.mark.parametrize(
    "bad",
    [
        "batch://queue",
        "batch://bad queue?job_definition=d",
        "batch://q?job_definition=bad name",
        "batch://q?job_definition=d&poll=0",
        "batch://q?job_definition=d&colour=blue",
        "batch://q/extra?job_definition=d",
    ],
)
def test_bad_urls_fail_before_any_request(bad: str) -> None:
    with pytest.raises(InvalidURL):
        open_launcher(bad)
