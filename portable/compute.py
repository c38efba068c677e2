"""Job launchers through one API: :class:`Launcher`, :class:`JobSpec`, :class:`Job`.

>>> import sys, portable.compute as compute
>>> launcher = compute.open_launcher("local:///tmp/portable-doctest-jobs?workers=2&idle=1")
>>> job = launcher.submit(compute.JobSpec(name="hello", command=[sys.executable, "-c", "print('hi')"]))
>>> job.wait(timeout=60).state
<JobState.SUCCEEDED: 'SUCCEEDED'>
>>> list(job.logs())
['hi']

Every method validates its arguments before a driver sees them, runs the
driver call under the profile's retry policy, circuit breaker and deadline
(:mod:`portable.resilience`), and raises only :mod:`portable.errors` types.
A submit without an idempotency key is never retried (a retry after a lost
answer could launch the job twice); with a key it is, safely.

Portable rules (so that a spec one provider accepts, every provider accepts):

* ``command`` is an argv list of ``str``: ``["python", "train.py"]``. A shell
  line is not accepted; split it with :func:`shlex.split`.
* ``name``: 1-128 of ``[A-Za-z0-9_-]``, starting with a letter or digit.
* ``env`` names: ``[A-Za-z_][A-Za-z0-9_]*``; values ``str`` without NUL; the
  launcher's own variables (``PORTABLE_JOB_ID``, ``PORTABLE_JOB_NAME``,
  ``PORTABLE_JOB_ATTEMPT``, ``PORTABLE_CHECKPOINT_URL``) cannot be set.
* ``labels``: at most 64; keys 1-63 of ``[a-z0-9_-]`` starting with a
  letter; values 0-63 of ``[a-z0-9_-]``.
* ``resources``: ``cpu`` > 0 (``2``, ``0.5`` or ``"500m"``), ``memory`` > 0
  in MiB or with a unit (``"512Mi"``, ``"2Gi"``, ``"1.5G"``, ``"800MB"``),
  ``gpu`` an int >= 0 (only where ``capabilities.gpus``).
* ``retries`` 0-9 (AWS Batch allows 10 attempts); ``timeout`` > 0 seconds.
* ``image`` is used by container backends and ignored by the others, so one
  spec runs everywhere.

Job events: ``open_launcher(..., events="sqlite://./q.db?name=jobs")`` (or a
:class:`~portable.messaging.Topic`) publishes each state change of the jobs
this launcher submits as a CloudEvent: type ``dev.portable.job.<state>``
(``pending``, ``running``, ``succeeded``, ``failed``, ``cancelled``), source
the launcher's endpoint, subject the job id, data the status as JSON, and an
id made of job id, state, attempt and preemptions, so that two launchers
reporting one change publish one idempotency key. A background thread polls
the watched jobs (every 0.2 s) while any is unfinished; changes shorter than
that may be missed, the final state never is (``close()`` reports it).
"""

from __future__ import annotations

import builtins
import datetime as dt
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from . import urls
from ._native import native_object
from .cloudevents import CloudEvent
from .config import Profile, check_requirements, load_profile
from .driver import Classifier
from .driver.compute import (
    RESERVED_ENV,
    ComputeCapabilities,
    ComputeDriver,
    JobSpec,
    JobState,
    JobStatus,
    Resources,
)
from .driver.redaction import redact
from .errors import (
    DeadlineExceeded,
    ErrorCode,
    InvalidArgument,
    InvalidKey,
    InvalidURL,
    PortableError,
    Unsupported,
)
from .resilience import Guard, ResiliencePolicy, remaining

if TYPE_CHECKING:
    from .messaging import Topic

_log = logging.getLogger("portable.compute")

__all__ = [
    "ComputeCapabilities",
    "Job",
    "JobSpec",
    "JobState",
    "JobStatus",
    "Launcher",
    "Resources",
    "check_job_id",
    "normalise_spec",
    "open_launcher",
    "parse_memory",
]

T = TypeVar("T")

_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_JOB_ID = re.compile(r"^[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,255}$")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
_MEMORY_AMOUNT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")
_MEMORY_UNITS: dict[str, float] = {
    "": 1.0,
    "mi": 1.0,
    "mib": 1.0,
    "gi": 1024.0,
    "gib": 1024.0,
    "ti": 1024.0 * 1024,
    "tib": 1024.0 * 1024,
    "m": 1e6 / 2**20,
    "mb": 1e6 / 2**20,
    "g": 1e9 / 2**20,
    "gb": 1e9 / 2**20,
    "t": 1e12 / 2**20,
    "tb": 1e12 / 2**20,
    "ki": 1 / 1024,
    "kib": 1 / 1024,
}
_MAX_RETRIES = 9
_MAX_LABELS = 64
_MAX_IDEMPOTENCY_KEY = 256


