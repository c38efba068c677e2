"""Checking a job request: one source of truth for both faces (:mod:`portable.compute`, :mod:`portable.aio`).

Every function here takes what a caller passed and returns what the driver
call needs, or raises the typed error that says what to fix, before any
request. :class:`~portable.compute.Launcher` and
:class:`~portable.aio.AsyncLauncher` call the same functions, so they refuse
the same input with the same words; only how they await the driver differs.
The portable rules themselves are listed in :mod:`portable.compute`.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Generic, TypeVar

from . import urls
from .driver.compute import (
    RESERVED_ENV,
    ComputeCapabilities,
    JobSpec,
    JobState,
    JobStatus,
    Resources,
)
from .driver.redaction import redact
from .errors import DeadlineExceeded, InvalidArgument, InvalidKey, InvalidURL, Unsupported
from .resilience import remaining
from .telemetry._propagation import job_environment

__all__ = [
    "JobHandle",
    "WaitPlan",
    "check_cancellable",
    "check_job_id",
    "check_labels",
    "check_preempt",
    "check_states",
    "check_wait_timeout",
    "normalise_spec",
    "parse_memory",
    "submission",
]

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
        raw: Mapping[str, Any] = {"cpu": value.cpu, "memory": value.memory_mib, "gpu": value.gpu, "spot": value.spot}
    elif isinstance(value, Mapping):
        raw = value
        unknown = set(raw) - {"cpu", "memory", "gpu", "spot"}
        if unknown:
            raise InvalidArgument(
                f"unknown resource(s) {', '.join(sorted(map(str, unknown)))}; resources take cpu, memory, gpu, spot"
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
    spot = raw.get("spot", False)
    if type(spot) is not bool:
        raise InvalidArgument(f"spot must be True or False, got {spot!r}")
    return Resources(cpu=cpu, memory_mib=memory, gpu=gpu, spot=spot)


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
    if resources.spot and capabilities is not None and not capabilities.spot:
        raise Unsupported(
            "the launcher cannot place jobs on spot / preemptible capacity (resources.spot); "
            "on k8s:// name the cloud with ?flavor=gke|eks|aks"
        )
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


def check_labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    """``labels`` as a dict of portable label pairs (what ``Launcher.list`` filters on)."""
    out = _str_dict(labels, "labels")
    for key, value in out.items():
        if not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
            raise InvalidArgument(f"label {key}={value!r} is not a portable label (see JobSpec.labels)")
    return out




def check_states(states: object) -> frozenset[JobState] | None:
    """The set of states ``Launcher.list(states=...)`` keeps, or None for every state.

    Raises:
        InvalidArgument: ``states`` is not a list of JobState (or their names).
    """
    if states is None:
        return None
    if isinstance(states, str | bytes) or not isinstance(states, list | tuple | set | frozenset):
        raise InvalidArgument(f"states must be a list of JobState such as [JobState.FAILED], got {states!r}")
    try:
        return frozenset(JobState(s) for s in states)
    except ValueError:
        raise InvalidArgument(
            f"states {states!r}: each must be one of {', '.join(s.value for s in JobState)}"
        ) from None


def submission(spec: JobSpec, idempotency_key: str | None, capabilities: ComputeCapabilities) -> JobSpec:
    """The normalised spec a submit sends: ``spec`` checked, with ``idempotency_key`` set if given.

    With tracing on and a span current, a spec without an idempotency key
    gains ``TRACEPARENT`` / ``TRACESTATE`` in its environment (unless it sets
    either itself), so the job can continue the submitter's trace.

    Raises:
        InvalidArgument: a bad spec, or an ``idempotency_key`` that differs from ``spec.idempotency_key``.
        InvalidKey / InvalidURL / Unsupported: as :func:`normalise_spec`.
    """
    if idempotency_key is not None and isinstance(spec, JobSpec):
        if spec.idempotency_key is not None and spec.idempotency_key != idempotency_key:
            raise InvalidArgument(
                f"submit(idempotency_key={idempotency_key[:60]!r}) differs from the spec's "
                f"idempotency_key {spec.idempotency_key[:60]!r}: give one of them"
            )
        spec = replace(spec, idempotency_key=idempotency_key)
    clean = normalise_spec(spec, capabilities)
    return _with_trace_context(clean)


def _with_trace_context(spec: JobSpec) -> JobSpec:
    """``spec`` with ``TRACEPARENT`` (and ``TRACESTATE``) of the current span in its environment.

    Only with tracing on and a span current, and never over the spec's own
    ``TRACEPARENT`` / ``TRACESTATE``. A spec with an idempotency key is left as it
    is: its environment is part of :meth:`JobSpec.fingerprint`, so a resubmission
    from another trace would conflict with the first submission.
    """
    if spec.idempotency_key is not None:
        return spec
    extra = job_environment(spec.env)
    if extra is None:
        return spec
    return replace(spec, env={**spec.env, **extra})


def check_wait_timeout(timeout: object) -> float | None:
    """``timeout`` of ``Job.wait``: seconds >= 0, or None."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0):
        raise InvalidArgument(f"timeout must be seconds >= 0 or None, got {timeout!r}")
    return None if timeout is None else float(timeout)


