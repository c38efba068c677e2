"""The async compute driver: what :class:`portable.aio.AsyncLauncher` awaits.

As in :mod:`portable.driver.aio_storage`, one class serves both kinds of
engine. :class:`AsyncComputeDriver` wraps a sync
:class:`~portable.driver.compute.ComputeDriver` and, by default, runs each
sync method in the bounded pool of :mod:`portable.driver.threads` (the one
place sync becomes async). An engine with a natively async client subclasses
it, overrides what it serves on the event loop and sets ``native = True``;
what it leaves alone stays thread-adapted.

A sync driver names its async twin with ``ComputeDriver.async_driver()``;
the default returns ``AsyncComputeDriver(self)``.

Where the thread-adapted default differs from a sync call:

* :meth:`~AsyncComputeDriver.wait` holds one pool thread while the sync
  driver waits; the portable layer asks for slices of at most 30 s.
* :meth:`~AsyncComputeDriver.logs` reads what there is now in one pool call.
  With ``follow`` it does not run the sync driver's follow loop (a thread
  asleep in it could not be stopped when the caller stops iterating): it
  reads the log again on the event loop's timer, from 5 ms backing off to
  :attr:`~AsyncComputeDriver.follow_poll` (0.5 s), yields the lines that
  are new, and holds the last line back until a later one (or the job's end)
  shows that it is whole. A pool thread is busy only during each read, so a
  follower the caller abandons costs nothing.
* :meth:`~AsyncComputeDriver.list_jobs` reads the whole listing in one pool
  call, then yields it.

Error contract: the sync driver's. Methods raise the native errors; the
portable layer classifies them through the *sync* driver (``code_of``,
``is_retryable``, ``retry_after``). Capabilities, scheme and endpoint are the
sync driver's; a capability the driver lacks raises the same Unsupported.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from .compute import ComputeCapabilities, ComputeDriver, JobSpec, JobStatus
from .threads import run_blocking

__all__ = ["AsyncComputeDriver"]


class AsyncComputeDriver:
    """Async face of one compute driver. The default runs the sync driver in the bounded pool.

    Attributes:
        sync: the sync driver (classification, capabilities, and every method
            not overridden here).
    """

    #: whether this class serves requests on the event loop (True in native subclasses)
    native: bool = False
    #: the longest pause between two reads of a followed log, in seconds
    follow_poll: float = 0.5

    def __init__(self, sync: ComputeDriver) -> None:
        self.sync = sync

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.sync!r})"

    # -- what the sync driver says --------------------------------------
    @property
    def scheme(self) -> str:
        return self.sync.scheme

    @property
    def endpoint(self) -> str:
        return self.sync.endpoint

    @property
    def capabilities(self) -> ComputeCapabilities:
        return self.sync.capabilities

    # -- the protocol ----------------------------------------------------
    async def submit(self, spec: JobSpec) -> JobStatus:
        """:meth:`ComputeDriver.submit`, awaited."""
        return await run_blocking(self.sync.submit, spec)

    async def describe(self, job_id: str) -> JobStatus:
        """:meth:`ComputeDriver.describe`, awaited."""
        return await run_blocking(self.sync.describe, job_id)

    async def terminate(self, job_id: str, reason: str) -> None:
        """:meth:`ComputeDriver.terminate`, awaited."""
        await run_blocking(self.sync.terminate, job_id, reason)

    async def preempt(self, job_id: str, grace: float | None) -> None:
        """:meth:`ComputeDriver.preempt`, awaited (UNSUPPORTED where the sync driver lacks it)."""
        await run_blocking(self.sync.preempt, job_id, grace)

    async def wait(self, job_id: str, timeout: float) -> JobStatus:
        """:meth:`ComputeDriver.wait`, awaited: the status once the job has ended or ``timeout`` has passed."""
        return await run_blocking(self.sync.wait, job_id, timeout)

    async def list_jobs(self, labels: dict[str, str]) -> list[JobStatus]:
        """:meth:`ComputeDriver.list_jobs`, read whole (oldest first)."""
        return await run_blocking(lambda: list(self.sync.list_jobs(labels)))

    async def read_logs(self, job_id: str) -> list[str]:
        """The job's output lines as they are now (``ComputeDriver.logs(job_id, follow=False)``, read whole).

        Unknown id: NOT_FOUND.
        """
        return await run_blocking(lambda: list(self.sync.logs(job_id, False)))

    async def logs(self, job_id: str, follow: bool) -> AsyncIterator[str]:
        """The job's output lines; with ``follow``, until the job has ended and its output is drained.

        The first read happens at the first iteration (unknown id: NOT_FOUND
        then). See the module docstring for how a follow polls.
        """
        seen = 0
        delay = 0.005
        while True:
            ended = follow and (await self.describe(job_id)).done
            lines = await self.read_logs(job_id)
            if not follow or ended:
                for line in lines[seen:]:
                    yield line
                return
            whole = len(lines) - 1  # the last line may still be growing
            if whole > seen:
                for line in lines[seen:whole]:
                    yield line
                seen = whole
                delay = 0.005
            else:
                await asyncio.sleep(delay)
                delay = min(delay * 1.5, self.follow_poll)

    async def aclose(self) -> None:
        """Release the async side's own connections (native drivers); the sync driver is closed by its owner."""
