"""``batch://`` — AWS Batch jobs through boto3, with logs from CloudWatch Logs.

URLs:
    ``batch://JOB_QUEUE?job_definition=NAME[:REVISION]``: jobs go to the job
    queue ``JOB_QUEUE`` (a name or an ARN's last part) and run the job
    definition ``NAME`` (its latest ACTIVE revision unless one is named).
    Both must exist; the job definition must be of type ``container``.

Options:
    ``job_definition`` (str, required): the job definition.
    ``region``, ``endpoint_url``, ``profile``, ``timeout``: as every AWS URL
    (see :mod:`portable_aws._aws`).
    ``log_group`` (str): the CloudWatch Logs group of the jobs' output.
    Defaults to the job definition's ``awslogs-group``, else ``/aws/batch/job``.
    ``wrap`` (bool): run the command under ``/bin/sh`` to set the portable
    job variables (below). Defaults to true; turn it off for images without
    a shell, and read ``AWS_BATCH_JOB_ID`` / ``AWS_BATCH_JOB_ATTEMPT`` instead.
    ``poll`` (float): seconds between polls of ``wait`` and ``logs(follow=True)``.
    Defaults to 2.

What a JobSpec becomes:
    ``command`` -> containerOverrides.command (inside the wrapper);
    ``env`` -> containerOverrides.environment plus ``PORTABLE_JOB_NAME`` and
    ``PORTABLE_CHECKPOINT_URL``; the wrapper exports ``PORTABLE_JOB_ID`` and
    ``PORTABLE_JOB_ATTEMPT`` from Batch's ``AWS_BATCH_JOB_ID`` and
    ``AWS_BATCH_JOB_ATTEMPT`` and changes to ``workdir``; ``resources`` ->
    resourceRequirements (VCPU, MEMORY in MiB, GPU); ``retries`` ->
    retryStrategy.attempts = retries + 1; ``timeout`` ->
    timeout.attemptDurationSeconds, rounded up to Batch's minimum of 60 s;
    ``labels`` -> tags ``label:<key>``; ``image`` -> the job definition's
    image when it is the same, else a derived job definition
    ``<definition>-<hash of image>`` registered once with that image.
    The spec's name, idempotency key (base64 when it holds characters tags
    refuse) and fingerprint travel as tags ``portable.*``.

Names and limits:
    A job queue name is 1-128 of ``A-Z a-z 0-9 - _`` (InvalidURL otherwise,
    before any request); env names must not start with ``AWS_BATCH`` (Batch
    reserves them: InvalidArgument before any request). Job ids are Batch's
    (UUIDs; ``UUID:N`` for an array child).

Idempotent submit:
    A job submitted with an idempotency key is named ``k<digest>-<name>``
    (digest: 24 hex characters of the key's SHA-256). A submit first lists
    the queue's jobs with that name prefix (ListJobs filter JOB_NAME) and
    returns the one it finds (IdempotencyConflict when its fingerprint
    differs). Batch has no client token, so two racing submits can both
    create a job: after submitting, the driver lists again, keeps the oldest
    and terminates the newer one before it starts ("portable: duplicate of
    ..."). Batch lists jobs for some days after they end; after that a key
    can launch again. ListJobs is eventually consistent, so the race check
    is best effort; give ``run(..., idempotency=store)`` a store for
    effects that must never run twice.

States:
    SUBMITTED, PENDING, RUNNABLE, STARTING -> PENDING; RUNNING -> RUNNING;
    SUCCEEDED; FAILED -> FAILED, or CANCELLED when portable terminated it.
    ``exit_code`` is the last attempt's container exit code (0 for a
    SUCCEEDED job that reports none). ``cancel`` calls TerminateJob, which
    cancels a job that has not started and stops a running one.

Logs:
    ``logs()`` reads each attempt's log stream from CloudWatch Logs
    (GetLogEvents, oldest first); a job that wrote nothing, or whose stream
    is gone, yields no lines. ``follow=True`` polls every ``poll`` seconds
    until the job has ended and its streams are drained.

Retries:
    botocore's retries are off (``retries={"total_max_attempts": 1}``); only
    :mod:`portable.resilience` retries.

As:
    ``botocore.client.BaseClient``: the boto3 ``batch`` client (the
    ``logs`` client is the driver's ``logs_client`` attribute).

Capabilities:
    containers, gpus, logs, cancel, checkpoints, timeouts, retries,
    idempotent_submit, detached. Not preempt: Batch cannot be asked to
    reclaim a machine (Spot reclaims are retried by Batch's retry strategy).

Known differences:
    * moto, the emulator the tests use, runs no container without Docker:
      with ``{"batch": {"use_docker": false}}`` (its ``/moto-api/config``)
      every job moves straight to SUCCEEDED with no exit code, no output and
      no log events. On moto the tests therefore cover the API flow (submit,
      describe, list by label, idempotent submit and its conflicts, cancel of
      an ended job, NotFound, bad input), not what a job does; the contract
      tests that need a running container are marked xfail with that reason.
    * A timeout under 60 s is raised to 60 s (Batch's minimum).
"""