def check_preempt(job_id: object, grace: object, capabilities: ComputeCapabilities, provider: str) -> str:
    """Check a preempt request; return the job id.

    Raises:
        InvalidArgument: a bad job id or ``grace``.
        Unsupported: the provider lacks the ``preempt`` capability.
    """
    checked = check_job_id(job_id)
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int | float) or grace < 0):
        raise InvalidArgument(f"grace must be seconds >= 0 or None, got {grace!r}")
    if not capabilities.preempt:
        raise Unsupported(f"{provider}:// cannot preempt jobs", provider=provider)
    return checked


def check_cancellable(status: JobStatus, provider: str) -> None:
    """On a provider without the ``cancel`` capability, only a pending (or ended) job may be cancelled.

    Raises:
        Unsupported: ``status`` is of a running job.
    """
    if status.state is not JobState.PENDING and not status.state.terminal:
        raise Unsupported(f"{provider}:// cannot cancel a running job", provider=provider)


class WaitPlan:
    """How ``Job.wait`` slices its wait: driver waits of at most 30 s until the job ends or time runs out.

    Both faces loop the same way: ``while True: status = <driver wait of
    plan.slice()>; if plan.finished(status): return status``.
    """

    __slots__ = ("_end", "_limit", "job_id", "provider", "what")

    #: the longest single driver wait, so that a deadline set meanwhile is seen
    longest = 30.0

    def __init__(self, job_id: str, timeout: float | None, provider: str) -> None:
        limit = remaining(None)
        if timeout is not None:
            limit = timeout if limit is None else min(limit, timeout)
        self._limit = limit
        self._end = None if limit is None else time.monotonic() + limit
        self.job_id = job_id
        self.provider = provider
        self.what = f"wait {job_id}"

    def slice(self) -> float:
        """Seconds the next driver wait may take."""
        left = self.longest if self._end is None else max(0.0, self._end - time.monotonic())
        return min(left, self.longest)

    def finished(self, status: JobStatus) -> bool:
        """True when ``status`` ends the wait (the job ended).

        Raises:
            DeadlineExceeded: the job has not ended and the time is up; it goes on running.
        """
        if status.state.terminal:
            return True
        if self._end is not None and time.monotonic() >= self._end:
            raise DeadlineExceeded(
                f"job {self.job_id} is still {status.state.value} after {self._limit:.3g}s", provider=self.provider
            )
        return False


L = TypeVar("L")


class JobHandle(Generic[L]):
    """What :class:`~portable.compute.Job` and :class:`~portable.aio.AsyncJob` share: a launcher and an id.

    Cheap; two handles are equal when they name one job of one launcher object.

    Attributes:
        id: the provider's job id.
        launcher: the launcher it came from.
    """

    __slots__ = ("id", "launcher")

    def __init__(self, launcher: L, job_id: str) -> None:
        self.launcher = launcher
        self.id = job_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r}, launcher={self.launcher!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.id == self.id and other.launcher is self.launcher

    def __hash__(self) -> int:
        return hash(self.id)
