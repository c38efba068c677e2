"""The compute driver protocol: what a job launcher adapter implements.

Application code should use :class:`portable.compute.Launcher`. A driver
subclasses :class:`ComputeDriver` and implements the abstract methods; the
optional ones (:meth:`ComputeDriver.preempt`, :meth:`ComputeDriver.wait`)
have defaults.

Public helpers for drivers: :func:`wait_for_status` (the polling loop behind
:meth:`ComputeDriver.wait`, with the poll interval and backoff a driver
chooses) and :data:`RESERVED_ENV`.

Inputs a driver can rely on (the Launcher checks and normalises them first):

* ``spec`` is a :class:`JobSpec` whose ``command`` is a non-empty tuple of
  ``str`` without NUL; ``env`` and ``labels`` are ``dict[str, str]`` of
  portable names (see :mod:`portable.compute`); ``resources`` is a
  :class:`Resources` with ``cpu`` a float > 0 or None, ``memory_mib`` an
  int > 0 or None and ``gpu`` an int >= 0; ``retries`` is 0-9; ``timeout``
  is None or a float > 0 (seconds, per attempt); ``checkpoint_url`` is None
  or a storage URL whose scheme is known.
* ``gpu > 0`` reaches only a driver whose capabilities say ``gpus``.
* ``env`` never sets the variables the launcher owns (:data:`RESERVED_ENV`).
* job ids are non-empty ``str`` of at most 256 characters from
  ``[A-Za-z0-9_.:-]``, not starting with ``.``.

What a driver must do for the variables it owns: every attempt of a job runs
with ``PORTABLE_JOB_ID``, ``PORTABLE_JOB_NAME``, ``PORTABLE_JOB_ATTEMPT``
(1-based, counting preempted attempts too) and, when the spec names one,
``PORTABLE_CHECKPOINT_URL`` in its environment.

States: a job is PENDING until a process of it starts, RUNNING while one
runs, and ends SUCCEEDED (exit code 0), FAILED (a non-zero exit code after
its retries, a timeout, or a command that could not start) or CANCELLED.
A failed attempt with retries left goes back to PENDING. A preempted attempt
(the provider reclaimed the machine; :meth:`ComputeDriver.preempt`) goes back
to PENDING and does not count against ``retries``.

Error contract: methods raise the native error and let :meth:`code_of`
classify it. An unknown job id is ``NOT_FOUND``. :meth:`submit` with an
``idempotency_key`` that names an existing job returns that job and launches
nothing, and raises ``IDEMPOTENCY_CONFLICT`` if that job's spec differs
(compare :meth:`JobSpec.fingerprint`). :meth:`terminate` of a job that has
already ended returns normally.
"""

from __future__ import annotations

import abc
import datetime as dt
import enum
import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import Unsupported
from . import Capabilities, Classifier

if TYPE_CHECKING:
    from .aio_compute import AsyncComputeDriver

__all__ = [
    "ComputeCapabilities",
    "ComputeDriver",
    "JobSpec",
    "JobState",
    "JobStatus",
    "RESERVED_ENV",
    "Resources",
    "wait_for_status",
]

#: Environment variables the launcher sets in every job; a spec may not set them.
RESERVED_ENV = frozenset(
    {"PORTABLE_JOB_ID", "PORTABLE_JOB_NAME", "PORTABLE_JOB_ATTEMPT", "PORTABLE_CHECKPOINT_URL"}
)


