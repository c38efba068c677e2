"""portable.driver.compute.wait_for_status: the polling loop drivers share."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from portable.driver.compute import JobState, JobStatus, wait_for_status


def statuses(*states: JobState) -> tuple[Callable[[str], JobStatus], list[str]]:
    """A describe that answers ``states`` in turn (the last one for ever) and records its calls."""
    calls: list[str] = []

    def describe(job_id: str) -> JobStatus:
        calls.append(job_id)
        return JobStatus(job_id=job_id, name="job", state=states[min(len(calls), len(states)) - 1])

    return describe, calls


def test_it_returns_the_first_terminal_status() -> None:
    describe, calls = statuses(JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED)
    status = wait_for_status(describe, "j1", 60, poll=0.001, max_poll=0.001)
    assert status.state is JobState.SUCCEEDED
    assert calls == ["j1", "j1", "j1"]


def test_a_zero_timeout_reads_the_status_once() -> None:
    describe, calls = statuses(JobState.RUNNING)
    assert wait_for_status(describe, "j1", 0).state is JobState.RUNNING
    assert calls == ["j1"]


def test_after_the_timeout_it_returns_the_last_status_read() -> None:
    describe, calls = statuses(JobState.RUNNING)
    assert wait_for_status(describe, "j1", 0.02, poll=0.001, max_poll=0.002).state is JobState.RUNNING
    assert len(calls) >= 2


def test_what_describe_raises_goes_through_unchanged() -> None:
    def describe(job_id: str) -> JobStatus:
        raise KeyError(job_id)

    with pytest.raises(KeyError):
        wait_for_status(describe, "missing", 60)
