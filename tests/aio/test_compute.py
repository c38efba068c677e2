"""portable.aio.AsyncLauncher: the same checks and errors as Launcher, one Guard, idempotent submits, safe cancels.

The compute contract itself runs on both faces (portable/testing/compute_suite.py);
these are the async face's own promises, on the real local:// launcher.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import portable.aio
from portable.aio import AsyncJob, AsyncLauncher
from portable.compute import JobSpec, JobState, Launcher, open_launcher
from portable.driver.compute import ComputeCapabilities
from portable.embedded.localjobs import LocalLauncher
from portable.errors import (
    DeadlineExceeded,
    IdempotencyConflict,
    InvalidArgument,
    InvalidURL,
    NotFound,
    PortableError,
    UnknownScheme,
    Unsupported,
)
from portable.testing.compute_suite import BAD_SPECS, contract_profile
from tests.compute.conftest import jobs_dir as jobs_dir  # the local:// folder fixture


class CountingLocal(LocalLauncher):
    """The real local:// driver, counting the calls that reach it (so a test can say 'before any request')."""

    def __init__(self, root: Path, **options: Any) -> None:
        super().__init__(root, **options)
        self.calls: dict[str, int] = {}
        self._count_lock = threading.Lock()

    def _count(self, name: str) -> None:
        with self._count_lock:
            self.calls[name] = self.calls.get(name, 0) + 1

    def submit(self, spec: JobSpec) -> Any:
        self._count("submit")
        return super().submit(spec)

    def describe(self, job_id: str) -> Any:
        self._count("describe")
        return super().describe(job_id)

    def logs(self, job_id: str, follow: bool) -> Iterator[str]:
        self._count("logs")
        lines = super().logs(job_id, follow)

        def counted() -> Iterator[str]:
            try:
                yield from lines
            finally:
                self._count("logs closed")

        return counted()


class NoPreempt(CountingLocal):
    capabilities = ComputeCapabilities(preempt=False, cancel=False)


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.fixture
def driver(jobs_dir: Path) -> CountingLocal:
    return CountingLocal(jobs_dir, workers=2, grace=1, idle=10)


@pytest.fixture
def pair(driver: CountingLocal) -> Iterator[tuple[Launcher, AsyncLauncher]]:
    """A sync Launcher and its async face over one driver."""
    launcher = Launcher(driver, url=driver.endpoint, policy=contract_profile(driver.endpoint).resilience)
    yield launcher, AsyncLauncher.from_sync(launcher)
    launcher.close()


def same_error(sync_call: Callable[[], Any], async_call: Callable[[], Any]) -> PortableError:
    """Both faces raise the same type with the same message; return the async one's."""
    with pytest.raises(PortableError) as sync_err:
        sync_call()
    with pytest.raises(PortableError) as async_err:
        asyncio.run(async_call())
    assert type(async_err.value) is type(sync_err.value)
    assert str(async_err.value) == str(sync_err.value)
    return async_err.value


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_a_bad_spec_is_the_same_error_on_both_faces_before_any_request(
    pair: tuple[Launcher, AsyncLauncher], driver: CountingLocal, case: str
) -> None:
    launcher, alauncher = pair
    spec = JobSpec(**BAD_SPECS[case])
    err = same_error(lambda: launcher.submit(spec), lambda: alauncher.submit(spec))
    assert isinstance(err, InvalidArgument | InvalidURL)
    assert driver.calls == {}


@pytest.mark.parametrize(
    ("call", "args"),
    [
        ("get", ("../etc",)),
        ("job", ("a b",)),
        ("preempt", ("",)),
        ("list", ({"Upper": "x"},)),
    ],
)
def test_bad_ids_and_labels_are_the_same_error_on_both_faces(
    pair: tuple[Launcher, AsyncLauncher], driver: CountingLocal, call: str, args: tuple[Any, ...]
) -> None:
    launcher, alauncher = pair

    async def on_async() -> Any:
        result = getattr(alauncher, call)(*args)
        return await result if asyncio.iscoroutine(result) else result

    err = same_error(lambda: getattr(launcher, call)(*args), on_async)
    assert isinstance(err, InvalidArgument)
    assert driver.calls == {}


def test_bad_wait_timeout_and_grace_are_refused_on_both_faces(pair: tuple[Launcher, AsyncLauncher]) -> None:
    launcher, alauncher = pair
    same_error(lambda: launcher.job("job-1").wait(timeout=-1), lambda: alauncher.job("job-1").wait(timeout=-1))
    same_error(lambda: launcher.preempt("job-1", grace=True), lambda: alauncher.preempt("job-1", grace=True))


