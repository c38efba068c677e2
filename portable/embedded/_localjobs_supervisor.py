"""The supervisor of ``local://`` jobs: one detached process per state folder.

It is started on demand by :mod:`portable.embedded.localjobs` (``python -I -S
this_file.py --fork STATE_DIR ...``), so it imports the standard library only.
It is the only process that starts, stops or changes a job once its record
exists; submitters, ``status`` and ``cancel`` only create records and
requests and then wake it. Jobs therefore outlive the process that
submitted them.

The state folder::

    supervisor.lock       held (flock) by the live supervisor: at most one per folder
    supervisor.pid        its pid
    supervisor.log        its stderr
    wake                  a FIFO; submitters write job ids there, one a line, to wake it
    stop                  a stop request: {"mode": "kill", "at": epoch}
    inbox/<job_id>        "look at this job", when the FIFO had no reader or was full
    tmp/                  records being built; renamed into jobs/ when complete
    jobs/<job_id>/spec.json     the normalised spec, written once (mode 0600)
    jobs/<job_id>/state.log     one JSON line per change, the first by the submitter;
                                the last whole line is the current state
    jobs/<job_id>/cancel        a cancel request
    jobs/<job_id>/preempt       a preemption request ({"grace": seconds or null})
    jobs/<job_id>/attempt-N.log stdout and stderr of attempt N

Lifecycle: the supervisor exits when it has had nothing to do for ``idle``
seconds, after closing the FIFO and looking for new records once more, so a
job recorded meanwhile is never lost (its submitter finds no reader and starts
a new supervisor, which waits for the lock). Processes are started on a few
launcher threads: fork/exec releases the GIL, so launches overlap. On SIGTERM it preempts its running
jobs (they go back to PENDING and resume under the next supervisor). A
record left RUNNING by a supervisor that died (SIGKILL) is treated the same
way when the next one starts: its process group is killed and the job runs
again, counted as a preemption.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import errno
import fcntl
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED = "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})
_SCAN_EVERY = 2.0
_LOCK_WAIT = 15.0


# ---------------------------------------------------------------- the layout (shared with localjobs.py)
def jobs_dir(root: str) -> str:
    return os.path.join(root, "jobs")


def job_dir(root: str, job_id: str) -> str:
    return os.path.join(root, "jobs", job_id)


def write_json(path: str, data: Any, mode: int = 0o644) -> None:
    """Replace ``path`` atomically with ``data`` as JSON (``mode`` applies when it is created)."""
    tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            os.write(fd, json.dumps(data, separators=(",", ":")).encode("utf-8"))
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: str) -> Any:
    """Read a JSON file; None if it does not exist."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None


