# mypy: disable-error-code="no-untyped-call"
"""``dask://`` and ``dask+local://`` — jobs on a Dask cluster.

URLs:
    ``dask://HOST:PORT`` connects to a running scheduler
    (``dask://127.0.0.1:8786``). ``dask+local://?workers=2`` starts a
    ``distributed.LocalCluster`` of worker processes on 127.0.0.1, without a
    dashboard, owned by this launcher and closed with it.

Options:
    ``grace`` (float): seconds between SIGTERM and SIGKILL when a command is
    cancelled, times out or is preempted. Defaults to 10.
    ``timeout`` (float, ``dask://`` only): seconds to wait for the scheduler
    when connecting. Defaults to 10.
    ``workers`` (int, ``dask+local://`` only): worker processes. Defaults to 2.
    ``threads`` (int, ``dask+local://`` only): threads per worker, i.e. jobs
    each worker runs at once. Defaults to 1.

How jobs map onto Dask:
    Each attempt is one task (key ``<job id>-<attempt>``, ``pure=False``).
    A command runs in a subprocess on the worker, in its own session; its
    output is streamed to the scheduler's event log (topic
    ``portable-log-<job id>``), which ``logs()`` reads. Start events go to a
    topic the launcher subscribes to, so a job turns RUNNING when its task
    starts on a worker, not when it is queued. Retries, preemption and
    timeouts are run by the launcher (a failed or preempted attempt is
    resubmitted as a new task), so ``PORTABLE_JOB_ATTEMPT`` counts attempts
    and a preempted attempt does not use up a retry. A command's task
    returns nothing when it exits 0 and raises :class:`AttemptFailed` (with
    the exit code) otherwise, so a success costs no result fetch; workers
    log such failures as "Compute Failed" like any task error. Cancel of a
    queued job cancels its future; of a running command, it signals the
    command's process group on its worker (``Client.run``: SIGTERM, grace,
    SIGKILL). Dask's own task retries are not used.

Python callables: :func:`submit_callable` runs ``fn(*args, **kwargs)`` as
a job with the same states, retries and idempotency;
:meth:`DaskLauncher.result` returns its value, which stays in worker memory
while the launcher holds the job (until it is closed). A running callable cannot be
interrupted (Dask cannot stop a thread): cancel, timeout and preempt mark
the job at once, but the call runs on in its worker thread and its result
is dropped. Callables have no logs beyond their error.

Errors: ``distributed``'s connection errors (``CommClosedError``,
``OSError``, ``TimeoutError``) are UNAVAILABLE and retried by the portable
layer; ``distributed.comm.retry.count`` stays at its default of 0, so the
client does not retry on its own.

Capabilities: logs, cancel, checkpoints, preempt, timeouts, retries,
idempotent_submit. Not detached: jobs belong to this launcher's client. When
its process exits, Dask forgets them (a running command is left to finish),
and another process cannot see them. No containers (``image`` is ignored),
no GPUs; ``resources`` are not mapped onto Dask worker resources.

Known differences:
    * Job records and idempotency keys live in this launcher, not in the
      scheduler: a second launcher, or another process, does not see them.
    * Each job keeps an event topic in the scheduler for its logs until the
      scheduler restarts.

As: ``distributed.Client``; ``distributed.LocalCluster`` for ``dask+local://``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from distributed import Client, Future, LocalCluster
from distributed.comm.core import CommClosedError

from portable.compute import Job, JobSpec, Launcher
from portable.driver.compute import ComputeCapabilities, ComputeDriver, JobState, JobStatus
from portable.errors import ErrorCode, IdempotencyConflict, InvalidURL, NotFound, Unsupported
from portable.urls import ParsedURL

from ._worker import AttemptFailed, run_callable, run_command, stop_attempt

__all__ = ["AttemptFailed", "DaskLauncher", "local_cluster", "submit_callable"]

#: a callable job's call: the function, its positional and its keyword arguments
_Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]


def local_cluster(workers: int = 2, threads: int = 1) -> LocalCluster:
    """The ``LocalCluster`` of ``dask+local://``: ``workers`` processes of
    ``threads`` threads each, listening on 127.0.0.1 only, without a dashboard.

    Args:
        workers: worker processes. Defaults to 2.
        threads: threads per worker (jobs each runs at once). Defaults to 1.
    """
    return LocalCluster(
        n_workers=workers,
        threads_per_worker=threads,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        # no dashboard; the scheduler's health endpoint on a free loopback port, not :8787
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        silence_logs=logging.ERROR,
    )


@dataclass
class _JobRecord:
    """A job of this launcher: its spec, its state, and its current attempt."""

    job_id: str
    spec: JobSpec
    fingerprint: str
    call: _Call | None = None
    state: JobState = JobState.PENDING
    exit_code: int | None = None
    reason: str | None = None
    attempts: int = 0  # attempts that started
    launched: int = 0  # attempts submitted: the number of the current one
    preemptions: int = 0
    failures: int = 0
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    future: Future[Any] | None = None
    worker: str | None = None
    running_attempt: int = 0
    intent: str | None = None  # "cancel" or "preempt", asked of the running attempt
    intent_grace: float = 0.0
    result: Future[Any] | None = None  # a callable's value, left on the cluster until asked for
    done: threading.Event = field(default_factory=threading.Event)

    def status(self) -> JobStatus:
        def when(t: float | None) -> dt.datetime | None:
            return None if t is None else dt.datetime.fromtimestamp(t, dt.UTC)

        return JobStatus(
            job_id=self.job_id,
            name=self.spec.name,
            state=self.state,
            exit_code=self.exit_code,
            reason=self.reason,
            attempts=self.attempts,
            preemptions=self.preemptions,
            labels=dict(self.spec.labels),
            idempotency_key=self.spec.idempotency_key,
            created=when(self.created),
            started=when(self.started),
            finished=when(self.finished),
        )


class _Attempts:
    """Runs each job's attempts as Dask tasks and moves its record along as they
    start and end: retries, preemption, cancel, and the timeouts of callables
    (a command's timeout is enforced by its task, on its worker).

    Records are changed only under the launcher's lock, which it shares.
    """

    def __init__(self, client: Client, grace: float, lock: threading.RLock, jobs: Mapping[str, _JobRecord]) -> None:
        self.client = client
        self.grace = grace
        self._lock = lock
        self._jobs = jobs
        self._started_topic = f"portable-jobs-{uuid.uuid4().hex[:16]}"  # workers report started attempts here
        self._actions = ThreadPoolExecutor(1, thread_name_prefix="portable-dask")
        self._timers: set[threading.Timer] = set()
        self._task_of_callable: weakref.WeakKeyDictionary[Callable[..., Any], Callable[..., Any]] = (
            weakref.WeakKeyDictionary()
        )
        client.subscribe_topic(self._started_topic, self._on_started)

    def launch_next(self, rec: _JobRecord) -> None:
        """Submit the job's next attempt (under the lock)."""
        rec.launched += 1
        attempt = rec.launched
        spec = rec.spec
        task_key = f"{rec.job_id}-{attempt}"
        if rec.call is not None:
            fn, args, kwargs = rec.call
            try:
                task = self._task_of_callable.get(fn)
            except TypeError:  # not weakly referenceable (a builtin): no cache
                task = None
            if task is None:
                # one task function per callable, so that Dask pickles it once, not per job
                task = functools.partial(run_callable, fn)
                with contextlib.suppress(TypeError):
                    self._task_of_callable[fn] = task
            fut = self.client.submit(
                task, rec.job_id, attempt, self._started_topic, args, kwargs, key=task_key, pure=False
            )
        else:
            env = dict(spec.env)
            env.update(
                PORTABLE_JOB_ID=rec.job_id, PORTABLE_JOB_NAME=spec.name, PORTABLE_JOB_ATTEMPT=str(attempt)
            )
            if spec.checkpoint_url:
                env["PORTABLE_CHECKPOINT_URL"] = spec.checkpoint_url
            fut = self.client.submit(
                run_command,
                rec.job_id,
                attempt,
                list(spec.command),
                env,
                spec.workdir,
                spec.timeout,
                self.grace,
                self._started_topic,
                key=task_key,
                pure=False,
            )
        rec.future = fut
        fut.add_done_callback(lambda f, r=rec, a=attempt: self._on_done(r, a, f))

    def _on_started(self, event: tuple[float, Any]) -> None:
        """Runs on the client's event loop: keep it short, never block."""
        msg = event[1]
        if not isinstance(msg, dict):
            return
        with self._lock:
            rec = self._jobs.get(msg.get("job", ""))
            attempt = int(msg.get("attempt", 0))
            if rec is None or attempt != rec.launched or rec.state.terminal:
                return
            if msg.get("event") != "started" or rec.state is JobState.RUNNING:
                return
            rec.attempts = max(rec.attempts, attempt)
            rec.worker = msg.get("worker")
            rec.running_attempt = attempt
            rec.started = rec.started or time.time()
            rec.state = JobState.RUNNING
            rec.reason = None
            if rec.intent is not None:
                self._actions.submit(self._stop_on_worker, rec, attempt, rec.intent_grace)
            elif rec.call is not None and rec.spec.timeout is not None:
                self._start_timer(rec, attempt, rec.spec.timeout)

    def _on_done(self, rec: _JobRecord, attempt: int, fut: Future[Any]) -> None:
        """Runs in Dask's callback thread once an attempt's future is done."""
        outcome: dict[str, Any] | None = None
        error: BaseException | None = None
        status = fut.status
        if status == "finished":
            # a command's success, or a callable's value, which stays on the cluster until result() asks
            outcome = {"exit_code": 0, "timed_out": False}
        elif status == "error":
            try:
                error = fut.exception(timeout=30)
            except Exception as exc:
                error = exc
            if isinstance(error, AttemptFailed) and rec.call is None:
                outcome, error = error.args[0], None
        with self._lock:
            if attempt != rec.launched or rec.state.terminal:
                return
            rec.future = None
            rec.attempts = max(rec.attempts, attempt) if (outcome or error) else rec.attempts
            intent = rec.intent
            if intent == "preempt":
                rec.preemptions += 1
                rec.intent = None
                rec.state = JobState.PENDING
                rec.exit_code = None if outcome is None else outcome.get("exit_code")
                rec.reason = f"attempt {attempt} was preempted; restarting"
                self.launch_next(rec)
                return
            if intent == "cancel" or status == "cancelled":
                code = None if outcome is None else outcome.get("exit_code")
                self._finish(rec, JobState.CANCELLED, "cancelled" if intent == "cancel" else "cancelled by Dask", code)
                return
            if outcome is not None and outcome.get("timed_out"):
                self._finish(rec, JobState.FAILED, f"timed out after {rec.spec.timeout:g}s (attempt {attempt})", outcome.get("exit_code"))
                return
            if outcome is not None and outcome.get("error"):
                self._finish(rec, JobState.FAILED, str(outcome["error"]), None)
                return
            if outcome is not None and outcome.get("exit_code") == 0:
                rec.result = fut if rec.call is not None else None
                self._finish(rec, JobState.SUCCEEDED, None, 0)
                return
            if outcome is not None:
                code = outcome.get("exit_code")
                why = f"exit code {code}" if code is not None and code >= 0 else f"killed by signal {-(code or 0)}"
            else:
                code = None
                why = f"{type(error).__name__}: {error}" if error is not None else f"the task ended {status}"
            rec.failures += 1
            rec.exit_code = code
            if rec.failures <= rec.spec.retries:
                rec.state = JobState.PENDING
                rec.reason = f"attempt {attempt} failed ({why}); retry {rec.failures} of {rec.spec.retries}"
                self.launch_next(rec)
            else:
                self._finish(rec, JobState.FAILED, why, code)

    def _finish(self, rec: _JobRecord, state: JobState, reason: str | None, code: int | None) -> None:
        """End the job (under the lock)."""
        rec.state, rec.reason, rec.exit_code = state, reason, code
        rec.finished = time.time()
        rec.future = None
        rec.done.set()

    def _start_timer(self, rec: _JobRecord, attempt: int, seconds: float) -> None:
        def expire() -> None:
            with self._lock:
                self._timers.discard(timer)
                if attempt != rec.launched or rec.state.terminal:
                    return
                fut = rec.future
                self._finish(
                    rec, JobState.FAILED, f"timed out after {seconds:g}s (attempt {attempt}); the call runs on in its thread", None
                )
            if fut is not None:
                fut.cancel()

        timer = threading.Timer(seconds, expire)
        timer.daemon = True
        self._timers.add(timer)
        timer.start()

    def _stop_on_worker(self, rec: _JobRecord, attempt: int, grace: float) -> None:
        worker = rec.worker
        if worker is None or rec.call is not None:
            return
        with contextlib.suppress(Exception):  # the worker may be gone; then so is the process
            self.client.run(stop_attempt, rec.job_id, attempt, grace, workers=[worker])

    def interrupt(self, rec: _JobRecord, intent: str, grace: float) -> None:
        """Cancel the job, or preempt its running attempt (``intent``: "cancel" or "preempt")."""
        with self._lock:
            if rec.state.terminal or rec.intent == "cancel":
                return
            if intent == "preempt" and rec.state is not JobState.RUNNING:
                return
            rec.intent, rec.intent_grace = intent, grace
            fut, running, attempt = rec.future, rec.state is JobState.RUNNING, rec.launched
            if intent == "cancel" and (not running or rec.call is not None):
                # not started yet (or a callable, which cannot be stopped): done now
                self._finish(rec, JobState.CANCELLED, "cancelled", None)
            elif intent == "preempt" and rec.call is not None:
                rec.preemptions += 1
                rec.intent = None
                rec.state = JobState.PENDING
                rec.reason = f"attempt {attempt} was preempted; restarting"
                self.launch_next(rec)
        if fut is not None and (not running or rec.call is not None):
            fut.cancel()
        if running and rec.call is None:
            self._stop_on_worker(rec, attempt, grace)
        elif not running and rec.call is None:
            # the task may be starting right now: make sure its process dies too
            self._actions.submit(self._stop_everywhere, rec.job_id, attempt, grace)

    def _stop_everywhere(self, job_id: str, attempt: int, grace: float) -> None:
        with contextlib.suppress(Exception):
            self.client.run(stop_attempt, job_id, attempt, grace)

    def close(self) -> None:
        """Cancel the timers, let pending stop requests go out, stop listening to the workers."""
        for timer in list(self._timers):
            timer.cancel()
        self._actions.shutdown(wait=True)
        with contextlib.suppress(Exception):
            self.client.unsubscribe_topic(self._started_topic)


class DaskLauncher(ComputeDriver):
    """Jobs as tasks on a Dask cluster."""

    scheme = "dask"
    # the defaults (logs, cancel, checkpoints, timeouts, retries, idempotent submit) and preempt;
    # not detached: the jobs belong to this launcher's client
    capabilities = ComputeCapabilities(preempt=True, detached=False)

    def __init__(self, client: Client, *, cluster: LocalCluster | None = None, grace: float = 10.0) -> None:
        self.client = client
        self.cluster = cluster
        self.grace = grace
        self.endpoint = f"dask://{client.scheduler.address}" if client.scheduler else "dask://"
        self._lock = threading.RLock()
        self._jobs: dict[str, _JobRecord] = {}
        self._job_id_by_key: dict[str, str] = {}
        self._closed = False
        self._attempts = _Attempts(client, grace, self._lock, self._jobs)

    @classmethod
    def from_url(cls, url: ParsedURL) -> DaskLauncher:
        grace = url.take("grace", float, 10.0)
        if grace < 0:
            raise InvalidURL(f"grace must be >= 0 seconds in {url}")
        if url.scheme == "dask+local":
            workers = url.take("workers", int, 2)
            threads = url.take("threads", int, 1)
            url.done()
            if workers < 1 or threads < 1:
                raise InvalidURL(f"workers and threads must be >= 1 in {url}")
            cluster = local_cluster(workers, threads)
            try:
                client = Client(cluster, set_as_default=False)
            except BaseException:
                cluster.close()
                raise
            return cls(client, cluster=cluster, grace=grace)
        timeout = url.take("timeout", float, 10.0)
        url.done()
        if not url.host:
            raise InvalidURL(f"{url} names no scheduler: write dask://HOST:PORT")
        return cls(Client(f"tcp://{url.host}", timeout=timeout, set_as_default=False), grace=grace)

    def __repr__(self) -> str:
        return f"DaskLauncher({self.endpoint!r})"

    # -- classification ----------------------------------------------------------------
    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, CommClosedError):
            return ErrorCode.UNAVAILABLE
        if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError | PermissionError | FileExistsError):
            return ErrorCode.UNAVAILABLE
        return super().code_of(exc)

    def as_(self, kind: type[Any]) -> Any:
        if isinstance(self.client, kind):
            return self.client
        if self.cluster is not None and isinstance(self.cluster, kind):
            return self.cluster
        return None

    # -- submit ------------------------------------------------------------------
    def submit(self, spec: JobSpec) -> JobStatus:
        return self._submit(spec, None)

    def submit_call(
        self, spec: JobSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> JobStatus:
        """Submit a Python callable as a job (``spec.command`` only names it)."""
        return self._submit(spec, (fn, args, kwargs))

    def _submit(self, spec: JobSpec, call: _Call | None) -> JobStatus:
        fingerprint = spec.fingerprint()
        with self._lock:
            key = spec.idempotency_key
            if key is not None and key in self._job_id_by_key:
                existing = self._jobs[self._job_id_by_key[key]]
                if existing.fingerprint != fingerprint:
                    raise IdempotencyConflict(
                        f"idempotency key {key!r} was used for job {existing.job_id} with a different spec; "
                        "use a new key for a new job",
                        provider=self.scheme,
                    )
                return existing.status()
            rec = _JobRecord(f"portable-{uuid.uuid4().hex[:24]}", spec, fingerprint, call)
            self._jobs[rec.job_id] = rec
            if key is not None:
                self._job_id_by_key[key] = rec.job_id
            self._attempts.launch_next(rec)
            return rec.status()

    # -- the protocol ---------------------------------------------------------
    def _record(self, job_id: str) -> _JobRecord:
        rec = self._jobs.get(job_id)
        if rec is None:
            raise NotFound(f"no job {job_id!r} in this Dask launcher", provider=self.scheme)
        return rec

    def describe(self, job_id: str) -> JobStatus:
        with self._lock:
            return self._record(job_id).status()

    def wait(self, job_id: str, timeout: float) -> JobStatus:
        rec = self._record(job_id)
        rec.done.wait(timeout)
        with self._lock:
            return rec.status()

    def terminate(self, job_id: str, reason: str) -> None:
        self._attempts.interrupt(self._record(job_id), "cancel", self.grace)

    def preempt(self, job_id: str, grace: float | None) -> None:
        self._attempts.interrupt(self._record(job_id), "preempt", self.grace if grace is None else grace)

    def list_jobs(self, labels: Mapping[str, str]) -> Iterator[JobStatus]:
        with self._lock:
            found = [
                rec.status()
                for rec in self._jobs.values()
                if all(rec.spec.labels.get(k) == v for k, v in labels.items())
            ]
        found.sort(key=lambda s: (s.created or dt.datetime.min.replace(tzinfo=dt.UTC), s.job_id))
        return iter(found)

    def logs(self, job_id: str, follow: bool) -> Iterator[str]:
        rec = self._record(job_id)
        if rec.call is not None:
            return iter([] if rec.state is not JobState.FAILED else [rec.reason or ""])
        return self._log_lines(rec, follow)

    def _log_lines(self, rec: _JobRecord, follow: bool) -> Iterator[str]:
        topic = f"portable-log-{rec.job_id}"
        seen = 0
        current: int | None = None
        partial = ""
        delay = 0.01
        while True:
            ended = rec.state.terminal
            events = self.client.get_events(topic)
            fresh = events[seen:]
            seen = len(events)
            for _, msg in fresh:
                attempt, text = msg["attempt"], msg["text"]
                if current is not None and attempt != current and partial:
                    yield partial
                    partial = ""
                current = attempt
                *whole, partial = (partial + text).split("\n")
                yield from whole
            if not follow or (ended and not fresh):
                if partial:
                    yield partial
                return
            if not fresh:
                time.sleep(delay)
                delay = min(delay * 1.5, 0.2)
            else:
                delay = 0.01

    def result(self, job_id: str) -> Any:
        """The return value of a succeeded callable job (None for commands)."""
        with self._lock:
            rec = self._record(job_id)
            if rec.state is not JobState.SUCCEEDED or rec.result is None:
                raise Unsupported(f"job {job_id} has no result: it is {rec.state.value}", provider=self.scheme)
            fut = rec.result
        return fut.result()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._attempts.close()
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def submit_callable(
    launcher: Launcher,
    fn: Callable[..., Any],
    *args: Any,
    name: str | None = None,
    labels: Mapping[str, str] | None = None,
    retries: int = 0,
    timeout: float | None = None,
    idempotency_key: str | None = None,
    **kwargs: Any,
) -> Job:
    """Run ``fn(*args, **kwargs)`` on a worker as a job of ``launcher`` (a ``dask://`` one).

    The job has the usual states, retries (on an exception) and idempotency;
    get its value with ``launcher.driver.result(job.id)``. See the module
    docstring for what cancel and timeout cannot do to a running call.

    Raises:
        Unsupported: the launcher is not a Dask launcher.
    """
    driver = launcher.driver
    if not isinstance(driver, DaskLauncher):
        raise Unsupported(f"submit_callable needs a dask:// launcher, not {launcher.provider}://")
    label = name or getattr(fn, "__name__", "call").strip("_<>") or "call"
    label = "".join(c if c.isalnum() or c in "-_" else "-" for c in label)[:128] or "call"
    spec = JobSpec(
        command=[f"python:{getattr(fn, '__qualname__', 'callable')}"],
        name=label if label[0].isalnum() else f"call{label}"[:128],
        labels=dict(labels or {}),
        retries=retries,
        timeout=timeout,
        idempotency_key=idempotency_key,
    )
    return launcher.submit_with(spec, lambda clean: driver.submit_call(clean, fn, args, kwargs))