# ---------------------------------------------------------------- validation
def parse_memory(value: object) -> int:
    """Return ``value`` in MiB: an int is MiB; a str may carry a unit (``"2Gi"``, ``"512MB"``).

    Raises:
        InvalidArgument: not a positive amount, or an unknown unit.
    """
    if isinstance(value, bool):
        raise InvalidArgument(f"memory must be MiB as an int or a string like '2Gi', got {value!r}")
    if isinstance(value, int):
        mib = float(value)
    elif isinstance(value, float):
        mib = value
    elif isinstance(value, str):
        match = _MEMORY_AMOUNT.match(value)
        unit = match.group(2).lower() if match else ""
        if not match or unit not in _MEMORY_UNITS:
            raise InvalidArgument(
                f"memory {value!r} is not an amount: write MiB as an int (512) or a number "
                "with a unit: Mi, Gi, Ti, MB, GB, TB (e.g. '512Mi', '2Gi')"
            )
        mib = float(match.group(1)) * _MEMORY_UNITS[unit]
    else:
        raise InvalidArgument(f"memory must be MiB as an int or a string like '2Gi', got {type(value).__name__}")
    if not math.isfinite(mib) or mib <= 0:
        raise InvalidArgument(f"memory must be > 0, got {value!r}")
    return max(1, math.ceil(mib))


def _parse_cpu(value: object) -> float:
    if isinstance(value, bool):
        raise InvalidArgument(f"cpu must be a number of vCPUs such as 2 or 0.5, got {value!r}")
    if isinstance(value, int | float):
        cpu = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            cpu = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
        except ValueError:
            raise InvalidArgument(
                f"cpu {value!r} is not a number of vCPUs: write 2, 0.5 or '500m'"
            ) from None
    else:
        raise InvalidArgument(f"cpu must be a number of vCPUs such as 2 or 0.5, got {type(value).__name__}")
    if not math.isfinite(cpu) or cpu <= 0:
        raise InvalidArgument(f"cpu must be > 0, got {value!r}")
    return cpu


def _normalise_resources(value: object) -> Resources:
    if value is None:
        return Resources()
    if isinstance(value, Resources):
        raw: Mapping[str, Any] = {"cpu": value.cpu, "memory": value.memory_mib, "gpu": value.gpu}
    elif isinstance(value, Mapping):
        raw = value
        unknown = set(raw) - {"cpu", "memory", "gpu"}
        if unknown:
            raise InvalidArgument(
                f"unknown resource(s) {', '.join(sorted(map(str, unknown)))}; resources take cpu, memory, gpu"
            )
    else:
        raise InvalidArgument(
            f"resources must be a Resources or a mapping such as {{'cpu': 2, 'memory': '4Gi'}}, "
            f"got {type(value).__name__}"
        )
    cpu = None if raw.get("cpu") is None else _parse_cpu(raw["cpu"])
    memory = None if raw.get("memory") is None else parse_memory(raw["memory"])
    gpu = raw.get("gpu") or 0
    if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0:
        raise InvalidArgument(f"gpu must be an int >= 0, got {raw.get('gpu')!r}")
    return Resources(cpu=cpu, memory_mib=memory, gpu=gpu)