from __future__ import annotations

import base64
import builtins
import datetime as dt
import hashlib
import math
import re
import shlex
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from portable.driver.compute import (
    ComputeCapabilities,
    ComputeDriver,
    JobSpec,
    JobState,
    JobStatus,
    Resources,
    wait_for_status,
)
from portable.errors import ErrorCode, IdempotencyConflict, InvalidArgument, InvalidURL
from portable.urls import ParsedURL

from ._aws import (
    AWSClassifier,
    AWSOptions,
    BotoClientOwner,
    aws_error_code,
    boto_config,
    new_client,
)

__all__ = ["BatchLauncher", "JobNotFound"]

_QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
_DEFINITION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}(:[0-9]{1,9})?$")
_TAG_SAFE = re.compile(r"^[A-Za-z0-9 +\-=._:/@]{0,256}$")
_CANCELLED = "portable: cancelled"
_DUPLICATE = "portable: duplicate of "
_PENDING = frozenset({"SUBMITTED", "PENDING", "RUNNABLE", "STARTING"})
_TAG_KEY = "portable.idempotency_key"
_TAG_FINGERPRINT = "portable.fingerprint"
_TAG_NAME = "portable.name"
_LABEL = "label:"
_MIN_TIMEOUT = 60
_ENV_WRAPPER = (
    'PORTABLE_JOB_ID="${AWS_BATCH_JOB_ID:-}"; PORTABLE_JOB_ATTEMPT="${AWS_BATCH_JOB_ATTEMPT:-1}"; '
    "export PORTABLE_JOB_ID PORTABLE_JOB_ATTEMPT; "
)
_DEFINITION_FIELDS = (
    "vcpus",
    "memory",
    "command",
    "jobRoleArn",
    "executionRoleArn",
    "volumes",
    "environment",
    "mountPoints",
    "readonlyRootFilesystem",
    "privileged",
    "ulimits",
    "user",
    "instanceType",
    "resourceRequirements",
    "linuxParameters",
    "logConfiguration",
    "secrets",
    "networkConfiguration",
    "fargatePlatformConfiguration",
    "ephemeralStorage",
    "runtimePlatform",
    "repositoryCredentials",
)


class JobNotFound(KeyError):
    """No job with this id in Batch (DescribeJobs answered nothing)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "no such job"


def key_digest(key: str) -> str:
    """The 24 hex characters of ``key``'s SHA-256 that name its job (``k<digest>-<name>``)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]


def _to_tag(text: str) -> str:
    """``text`` as a tag value: as it is when tags accept it, else ``b64:`` and its base64."""
    if _TAG_SAFE.match(text) and not text.startswith("b64:"):
        return text
    return "b64:" + base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii")


def _from_tag(value: str | None) -> str | None:
    if value is None or not value.startswith("b64:"):
        return value
    return base64.urlsafe_b64decode(value[4:].encode("ascii")).decode("utf-8")


def _from_epoch_ms(ms: Any) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(int(ms) / 1000, dt.UTC) if ms else None


