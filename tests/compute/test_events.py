"""Job state changes published as CloudEvents to a portable Topic."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from portable.compute import JobSpec, JobState, open_launcher
from portable.messaging import Subscription, open_subscription, open_topic
from portable.testing.compute_suite import poll_until


def _receive(sub: Subscription, count: int, into: list[Any]) -> list[Any]:
    def more() -> bool:
        for message in sub.receive(10, wait=0.1):
            into.append(message)
            message.ack()
        return len(into) >= count

    poll_until(more, 30, f"{count} messages")
    return into


def test_state_changes_are_published(jobs_dir: Path, tmp_path: Path, unique_name: str) -> None:
    gate = tmp_path / "gate"
    queue = f"mem://{unique_name}"
    sub = open_subscription(queue)
    launcher = open_launcher(f"local://{jobs_dir}", events=queue)
    code = "import os, sys, time\nwhile not os.path.exists(os.environ['GATE']): time.sleep(0.01)\nsys.exit(2)"
    job = launcher.submit(JobSpec(name="watched", command=[sys.executable, "-c", code], env={"GATE": str(gate)}))
    got: list[Any] = []
    _receive(sub, 2, got)  # pending, then running
    gate.write_text("go")
    assert job.wait(timeout=60).state is JobState.FAILED
    launcher.close()
    events = [m.event() for m in _receive(sub, 3, got)]
    assert [e.type for e in events] == ["dev.portable.job.pending", "dev.portable.job.running", "dev.portable.job.failed"]
    assert {e.subject for e in events} == {job.id}
    assert all(e.source == f"local://{jobs_dir}" for e in events)
    final = json.loads(events[-1].data)
    assert final["state"] == "FAILED" and final["exit_code"] == 2 and final["name"] == "watched"
    assert len({e.id for e in events}) == 3


def test_a_topic_object_is_used_and_left_open(jobs_dir: Path, unique_name: str) -> None:
    topic = open_topic(f"mem://{unique_name}")
    sub = open_subscription(f"mem://{unique_name}")
    with open_launcher(f"local://{jobs_dir}", events=topic) as launcher:
        launcher.submit(JobSpec(command=[sys.executable, "-c", "pass"])).wait(timeout=60)
    topic.publish(b"still open")
    messages: list[Any] = []

    def until_plain() -> bool:
        _receive(sub, len(messages) + 1, messages)
        return messages[-1].body == b"still open"

    poll_until(until_plain, 30, "the plain message")
    assert messages[0].event().type == "dev.portable.job.pending"
    assert messages[-2].event().type == "dev.portable.job.succeeded"