class JobState(enum.StrEnum):
    """Where a job is in its life. The three last are terminal."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        """True once the job can change no more."""
        return self in _TERMINAL


_TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


@dataclass(frozen=True, slots=True)
class Resources:
    """What one attempt of a job asks for.

    Accepted loosely by :class:`portable.compute.JobSpec` (``cpu="500m"``,
    ``memory="2Gi"``) and normalised to these types before a driver sees them.

    Attributes:
        cpu: virtual CPUs (``0.5``, ``2``), or None for the provider's default.
        memory_mib: memory in MiB, or None for the provider's default.
        gpu: GPUs. Defaults to 0.
        spot: run on spot / preemptible capacity (cheaper, reclaimable at any
            time; a reclaimed attempt counts as a preemption and resumes from
            its checkpoint). Defaults to False. A launcher that cannot place a
            job on such capacity refuses it (``capabilities.spot``).
    """

    cpu: float | None = None
    memory_mib: int | None = None
    gpu: int = 0
    spot: bool = False


#: the job-environment variables that carry the launching trace's context (W3C Trace Context), not
#: part of what a job is
_TRACE_CONTEXT_ENV = frozenset({"TRACEPARENT", "TRACESTATE"})


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """What to run. Every field but ``command`` has a default.

    Attributes:
        command: the argv list (``["python", "train.py", "--epochs", "3"]``);
            no shell is involved. Required.
        name: a label for people, 1-128 of ``[A-Za-z0-9_-]`` starting with a
            letter or digit. Defaults to ``"job"``.
        image: the container image, for container backends; others ignore it.
        env: extra environment variables of the job.
        workdir: the working directory of the job. Defaults to the backend's
            (the submitting process's working directory on ``local://``).
        resources: a :class:`Resources`, or a mapping with ``cpu``,
            ``memory`` (MiB as an int, or a string with a unit such as
            ``"512Mi"``, ``"2Gi"``, ``"1G"``) and ``gpu``.
        retries: how many times a failed attempt is retried, 0-9. Defaults to 0.
        timeout: seconds one attempt may run before it is killed; a timed-out
            attempt fails the job without retry. Defaults to no limit.
        labels: ``{key: value}`` to find jobs by with ``Launcher.list``. Keys
            are 1-63 of ``[a-z0-9_-]`` starting with a letter; values 0-63
            of ``[a-z0-9_-]`` (the strictest provider's rule, so a label is
            valid everywhere).
        idempotency_key: submitting again with the same key returns the
            first job and launches nothing, even from another process.
        checkpoint_url: a bucket URL where the job keeps its checkpoint
            (see :mod:`portable.checkpoint`); passed to the job as
            ``PORTABLE_CHECKPOINT_URL``.
    """

    command: Any
    name: str = "job"
    image: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str | None = None
    resources: Any = None
    retries: int = 0
    timeout: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None
    checkpoint_url: str | None = None

    def fingerprint(self) -> str:
        """A digest of everything that defines the job except its idempotency key and trace context.

        Two submissions with one key and different fingerprints conflict.
        ``TRACEPARENT`` and ``TRACESTATE`` are left out: they say which trace
        launched the job, not what it runs, so a resubmission from another
        trace is the same job. Call it on a normalised spec (the Launcher
        passes drivers only those).
        """
        res = self.resources if isinstance(self.resources, Resources) else Resources()
        body = {
            "command": list(self.command),
            "name": self.name,
            "image": self.image,
            "env": {k: v for k, v in sorted(self.env.items()) if k not in _TRACE_CONTEXT_ENV},
            "workdir": self.workdir,
            # spot only when asked for, so every digest made before the field existed still holds
            "resources": [res.cpu, res.memory_mib, res.gpu, *(["spot"] if res.spot else [])],
            "retries": self.retries,
            "timeout": self.timeout,
            "labels": dict(sorted(self.labels.items())),
            "checkpoint_url": self.checkpoint_url,
        }
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A snapshot of a job.

    Attributes:
        job_id: the provider's id of the job.
        name: the spec's name.
        state: a :class:`JobState`.
        exit_code: the last attempt's exit code once it has one; a negative
            number is the signal that ended the process (``-9``); None when
            the job never ran or the provider does not say.
        reason: why the job is in this state, for people (``"exit code 3"``,
            ``"timed out after 5s"``, ``"cancelled"``); None while nothing
            needs saying.
        attempts: attempts started so far (preempted ones included).
        preemptions: attempts ended by preemption; they do not use up retries.
        labels: the spec's labels.
        idempotency_key: the spec's key, if any.
        created, started, finished: UTC times, where known.
    """

    job_id: str
    name: str
    state: JobState
    exit_code: int | None = None
    reason: str | None = None
    attempts: int = 0
    preemptions: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None
    created: dt.datetime | None = None
    started: dt.datetime | None = None
    finished: dt.datetime | None = None

    @property
    def done(self) -> bool:
        """True once the job has ended (SUCCEEDED, FAILED or CANCELLED)."""
        return self.state.terminal

    @property
    def succeeded(self) -> bool:
        """True when the job ended SUCCEEDED."""
        return self.state is JobState.SUCCEEDED

    def as_dict(self) -> dict[str, Any]:
        """The status as JSON-ready values: the state by its value, times in ISO 8601, labels a dict.

        The keys are the attribute names, in the order above; ``portable jobs
        status --json`` prints this, and job events carry it without
        ``idempotency_key``.
        """

        def when(value: dt.datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        return {
            "job_id": self.job_id,
            "name": self.name,
            "state": self.state.value,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "attempts": self.attempts,
            "preemptions": self.preemptions,
            "labels": dict(self.labels),
            "idempotency_key": self.idempotency_key,
            "created": when(self.created),
            "started": when(self.started),
            "finished": when(self.finished),
        }


@dataclass(frozen=True, slots=True)
class ComputeCapabilities(Capabilities):
    """What a launcher can do. A profile's ``requires`` names these fields.

    Attributes:
        containers: runs ``spec.image``; without it the image is ignored.
        gpus: can give a job GPUs (``resources.gpu > 0``).
        logs: ``logs()`` returns the job's output.
        cancel: ``cancel()`` stops a running job (not only a pending one).
        checkpoints: passes ``PORTABLE_CHECKPOINT_URL`` to the job.
        preempt: ``Launcher.preempt`` can interrupt a running job the way a
            reclaimed spot machine would, and restarts it.
        timeouts: kills an attempt that runs past ``spec.timeout``.
        retries: retries a failed attempt up to ``spec.retries`` times.
        idempotent_submit: a repeated ``idempotency_key`` returns the first job.
        detached: jobs go on, and stay visible to other processes, after the
            submitting process exits.
        spot: can place a job on spot / preemptible capacity (``resources.spot``).
    """

    containers: bool = False
    gpus: bool = False
    logs: bool = True
    cancel: bool = True
    checkpoints: bool = True
    preempt: bool = False
    timeouts: bool = True
    retries: bool = True
    idempotent_submit: bool = True
    detached: bool = True
    spot: bool = False


def wait_for_status(
    describe: Callable[[str], JobStatus],
    job_id: str,
    timeout: float,
    *,
    poll: float = 0.005,
    max_poll: float = 0.25,
    backoff: float = 1.5,
) -> JobStatus:
    """Poll ``describe(job_id)`` until the job has ended or ``timeout`` seconds have passed.

    The first status is read at once; then the helper sleeps ``poll`` seconds,
    multiplies the interval by ``backoff`` after each poll up to ``max_poll``,
    and never sleeps past the deadline, so the last poll happens at or just
    after it. This is the loop behind :meth:`ComputeDriver.wait`; a driver
    overrides ``wait`` only to pass intervals that suit its provider.

    Where the drivers differ:

    * the default (:meth:`ComputeDriver.wait`): from 5 ms, x1.5, up to 250 ms.
    * ``local://``: from 1 ms, x1.5, up to 20 ms (a poll reads a local file).
    * ``batch://``: from 50 ms, x2, up to the URL's ``poll`` (2 s by default),
      since every poll is a DescribeJobs request.
    * ``dask://`` does not poll: it waits on the attempt's completion callback.

    Args:
        describe: the driver's :meth:`ComputeDriver.describe`.
        job_id: the job to wait for.
        timeout: seconds to wait at most; 0 reads the status once.
        poll: seconds of the first sleep. Defaults to 5 ms.
        max_poll: the longest sleep between two polls. Defaults to 250 ms.
        backoff: what each sleep is multiplied by for the next. Defaults to 1.5.

    Returns:
        The first terminal status read, or the last status read once the
        timeout has passed (then the job may not have ended).

    Raises:
        Whatever ``describe`` raises (the native error of an unknown job id,
        for one), unchanged: the portable layer classifies and wraps it.
    """
    end = time.monotonic() + timeout
    delay = poll
    while True:
        status = describe(job_id)
        left = end - time.monotonic()
        if status.state.terminal or left <= 0:
            return status
        time.sleep(min(delay, left))
        delay = min(delay * backoff, max_poll)


class ComputeDriver(Classifier, abc.ABC):
    """Base class of compute drivers.

    Attributes:
        scheme: the URL scheme this driver serves (``"local"``).
        endpoint: where requests go, for breaker keys and messages; never a secret.
        capabilities: what the provider supports.
    """

    scheme: str = ""
    endpoint: str = ""
    capabilities: ComputeCapabilities = ComputeCapabilities()

    @abc.abstractmethod
    def submit(self, spec: JobSpec) -> JobStatus:
        """Start a job (asynchronously) and return its first status.

        With ``spec.idempotency_key`` set, a job already submitted under that
        key is returned instead, and nothing is launched, whichever process
        submitted it; a different fingerprint is IDEMPOTENCY_CONFLICT.
        """

    @abc.abstractmethod
    def describe(self, job_id: str) -> JobStatus:
        """Return the job's current status. Unknown id: NOT_FOUND."""

    @abc.abstractmethod
    def terminate(self, job_id: str, reason: str) -> None:
        """Cancel the job: a pending one never starts; a running one is sent
        SIGTERM (or the provider's equivalent) and killed after a grace period.

        Returns once the request is recorded; the job turns CANCELLED when
        its process is gone. A job that has ended is left as it is. Unknown
        id: NOT_FOUND.
        """

    @abc.abstractmethod
    def list_jobs(self, labels: Mapping[str, str]) -> Iterator[JobStatus]:
        """Yield the jobs whose labels include every ``labels`` pair, oldest first."""

    @abc.abstractmethod
    def logs(self, job_id: str, follow: bool) -> Iterator[str]:
        """Yield the job's output (stdout and stderr) as lines without line endings.

        Without ``follow``: what is there now. With ``follow``: keep yielding
        until the job has ended and its output is drained. Unknown id: NOT_FOUND.
        """

    def preempt(self, job_id: str, grace: float | None) -> None:
        """Interrupt the running attempt as a reclaimed spot machine would
        (SIGTERM, ``grace`` seconds, then SIGKILL; None: the driver's default
        grace) and run the job again; the attempt does not use up a retry.

        A job that is not running is left as it is. Unknown id: NOT_FOUND.
        Drivers without the ``preempt`` capability raise UNSUPPORTED.
        """
        raise Unsupported(f"{self.scheme}:// cannot preempt jobs", provider=self.scheme)

    def wait(self, job_id: str, timeout: float) -> JobStatus:
        """Return the status once the job has ended, or after ``timeout`` seconds
        (then possibly not ended).

        The default is :func:`wait_for_status` over :meth:`describe` with its
        default intervals; a driver overrides it to poll at a pace that suits
        its provider, or to wait on a notification instead of polling.
        """
        return wait_for_status(self.describe, job_id, timeout)

    def async_driver(self) -> AsyncComputeDriver:
        """This driver's async face, for :mod:`portable.aio`.

        The default adapts every method through the bounded thread pool
        (:class:`~portable.driver.aio_compute.AsyncComputeDriver`); a driver
        whose library is natively async returns its own subclass of it.
        """
        # imported here: aio_compute imports this module (and asyncio, which sync users need not load)
        from .aio_compute import AsyncComputeDriver

        return AsyncComputeDriver(self)

    def close(self) -> None:
        """Release connections and threads. Jobs are not affected."""