def _str_dict(value: object, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{what} must be a mapping of str to str, got {type(value).__name__}")
    out: dict[str, str] = {}
    for key, item in value.items():
        if type(key) is not str or type(item) is not str:
            raise InvalidArgument(f"{what} must map str to str; {key!r}: {type(item).__name__} is not")
        out[key] = item
    return out


def _check_text(value: object, what: str, limit: int) -> str:
    if type(value) is not str or not value:
        raise InvalidArgument(f"{what} must be a non-empty str, got {value!r}")
    if len(value) > limit or _CONTROL_CHARS.search(value):
        raise InvalidArgument(f"{what} must be at most {limit} characters without control characters")
    return value


def normalise_spec(spec: JobSpec, capabilities: ComputeCapabilities | None = None) -> JobSpec:
    """Check every field of ``spec`` and return it with canonical types.

    Raises:
        InvalidArgument / InvalidKey / InvalidURL: what to fix, before any request.
        Unsupported: the spec asks for GPUs on a provider without them.
    """
    if not isinstance(spec, JobSpec):
        raise InvalidArgument(f"submit takes a JobSpec, got {type(spec).__name__}")
    command = spec.command
    if isinstance(command, str | bytes):
        raise InvalidArgument(
            f"command must be an argv list such as ['python', 'train.py'], not a string; "
            f"split a shell line with shlex.split({str(command)[:40]!r})"
        )
    if not isinstance(command, list | tuple) or not command:
        raise InvalidArgument("command must be a non-empty argv list such as ['python', 'train.py']")
    for arg in command:
        if type(arg) is not str:
            raise InvalidArgument(f"every command argument must be a str, got {type(arg).__name__} {arg!r}")
        if "\x00" in arg:
            raise InvalidArgument("a command argument holds a NUL character")
    if not command[0]:
        raise InvalidArgument("the command's program (its first element) must not be empty")
    if type(spec.name) is not str or not _JOB_NAME.match(spec.name):
        raise InvalidKey(
            f"job name {spec.name!r} must be 1-128 of letters, digits, '-' or '_', "
            "starting with a letter or digit"
        )
    if spec.image is not None:
        _check_text(spec.image, "image", 1024)
    env = _str_dict(spec.env, "env")
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise InvalidArgument(f"env name {name!r} must match [A-Za-z_][A-Za-z0-9_]*")
        if "\x00" in value:
            raise InvalidArgument(f"env {name} holds a NUL character")
        if name in RESERVED_ENV:
            raise InvalidArgument(
                f"env {name} is set by the launcher; "
                + ("pass checkpoint_url= instead" if name == "PORTABLE_CHECKPOINT_URL" else "remove it")
            )
    workdir = spec.workdir
    if workdir is not None and (type(workdir) is not str or not workdir or "\x00" in workdir):
        raise InvalidArgument(f"workdir must be a non-empty path str, got {workdir!r}")
    resources = _normalise_resources(spec.resources)
    if resources.gpu and capabilities is not None and not capabilities.gpus:
        raise Unsupported(f"the launcher has no GPUs; the spec asks for {resources.gpu}")
    retries = spec.retries
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= _MAX_RETRIES:
        raise InvalidArgument(f"retries must be an int from 0 to {_MAX_RETRIES}, got {retries!r}")
    timeout = spec.timeout
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout <= 0:
            raise InvalidArgument(f"timeout must be a number of seconds > 0, or None; got {timeout!r}")
        timeout = float(timeout)
    labels = _str_dict(spec.labels, "labels")
    if len(labels) > _MAX_LABELS:
        raise InvalidArgument(f"a job takes at most {_MAX_LABELS} labels, got {len(labels)}")
    for key, value in labels.items():
        if not _LABEL_KEY.match(key):
            raise InvalidArgument(
                f"label key {key!r} must be 1-63 of lower-case letters, digits, '-' or '_', starting with a letter"
            )
        if not _LABEL_VALUE.match(value):
            raise InvalidArgument(
                f"label {key}={value!r}: values are 0-63 of lower-case letters, digits, '-' or '_'"
            )
    if spec.idempotency_key is not None:
        _check_text(spec.idempotency_key, "idempotency_key", _MAX_IDEMPOTENCY_KEY)
    checkpoint = spec.checkpoint_url
    if checkpoint is not None:
        if type(checkpoint) is not str:
            raise InvalidURL(f"checkpoint_url must be a bucket URL str, got {type(checkpoint).__name__}")
        parsed = urls.parse_url(checkpoint)
        known = urls.known_schemes("storage")
        if parsed.scheme not in known and "+" not in parsed.scheme:
            raise InvalidURL(
                f"checkpoint_url {redact(checkpoint)!r} is not a bucket URL; known schemes: "
                + ", ".join(f"{s}://" for s in known)
            )
    return replace(
        spec,
        command=tuple(command),
        env=env,
        resources=resources,
        timeout=timeout,
        labels=labels,
    )


def check_job_id(job_id: object) -> str:
    """Return ``job_id`` if it can be a job id, else raise InvalidArgument."""
    if type(job_id) is not str or not _JOB_ID.match(job_id):
        raise InvalidArgument(
            f"{job_id!r} is not a job id: ids are 1-256 of letters, digits, '_', '.', ':' or '-'"
        )
    return job_id


def _check_labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    out = _str_dict(labels, "labels")
    for key, value in out.items():
        if not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
            raise InvalidArgument(f"label {key}={value!r} is not a portable label (see JobSpec.labels)")
    return out


class _NoRetry(Classifier):
    """A driver's classification with every error made final (non-idempotent submits)."""

    def __init__(self, inner: ComputeDriver) -> None:
        self._inner = inner

    def code_of(self, exc: BaseException) -> ErrorCode:
        return self._inner.code_of(exc)

    def is_retryable(self, exc: BaseException) -> bool:
        return False

    def retry_after(self, exc: BaseException) -> float | None:
        return None


# ---------------------------------------------------------------- the types
class Job:
    """A handle on one job. Cheap: it holds the launcher and the id.

    Attributes:
        id: the provider's job id.
        launcher: the :class:`Launcher` it came from.
    """

    __slots__ = ("id", "launcher")

    def __init__(self, launcher: Launcher, job_id: str) -> None:
        self.launcher = launcher
        self.id = job_id

    def __repr__(self) -> str:
        return f"Job({self.id!r}, launcher={self.launcher!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other.id == self.id and other.launcher is self.launcher

    def __hash__(self) -> int:
        return hash(self.id)

    def status(self) -> JobStatus:
        """The job's current :class:`JobStatus` (state, exit code, reason, attempts)."""
        return self.launcher._describe(self.id)

    def wait(self, timeout: float | None = None) -> JobStatus:
        """Block until the job has ended; return its final status.

        Args:
            timeout: seconds to wait at most; None waits as long as it takes
                (or until the :func:`portable.deadline` in force).

        Raises:
            DeadlineExceeded: the job had not ended in time; it goes on running.
        """
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0):
            raise InvalidArgument(f"timeout must be seconds >= 0 or None, got {timeout!r}")
        return self.launcher._wait(self.id, timeout)

    def logs(self, follow: bool = False) -> Iterator[str]:
        """Yield the job's output lines (stdout and stderr, all attempts in order).

        With ``follow``, keep yielding until the job has ended and its
        output is drained.
        """
        return self.launcher._logs(self.id, bool(follow))

    def cancel(self) -> None:
        """Ask the job to stop: a pending job never starts; a running one gets
        SIGTERM, then SIGKILL after the launcher's grace period. It turns
        CANCELLED once stopped. Cancelling an ended job does nothing."""
        self.launcher._terminate(self.id)

    def preempt(self, grace: float | None = None) -> None:
        """Interrupt and restart the job as a reclaimed spot machine would (see
        :meth:`Launcher.preempt`)."""
        self.launcher.preempt(self.id, grace=grace)