def test_two_different_idempotency_keys_are_refused(pair: tuple[Launcher, AsyncLauncher], driver: CountingLocal) -> None:
    launcher, alauncher = pair
    spec = JobSpec(command=["true"], idempotency_key="one")
    err = same_error(
        lambda: launcher.submit(spec, idempotency_key="two"), lambda: alauncher.submit(spec, idempotency_key="two")
    )
    assert "differs" in str(err)
    assert driver.calls == {}


def test_a_missing_capability_is_the_same_unsupported(jobs_dir: Path) -> None:
    driver = NoPreempt(jobs_dir, workers=1, grace=1, idle=10)
    with Launcher(driver, url=driver.endpoint) as launcher:
        alauncher = AsyncLauncher.from_sync(launcher)
        err = same_error(lambda: launcher.preempt("job-1"), lambda: alauncher.preempt("job-1"))
        assert isinstance(err, Unsupported) and "cannot preempt" in str(err)
        assert driver.calls == {}


def test_open_launcher_refuses_what_the_sync_one_refuses() -> None:
    for url in ("nosuch://x", "local:///tmp/x?workers=0", "local:///tmp/x?unknown=1"):
        with pytest.raises(PortableError) as sync_err:
            open_launcher(url)
        with pytest.raises(type(sync_err.value)):
            portable.aio.open_launcher(url)
    with pytest.raises(UnknownScheme):
        portable.aio.open_launcher("nosuch://x")


# ---------------------------------------------------------------- the same jobs, the same guard
def test_an_idempotent_submit_returns_the_same_job_on_either_face(
    pair: tuple[Launcher, AsyncLauncher], driver: CountingLocal
) -> None:
    launcher, alauncher = pair
    spec = JobSpec(command=python("pass"), labels={"t": "idem"}, idempotency_key="order-7")

    async def twice() -> tuple[AsyncJob, AsyncJob, list[AsyncJob]]:
        first = await alauncher.submit(spec)
        again = await alauncher.submit(spec)
        racing = await asyncio.gather(*(alauncher.submit(spec) for _ in range(8)))
        return first, again, racing

    first, again, racing = asyncio.run(twice())
    assert again.id == first.id and {j.id for j in racing} == {first.id}
    assert launcher.submit(spec).id == first.id  # the sync face finds it too
    assert [s.job_id for s in launcher.list({"t": "idem"})] == [first.id]
    with pytest.raises(IdempotencyConflict):
        asyncio.run(alauncher.submit(JobSpec(command=python("print(2)"), idempotency_key="order-7")))
    assert asyncio.run(first.wait(timeout=60)).state is JobState.SUCCEEDED


def test_from_sync_shares_the_driver_and_the_guards(pair: tuple[Launcher, AsyncLauncher]) -> None:
    launcher, alauncher = pair
    assert alauncher.sync is launcher
    assert alauncher.driver.sync is launcher.driver
    assert alauncher.capabilities is launcher.capabilities
    assert alauncher.provider == launcher.provider == "local"
    assert launcher._guard.breaker("read") is alauncher.sync._guard.breaker("read")


def test_a_job_submitted_on_one_face_is_seen_on_the_other(pair: tuple[Launcher, AsyncLauncher]) -> None:
    launcher, alauncher = pair
    job = launcher.submit(JobSpec(command=python("print('from sync')")))

    async def look() -> tuple[JobState, list[str]]:
        ajob = await alauncher.get(job.id)
        status = await ajob.wait(timeout=60)
        return status.state, [line async for line in ajob.logs()]

    assert asyncio.run(look()) == (JobState.SUCCEEDED, ["from sync"])


def test_unknown_jobs_are_not_found(pair: tuple[Launcher, AsyncLauncher]) -> None:
    _, alauncher = pair
    with pytest.raises(NotFound):
        asyncio.run(alauncher.get("job-000000000000000000000000"))

    async def read_logs() -> list[str]:
        return [line async for line in alauncher.job("job-000000000000000000000000").logs(follow=True)]

    with pytest.raises(NotFound):
        asyncio.run(read_logs())