class _JobDefinitions:
    """The job definition the launcher's jobs run, and those derived from it for
    other images: ``<definition>-<hash of image>``, registered once, found again
    by name afterwards (by this or any other process)."""

    def __init__(self, client: Any, definition: str) -> None:
        self.client = client
        self.definition = definition  # NAME or NAME:REVISION
        self._base: dict[str, Any] | None = None
        self._arn_by_image: dict[str, str] = {}
        self._lock = threading.Lock()

    def base(self) -> dict[str, Any]:
        """The named revision, or the latest ACTIVE one (read once)."""
        with self._lock:
            if self._base is None:
                name, _, revision = self.definition.partition(":")
                if revision:
                    found = self.client.describe_job_definitions(jobDefinitions=[self.definition])
                else:
                    found = self.client.describe_job_definitions(jobDefinitionName=name, status="ACTIVE")
                defs = sorted(found.get("jobDefinitions", []), key=lambda d: int(d.get("revision", 0)))
                if not defs:
                    raise JobNotFound(f"no ACTIVE job definition {self.definition!r}")
                self._base = defs[-1]
            return self._base

    def arn_for(self, image: str | None) -> str:
        """The ARN of the definition that runs ``image`` (None: the base's own image)."""
        base = self.base()
        props = base.get("containerProperties") or {}
        if image is None or image == props.get("image"):
            return str(base["jobDefinitionArn"])
        with self._lock:
            known = self._arn_by_image.get(image)
        if known:
            return known
        name = f"{base['jobDefinitionName'][:110]}-{hashlib.sha256(image.encode()).hexdigest()[:12]}"
        found = self.client.describe_job_definitions(jobDefinitionName=name, status="ACTIVE").get("jobDefinitions", [])
        same = [d for d in found if (d.get("containerProperties") or {}).get("image") == image]
        if same:
            arn = str(max(same, key=lambda d: int(d.get("revision", 0)))["jobDefinitionArn"])
        else:
            container = {k: props[k] for k in _DEFINITION_FIELDS if k in props}
            container["image"] = image
            extra: dict[str, Any] = {}
            if base.get("platformCapabilities"):
                extra["platformCapabilities"] = base["platformCapabilities"]
            arn = str(
                self.client.register_job_definition(
                    jobDefinitionName=name, type="container", containerProperties=container, **extra
                )["jobDefinitionArn"]
            )
        with self._lock:
            self._arn_by_image[image] = arn
        return arn

    def log_group(self) -> str | None:
        """The base definition's ``awslogs-group``, if it names one."""
        props = self.base().get("containerProperties") or {}
        options = (props.get("logConfiguration") or {}).get("options") or {}
        group = options.get("awslogs-group")
        return str(group) if group else None


class _JobLogs:
    """A job's output from CloudWatch Logs: one log stream per attempt, oldest first."""

    def __init__(self, client: Any, group: Callable[[], str], poll: float) -> None:
        self.client = client
        self.group = group  # resolved on first use: it may need the job definition
        self.poll = poll

    def lines(self, job: dict[str, Any], follow: bool, describe: Callable[[], dict[str, Any]]) -> Iterator[str]:
        """Yield the lines of every attempt of ``job``; with ``follow``, poll
        (``describe`` reads the job again) until it has ended and its streams are drained."""
        tokens: dict[str, str | None] = {}
        while True:
            ended = str(job.get("status")) in ("SUCCEEDED", "FAILED")
            for stream in self._stream_names(job):
                yield from self._read_stream(stream, tokens)
            if not follow or ended:
                return
            time.sleep(self.poll)
            job = describe()

    @staticmethod
    def _stream_names(job: dict[str, Any]) -> builtins.list[str]:
        names = [((a.get("container") or {}).get("logStreamName")) for a in job.get("attempts") or []]
        current = (job.get("container") or {}).get("logStreamName")
        if current:
            names.append(current)
        out: builtins.list[str] = []
        for name in names:
            if name and name not in out:
                out.append(name)
        return out

    def _read_stream(self, stream: str, tokens: dict[str, str | None]) -> Iterator[str]:
        """Yield what ``stream`` holds past ``tokens[stream]``, and advance that token."""
        group = self.group()
        while True:
            kwargs: dict[str, Any] = {"logGroupName": group, "logStreamName": stream, "startFromHead": True}
            token = tokens.get(stream)
            if token:
                kwargs["nextToken"] = token
            try:
                resp = self.client.get_log_events(**kwargs)
            except Exception as exc:
                if aws_error_code(exc)[0] == "ResourceNotFoundException":
                    return  # the job wrote nothing (yet), or its stream expired
                raise
            for event in resp.get("events", ()):
                yield str(event.get("message", "")).rstrip("\r\n")
            new = resp.get("nextForwardToken")
            if not new or new == token:
                tokens[stream] = token
                return
            tokens[stream] = new


