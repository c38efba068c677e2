"""portable.checkpoint: atomic, step-ordered saves that a stale writer cannot overwrite."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from portable.checkpoint import Checkpoint, from_env, open_checkpoint
from portable.compute import JobSpec, JobState, open_launcher
from portable.errors import ConfigError, InvalidArgument, PreconditionFailed
from portable.storage import open_bucket
from portable.testing.compute_suite import poll_until


@pytest.fixture(params=["mem", "file"])
def url(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> str:
    return f"mem://{unique_name}" if request.param == "mem" else f"file://{tmp_path / 'ckpt'}"


def test_load_without_a_checkpoint_returns_the_default(url: str) -> None:
    ckpt = open_checkpoint(url)
    assert ckpt.load(default={"i": 0}) == {"i": 0}
    assert ckpt.step == 0


def test_save_then_load_in_another_reader(url: str) -> None:
    writer = open_checkpoint(url)
    writer.load()
    assert writer.save({"i": 10, "items": ["a", "b"]}) == 1
    assert writer.save({"i": 20, "items": []}) == 2
    reader = open_checkpoint(url)
    assert reader.load() == {"i": 20, "items": []}
    assert reader.step == 2


def test_bytes_state_round_trips(url: str) -> None:
    ckpt = open_checkpoint(url)
    ckpt.load()
    ckpt.save(b"\x00\x01binary\n")
    assert open_checkpoint(url).load() == b"\x00\x01binary\n"


def test_a_stale_writer_cannot_overwrite_a_newer_checkpoint(url: str) -> None:
    old = open_checkpoint(url)
    old.load()
    old.save({"i": 1})
    new = open_checkpoint(url)
    assert new.load() == {"i": 1}
    new.save({"i": 2})
    with pytest.raises(PreconditionFailed, match="stale"):
        old.save({"i": 999})
    assert open_checkpoint(url).load() == {"i": 2}
    # reloading makes it current again
    assert old.load() == {"i": 2}
    assert old.save({"i": 3}) == 3


def test_a_writer_that_never_loaded_cannot_clobber(url: str) -> None:
    first = open_checkpoint(url)
    first.load()
    first.save({"i": 1})
    blind = open_checkpoint(url)
    with pytest.raises(PreconditionFailed):
        blind.save({"i": 0})


def test_explicit_steps_must_increase(url: str) -> None:
    ckpt = open_checkpoint(url)
    ckpt.load()
    assert ckpt.save({"i": 100}, step=100) == 100
    with pytest.raises(InvalidArgument):
        ckpt.save({"i": 50}, step=50)
    with pytest.raises(InvalidArgument):
        ckpt.save({"i": 50}, step=True)  # type: ignore[arg-type]
    assert open_checkpoint(url).load() == {"i": 100}


def test_unserialisable_state_is_refused(url: str) -> None:
    ckpt = open_checkpoint(url)
    ckpt.load()
    with pytest.raises(InvalidArgument, match="JSON"):
        ckpt.save({"when": object()})


def test_an_object_that_is_not_a_checkpoint_is_reported(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'ckpt'}"
    open_bucket(url).put("checkpoint", b"hello")
    with pytest.raises(InvalidArgument, match="not a portable checkpoint"):
        open_checkpoint(url).load()


def test_clear_deletes(url: str) -> None:
    ckpt = open_checkpoint(url)
    ckpt.load()
    ckpt.save([1])
    ckpt.clear()
    assert open_checkpoint(url).load(default="none") == "none"


def test_from_env(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.delenv("PORTABLE_CHECKPOINT_URL", raising=False)
    with pytest.raises(ConfigError, match="PORTABLE_CHECKPOINT_URL"):
        from_env()
    assert isinstance(from_env(default_url=url), Checkpoint)
    monkeypatch.setenv("PORTABLE_CHECKPOINT_URL", url)
    assert from_env().url == url


COUNT_JOB = """
import os, sys, time
import portable.checkpoint
ckpt = portable.checkpoint.from_env()
state = ckpt.load(default={"next": 1, "total": 0})
log = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
os.write(log, f"resume {state['next']} attempt {os.environ['PORTABLE_JOB_ATTEMPT']}\\n".encode())
for i in range(state["next"], 1001):
    os.write(log, f"{i}\\n".encode())
    state["total"] += i
    state["next"] = i + 1
    if i % 100 == 0:
        ckpt.save(state)
    time.sleep(0.002)
print("total", state["total"])
"""


def test_count_to_1000_preempted_three_times(jobs_dir: Path, tmp_path: Path) -> None:
    """Preempted three times, the job finishes with the right total; no step
    before the checkpoint it resumed from ever runs again."""
    ckpt_url = f"file://{tmp_path / 'ckpt'}"
    steps = tmp_path / "steps.log"
    launcher = open_launcher(f"local://{jobs_dir}?workers=2&grace=0.2")
    job = launcher.submit(
        JobSpec(name="count", command=[sys.executable, "-c", COUNT_JOB, str(steps)], checkpoint_url=ckpt_url)
    )
    probe = open_checkpoint(ckpt_url)

    def checkpoint_step() -> int:
        state = probe.load(default={"next": 1})
        return int(state["next"]) - 1

    for round_, at_least in enumerate((200, 400, 600)):
        poll_until(
            lambda n=round_: (s := job.status()).state is JobState.RUNNING and s.preemptions == n,
            60,
            f"attempt {round_ + 1} to run",
        )
        poll_until(lambda at=at_least: checkpoint_step() >= at, 60, f"a checkpoint at step {at_least}")
        launcher.preempt(job.id, grace=0.2)

    status = job.wait(timeout=120)
    assert status.state is JobState.SUCCEEDED, status
    assert status.preemptions == 3
    assert status.attempts == 4
    assert status.exit_code == 0
    assert "total 500500" in list(job.logs())

    runs: list[tuple[int, list[int]]] = []
    for line in steps.read_text().splitlines():
        if line.startswith("resume"):
            runs.append((int(line.split()[1]), []))
        else:
            runs[-1][1].append(int(line))
    assert len(runs) == 4
    assert runs[0][0] == 1
    covered: set[int] = set()
    for k, (resume, ran) in enumerate(runs):
        # each attempt resumes right after a checkpoint, and at or after the last one saved
        assert (resume - 1) % 100 == 0
        if k:
            previous_max = max(runs[k - 1][1])
            assert resume - 1 <= previous_max
            assert resume > runs[k - 1][0], "an attempt lost a checkpoint"
        # and runs each step from there once, in order
        assert ran == list(range(resume, resume + len(ran)))
        for earlier_resume, _ in runs[:k]:
            assert resume >= earlier_resume
        covered.update(ran)
    assert covered == set(range(1, 1001))
    # no step before an attempt's resume point runs in it or in any later attempt
    for k, (resume, _) in enumerate(runs):
        assert all(step >= resume for _, later in runs[k:] for step in later)
