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
* :meth:`~AsyncComputeDriver.logs` reads what there is now in one pool
  call. With ``follow`` it runs the sync driver's follow loop in one pool
  thread for the whole iteration (never a thread per line), handing each line
  to the event loop as it comes. When the caller stops iterating (``break``,
  a cancel), the loop is told to stop: it does at its next line or at the
  job's end, whichever comes first (a thread asleep in a driver's poll
  cannot be interrupted), and only then is the thread free.
* :meth:`~AsyncComputeDriver.list_jobs` (an async iterator) reads the whole
  listing in one pool call, then yields it.

Error contract: the sync driver's. Methods raise the native errors; the
portable layer classifies them through the *sync* driver (``code_of``,
``is_retryable``, ``retry_after``). Capabilities, scheme and endpoint are the
sync driver's; a capability the driver lacks raises the same Unsupported.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, cast

from .threads import run_blocking

if TYPE_CHECKING:  # annotations only: driver.compute imports this module in ComputeDriver.async_driver
    from .compute import ComputeCapabilities, ComputeDriver, JobSpec, JobStatus

__all__ = ["AsyncComputeDriver"]

_END = object()


class _Failed:
    """What a follow's pump hands over when the sync driver raised."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class AsyncComputeDriver:
    """Async face of one compute driver. The default runs the sync driver in the bounded pool.

    Attributes:
        sync: the sync driver (classification, capabilities, and every method
            not overridden here).
    """

    #: whether this class serves requests on the event loop (True in native subclasses)
    native: bool = False

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

    async def list_jobs(self, labels: dict[str, str]) -> AsyncIterator[JobStatus]:
        """:meth:`ComputeDriver.list_jobs` as an async iterator (oldest first).

        The default reads the sync listing whole in one pool call, then yields it.
        """
        for status in await run_blocking(lambda: list(self.sync.list_jobs(labels))):
            yield status

    async def read_logs(self, job_id: str) -> list[str]:
        """The job's output lines as they are now (``ComputeDriver.logs(job_id, follow=False)``, read whole).

        Unknown id: NOT_FOUND.
        """
        return await run_blocking(lambda: list(self.sync.logs(job_id, False)))

    async def logs(self, job_id: str, follow: bool) -> AsyncIterator[str]:
        """The job's output lines; with ``follow``, until the job has ended and its output is drained.

        The first read happens at the first iteration (unknown id: NOT_FOUND
        then). See the module docstring for what a follow holds.
        """
        if not follow:
            for line in await self.read_logs(job_id):
                yield line
            return
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[object] = asyncio.Queue()
        stop = threading.Event()

        def hand(item: object) -> bool:
            try:
                loop.call_soon_threadsafe(lines.put_nowait, item)
            except RuntimeError:  # the loop is gone: nobody reads any more
                return False
            return not stop.is_set()

        def pump() -> None:
            try:
                it = self.sync.logs(job_id, True)
                try:
                    for line in it:
                        if not hand(line):
                            return
                finally:
                    close = getattr(it, "close", None)
                    if close is not None:
                        close()
            except BaseException as exc:
                hand(_Failed(exc))
            else:
                hand(_END)

        pumping = asyncio.ensure_future(run_blocking(pump))
        try:
            while True:
                item = await lines.get()
                if item is _END:
                    return
                if isinstance(item, _Failed):
                    raise item.exc
                yield cast(str, item)
        finally:
            stop.set()
            if pumping.done() and not pumping.cancelled():
                pumping.exception()  # the pump reports through the queue; nothing is left unread

    async def aclose(self) -> None:
        """Release the async side's own connections (native drivers); the sync driver is closed by its owner."""