class Launcher:
    """A portable job launcher on any provider.

    Open one with :func:`open_launcher`. Thread-safe; close it (or use
    ``with``) to release the provider's connections. Closing never stops jobs.
    """

    __slots__ = ("_driver", "_events", "_guard", "_guard_no_retry", "provider", "url")

    def __init__(
        self,
        driver: ComputeDriver,
        *,
        url: str = "",
        policy: ResiliencePolicy | None = None,
        events: Topic | None = None,
        own_events: bool = False,
    ) -> None:
        self._driver = driver
        self.provider = driver.scheme
        self.url = url
        self._guard = Guard(driver.scheme, driver.endpoint, driver, policy)
        # a submit without an idempotency key must not be retried: a lost answer could mean a launched job
        self._guard_no_retry = Guard(driver.scheme, driver.endpoint, _NoRetry(driver), policy)
        self._events = None if events is None else _JobEvents(self, events, own_events)

    def __repr__(self) -> str:
        return f"Launcher({redact(self.url)!r})"

    def __enter__(self) -> Launcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def capabilities(self) -> ComputeCapabilities:
        """What this provider supports (see :class:`ComputeCapabilities`)."""
        return self._driver.capabilities

    @property
    def driver(self) -> ComputeDriver:
        """The driver underneath (for adapters and tests)."""
        return self._driver

    def submit(self, spec: JobSpec) -> Job:
        """Start a job; return its handle at once (the job runs asynchronously).

        With ``spec.idempotency_key``, a job already submitted under that key
        (by any process, for providers with ``detached``) is returned instead
        and nothing is launched.

        Raises:
            InvalidArgument / InvalidKey / InvalidURL: a bad spec, before any request.
            Unsupported: GPUs asked of a provider without them.
            IdempotencyConflict: the key's job was submitted with another spec.
        """
        return self.submit_with(spec, self._driver.submit)

    def submit_with(self, spec: JobSpec, submit: Callable[[JobSpec], JobStatus]) -> Job:
        """Start a job through ``submit``, a driver's own variant of
        :meth:`ComputeDriver.submit` (``DaskLauncher.submit_call`` for a Python
        callable), with everything :meth:`submit` does around it.

        ``spec`` is checked and normalised first; ``submit`` gets the clean
        spec and runs under this launcher's resilience policy, retried only
        when the spec has an idempotency key; the job's events are published
        when the launcher has an events topic.

        Args:
            spec: what to run.
            submit: called with the normalised spec; returns the job's first status.

        Raises:
            InvalidArgument / InvalidKey / InvalidURL: a bad spec, before any request.
            Unsupported: GPUs asked of a provider without them.
            IdempotencyConflict: the key's job was submitted with another spec.
        """
        clean = normalise_spec(spec, self._driver.capabilities)
        guard = self._guard if clean.idempotency_key is not None else self._guard_no_retry
        status = guard.call("submit", f"submit {clean.name}", submit, clean)
        if self._events is not None:
            self._events.watch(status)
        return Job(self, status.job_id)

    def get(self, job_id: str) -> Job:
        """The job with this id.

        Raises:
            NotFound: no such job.
        """
        self._describe(check_job_id(job_id))
        return Job(self, job_id)

    def list(
        self, labels: Mapping[str, str] | None = None, *, states: builtins.list[JobState] | None = None
    ) -> builtins.list[JobStatus]:
        """Statuses of the jobs whose labels include every ``labels`` pair, oldest first.

        Args:
            labels: pairs every job listed must have. Defaults to all jobs.
            states: only jobs in these states. Defaults to every state.
        """
        wanted = _check_labels(labels)
        if states is not None:
            state_set = {JobState(s) for s in states}
        found = self._guard.call("read", "list jobs", lambda: builtins.list(self._driver.list_jobs(wanted)))
        if states is not None:
            found = [s for s in found if s.state in state_set]
        return found

    def preempt(self, job_id: str, *, grace: float | None = None) -> None:
        """Interrupt a running job as a reclaimed spot VM would: SIGTERM, ``grace``
        seconds (None: the launcher's default), then SIGKILL; then run it again.
        The interrupted attempt does not use up a retry. A job that is not
        running is left as it is.

        Raises:
            Unsupported: the provider lacks the ``preempt`` capability.
            NotFound: no such job.
        """
        check_job_id(job_id)
        if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int | float) or grace < 0):
            raise InvalidArgument(f"grace must be seconds >= 0 or None, got {grace!r}")
        if not self._driver.capabilities.preempt:
            raise Unsupported(f"{self.provider}:// cannot preempt jobs", provider=self.provider)
        self._guard.call("control", f"preempt {job_id}", self._driver.preempt, job_id, grace)

    def close(self) -> None:
        """Report the last job events (if any), release the driver's connections
        and threads; jobs go on."""
        try:
            if self._events is not None:
                self._events.close()
        finally:
            self._driver.close()

    def as_(self, kind: type[T]) -> T:
        """Return the native object of type ``kind`` under this launcher (see each adapter)."""
        return native_object(self._driver, kind, self.provider)

    # -- used by Job ----------------------------------------------------
    def _describe(self, job_id: str) -> JobStatus:
        return self._guard.call("read", f"describe {job_id}", self._driver.describe, job_id)

    def _terminate(self, job_id: str) -> None:
        if not self._driver.capabilities.cancel:
            status = self._describe(job_id)
            if status.state is not JobState.PENDING and not status.state.terminal:
                raise Unsupported(f"{self.provider}:// cannot cancel a running job", provider=self.provider)
        self._guard.call("control", f"cancel {job_id}", self._driver.terminate, job_id, "cancelled")

    def _wait(self, job_id: str, timeout: float | None) -> JobStatus:
        limit = remaining(None)
        if timeout is not None:
            limit = timeout if limit is None else min(limit, timeout)
        end = None if limit is None else time.monotonic() + limit
        while True:
            left = 30.0 if end is None else max(0.0, end - time.monotonic())
            status = self._guard.call(
                "read", f"wait {job_id}", self._driver.wait, job_id, min(left, 30.0)
            )
            if status.state.terminal:
                return status
            if end is not None and time.monotonic() >= end:
                raise DeadlineExceeded(
                    f"job {job_id} is still {status.state.value} after {limit:.3g}s", provider=self.provider
                )

    def _logs(self, job_id: str, follow: bool) -> Iterator[str]:
        lines = self._guard.call("read", f"logs {job_id}", self._driver.logs, job_id, follow)
        return self._wrapped_lines(job_id, lines)

    def _wrapped_lines(self, job_id: str, lines: Iterator[str]) -> Iterator[str]:
        try:
            yield from lines
        except PortableError:
            raise
        except Exception as exc:
            raise self._guard.wrap(f"logs {job_id}", exc) from exc


