"""``local://`` — jobs as processes on this machine, supervised in the background.

URLs:
    ``local://STATE_DIR?workers=N``: ``local://./.portable/jobs`` (relative
    to the working directory), ``local:///var/lib/jobs``. ``local://`` alone
    is ``local://./.portable/jobs``. Every launcher, in any process, that
    names the same folder sees the same jobs: ``portable jobs status ID``
    works from another shell.

Options:
    ``workers`` (int): jobs run at once; the rest wait PENDING. Defaults to 4.
    ``grace`` (float): seconds between SIGTERM and SIGKILL when a job is
    cancelled, times out or is preempted. Defaults to 10.
    ``idle`` (float): seconds the supervisor stays with nothing to do before
    it exits. Defaults to 30.

    ``workers``, ``grace`` and ``idle`` are those of the launcher that
    started the folder's supervisor; they hold until it exits.

How it works:
    A submit writes the job's record (spec and PENDING state) into a
    temporary folder and renames it into ``STATE_DIR/jobs/<id>``: the record
    appears whole or not at all. A job with an idempotency key gets an id
    derived from the key, so a second submit, from any process, even after
    the first submitter was killed mid-submit, finds the record and launches
    nothing. The submitter then wakes the folder's supervisor, a detached
    process (one per folder, started on demand, see
    :mod:`portable.embedded._localjobs_supervisor`) that starts jobs up to
    ``workers``, writes their state, enforces timeouts, retries failed
    attempts, and carries out cancel and preempt requests. It is the only
    writer of a record once it exists, so jobs outlive their submitter.
    Each attempt runs in its own process group (session); when it ends,
    what is left of the group is killed.

Environment of a job: the supervisor's (that of the process that started
it), then ``spec.env``, then ``PORTABLE_JOB_ID``, ``PORTABLE_JOB_NAME``,
``PORTABLE_JOB_ATTEMPT`` and ``PORTABLE_CHECKPOINT_URL``. The working
directory defaults to the submitter's; a relative ``workdir`` is taken from
there.

Platforms: POSIX (Linux, macOS): it uses fork/exec sessions, ``fcntl``
locks and a FIFO.

Capabilities: logs, cancel, checkpoints, preempt, timeouts, retries,
idempotent_submit, detached. No containers (``image`` is ignored), no GPUs.

Known differences:
    * ``resources`` are recorded but not enforced.
    * Exit codes: a process killed by a signal reports minus the signal
      number (``-9``), as :mod:`subprocess` does.
    * Specs (environment included) are stored in the state folder with
      mode 0600; keep secrets out of ``env`` if the folder is shared.
    * If the supervisor itself is killed (SIGKILL), its running jobs are
      killed and started again by the next supervisor, counted as
      preemptions; on SIGTERM it preempts them the same way.

As: nothing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..driver.compute import (
    ComputeCapabilities,
    ComputeDriver,
    JobSpec,
    JobState,
    JobStatus,
    wait_for_status,
)
from ..errors import IdempotencyConflict, InvalidURL, NotFound
from ..urls import ParsedURL
from . import _localjobs_supervisor as supervisor

__all__ = ["LocalLauncher"]

_JOB_ID = re.compile(r"^job-[0-9a-f]{24}$")
_SPAWN_EVERY = 2.0


def _utc_from_epoch(value: float | None) -> dt.datetime | None:
    return None if value is None else dt.datetime.fromtimestamp(value, dt.UTC)


def _status_from_record(state: Mapping[str, Any]) -> JobStatus:
    return JobStatus(
        job_id=state["job_id"],
        name=state["name"],
        state=JobState(state["state"]),
        exit_code=state.get("exit_code"),
        reason=state.get("reason"),
        attempts=state.get("attempts", 0),
        preemptions=state.get("preemptions", 0),
        labels=state.get("labels") or {},
        idempotency_key=state.get("idempotency_key"),
        created=_utc_from_epoch(state.get("created")),
        started=_utc_from_epoch(state.get("started")),
        finished=_utc_from_epoch(state.get("finished")),
    )


class LocalLauncher(ComputeDriver):
    """Jobs as local processes; state and logs in a folder."""

    scheme = "local"
    # the defaults (logs, cancel, checkpoints, timeouts, retries, idempotent submit, detached) and:
    capabilities = ComputeCapabilities(preempt=True)

    def __init__(
        self, root: str | os.PathLike[str], *, workers: int = 4, grace: float = 10.0, idle: float = 30.0
    ) -> None:
        if workers < 1:
            raise InvalidURL(f"local:// workers must be >= 1, got {workers}")
        if grace < 0 or idle < 0:
            raise InvalidURL("local:// grace and idle must be >= 0 seconds")
        self.root = str(Path(root).absolute())
        self.endpoint = f"local://{self.root}"
        self.workers = workers
        self.grace = grace
        self.idle = idle
        self._spawned_at = -_SPAWN_EVERY
        self._checked_at = 0.0
        for sub in ("jobs", "inbox", "tmp"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)
        with contextlib.suppress(OSError):
            os.chmod(self.root, 0o700)

    @classmethod
    def from_url(cls, url: ParsedURL) -> LocalLauncher:
        workers = url.take("workers", int, 4)
        grace = url.take("grace", float, 10.0)
        idle = url.take("idle", float, 30.0)
        url.done()
        root = (url.netloc + url.path) or "./.portable/jobs"
        return cls(root, workers=workers, grace=grace, idle=idle)

    def __repr__(self) -> str:
        return f"LocalLauncher({self.root!r}, workers={self.workers})"

    # -- the supervisor -------------------------------------------------------
    def _wake_supervisor(self, job_id: str) -> None:
        """Tell the supervisor to look at ``job_id``, starting one if none serves the folder."""
        sent = supervisor.poke(self.root, job_id.encode("ascii") + b"\n")
        if sent:
            return
        supervisor.touch(os.path.join(self.root, "inbox", job_id))  # a durable hint for whoever serves next
        if sent is None:
            self._spawn_supervisor()

    def _ensure_supervisor(self) -> None:
        """Start a supervisor if none serves the folder (checks at most every 0.5 s)."""
        now = time.monotonic()
        if now - self._checked_at < 0.5:
            return
        self._checked_at = now
        if supervisor.poke(self.root, b"") is None:
            self._spawn_supervisor()

    def _spawn_supervisor(self) -> None:
        now = time.monotonic()
        if now - self._spawned_at < _SPAWN_EVERY:
            return  # one is starting; it reads the inbox when it is up
        self._spawned_at = now
        log = os.open(os.path.join(self.root, "supervisor.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            first = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    supervisor.__file__,
                    "--fork",
                    self.root,
                    "--workers",
                    str(self.workers),
                    "--grace",
                    str(self.grace),
                    "--idle",
                    str(self.idle),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self.root,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(log)
        first.wait(timeout=60)  # the --fork parent exits at once; the supervisor lives on

    def supervisor_pid(self) -> int | None:
        """The pid of the folder's live supervisor, or None."""
        if not supervisor.lock_held(self.root):
            return None
        try:
            return int(Path(self.root, "supervisor.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def stop_supervisor(self, *, grace: float | None = None, timeout: float = 30.0) -> int | None:
        """Stop the folder's supervisor: running jobs are cancelled (SIGTERM,
        ``grace`` seconds, SIGKILL), pending ones too. Returns its pid, or None
        if none was running. Waits until it has exited.

        For tests and shutdown scripts; a later submit starts a new one.
        """
        pid = self.supervisor_pid()
        if pid is None:
            return None
        request = {"mode": "kill", "at": time.time(), "grace": self.grace if grace is None else grace}
        supervisor.write_json(os.path.join(self.root, "stop"), request)
        supervisor.poke(self.root, b"\n")
        end = time.monotonic() + timeout
        while supervisor.lock_held(self.root):
            if time.monotonic() > end:
                raise TimeoutError(f"the supervisor of {self.root} (pid {pid}) did not stop in {timeout}s")
            time.sleep(0.01)
        return pid

    # -- records --------------------------------------------------------------
    def _job_folder(self, job_id: str) -> str:
        if not _JOB_ID.match(job_id):
            raise NotFound(f"no job {job_id!r} in {self.root}", provider=self.scheme)
        return supervisor.job_dir(self.root, job_id)

    def _read_state(self, job_id: str) -> dict[str, Any]:
        state = supervisor.read_state(self._job_folder(job_id))
        if state is None:
            raise NotFound(f"no job {job_id!r} in {self.root}", provider=self.scheme)
        return state

    def _send_request(self, job_id: str, marker: str | None = None, data: Any = None) -> None:
        folder = self._job_folder(job_id)
        if marker is not None:
            supervisor.write_json(os.path.join(folder, marker), data or {}, 0o600)
        self._wake_supervisor(job_id)

    def submit(self, spec: JobSpec) -> JobStatus:
        fingerprint = spec.fingerprint()
        key = spec.idempotency_key
        if key is not None:
            job_id = "job-" + hashlib.sha256(b"idempotency-key\0" + key.encode("utf-8")).hexdigest()[:24]
            existing = self._existing_job(job_id, fingerprint)
            if existing is not None:
                return existing
        else:
            job_id = "job-" + uuid.uuid4().hex[:24]
        record = {"spec": asdict(spec), "cwd": os.getcwd(), "fingerprint": fingerprint}
        state = {
            "job_id": job_id,
            "name": spec.name,
            "labels": dict(spec.labels),
            "idempotency_key": key,
            "fingerprint": fingerprint,
            "state": supervisor.PENDING,
            "exit_code": None,
            "reason": None,
            "attempts": 0,
            "preemptions": 0,
            "failures": 0,
            "created": time.time(),
            "started": None,
            "finished": None,
            "pid": None,
        }
        building = tempfile.mkdtemp(dir=os.path.join(self.root, "tmp"))
        try:
            fd = os.open(os.path.join(building, "spec.json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, json.dumps(record, separators=(",", ":")).encode("utf-8"))
            finally:
                os.close(fd)
            supervisor.append_state(building, state)
            os.rename(building, supervisor.job_dir(self.root, job_id))
        except OSError:
            shutil.rmtree(building, ignore_errors=True)
            existing = self._existing_job(job_id, fingerprint) if key is not None else None
            if existing is None:
                raise
            return existing
        self._send_request(job_id)
        return _status_from_record(state)

    def _existing_job(self, job_id: str, fingerprint: str) -> JobStatus | None:
        state = supervisor.read_state(supervisor.job_dir(self.root, job_id))
        if state is None:
            return None
        if state.get("fingerprint") != fingerprint:
            raise IdempotencyConflict(
                f"idempotency key {state.get('idempotency_key')!r} was used for job {job_id} "
                "with a different spec; use a new key for a new job",
                provider=self.scheme,
            )
        if state["state"] not in supervisor.TERMINAL:
            self._send_request(job_id)  # its first submitter may have died before waking the supervisor
        return _status_from_record(state)

    def describe(self, job_id: str) -> JobStatus:
        state = self._read_state(job_id)
        if state["state"] not in supervisor.TERMINAL:
            self._ensure_supervisor()
        return _status_from_record(state)

    def wait(self, job_id: str, timeout: float) -> JobStatus:
        # a poll reads one local file: poll often, so that wait() returns soon after the end
        return wait_for_status(self.describe, job_id, timeout, poll=0.001, max_poll=0.02)

    def terminate(self, job_id: str, reason: str) -> None:
        if self._read_state(job_id)["state"] in supervisor.TERMINAL:
            return
        self._send_request(job_id, "cancel", {"reason": reason})

    def preempt(self, job_id: str, grace: float | None) -> None:
        if self._read_state(job_id)["state"] != supervisor.RUNNING:
            return
        self._send_request(job_id, "preempt", {"grace": grace})

    def list_jobs(self, labels: Mapping[str, str]) -> Iterator[JobStatus]:
        found: list[dict[str, Any]] = []
        for job_id in os.listdir(supervisor.jobs_dir(self.root)):
            if not _JOB_ID.match(job_id):
                continue
            state = supervisor.read_state(supervisor.job_dir(self.root, job_id))
            if state is None:
                continue
            have = state.get("labels") or {}
            if all(have.get(k) == v for k, v in labels.items()):
                found.append(state)
        found.sort(key=lambda s: (s.get("created") or 0.0, s["job_id"]))
        return iter([_status_from_record(s) for s in found])

    def logs(self, job_id: str, follow: bool) -> Iterator[str]:
        self._read_state(job_id)  # NotFound now, not on first iteration
        return self._log_lines(job_id, follow)

    def _log_lines(self, job_id: str, follow: bool) -> Iterator[str]:
        folder = self._job_folder(job_id)
        attempt, offset, partial = 1, 0, b""
        delay = 0.005
        ending = False  # the job has ended (or we do not follow): one more read, then stop
        while True:
            chunk = _read_from(os.path.join(folder, f"attempt-{attempt}.log"), offset)
            if chunk:
                offset += len(chunk)
                *whole, partial = (partial + chunk).split(b"\n")
                for line in whole:
                    yield line.decode("utf-8", "replace")
                delay = 0.005
                if not ending:
                    continue
            if os.path.exists(os.path.join(folder, f"attempt-{attempt + 1}.log")):
                if partial:
                    yield partial.decode("utf-8", "replace")
                attempt, offset, partial, ending = attempt + 1, 0, b"", False
                continue
            if ending:
                if partial:
                    yield partial.decode("utf-8", "replace")
                return
            if not follow or self._read_state(job_id)["state"] in supervisor.TERMINAL:
                ending = True  # output may have been written just before the job ended
                continue
            self._ensure_supervisor()
            time.sleep(delay)
            delay = min(delay * 1.5, 0.1)


def _read_from(path: str, offset: int) -> bytes:
    """What ``path`` holds past ``offset``; nothing while it does not exist."""
    with contextlib.suppress(FileNotFoundError), open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read()
    return b""
