"""AsyncLauncher and AsyncJob: the async face of :mod:`portable.compute`.

>>> import asyncio, sys, portable.aio
>>> from portable.compute import JobSpec
>>> async def main() -> list[str]:
...     async with portable.aio.open_launcher("local:///tmp/portable-doctest-ajobs?workers=2&idle=1") as launcher:
...         job = await launcher.submit(JobSpec(name="hello", command=[sys.executable, "-c", "print('hi')"]))
...         await job.wait(timeout=60)
...         return [line async for line in job.logs()]
>>> asyncio.run(main())
['hi']

Same names, arguments, errors and semantics as :class:`~portable.compute.Launcher`
and :class:`~portable.compute.Job`, awaited. An AsyncLauncher wraps a sync
Launcher (:meth:`AsyncLauncher.from_sync`, or :func:`open_launcher`, which
opens one) and shares its checks (:mod:`portable._compute_spec`), its guards
(one breaker set and retry budget per endpoint, whichever face calls) and its
job events; the calls go to the driver's async face
(:meth:`~portable.driver.compute.ComputeDriver.async_driver`).

Where the async face differs: ``job.logs()`` is an async iterator whose first
read (and so NotFound for an unknown job) happens at the first iteration, not
at the call; a followed log polls on the event loop instead of holding a
thread (see :mod:`portable.driver.aio_compute`).
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from .._compute_spec import (
    JobHandle,
    WaitPlan,
    check_cancellable,
    check_job_id,
    check_labels,
    check_preempt,
    check_states,
    check_wait_timeout,
    submission,
)
from ..compute import Launcher
from ..compute import open_launcher as _open_sync_launcher
from ..config import Profile
from ..driver.aio_compute import AsyncComputeDriver
from ..driver.compute import ComputeCapabilities, JobSpec, JobState, JobStatus
from ..driver.redaction import redact
from ..driver.threads import run_blocking
from ..errors import InvalidArgument, PortableError
from ..resilience import ResiliencePolicy

if TYPE_CHECKING:
    from ..messaging import Topic

__all__ = ["AsyncJob", "AsyncLauncher", "open_launcher"]

T = TypeVar("T")


class AsyncJob(JobHandle["AsyncLauncher"]):
    """A handle on one job, awaited. Cheap: it holds the launcher and the id.

    Attributes:
        id: the provider's job id.
        launcher: the :class:`AsyncLauncher` it came from.
    """

    __slots__ = ()

    async def status(self) -> JobStatus:
        """The job's current :class:`JobStatus` (state, exit code, reason, attempts)."""
        return await self.launcher._describe(self.id)

    async def wait(self, timeout: float | None = None) -> JobStatus:
        """Wait until the job has ended; return its final status (see :meth:`portable.compute.Job.wait`).

        Cancelling the awaiting task stops the wait; the job goes on.

        Raises:
            DeadlineExceeded: the job had not ended in time; it goes on running.
        """
        return await self.launcher._wait(self.id, check_wait_timeout(timeout))

    def logs(self, follow: bool = False) -> AsyncIterator[str]:
        """The job's output lines (stdout and stderr, all attempts in order), as an async iterator.

        With ``follow``, keep yielding until the job has ended and its output
        is drained. Leaving the ``async for`` early (or cancelling it) stops
        the reads at once.
        """
        return self.launcher._logs(self.id, bool(follow))

    async def cancel(self) -> None:
        """Ask the job to stop (see :meth:`portable.compute.Job.cancel`)."""
        await self.launcher._terminate(self.id)

    async def preempt(self, grace: float | None = None) -> None:
        """Interrupt and restart the job as a reclaimed spot machine would (see :meth:`AsyncLauncher.preempt`)."""
        await self.launcher.preempt(self.id, grace=grace)