class _JobEvents:
    """Publishes the state changes of watched jobs to a Topic as CloudEvents."""

    interval = 0.2

    def __init__(self, launcher: Launcher, topic: Topic, own: bool) -> None:
        self._launcher = launcher
        self._topic = topic
        self._own = own
        self._source = redact(launcher.driver.endpoint or f"{launcher.provider}://")
        self._lock = threading.Lock()
        self._last: dict[str, str] = {}  # job id -> id of the last event published
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def watch(self, status: JobStatus) -> None:
        self._publish(status)
        with self._lock:
            if status.done or self._closed:
                return
            self._last.setdefault(status.job_id, "")
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="portable-job-events", daemon=True)
                self._thread.start()

    def _publish(self, status: JobStatus) -> None:
        event_id = f"{status.job_id}:{status.state.value}:{status.attempts}:{status.preemptions}"
        with self._lock:
            if self._last.get(status.job_id) == event_id:
                return
        event = CloudEvent(
            id=event_id,
            source=self._source,
            type=f"dev.portable.job.{status.state.value.lower()}",
            subject=status.job_id,
            time=dt.datetime.now(dt.UTC),
            datacontenttype="application/json",
            data=json.dumps(_event_data(status), separators=(",", ":")).encode("utf-8"),
        )
        self._topic.publish_event(event)
        with self._lock:
            if status.done:
                self._last.pop(status.job_id, None)
            else:
                self._last[status.job_id] = event_id

    def poll_once(self) -> None:
        with self._lock:
            watched = list(self._last)
        for job_id in watched:
            try:
                self._publish(self._launcher._describe(job_id))
            except PortableError as exc:  # try again on the next round
                _log.warning("job events: %s: %s", job_id, exc)

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.interval)
            self.poll_once()
            with self._lock:
                if not self._last:
                    self._thread = None
                    return

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=30)
        self.poll_once()
        if self._own:
            self._topic.close()