# ---------------------------------------------------------------- waiting and following, cancelled
def test_wait_with_a_timeout_raises_and_a_cancelled_wait_leaves_the_job_running(
    pair: tuple[Launcher, AsyncLauncher], tmp_path: Path
) -> None:
    _, alauncher = pair
    gate = tmp_path / "go"
    code = "import os, time\nwhile not os.path.exists(os.environ['GATE']): time.sleep(0.01)"

    async def scenario() -> JobState:
        job = await alauncher.submit(JobSpec(command=python(code), env={"GATE": str(gate)}))
        with pytest.raises(DeadlineExceeded):
            await job.wait(timeout=0.2)
        waiting = asyncio.create_task(job.wait())
        await asyncio.sleep(0.2)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not (await job.status()).done
        gate.write_text("go")
        return (await job.wait(timeout=60)).state

    assert asyncio.run(scenario()) is JobState.SUCCEEDED


def test_follow_streams_whole_lines_and_an_abandoned_follow_frees_its_thread(
    pair: tuple[Launcher, AsyncLauncher], driver: CountingLocal, tmp_path: Path
) -> None:
    _, alauncher = pair
    gate = tmp_path / "go"
    # a line written in two halves must come out whole; then the job waits for the gate, then says bye
    code = (
        "import os, sys, time\n"
        "for i in range(3):\n"
        "    sys.stdout.write(f'line {i} first half'); sys.stdout.flush(); time.sleep(0.1)\n"
        "    print(' second half', flush=True)\n"
        "while not os.path.exists(os.environ['GATE']): time.sleep(0.01)\n"
        "print('bye', flush=True)\n"
    )

    async def scenario() -> list[str]:
        job = await alauncher.submit(JobSpec(command=python(code), env={"GATE": str(gate)}))
        got: list[str] = []
        async for line in job.logs(follow=True):
            got.append(line)
            if len(got) == 3:
                break  # leave the follow while the job still runs
        assert driver.calls.get("logs closed", 0) == 0  # the pump is still in the driver's poll
        gate.write_text("go")
        assert (await job.wait(timeout=60)).succeeded
        for _ in range(500):  # its next line (or the job's end) lets the pump see the stop
            if driver.calls.get("logs closed"):
                break
            await asyncio.sleep(0.01)
        return got

    assert asyncio.run(scenario()) == [f"line {i} first half second half" for i in range(3)]
    assert driver.calls["logs"] == 1 and driver.calls["logs closed"] == 1


def test_follow_reads_to_the_end_on_one_thread(pair: tuple[Launcher, AsyncLauncher]) -> None:
    _, alauncher = pair
    code = "import time\nfor i in range(20):\n    print('n', i, flush=True)\n    time.sleep(0.01)"

    async def scenario() -> tuple[list[str], set[str]]:
        threads: set[str] = set()
        job = await alauncher.submit(JobSpec(command=python(code)))
        got = []
        async for line in job.logs(follow=True):
            got.append(line)
            threads.update(t.name for t in threading.enumerate() if t.name.startswith("portable-aio"))
        return got, threads

    got, threads = asyncio.run(scenario())
    assert got == [f"n {i}" for i in range(20)]
    assert threads, "the follow ran on the bounded pool"


def test_aclose_closes_the_sync_launcher(driver: CountingLocal) -> None:
    closed: list[bool] = []
    real_close = driver.close

    def close() -> None:
        closed.append(True)
        real_close()

    driver.close = close  # type: ignore[method-assign]
    launcher = Launcher(driver, url=driver.endpoint)

    async def use() -> None:
        async with AsyncLauncher.from_sync(launcher) as alauncher:
            assert await alauncher.list() == []

    asyncio.run(use())
    assert closed == [True]


def test_from_sync_takes_only_a_launcher() -> None:
    with pytest.raises(InvalidArgument):
        AsyncLauncher.from_sync("local://x")  # type: ignore[arg-type]


def test_jobs_submitted_on_the_async_face_publish_their_events(jobs_dir: Path, unique_name: str) -> None:
    from portable.messaging import open_subscription

    queue = f"mem://{unique_name}"
    sub = open_subscription(queue)

    async def run() -> str:
        async with portable.aio.open_launcher(f"local://{jobs_dir}", events=queue) as launcher:
            job = await launcher.submit(JobSpec(name="watched", command=python("raise SystemExit(3)")))
            assert (await job.wait(timeout=60)).state is JobState.FAILED
            return job.id

    job_id = asyncio.run(run())  # leaving the block closed the launcher, which reported the final state
    events = []
    for _ in range(100):
        for message in sub.receive(10, wait=0.05):
            events.append(message.event())
            message.ack()
        if events and events[-1].type == "dev.portable.job.failed":
            break
    assert events[0].type == "dev.portable.job.pending"
    assert events[-1].type == "dev.portable.job.failed"
    assert {e.subject for e in events} == {job_id}
