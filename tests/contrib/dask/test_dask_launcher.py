"""The compute contract on Dask (a LocalCluster these tests start), plus callables and dask+local://.

No __init__.py here on purpose: as a package this folder would be named ``dask``
and shadow the real one.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("distributed", reason="portable-cloud-dask is not installed")

from distributed import LocalCluster
from portable_dask import DaskLauncher, local_cluster, submit_callable

from portable.compute import JobSpec, JobState, open_launcher
from portable.errors import InvalidURL, Unsupported
from portable.testing.compute_suite import ComputeContract, poll_until


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """A LocalCluster of two single-threaded worker processes on 127.0.0.1; its address."""
    cluster = local_cluster(workers=2, threads=1)
    try:
        yield cluster.scheduler_address
    finally:
        pids = [w.process.pid for w in cluster.workers.values() if getattr(w, "process", None) and w.process.pid]
        cluster.close()
        for pid in pids:
            poll_until(lambda p=pid: _gone(p), 30, f"worker {pid} to exit")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


class TestDaskContract(ComputeContract):
    @pytest.fixture
    def launcher_url(self, scheduler: str) -> str:
        return f"dask://{scheduler.removeprefix('tcp://')}?grace=1"


def _url(scheduler: str) -> str:
    return f"dask://{scheduler.removeprefix('tcp://')}?grace=1"


def _square(x: int) -> int:
    return x * x


def _flaky(path: str) -> str:
    """Fails on its first two calls, then succeeds."""
    with open(path, "a+") as fh:
        fh.seek(0)
        calls = len(fh.read())
        fh.write("x")
    if calls < 2:
        raise RuntimeError(f"call {calls + 1} fails")
    return "third time lucky"


def _boom() -> None:
    raise ValueError("boom")


def test_callable_runs_and_returns(scheduler: str) -> None:
    with open_launcher(_url(scheduler)) as launcher:
        job = submit_callable(launcher, _square, 12, labels={"kind": "callable"})
        status = job.wait(timeout=60)
        assert status.state is JobState.SUCCEEDED and status.name == "square"
        driver = launcher.driver
        assert isinstance(driver, DaskLauncher)
        assert driver.result(job.id) == 144
        assert [s.job_id for s in launcher.list({"kind": "callable"})] == [job.id]


def test_callable_retries_on_exceptions(scheduler: str, tmp_path: object) -> None:
    with open_launcher(_url(scheduler)) as launcher:
        job = submit_callable(launcher, _flaky, f"{tmp_path}/calls", retries=2)
        status = job.wait(timeout=60)
        assert status.state is JobState.SUCCEEDED and status.attempts == 3
        assert launcher.driver.result(job.id) == "third time lucky"  # type: ignore[attr-defined]


def test_callable_failure_has_the_error_as_reason(scheduler: str) -> None:
    with open_launcher(_url(scheduler)) as launcher:
        job = submit_callable(launcher, _boom)
        status = job.wait(timeout=60)
        assert status.state is JobState.FAILED
        assert status.reason is not None and "ValueError" in status.reason and "boom" in status.reason
        with pytest.raises(Unsupported):
            launcher.driver.result(job.id)  # type: ignore[attr-defined]


def test_callable_timeout_marks_the_job(scheduler: str) -> None:
    with open_launcher(_url(scheduler)) as launcher:
        job = submit_callable(launcher, time.sleep, 1, timeout=0.3)
        status = job.wait(timeout=60)
        assert status.state is JobState.FAILED and "timed out" in (status.reason or "")


def test_callable_idempotency(scheduler: str) -> None:
    with open_launcher(_url(scheduler)) as launcher:
        first = submit_callable(launcher, _square, 3, idempotency_key="sq-3")
        again = submit_callable(launcher, _square, 3, idempotency_key="sq-3")
        assert first.id == again.id


def test_submit_callable_needs_a_dask_launcher(tmp_path: object) -> None:
    with pytest.raises(Unsupported):
        submit_callable(open_launcher(f"local://{tmp_path}/jobs"), _square, 2)


def test_jobs_run_on_both_workers_at_once(scheduler: str, tmp_path: object) -> None:
    gate = f"{tmp_path}/gate"
    code = "import os, time\nwhile not os.path.exists(os.environ['GATE']): time.sleep(0.01)"
    with open_launcher(_url(scheduler)) as launcher:
        jobs = [launcher.submit(JobSpec(command=[sys.executable, "-c", code], env={"GATE": gate})) for _ in range(2)]
        poll_until(lambda: all(j.status().state is JobState.RUNNING for j in jobs), 30, "both jobs to run at once")
        open(gate, "w").close()
        assert all(j.wait(timeout=60).succeeded for j in jobs)


def test_dask_local_url_starts_and_stops_its_own_cluster() -> None:
    with open_launcher("dask+local://?workers=1&grace=1") as launcher:
        driver = launcher.driver
        assert isinstance(driver, DaskLauncher) and driver.cluster is not None
        assert launcher.as_(LocalCluster) is driver.cluster
        assert launcher.submit(JobSpec(command=[sys.executable, "-c", "print(1)"])).wait(timeout=60).succeeded
        pids = [w.process.pid for w in driver.cluster.workers.values()]
    for pid in pids:
        poll_until(lambda p=pid: _gone(p), 30, f"worker {pid} to exit")


@pytest.mark.parametrize(
    "url", ["dask://", "dask+local://?workers=0", "dask+local://?colour=red", "dask://127.0.0.1:1?grace=-1"]
)
def test_bad_urls(url: str) -> None:
    with pytest.raises(InvalidURL):
        open_launcher(url)
