# mypy: disable-error-code="no-untyped-call"
"""What runs on the Dask workers: one task per attempt of a job, and the stop
requests the launcher sends with ``Client.run``.

A command's task runs it in a subprocess in its own session, streams its output
to the scheduler's event log (topic ``portable-log-<job id>``), enforces its
timeout, and kills what is left of its process group when it ends. Each task
first reports ``started`` on the launcher's topic, so the job turns RUNNING
when the task starts on a worker, not when it is queued.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from distributed import get_worker

__all__ = ["AttemptFailed", "run_callable", "run_command", "stop_attempt"]

#: seconds a worker gathers a command's output before it sends it to the event log
_LOG_FLUSH_SECONDS = 0.05

#: (job id, attempt) -> the command's process, on each worker
_COMMANDS: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
#: (job id, attempt) -> grace of a stop that came before the process existed
_STOPS_BEFORE_START: dict[tuple[str, int], float] = {}
_COMMANDS_LOCK = threading.Lock()


def _kill_process_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds if still there."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
    if grace <= 0:
        return

    def later() -> None:
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    threading.Thread(target=later, daemon=True, name="portable-kill").start()


def stop_attempt(job_id: str, attempt: int, grace: float) -> bool:
    """Run on a worker by ``Client.run``: stop an attempt's command."""
    with _COMMANDS_LOCK:
        proc = _COMMANDS.get((job_id, attempt))
        if proc is None:
            _STOPS_BEFORE_START[(job_id, attempt)] = grace
            return False
    _kill_process_group(proc, grace)
    return True


def run_command(
    job_id: str,
    attempt: int,
    command: list[str],
    env: dict[str, str],
    cwd: str | None,
    timeout: float | None,
    grace: float,
    topic: str,
) -> None:
    """The task of one attempt of a command job; raises AttemptFailed unless it exits 0."""
    worker = get_worker()
    worker.log_event(topic, {"job": job_id, "attempt": attempt, "event": "started", "worker": worker.address})
    log_topic = f"portable-log-{job_id}"
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        text = f"portable: cannot start {command[0]!r}: {exc}\n"
        worker.log_event(log_topic, {"attempt": attempt, "text": text})
        raise AttemptFailed({"exit_code": None, "error": f"cannot start {command[0]!r}: {exc.strerror or exc}"}) from None
    with _COMMANDS_LOCK:
        _COMMANDS[(job_id, attempt)] = proc
        doomed = _STOPS_BEFORE_START.pop((job_id, attempt), None)
    if doomed is not None:
        _kill_process_group(proc, doomed)
    assert proc.stdout is not None
    try:
        outcome = _stream_output(proc, job_id, attempt, timeout, grace, worker, log_topic)
    finally:
        with _COMMANDS_LOCK:
            _COMMANDS.pop((job_id, attempt), None)
    if outcome["exit_code"] != 0 or outcome["timed_out"]:
        raise AttemptFailed(outcome)
    return None  # success is the future's own state: the client fetches nothing


class AttemptFailed(Exception):
    """Raised by a command's task when it did not exit 0; ``args[0]`` is the outcome.

    Success then needs no result fetch at all (the future is just "finished"),
    and only a failed attempt costs the client a round trip for its outcome.
    """


def _stream_output(
    proc: subprocess.Popen[bytes],
    job_id: str,
    attempt: int,
    timeout: float | None,
    grace: float,
    worker: Any,
    log_topic: str,
) -> dict[str, Any]:
    """Stream the command's output to the event log until it ends; enforce its timeout.

    One thread: select on the pipe, at most 0.1 s at a time, so that a job whose
    leftover children keep the pipe open still ends when its own process does.
    """
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    pending: list[str] = []
    flushed = time.monotonic()
    deadline = None if timeout is None else flushed + timeout
    timed_out = False
    code: int | None = None
    while True:
        now = time.monotonic()
        wait = 0.1
        if pending:
            wait = min(wait, max(0.0, flushed + _LOG_FLUSH_SECONDS - now))
        if deadline is not None and not timed_out:
            wait = min(wait, max(0.0, deadline - now))
        ready, _, _ = select.select([fd], [], [], wait)
        chunk = os.read(fd, 65536) if ready else None
        if chunk:
            pending.append(decoder.decode(chunk))
        now = time.monotonic()
        if pending and (chunk == b"" or now - flushed >= _LOG_FLUSH_SECONDS):
            worker.log_event(log_topic, {"attempt": attempt, "text": "".join(pending)})
            pending.clear()
            flushed = now
        if deadline is not None and not timed_out and now >= deadline:
            timed_out = True
            _kill_process_group(proc, grace)
        if chunk == b"":
            break
        if code is None and (code := proc.poll()) is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # what the attempt left behind
    tail = decoder.decode(b"", final=True)
    if tail:
        worker.log_event(log_topic, {"attempt": attempt, "text": tail})
    proc.stdout.close()
    if code is None:
        code = proc.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    return {"exit_code": code, "timed_out": timed_out}


def run_callable(fn: Callable[..., Any], job_id: str, attempt: int, topic: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The task of one attempt of a callable job (bound to ``fn`` with functools.partial)."""
    worker = get_worker()
    worker.log_event(topic, {"job": job_id, "attempt": attempt, "event": "started", "worker": worker.address})
    return fn(*args, **kwargs)