class AsyncLauncher:
    """A portable job launcher, awaited. Open one with :func:`open_launcher` or wrap one with :meth:`from_sync`.

    Closing it (``aclose()`` or ``async with``) closes the async driver, then
    the sync launcher (its events and driver). Closing never stops jobs.
    """

    __slots__ = ("_adriver", "_launcher", "provider", "url")

    def __init__(self, launcher: Launcher, driver: AsyncComputeDriver | None = None) -> None:
        if not isinstance(launcher, Launcher):
            raise InvalidArgument(f"AsyncLauncher wraps a portable.compute.Launcher, got {type(launcher).__name__}")
        self._launcher = launcher
        self._adriver = driver or launcher.driver.async_driver()
        self.provider = launcher.provider
        self.url = launcher.url

    @classmethod
    def from_sync(cls, launcher: Launcher) -> AsyncLauncher:
        """The async face of ``launcher``: the same driver, guards (breakers, budget, policy) and job events.

        Closing the AsyncLauncher closes ``launcher`` too.
        """
        return cls(launcher)

    def __repr__(self) -> str:
        return f"AsyncLauncher({redact(self.url)!r})"

    async def __aenter__(self) -> AsyncLauncher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def sync(self) -> Launcher:
        """The sync Launcher this face shares its driver, guards and events with."""
        return self._launcher

    @property
    def capabilities(self) -> ComputeCapabilities:
        """What this provider supports (see :class:`ComputeCapabilities`)."""
        return self._launcher.capabilities

    @property
    def driver(self) -> AsyncComputeDriver:
        """The async driver underneath (for adapters and tests)."""
        return self._adriver

    async def submit(self, spec: JobSpec, *, idempotency_key: str | None = None) -> AsyncJob:
        """Start a job; return its handle at once (see :meth:`portable.compute.Launcher.submit`).

        Raises:
            InvalidArgument / InvalidKey / InvalidURL: a bad spec, or two
                different idempotency keys, before any request.
            Unsupported: GPUs asked of a provider without them.
            IdempotencyConflict: the key's job was submitted with another spec.
        """
        return await self.submit_with(spec, self._adriver.submit, idempotency_key=idempotency_key)

    async def submit_with(
        self,
        spec: JobSpec,
        submit: Callable[[JobSpec], Awaitable[JobStatus]],
        *,
        idempotency_key: str | None = None,
    ) -> AsyncJob:
        """Start a job through ``submit``, an async variant of the driver's submit, with everything
        :meth:`submit` does around it (see :meth:`portable.compute.Launcher.submit_with`)."""
        launcher = self._launcher
        clean = submission(spec, idempotency_key, launcher.capabilities)
        guard = launcher._submit_guard(clean)
        status = await guard.acall("submit", f"submit {clean.name}", submit, clean)
        if launcher._events is not None:
            await run_blocking(launcher._events.watch, status)
        return AsyncJob(self, status.job_id)

    async def get(self, job_id: str) -> AsyncJob:
        """The job with this id, once the provider has said it exists.

        Raises:
            InvalidArgument: not a job id.
            NotFound: no such job.
        """
        await self._describe(check_job_id(job_id))
        return AsyncJob(self, job_id)

    def job(self, job_id: str) -> AsyncJob:
        """A handle on the job with this id, without a request.

        Raises:
            InvalidArgument: not a job id.
        """
        return AsyncJob(self, check_job_id(job_id))

    async def list(
        self, labels: Mapping[str, str] | None = None, *, states: builtins.list[JobState] | None = None
    ) -> builtins.list[JobStatus]:
        """Statuses of the jobs whose labels include every ``labels`` pair, oldest first
        (see :meth:`portable.compute.Launcher.list`)."""
        wanted = check_labels(labels)
        state_set = check_states(states)
        found = await self._launcher._guard.acall("read", "list jobs", self._listed, wanted)
        return found if state_set is None else [s for s in found if s.state in state_set]

    async def _listed(self, labels: dict[str, str]) -> builtins.list[JobStatus]:
        return [status async for status in self._adriver.list_jobs(labels)]

    async def preempt(self, job_id: str, *, grace: float | None = None) -> None:
        """Interrupt a running job as a reclaimed spot VM would, then run it again
        (see :meth:`portable.compute.Launcher.preempt`).

        Raises:
            Unsupported: the provider lacks the ``preempt`` capability.
            NotFound: no such job.
        """
        check_preempt(job_id, grace, self.capabilities, self.provider)
        await self._launcher._guard.acall("control", f"preempt {job_id}", self._adriver.preempt, job_id, grace)

    async def aclose(self) -> None:
        """Release the async driver's connections, then close the sync launcher (last job events, driver)."""
        try:
            await self._adriver.aclose()
        finally:
            await run_blocking(self._launcher.close)

    async def close(self) -> None:
        """The same as :meth:`aclose`."""
        await self.aclose()

    def as_(self, kind: type[T]) -> T:
        """The native object of type ``kind`` under this launcher (see each adapter)."""
        return self._launcher.as_(kind)

    # -- used by AsyncJob -------------------------------------------------
    async def _describe(self, job_id: str) -> JobStatus:
        return await self._launcher._guard.acall("read", f"describe {job_id}", self._adriver.describe, job_id)

    async def _terminate(self, job_id: str) -> None:
        if not self.capabilities.cancel:
            check_cancellable(await self._describe(job_id), self.provider)
        await self._launcher._guard.acall("control", f"cancel {job_id}", self._adriver.terminate, job_id, "cancelled")

    async def _wait(self, job_id: str, timeout: float | None) -> JobStatus:
        plan = WaitPlan(job_id, timeout, self.provider)
        guard = self._launcher._guard
        while True:
            status = await guard.acall("read", plan.what, self._adriver.wait, job_id, plan.slice())
            if plan.finished(status):
                return status

    async def _logs(self, job_id: str, follow: bool) -> AsyncIterator[str]:
        guard = self._launcher._guard
        lines = self._adriver.logs(job_id, follow)
        try:
            async for line in lines:
                yield line
        except PortableError:
            raise
        except Exception as exc:
            raise guard.wrap(f"logs {job_id}", exc) from exc
        finally:
            await lines.aclose()  # type: ignore[attr-defined]


def open_launcher(
    url: str | None = None,
    *,
    profile: str | Profile | None = None,
    policy: ResiliencePolicy | None = None,
    events: str | Topic | None = None,
) -> AsyncLauncher:
    """Open a launcher by URL, or the active profile's ``jobs`` URL, as an AsyncLauncher.

    Same arguments, checks and errors as :func:`portable.compute.open_launcher`
    (no request is made); ``async with`` closes it.
    """
    return AsyncLauncher(_open_sync_launcher(url, profile=profile, policy=policy, events=events))