class BatchLauncher(BotoClientOwner, AWSClassifier, ComputeDriver):
    """Jobs on one AWS Batch job queue with one job definition."""

    scheme = "batch"
    # the defaults (logs, cancel, checkpoints, timeouts, retries, idempotent submit, detached) and
    # containers and GPUs; Batch cannot be asked to reclaim a machine, so no preempt
    capabilities = ComputeCapabilities(containers=True, gpus=True)

    def __init__(
        self,
        job_queue: str,
        job_definition: str,
        *,
        options: AWSOptions | None = None,
        log_group: str | None = None,
        wrap: bool = True,
        poll: float = 2.0,
    ) -> None:
        if not _QUEUE_NAME.match(job_queue):
            raise InvalidURL(f"{job_queue!r} is not a Batch job queue name: 1-128 of A-Z, a-z, 0-9, '-', '_'")
        if not _DEFINITION.match(job_definition):
            raise InvalidURL(
                f"job_definition={job_definition!r} must be NAME or NAME:REVISION (1-128 of A-Z, a-z, 0-9, '-', '_')"
            )
        self.job_queue = job_queue
        self.job_definition = job_definition
        self.options = options or AWSOptions()
        self.endpoint = self.options.describe("batch")
        self.wrap = wrap
        self.poll = poll
        config = boto_config(self.options, pool=16)
        self.client: Any = new_client("batch", self.options, config)
        self.logs_client: Any = new_client("logs", self.options, config)
        self._log_group = log_group
        self.definitions = _JobDefinitions(self.client, job_definition)
        self._logs = _JobLogs(self.logs_client, self._log_group_name, poll)

    @classmethod
    def from_url(cls, url: ParsedURL) -> BatchLauncher:
        queue = url.host
        if not queue:
            raise InvalidURL(f"{url} names no job queue: write batch://JOB_QUEUE?job_definition=NAME")
        if url.path.strip("/"):
            raise InvalidURL(f"{url}: write batch://JOB_QUEUE?job_definition=NAME, with no path")
        options = AWSOptions.take(url)
        definition = url.take_str("job_definition")
        if not definition:
            raise InvalidURL(f"{url} needs ?job_definition=NAME[:REVISION]")
        log_group = url.take_str("log_group")
        wrap = url.take("wrap", bool, True)
        poll = url.take("poll", float, 2.0)
        if not 0.05 <= poll <= 60:
            raise InvalidURL(f"poll in {url} must be from 0.05 to 60 seconds, got {poll}")
        url.done()
        return cls(queue, definition, options=options, log_group=log_group, wrap=wrap, poll=poll)

    def __repr__(self) -> str:
        return f"BatchLauncher(queue={self.job_queue!r}, definition={self.job_definition!r}, endpoint={self.endpoint!r})"

    def _log_group_name(self) -> str:
        if self._log_group:
            return self._log_group
        try:
            group = self.definitions.log_group()
        except Exception:  # the definition cannot be read: its logs go to Batch's default group
            group = None
        self._log_group = group or "/aws/batch/job"
        return self._log_group

    # -- submit ----------------------------------------------------------
    def submit(self, spec: JobSpec) -> JobStatus:
        for name in spec.env:
            if name.startswith("AWS_BATCH"):
                raise InvalidArgument(f"env {name}: AWS Batch reserves names starting with AWS_BATCH; rename it")
        key = spec.idempotency_key
        fingerprint = spec.fingerprint()
        if key is not None:
            existing = self._jobs_with_key(key)
            if existing:
                return self._status_if_same_spec(existing[0], fingerprint, key)
        request = self._submit_request(spec, fingerprint)
        resp = self.client.submit_job(**request)
        job_id = str(resp["jobId"])
        if key is None:
            return self.describe(job_id)
        racers = self._jobs_with_key(key)
        ids = [j["jobId"] for j in racers]
        if job_id not in ids:  # ListJobs has not caught up: ours is all we know of
            return self.describe(job_id)
        winner = racers[0]
        if winner["jobId"] != job_id:
            self.client.terminate_job(jobId=job_id, reason=(_DUPLICATE + str(winner["jobId"]))[:256])
        return self._status_if_same_spec(winner, fingerprint, key)

    def _status_if_same_spec(self, job: dict[str, Any], fingerprint: str, key: str) -> JobStatus:
        tags = job.get("tags") or {}
        if tags.get(_TAG_FINGERPRINT) not in (None, fingerprint):
            raise IdempotencyConflict(
                f"idempotency key {key[:60]!r} was used for job {job['jobId']} with another spec",
                provider=self.scheme,
            )
        return self._status(job)

    def _submit_request(self, spec: JobSpec, fingerprint: str) -> dict[str, Any]:
        env = dict(spec.env)
        env["PORTABLE_JOB_NAME"] = spec.name
        if spec.checkpoint_url is not None:
            env["PORTABLE_CHECKPOINT_URL"] = spec.checkpoint_url
        command = list(spec.command)
        if self.wrap:
            script = _ENV_WRAPPER
            if spec.workdir is not None:
                script += f"cd {shlex.quote(spec.workdir)} || exit 127; "
            command = ["/bin/sh", "-c", script + 'exec "$@"', "portable-job", *command]
        overrides: dict[str, Any] = {
            "command": command,
            "environment": [{"name": k, "value": v} for k, v in env.items()],
        }
        res = spec.resources if isinstance(spec.resources, Resources) else Resources()
        requirements = []
        if res.cpu is not None:
            requirements.append({"type": "VCPU", "value": f"{res.cpu:g}"})
        if res.memory_mib is not None:
            requirements.append({"type": "MEMORY", "value": str(res.memory_mib)})
        if res.gpu:
            requirements.append({"type": "GPU", "value": str(res.gpu)})
        if requirements:
            overrides["resourceRequirements"] = requirements
        tags = {_TAG_NAME: spec.name, _TAG_FINGERPRINT: fingerprint}
        tags.update({f"{_LABEL}{k}": v for k, v in spec.labels.items()})
        name = spec.name
        if spec.idempotency_key is not None:
            tags[_TAG_KEY] = _to_tag(spec.idempotency_key)
            name = f"k{key_digest(spec.idempotency_key)}-{spec.name}"[:128]
        request: dict[str, Any] = {
            "jobName": name,
            "jobQueue": self.job_queue,
            "jobDefinition": self.definitions.arn_for(spec.image),
            "containerOverrides": overrides,
            "retryStrategy": {"attempts": spec.retries + 1},
            "tags": tags,
            "propagateTags": False,
        }
        if spec.timeout is not None:
            request["timeout"] = {"attemptDurationSeconds": max(_MIN_TIMEOUT, math.ceil(spec.timeout))}
        return request

    def _jobs_with_key(self, key: str) -> list[dict[str, Any]]:
        """Jobs of this queue submitted under ``key``, oldest first (described, with tags)."""
        prefix = f"k{key_digest(key)}-"
        ids = [
            s["jobId"]
            for s in self._job_summaries([{"name": "JOB_NAME", "values": [prefix + "*"]}])
            if str(s.get("jobName", "")).startswith(prefix)
        ]
        jobs = [
            j
            for j in self._describe_many(ids)
            if _from_tag((j.get("tags") or {}).get(_TAG_KEY)) == key
            and not str(j.get("statusReason", "")).startswith(_DUPLICATE)
        ]
        jobs.sort(key=lambda j: (int(j.get("createdAt", 0)), str(j["jobId"])))
        return jobs

    def _job_summaries(self, filters: builtins.list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"jobQueue": self.job_queue, "filters": filters, "maxResults": 1000}
            if token:
                kwargs["nextToken"] = token
            resp = self.client.list_jobs(**kwargs)
            yield from resp.get("jobSummaryList", ())
            token = resp.get("nextToken")
            if not token:
                return

    def _describe_many(self, ids: builtins.list[str]) -> builtins.list[dict[str, Any]]:
        out: builtins.list[dict[str, Any]] = []
        for start in range(0, len(ids), 100):
            out.extend(self.client.describe_jobs(jobs=ids[start : start + 100]).get("jobs", ()))
        return out

    # -- reading ---------------------------------------------------------
    def _described_job(self, job_id: str) -> dict[str, Any]:
        jobs = self.client.describe_jobs(jobs=[job_id]).get("jobs", [])
        if not jobs:
            raise JobNotFound(f"no Batch job {job_id!r} in {self.endpoint}")
        return dict(jobs[0])

    def describe(self, job_id: str) -> JobStatus:
        return self._status(self._described_job(job_id))

    def _status(self, job: dict[str, Any]) -> JobStatus:
        raw = str(job.get("status", "SUBMITTED"))
        reason_text = str(job.get("statusReason") or "")
        attempts = list(job.get("attempts") or [])
        last = attempts[-1] if attempts else {}
        container = last.get("container") or job.get("container") or {}
        exit_code = container.get("exitCode")
        if exit_code is None and job.get("container"):
            exit_code = job["container"].get("exitCode")
        running = raw in ("STARTING", "RUNNING")
        if raw in _PENDING and raw != "STARTING":
            state = JobState.PENDING
        elif running:
            state = JobState.RUNNING if raw == "RUNNING" else JobState.PENDING
        elif raw == "SUCCEEDED":
            state = JobState.SUCCEEDED
            exit_code = 0 if exit_code is None else exit_code
        elif reason_text.startswith((_CANCELLED, _DUPLICATE)):
            state = JobState.CANCELLED
        else:
            state = JobState.FAILED
        reason: str | None = None
        if state is JobState.FAILED:
            timeout = (job.get("timeout") or {}).get("attemptDurationSeconds")
            if "timeout" in reason_text.lower() or "duration exceeded" in reason_text.lower():
                reason = f"timed out after {timeout}s" if timeout else "timed out"
            elif exit_code is not None:
                reason = f"exit code {exit_code}" + (f": {reason_text}" if reason_text else "")
            else:
                reason = reason_text or str(container.get("reason") or "failed")
        elif state is JobState.CANCELLED:
            reason = "cancelled" if reason_text.startswith(_CANCELLED) else reason_text
        tags = job.get("tags") or {}
        return JobStatus(
            job_id=str(job["jobId"]),
            name=str(tags.get(_TAG_NAME) or job.get("jobName", "job")),
            state=state,
            exit_code=int(exit_code) if exit_code is not None else None,
            reason=reason,
            attempts=len(attempts) + (1 if running else 0),
            preemptions=0,
            labels={k[len(_LABEL) :]: v for k, v in tags.items() if k.startswith(_LABEL)},
            idempotency_key=_from_tag(tags.get(_TAG_KEY)),
            created=_from_epoch_ms(job.get("createdAt")),
            started=_from_epoch_ms(job.get("startedAt")),
            finished=_from_epoch_ms(job.get("stoppedAt")) if state.terminal else None,
        )

    def terminate(self, job_id: str, reason: str) -> None:
        job = self._described_job(job_id)
        if str(job.get("status")) in ("SUCCEEDED", "FAILED"):
            return
        self.client.terminate_job(jobId=job_id, reason=f"{_CANCELLED}: {reason}"[:256])

    def list_jobs(self, labels: Mapping[str, str]) -> Iterator[JobStatus]:
        # AFTER_CREATED_AT=0 lists every status (without a filter ListJobs lists RUNNING only).
        ids = [s["jobId"] for s in self._job_summaries([{"name": "AFTER_CREATED_AT", "values": ["0"]}])]
        wanted = {f"{_LABEL}{k}": v for k, v in labels.items()}
        jobs = [
            j
            for j in self._describe_many(ids)
            if all((j.get("tags") or {}).get(k) == v for k, v in wanted.items())
            and not str(j.get("statusReason", "")).startswith(_DUPLICATE)
        ]
        jobs.sort(key=lambda j: (int(j.get("createdAt", 0)), str(j["jobId"])))
        return iter([self._status(j) for j in jobs])

    def wait(self, job_id: str, timeout: float) -> JobStatus:
        # every poll is a DescribeJobs request: back off quickly to the URL's poll interval
        return wait_for_status(self.describe, job_id, timeout, poll=0.05, max_poll=self.poll, backoff=2.0)

    # -- logs ------------------------------------------------------------
    def logs(self, job_id: str, follow: bool) -> Iterator[str]:
        job = self._described_job(job_id)  # NotFound now, not at the first line
        return self._logs.lines(job, follow, lambda: self._described_job(job_id))

    # -- classification and escape hatches ------------------------------
    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, JobNotFound):
            return ErrorCode.NOT_FOUND
        code, _status = aws_error_code(exc)
        if code == "ClientException":
            text = str(exc).lower()
            if "does not exist" in text or "not found" in text:
                return ErrorCode.NOT_FOUND
        return super().code_of(exc)

    def close(self) -> None:
        super().close()
        self.logs_client.close()