def _event_data(status: JobStatus) -> dict[str, Any]:
    """What a job event carries: the status as JSON, without its idempotency key
    (events have never carried it; subscribers match jobs by id)."""
    data = status.as_dict()
    del data["idempotency_key"]
    return data


def open_driver(url: str) -> ComputeDriver:
    """Open the compute driver for ``url`` (no portable layer around it)."""
    driver = urls.open_driver("compute", url)
    if not isinstance(driver, ComputeDriver):
        raise PortableError(f"{urls.parse_url(url)}: the driver is not a ComputeDriver")
    return driver


def open_launcher(
    url: str | None = None,
    *,
    profile: str | Profile | None = None,
    policy: ResiliencePolicy | None = None,
    events: str | Topic | None = None,
) -> Launcher:
    """Open a launcher by URL, or the active profile's ``jobs`` URL.

    The profile's resilience policy applies unless ``policy`` is given, and
    its ``requires`` are checked now: a launcher that lacks a required
    capability fails here with MissingCapability.

    Args:
        url: the launcher's URL (``local://./.portable/jobs``). Defaults to
            the profile's ``jobs``.
        profile: a profile name or :class:`~portable.config.Profile`.
            Defaults to the active profile.
        policy: retries, breakers and deadline of every call, in place of the
            profile's; it applies to the ``events`` topic this opens too.
            Defaults to the profile's.
        events: a topic URL or :class:`~portable.messaging.Topic` to publish the
            submitted jobs' state changes to as CloudEvents (see the module
            docstring). Defaults to none.

    Raises:
        UnknownScheme / MissingDependency / InvalidURL / ConfigError: before any request.
        MissingCapability: the profile requires what the launcher lacks.
    """
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    resilience = policy or prof.resilience
    target = url or prof.jobs
    driver = open_driver(target)
    try:
        check_requirements(
            "compute", driver.scheme, driver.capabilities.supported(), ComputeCapabilities.flag_names(), prof.requires
        )
        topic: Topic | None = None
        if isinstance(events, str):
            # here, not at the top: importing portable.compute must not load the messaging domain
            from .messaging import open_topic

            topic = open_topic(events, profile=prof, policy=resilience)
        elif events is not None:
            topic = events
    except BaseException:
        driver.close()
        raise
    return Launcher(driver, url=target, policy=resilience, events=topic, own_events=isinstance(events, str))
