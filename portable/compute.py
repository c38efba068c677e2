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
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from . import urls
from ._compute_spec import (
    JobHandle,
    WaitPlan,
    check_cancellable,
    check_job_id,
    check_labels,
    check_preempt,
    check_states,
    check_wait_timeout,
    normalise_spec,
    parse_memory,
    submission,
)
from ._native import native_object
from .cloudevents import CloudEvent
from .config import Profile, check_requirements, load_profile
from .driver import Classifier
from .driver.compute import (
    ComputeCapabilities,
    ComputeDriver,
    JobSpec,
    JobState,
    JobStatus,
    Resources,
)
from .driver.redaction import redact
from .errors import ErrorCode, PortableError
from .resilience import Guard, ResiliencePolicy

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
class Job(JobHandle["Launcher"]):
    """A handle on one job. Cheap: it holds the launcher and the id.

    Attributes:
        id: the provider's job id.
        launcher: the :class:`Launcher` it came from.
    """

    __slots__ = ()

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
        return self.launcher._wait(self.id, check_wait_timeout(timeout))

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
        self._guard_no_retry = Guard(
            driver.scheme, driver.endpoint, _NoRetry(driver), policy,
            target=self._guard.target, domain=self._guard.domain,
        )  # fmt: skip
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

    def submit(self, spec: JobSpec, *, idempotency_key: str | None = None) -> Job:
        """Start a job; return its handle at once (the job runs asynchronously).

        With an idempotency key (``idempotency_key=`` or ``spec.idempotency_key``),
        a job already submitted under that key (by any process, for providers
        with ``detached``) is returned instead and nothing is launched.

        Raises:
            InvalidArgument / InvalidKey / InvalidURL: a bad spec, or two
                different idempotency keys, before any request.
            Unsupported: GPUs asked of a provider without them.
            IdempotencyConflict: the key's job was submitted with another spec.
        """
        return self.submit_with(spec, self._driver.submit, idempotency_key=idempotency_key)

    def submit_with(
        self, spec: JobSpec, submit: Callable[[JobSpec], JobStatus], *, idempotency_key: str | None = None
    ) -> Job:
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
            idempotency_key: as in :meth:`submit`.

        Raises:
            InvalidArgument / InvalidKey / InvalidURL: a bad spec, before any request.
            Unsupported: GPUs asked of a provider without them.
            IdempotencyConflict: the key's job was submitted with another spec.
        """
        clean = submission(spec, idempotency_key, self._driver.capabilities)
        status = self._submit_guard(clean).call("submit", f"submit {clean.name}", submit, clean)
        if self._events is not None:
            self._events.watch(status)
        return Job(self, status.job_id)

    def get(self, job_id: str) -> Job:
        """The job with this id, once the provider has said it exists.

        Raises:
            InvalidArgument: not a job id.
            NotFound: no such job.
        """
        self._describe(check_job_id(job_id))
        return Job(self, job_id)

    def job(self, job_id: str) -> Job:
        """A handle on the job with this id, without a request (its first call says NotFound if it is unknown).

        Raises:
            InvalidArgument: not a job id.
        """
        return Job(self, check_job_id(job_id))

    def list(
        self, labels: Mapping[str, str] | None = None, *, states: builtins.list[JobState] | None = None
    ) -> builtins.list[JobStatus]:
        """Statuses of the jobs whose labels include every ``labels`` pair, oldest first.

        Args:
            labels: pairs every job listed must have. Defaults to all jobs.
            states: only jobs in these states. Defaults to every state.
        """
        wanted = check_labels(labels)
        state_set = check_states(states)
        found = self._guard.call("read", "list jobs", lambda: builtins.list(self._driver.list_jobs(wanted)))
        return found if state_set is None else [s for s in found if s.state in state_set]

    def preempt(self, job_id: str, *, grace: float | None = None) -> None:
        """Interrupt a running job as a reclaimed spot VM would: SIGTERM, ``grace``
        seconds (None: the launcher's default), then SIGKILL; then run it again.
        The interrupted attempt does not use up a retry. A job that is not
        running is left as it is.

        Raises:
            Unsupported: the provider lacks the ``preempt`` capability.
            NotFound: no such job.
        """
        check_preempt(job_id, grace, self._driver.capabilities, self.provider)
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

    # -- used by Job (and by portable.aio.AsyncLauncher, which shares the guards) --
    def _submit_guard(self, clean: JobSpec) -> Guard:
        """A submit without an idempotency key is never retried: a lost answer could mean a launched job."""
        return self._guard if clean.idempotency_key is not None else self._guard_no_retry

    def _describe(self, job_id: str) -> JobStatus:
        return self._guard.call("read", f"describe {job_id}", self._driver.describe, job_id)

    def _terminate(self, job_id: str) -> None:
        if not self._driver.capabilities.cancel:
            check_cancellable(self._describe(job_id), self.provider)
        self._guard.call("control", f"cancel {job_id}", self._driver.terminate, job_id, "cancelled")

    def _wait(self, job_id: str, timeout: float | None) -> JobStatus:
        plan = WaitPlan(job_id, timeout, self.provider)
        while True:
            status = self._guard.call("read", plan.what, self._driver.wait, job_id, plan.slice())
            if plan.finished(status):
                return status

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