def read_state(folder: str) -> dict[str, Any] | None:
    """A job's current state: the last whole line of its ``state.log``; None if it has none.

    The submitter writes the first line; the supervisor appends a snapshot per
    change instead of replacing a file: on ext4 a rename over an existing
    file forces the new file's blocks out (``auto_da_alloc``), an order of
    magnitude slower than an append. A line being written is ignored until
    it is whole.
    """
    try:
        with open(os.path.join(folder, "state.log"), "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return None
    end = data.rfind(b"\n")
    if end < 0:
        return None
    start = data.rfind(b"\n", 0, end) + 1
    return json.loads(data[start:end])  # type: ignore[no-any-return]


def state_line(state: dict[str, Any]) -> bytes:
    return json.dumps(state, separators=(",", ":")).encode("utf-8") + b"\n"


def append_state(folder: str, state: dict[str, Any]) -> None:
    fd = os.open(os.path.join(folder, "state.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, state_line(state))
    finally:
        os.close(fd)


def touch(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)


def poke(root: str, data: bytes = b"\n") -> bool | None:
    """Write ``data`` (job ids, one a line) to the supervisor's FIFO.

    Returns True once written, None if no supervisor is reading, False if the
    FIFO is full (the supervisor is behind; leave a durable hint instead).
    With ``data=b""`` it only checks that one is there, without waking it.
    """
    try:
        fd = os.open(os.path.join(root, "wake"), os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENOENT):
            return None
        raise
    try:
        if data:
            os.write(fd, data)  # <= PIPE_BUF bytes: written whole or not at all
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def lock_held(root: str) -> bool:
    """Whether a supervisor holds the folder's lock (is starting, running or exiting)."""
    try:
        fd = os.open(os.path.join(root, "supervisor.lock"), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a lock we may have taken
    return False


def remove_stale_tmp(root: str) -> None:
    """Remove the records left half-built in ``tmp/`` an hour ago or more (their submitter died)."""
    tmp = os.path.join(root, "tmp")
    cutoff = time.time() - 3600
    for name in os.listdir(tmp):
        path = os.path.join(tmp, name)
        with contextlib.suppress(OSError):
            if os.stat(path).st_mtime < cutoff:
                for inner in os.listdir(path):
                    os.unlink(os.path.join(path, inner))
                os.rmdir(path)


def signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


# ---------------------------------------------------------------- the supervisor's parts
def acquire_lock(root: str) -> tuple[int, float] | None:
    """Take the folder's lock: its fd and when it was taken, or None if another
    supervisor keeps it and is serving (or does not let go within 15 s)."""
    fd = os.open(os.path.join(root, "supervisor.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    end = time.monotonic() + _LOCK_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd, time.time()
        except BlockingIOError:
            pass
        if poke(root) is not None or time.monotonic() > end:
            # a live supervisor is serving (and now looks at the inbox): nothing to do
            os.close(fd)
            return None
        time.sleep(0.02)


def attempt_env(job_id: str, spec: dict[str, Any], attempt: int) -> dict[str, str]:
    """The environment of an attempt: the supervisor's, the spec's, then the launcher's own variables."""
    env = dict(os.environ)
    env.update(spec.get("env") or {})
    env["PORTABLE_JOB_ID"] = job_id
    env["PORTABLE_JOB_NAME"] = spec["name"]
    env["PORTABLE_JOB_ATTEMPT"] = str(attempt)
    if spec.get("checkpoint_url"):
        env["PORTABLE_CHECKPOINT_URL"] = spec["checkpoint_url"]
    return env


@dataclass
class _RunningAttempt:
    job_id: str
    proc: subprocess.Popen[bytes]
    state: dict[str, Any]
    spec: dict[str, Any]
    deadline: float | None
    intent: str | None = None  # cancel | preempt | timeout | stop | requeue
    kill_at: float | None = None
    state_fd: int = -1


@dataclass
class _Launch:
    job_id: str
    state: dict[str, Any]
    spec: dict[str, Any]
    attempt: int
    env: dict[str, str]
    cwd: str
    log: int
    state_fd: int
    proc: subprocess.Popen[bytes] | None = None
    error: BaseException | None = None


class _Wakeups:
    """What wakes the main loop: the FIFO submitters write job ids to, and a
    self-pipe that signals (SIGCHLD, SIGTERM) and the launch threads write to."""

    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, "wake")
        self.terminated = False  # SIGTERM arrived
        self._fifo_fd = -1
        self._fifo_keep = -1
        self._sig_r = -1
        self._sig_w = -1
        self._hints: set[str] = set()  # job ids read from the FIFO, to look at

    def setup(self) -> None:
        """Create the FIFO, install the signal handlers, and start listening."""
        with contextlib.suppress(FileExistsError):
            os.mkfifo(self.path, 0o600)
        sig_r, sig_w = os.pipe()
        os.set_blocking(sig_r, False)
        os.set_blocking(sig_w, False)
        self._sig_r, self._sig_w = sig_r, sig_w
        signal.set_wakeup_fd(sig_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.open_fifo()

    def open_fifo(self) -> None:
        self._fifo_fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._fifo_keep = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)  # never see EOF

    def close_fifo(self) -> None:
        """Read what the FIFO holds, then close it: a submitter's poke fails from now on."""
        self._read(self._fifo_fd)
        os.close(self._fifo_fd)
        os.close(self._fifo_keep)
        self._fifo_fd = self._fifo_keep = -1

    def notify(self) -> None:
        """Wake :meth:`wait` (from any thread)."""
        with contextlib.suppress(OSError):
            os.write(self._sig_w, b"L")

    def wait(self, timeout: float) -> None:
        """Sleep until a poke, a signal or a notify, or ``timeout`` seconds."""
        try:
            ready, _, _ = select.select([self._sig_r, self._fifo_fd], [], [], timeout)
        except InterruptedError:
            return
        for fd in ready:
            self._read(fd)

    def take_hints(self) -> set[str]:
        """The job ids poked since the last call."""
        hints, self._hints = self._hints, set()
        return hints

    def _read(self, fd: int) -> None:
        data = b""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while chunk := os.read(fd, 65536):
                data += chunk
        if fd == self._fifo_fd and data:
            # writes are whole lines (atomic below PIPE_BUF), so no line is ever split
            self._hints.update(line.decode("ascii", "replace") for line in data.split(b"\n") if line)

    def _on_sigterm(self, *_: Any) -> None:
        self.terminated = True


class _Spawner:
    """Starts the attempts' processes on a few threads (fork/exec releases the
    GIL, so launches overlap); the main loop collects what they started."""

    def __init__(self, workers: int, wakeups: _Wakeups) -> None:
        self.launching: dict[str, _Launch] = {}  # main thread only
        self._started: queue.SimpleQueue[_Launch] = queue.SimpleQueue()
        self._pool = ThreadPoolExecutor(max(1, min(workers, 4)), thread_name_prefix="portable-launch")
        self._wakeups = wakeups

    def start(self, folder: str, job_id: str, state: dict[str, Any], record: dict[str, Any]) -> None:
        """Open the next attempt's files and start its process on a launch thread."""
        spec = record["spec"]
        attempt = state.get("attempts", 0) + 1
        env = attempt_env(job_id, spec, attempt)
        cwd = record["cwd"]
        if spec.get("workdir"):
            cwd = os.path.join(cwd, spec["workdir"])
        state_fd = os.open(os.path.join(folder, "state.log"), os.O_WRONLY | os.O_APPEND)
        try:
            log = os.open(os.path.join(folder, f"attempt-{attempt}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except BaseException:
            os.close(state_fd)
            raise
        launch = _Launch(job_id, state, spec, attempt, env, cwd, log, state_fd)
        self.launching[job_id] = launch
        self._pool.submit(self._spawn, launch)

    def _spawn(self, launch: _Launch) -> None:
        """On a launch thread."""
        try:
            launch.proc = subprocess.Popen(
                launch.spec["command"],
                stdin=subprocess.DEVNULL,
                stdout=launch.log,
                stderr=launch.log,
                cwd=launch.cwd,
                env=launch.env,
                start_new_session=True,
                close_fds=True,
            )
        except BaseException as exc:
            launch.error = exc
        self._started.put(launch)
        self._wakeups.notify()

    def collect(self) -> Iterator[_Launch]:
        """Each launch whose process has started (or failed to start), once (main thread)."""
        while True:
            try:
                launch = self._started.get_nowait()
            except queue.Empty:
                return
            self.launching.pop(launch.job_id, None)
            yield launch

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


def _terminate(run: _RunningAttempt, intent: str, grace: float) -> None:
    """SIGTERM the attempt's process group (SIGKILL at once without ``grace``); SIGKILL it after ``grace``."""
    run.intent = intent
    sig = signal.SIGTERM if grace > 0 else signal.SIGKILL
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(run.proc.pid, sig)
    run.kill_at = time.monotonic() + grace


# ---------------------------------------------------------------- the supervisor
class Supervisor:
    """Runs the jobs of one state folder: queues what is PENDING, starts up to
    ``workers`` attempts, writes each change of state, and carries out
    timeouts, retries, cancel, preempt and stop requests."""

    def __init__(self, root: str, workers: int, grace: float, idle: float) -> None:
        self.root = os.path.abspath(root)
        self.workers = workers
        self.grace = grace
        self.idle = idle
        self.running: dict[str, _RunningAttempt] = {}
        self.queue: collections.deque[str] = collections.deque()
        self.known: set[str] = set()
        self.queued_state: dict[str, dict[str, Any]] = {}  # queued job -> the state read when it was queued
        self.stopping: str | None = None
        self.locked_at = 0.0
        self.deferred: set[str] = set()  # requests that came while their job was being launched
        self.wakeups = _Wakeups(self.root)
        self.spawner = _Spawner(workers, self.wakeups)
        self._stop_grace = grace

    # -- start ------------------------------------------------------------
    def setup(self) -> None:
        for sub in ("jobs", "inbox", "tmp"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)
        with open(os.path.join(self.root, "supervisor.pid"), "w") as fh:
            fh.write(f"{os.getpid()}\n")
        self.wakeups.setup()

    # -- records ------------------------------------------------------------
    def _load(self, job_id: str) -> dict[str, Any] | None:
        return read_state(job_dir(self.root, job_id))

    def _save(self, state: dict[str, Any]) -> None:
        run = self.running.get(state["job_id"])
        if run is not None and run.state_fd >= 0:
            os.write(run.state_fd, state_line(state))
        else:
            append_state(job_dir(self.root, state["job_id"]), state)

    def _request_path(self, job_id: str, name: str) -> str:
        return os.path.join(job_dir(self.root, job_id), name)

    def _remove_request(self, job_id: str, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._request_path(job_id, name))

    def _end_job(self, state: dict[str, Any], final: str, reason: str | None, exit_code: int | None) -> None:
        self.queued_state.pop(state["job_id"], None)
        state.update(state=final, reason=reason, exit_code=exit_code, finished=time.time(), pid=None)
        self._save(state)
        self._remove_request(state["job_id"], "cancel")
        self._remove_request(state["job_id"], "preempt")

    # -- discovery ------------------------------------------------------------
    def recover(self) -> None:
        """Full scan at start: queue PENDING jobs, restart the orphans of a dead supervisor."""
        names = sorted(os.listdir(jobs_dir(self.root)))
        pending: list[tuple[float, str]] = []
        for job_id in names:
            self.known.add(job_id)
            state = self._load(job_id)
            if state is None:
                continue
            if state["state"] == RUNNING:
                self._orphan(state)
            if state["state"] == PENDING:
                pending.append((state.get("created") or 0.0, job_id))
        self.queue.extend(job_id for _, job_id in sorted(pending))
        remove_stale_tmp(self.root)
        self.read_inbox()

    def _orphan(self, state: dict[str, Any]) -> None:
        pid = state.get("pid")
        if pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        job_id = state["job_id"]
        if os.path.exists(self._request_path(job_id, "cancel")):
            self._end_job(state, CANCELLED, "cancelled", None)
            return
        state.update(
            state=PENDING,
            pid=None,
            preemptions=state.get("preemptions", 0) + 1,
            reason=f"attempt {state.get('attempts', 0)} lost with its supervisor; restarting",
        )
        self._save(state)

    def read_inbox(self) -> None:
        inbox = os.path.join(self.root, "inbox")
        for job_id in os.listdir(inbox):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(inbox, job_id))
            self.look(job_id)

    def scan_new(self) -> None:
        """Find records whose submitter died before writing their inbox entry."""
        for job_id in os.listdir(jobs_dir(self.root)):
            if job_id not in self.known:
                self.look(job_id)

    def look(self, job_id: str) -> None:
        try:
            self._act_on(job_id)
        except Exception as exc:  # one bad record must not stop the others
            print(f"portable supervisor: job {job_id}: {exc!r}", file=sys.stderr, flush=True)

    def _act_on(self, job_id: str) -> None:
        """Act on a job's record and requests."""
        if "/" in job_id or job_id.startswith("."):
            return
        state = self._load(job_id)
        if state is None:
            return
        self.known.add(job_id)
        if job_id in self.spawner.launching:
            self.deferred.add(job_id)  # looked at again once its process is registered
            return
        cancel = os.path.exists(self._request_path(job_id, "cancel"))
        run = self.running.get(job_id)
        if run is not None:
            if cancel and run.intent not in ("cancel", "stop"):
                _terminate(run, "cancel", self.grace)
            preempt = read_json(self._request_path(job_id, "preempt")) if run.intent is None else None
            if preempt is not None:
                grace = preempt.get("grace")
                _terminate(run, "preempt", self.grace if grace is None else float(grace))
            return
        self._remove_request(job_id, "preempt")  # only a running job can be preempted
        if state["state"] == RUNNING:
            self._orphan(state)
        if state["state"] == PENDING:
            if cancel:
                with contextlib.suppress(ValueError):
                    self.queue.remove(job_id)
                self._end_job(state, CANCELLED, "cancelled before it started", None)
            elif job_id not in self.queue:
                self.queue.append(job_id)
                self.queued_state[job_id] = state
        elif cancel:
            self._remove_request(job_id, "cancel")

    # -- running jobs ---------------------------------------------------------
    def start_next(self) -> None:
        while self.queue and len(self.running) + len(self.spawner.launching) < self.workers and not self.stopping:
            job_id = self.queue.popleft()
            try:
                self._start(job_id)
            except Exception as exc:
                print(f"portable supervisor: job {job_id}: {exc!r}", file=sys.stderr, flush=True)
                state = self._load(job_id)
                if state is not None and state["state"] == PENDING:
                    self._end_job(state, FAILED, f"the supervisor could not start it: {exc!r}", None)

    def _start(self, job_id: str) -> None:
        folder = job_dir(self.root, job_id)
        # only this process changes a queued job's state, so what it read then still holds
        state = self.queued_state.pop(job_id, None) or self._load(job_id)
        record = read_json(os.path.join(folder, "spec.json"))
        if state is None or record is None or state["state"] != PENDING:
            return
        if os.path.exists(self._request_path(job_id, "cancel")):
            self._end_job(state, CANCELLED, "cancelled before it started", None)
            return
        self.spawner.start(folder, job_id, state, record)

    def collect_launched(self) -> None:
        """Register the processes the launch threads started (main thread)."""
        for launch in self.spawner.collect():
            try:
                self._register(launch)
            except Exception as exc:
                print(f"portable supervisor: job {launch.job_id}: {exc!r}", file=sys.stderr, flush=True)
            if launch.job_id in self.deferred:
                self.deferred.discard(launch.job_id)
                self.look(launch.job_id)

    def _register(self, launch: _Launch) -> None:
        state, spec, job_id = launch.state, launch.spec, launch.job_id
        if launch.proc is None:
            exc = launch.error
            try:
                os.write(launch.log, f"portable: cannot start {spec['command'][0]!r}: {exc}\n".encode())
            finally:
                os.close(launch.log)
                os.close(launch.state_fd)
            state["attempts"] = launch.attempt
            state["started"] = state.get("started") or time.time()
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            self._end_job(state, FAILED, f"cannot start {spec['command'][0]!r}: {why}", None)
            return
        os.close(launch.log)
        proc = launch.proc
        state.update(
            state=RUNNING, attempts=launch.attempt, pid=proc.pid, reason=None, started=state.get("started") or time.time()
        )
        timeout = spec.get("timeout")
        deadline = time.monotonic() + timeout if timeout else None
        run = _RunningAttempt(job_id, proc, state, spec, deadline, state_fd=launch.state_fd)
        self.running[job_id] = run  # from here on reap() owns the process, whatever happens
        self._save(state)
        if self.stopping is not None:
            _terminate(run, self.stopping, self._stop_grace)

    def reap(self) -> None:
        for job_id, run in list(self.running.items()):
            code = run.proc.poll()
            if code is None:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.proc.pid, signal.SIGKILL)  # what the attempt left behind
            try:
                self._on_exit(run, code)
            finally:
                self.running.pop(job_id, None)
                os.close(run.state_fd)

    def _on_exit(self, run: _RunningAttempt, code: int) -> None:
        state, spec = run.state, run.spec
        attempt = state["attempts"]
        if run.intent in ("preempt", "requeue"):
            state.update(
                state=PENDING,
                pid=None,
                exit_code=code,
                preemptions=state.get("preemptions", 0) + 1,
                reason=f"attempt {attempt} was preempted; restarting",
            )
            self._save(state)
            self._remove_request(run.job_id, "preempt")
            if run.intent == "preempt":
                self.queue.appendleft(run.job_id)
            return
        if run.intent == "cancel":
            self._end_job(state, CANCELLED, "cancelled", code)
        elif run.intent == "stop":
            self._end_job(state, CANCELLED, "cancelled: the supervisor was stopped", code)
        elif run.intent == "timeout":
            self._end_job(state, FAILED, f"timed out after {spec['timeout']:g}s (attempt {attempt})", code)
        elif code == 0:
            self._end_job(state, SUCCEEDED, None, 0)
        else:
            why = f"exit code {code}" if code > 0 else f"killed by {signal_name(code)}"
            failures = state.get("failures", 0) + 1
            state["failures"] = failures
            if failures <= spec.get("retries", 0):
                state.update(
                    state=PENDING,
                    pid=None,
                    exit_code=code,
                    reason=f"attempt {attempt} failed ({why}); retry {failures} of {spec['retries']}",
                )
                self._save(state)
                self.queue.append(run.job_id)
            else:
                self._end_job(state, FAILED, why, code)

    def enforce_deadlines(self) -> None:
        now = time.monotonic()
        for run in self.running.values():
            if run.intent is None and run.deadline is not None and now >= run.deadline:
                _terminate(run, "timeout", self.grace)
            elif run.kill_at is not None and now >= run.kill_at:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(run.proc.pid, signal.SIGKILL)
                run.kill_at = None

    def next_wakeup(self) -> float:
        now = time.monotonic()
        times = [now + _SCAN_EVERY]
        for run in self.running.values():
            if run.intent is None and run.deadline is not None:
                times.append(run.deadline)
            if run.kill_at is not None:
                times.append(run.kill_at)
        return max(0.0, min(times) - now)

    # -- stop requests -------------------------------------------------------
    def check_stop(self) -> None:
        path = os.path.join(self.root, "stop")
        request = read_json(path)
        if request is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        if float(request.get("at", 0)) < self.locked_at:
            return  # meant for a supervisor that is gone
        self._stop("stop", min(self.grace, float(request.get("grace", self.grace))))

    def _stop(self, intent: str, grace: float) -> None:
        self.stopping = intent
        self._stop_grace = grace
        for run in self.running.values():
            if run.intent not in ("cancel", "stop", "requeue"):
                _terminate(run, intent, grace)
        if intent == "stop":
            while self.queue:
                job_id = self.queue.popleft()
                state = self._load(job_id)
                if state is not None and state["state"] == PENDING:
                    self._end_job(state, CANCELLED, "cancelled: the supervisor was stopped", None)

    # -- the loop -------------------------------------------------------------
    def read_hints(self) -> None:
        for job_id in self.wakeups.take_hints():
            self.look(job_id)

    def serve(self) -> None:
        idle_since = time.monotonic()
        last_scan = time.monotonic()
        while True:
            if self.wakeups.terminated and self.stopping is None:
                self._stop("requeue", min(self.grace, 5.0))
            self.check_stop()
            self.collect_launched()
            if self.stopping is None:
                self.read_hints()
                self.read_inbox()
            self.reap()
            self.enforce_deadlines()
            self.start_next()
            now = time.monotonic()
            if self.stopping is None and now - last_scan >= _SCAN_EVERY:
                self.scan_new()
                last_scan = now
            if self.stopping is not None and not self.running and not self.spawner.launching:
                return
            if self.running or self.queue or self.spawner.launching:
                idle_since = now
            elif now - idle_since >= self.idle and self._may_exit():
                return
            wait = min(self.next_wakeup(), max(0.0, self.idle - (now - idle_since)) + 0.01)
            self.wakeups.wait(wait)

    def _may_exit(self) -> bool:
        """Stop taking pokes, then look for work a last time.

        A submitter renames its record into ``jobs/`` before it pokes; once
        the FIFO is closed its poke fails and it starts a new supervisor
        (which waits for this one's lock). So a record either shows up in the
        scan below or is found by that new supervisor.
        """
        self.wakeups.close_fifo()
        before = len(self.queue)
        self.read_hints()
        self.read_inbox()
        self.scan_new()
        if len(self.queue) > before or os.path.exists(os.path.join(self.root, "stop")):
            self.wakeups.open_fifo()
            return False
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="supervise the local:// jobs of one state folder")
    parser.add_argument("root")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--grace", type=float, default=10.0)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--fork", action="store_true", help="detach: fork, and let the parent exit at once")
    args = parser.parse_args(argv)
    if args.fork and os.fork() > 0:
        os._exit(0)
    supervisor = Supervisor(args.root, args.workers, args.grace, args.idle)
    locked = acquire_lock(supervisor.root)
    if locked is None:
        return 0
    lock, supervisor.locked_at = locked
    try:
        supervisor.setup()
        supervisor.recover()
        supervisor.serve()
        supervisor.spawner.shutdown()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(supervisor.root, "supervisor.pid"))
        os.close(lock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
