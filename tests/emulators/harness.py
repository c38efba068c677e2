"""The emulator base class and the process bookkeeping behind it.

An `Emulator` checks that its tool is installed (`available()`), starts it on
127.0.0.1 on free ports in a process group of its own (`start()`), polls a real
request until it answers or a deadline passes, and on `stop()` ends exactly the
processes it started: the group it created and any descendant that left that
group, each named by PID *and* kernel start time so that a recycled PID is never
signalled. Nothing is ever looked up or killed by name.

Each emulator writes its stdout and stderr to ``.cache/emulators/<name>.log``; a
start that fails raises `EmulatorStartError` with the last lines of that log.
The emulators themselves live in sibling modules and are created by name with
`tests.emulators.create()`.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import dataclasses
import functools
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TextIO

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache"
STATE_DIR = CACHE_DIR / "emulators"
LOOPBACK = "127.0.0.1"
INSTALL_SCRIPT = "bash scripts/install-emulators.sh"

# Keys whose values are credentials: shown as "***" whenever an info is printed.
SECRET_KEYS = frozenset({"account_key", "connection_string", "AZURE_STORAGE_CONNECTION_STRING"})

# Free ports are drawn below Linux's ephemeral range (32768-60999) so that an
# outgoing connection can never take a port between our probe and the bind.
_PORT_LOW, _PORT_HIGH = 20000, 32767
_ports_handed_out: set[int] = set()
_port_random = random.SystemRandom()  # immune to tests that seed `random`

_BIND_ERRORS = ("address already in use", "eaddrinuse", "bindexception", "failed to bind")


class EmulatorError(RuntimeError):
    """Base of the errors raised by the harness."""


class EmulatorUnavailable(EmulatorError):
    """The emulator's tool is not installed; the message says how to install it."""


class EmulatorStartError(EmulatorError):
    """The emulator was installed but did not start or did not become healthy."""


@dataclass(frozen=True, repr=False)
class EmulatorInfo:
    """Where a running emulator listens and what a client needs to reach it.

    Attributes:
        name: The harness name, e.g. ``"azurite"``.
        host: Always ``127.0.0.1``.
        port: The main port (the first of `ports`).
        pid: The PID of the process the harness started (the process-group leader).
        ports: Every port the harness chose for it (Java emulators also open
            internal ports of their own, on loopback too).
        endpoints: Adapter-facing values, e.g. ``endpoint_url`` or ``bootstrap``.
        env: Environment variables that point the provider's own SDK at the
            emulator. Fixtures never export them; a test applies them itself
            (``monkeypatch.setenv``) when it wants them.
    """

    name: str
    host: str
    port: int
    pid: int
    ports: tuple[int, ...] = ()
    endpoints: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (
            f"EmulatorInfo(name={self.name!r}, host={self.host!r}, port={self.port}, "
            f"pid={self.pid}, ports={self.ports}, endpoints={redact(self.endpoints)}, "
            f"env={redact(self.env)})"
        )

    __str__ = __repr__


def redact(values: Mapping[str, str]) -> dict[str, str]:
    """Return a copy of `values` with every credential replaced by ``***``."""
    return {key: ("***" if key in SECRET_KEYS else value) for key, value in values.items()}


# --- processes ---------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class ProcessRecord:
    """One process, named by PID and by its start time in clock ticks since boot.

    The pair survives PID reuse: a new process with the same PID has a later
    start time, so `is_alive()` says False for it and nothing signals it.
    """

    pid: int
    start_time: int

    @classmethod
    def of(cls, pid: int) -> ProcessRecord | None:
        stat = _read_stat(pid)
        return None if stat is None else cls(pid, stat.start_time)

    def is_alive(self) -> bool:
        stat = _read_stat(self.pid)
        return stat is not None and stat.start_time == self.start_time and stat.state not in "ZX"

    def signal(self, signum: int) -> None:
        if self.is_alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, signum)


@dataclass(frozen=True)
class _Stat:
    state: str
    ppid: int
    pgrp: int
    start_time: int


def _read_stat(pid: int) -> _Stat | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    fields = raw[raw.rindex(")") + 2 :].split()
    return _Stat(
        state=fields[0], ppid=int(fields[1]), pgrp=int(fields[2]), start_time=int(fields[19])
    )


def _all_stats() -> dict[int, _Stat]:
    stats: dict[int, _Stat] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _read_stat(int(entry.name))
            if stat is not None:
                stats[int(entry.name)] = stat
    return stats


def related_processes(known: Iterable[ProcessRecord], pgid: int) -> set[ProcessRecord]:
    """The live processes among `known`, in group `pgid`, or descended from either.

    The group is trusted only while a process of `known` still holds a PID in it
    (even as a zombie): the kernel never recycles a PID that a live group uses.
    """
    stats = _all_stats()
    anchors = [
        r for r in known if (s := stats.get(r.pid)) is not None and s.start_time == r.start_time
    ]
    found = {ProcessRecord(r.pid, r.start_time) for r in anchors}
    if any(stats[r.pid].pgrp == pgid for r in anchors):
        found |= {ProcessRecord(pid, s.start_time) for pid, s in stats.items() if s.pgrp == pgid}
    children: dict[int, list[int]] = {}
    for pid, stat in stats.items():
        children.setdefault(stat.ppid, []).append(pid)
    stack = [record.pid for record in found]
    while stack:
        for child in children.get(stack.pop(), []):
            record = ProcessRecord(child, stats[child].start_time)
            if record not in found:
                found.add(record)
                stack.append(child)
    return {record for record in found if stats[record.pid].state not in "ZX"}


def terminate(
    records: Iterable[ProcessRecord],
    pgid: int,
    *,
    grace: float,
    reap: Callable[[], object] | None = None,
) -> set[ProcessRecord]:
    """Stop `records` and the rest of group `pgid`: SIGTERM, then SIGKILL after `grace` s.

    Args:
        records: The processes to stop; the group is signalled only while one of them lives.
        pgid: The process group the harness created for them.
        grace: Seconds to wait after SIGTERM before SIGKILL.
        reap: Called while waiting, so that a caller that is the parent can reap
            its child (`Popen.poll`) instead of leaving a zombie.

    Returns:
        The processes still alive at the end (empty unless something is stuck in the kernel).
    """
    targets = {record for record in records if record.is_alive()}
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        if not targets:
            break
        _signal_group(pgid, targets, signum)
        for record in targets:
            record.signal(signum)
        deadline = time.monotonic() + wait
        while targets and time.monotonic() < deadline:
            if reap is not None:
                reap()
            time.sleep(0.05)
            targets = {record for record in targets if record.is_alive()}
    return targets


def _signal_group(pgid: int, members: set[ProcessRecord], signum: int) -> None:
    # Only signal the group while a process we recorded is still in it, so a
    # recycled group id can never be hit.
    for record in members:
        stat = _read_stat(record.pid)
        if stat is not None and stat.pgrp == pgid and record.is_alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signum)
            return


class ManagedProcess:
    """A child started in a new session, logging to a file, stopped by PID and group."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._popen: subprocess.Popen[bytes] | None = None
        self._log: TextIO | None = None
        self.leader: ProcessRecord | None = None
        self._seen: set[ProcessRecord] = set()

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise EmulatorError("process not started")
        return self._popen.pid

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("a")
        self._log.write(f"$ {' '.join(self.argv)}\n")
        self._log.flush()
        self._popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self._env,
            cwd=self._cwd,
            start_new_session=True,
        )
        self.leader = ProcessRecord.of(self._popen.pid) or ProcessRecord(self._popen.pid, -1)
        self._seen.add(self.leader)

    def poll(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    def processes(self) -> set[ProcessRecord]:
        """Every live process this child has become: itself, its group, its descendants."""
        if self.leader is None:
            return set()
        # Dead records stay in `_seen`: a zombie leader still vouches for its group.
        live = related_processes(self._seen, self.leader.pid)
        self._seen |= live
        return live

    def detach(self) -> None:
        """Forget the child without stopping it (it keeps running after we exit)."""
        self.processes()
        if self._log is not None:
            self._log.close()
            self._log = None
        self._popen = None

    def stop(self, grace: float) -> set[ProcessRecord]:
        if self.leader is None:
            return set()
        survivors = terminate(self.processes(), self.leader.pid, grace=grace, reap=self.poll)
        late = self.processes() - survivors  # anything forked while it shut down
        if late:
            survivors |= terminate(late, self.leader.pid, grace=grace, reap=self.poll)
        if self._popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None
        return survivors


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log written)"
    return "\n".join(text.splitlines()[-lines:])


# --- ports -------------------------------------------------------------------------------


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on, in 20000-32767, not handed out before."""
    for _ in range(500):
        port = _port_random.randint(_PORT_LOW, _PORT_HIGH)
        if port in _ports_handed_out or is_listening(port):
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((LOOPBACK, port))
            except OSError:
                continue
        _ports_handed_out.add(port)
        return port
    raise EmulatorError("no free port found on 127.0.0.1 in 20000-32767")


def is_listening(port: int) -> bool:
    """Whether any socket on this machine listens on TCP `port` (any address, v4 or v6)."""
    found_table = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        found_table = True
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                return True
    if found_table:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((LOOPBACK, port)) == 0


def listening_sockets(records: Iterable[ProcessRecord]) -> set[tuple[str, int]]:
    """The (address, port) of every TCP socket in LISTEN state that `records` hold open."""
    inodes: set[str] = set()
    for record in records:
        with contextlib.suppress(FileNotFoundError, PermissionError, ProcessLookupError):
            for fd in os.scandir(f"/proc/{record.pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(fd.path)
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    found: set[tuple[str, int]] = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        with contextlib.suppress(FileNotFoundError):
            for row in Path(table).read_text().splitlines()[1:]:
                cols = row.split()
                if cols[3] != "0A" or cols[9] not in inodes:
                    continue
                hex_addr, hex_port = cols[1].split(":")
                raw = bytes.fromhex(hex_addr)
                # The kernel prints each 32-bit word of the address in host (little) order.
                packed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                found.add((socket.inet_ntop(family, packed), int(hex_port, 16)))
    return found


def is_loopback(address: str) -> bool:
    return (
        address.startswith("127.")
        or address in ("::1", "::ffff:127.0.0.1")
        or (address.startswith("::ffff:127."))
    )


# --- the emulator base -------------------------------------------------------------------


@dataclass
class LaunchPlan:
    """What `Emulator.start` runs: argv, environment, and the info to return once healthy."""

    argv: list[str]
    info: EmulatorInfo
    env: dict[str, str] | None = None
    cwd: Path | None = None


_running: set[Emulator] = set()


class Emulator(abc.ABC):
    """One local emulator: check it is installed, start it, health-check it, stop it.

    Subclasses set `name` and implement `available`, `plan` and `health_check`;
    `prepare` runs between planning and launching (e.g. formatting Kafka's storage).
    """

    name: ClassVar[str]
    #: Seconds `start()` waits for the first successful health check.
    start_timeout: ClassVar[float] = 120.0
    #: Seconds between SIGTERM and SIGKILL on `stop()`.
    stop_grace: ClassVar[float] = 10.0

    def __init__(self) -> None:
        self._process: ManagedProcess | None = None
        self._info: EmulatorInfo | None = None
        self._workdir: Path | None = None

    @abc.abstractmethod
    def available(self) -> tuple[bool, str]:
        """Whether the tool is installed; if not, a reason that says how to install it."""

    @abc.abstractmethod
    def plan(self, workdir: Path) -> LaunchPlan:
        """Pick ports and build the command line; `workdir` is a fresh private folder."""

    @abc.abstractmethod
    def health_check(self, info: EmulatorInfo, timeout: float) -> None:
        """Make one minimal real request; raise if the emulator does not answer correctly."""

    def prepare(self, plan: LaunchPlan, workdir: Path, log_path: Path) -> None:  # noqa: B027
        """Run before the launch; the default does nothing."""

    @property
    def info(self) -> EmulatorInfo | None:
        return self._info

    @property
    def log_path(self) -> Path:
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        return STATE_DIR / (f"{self.name}-{worker}.log" if worker else f"{self.name}.log")

    def start(self) -> EmulatorInfo:
        """Start the emulator and wait until it is healthy.

        Raises:
            EmulatorUnavailable: The tool is not installed.
            EmulatorStartError: It exited, or gave no healthy answer within `start_timeout`.
        """
        if self._info is not None:
            return self._info
        ok, reason = self.available()
        if not ok:
            raise EmulatorUnavailable(f"{self.name}: {reason}")
        attempts = 3
        for attempt in range(1, attempts + 1):
            try:
                return self._start_once()
            except EmulatorStartError as exc:
                if attempt == attempts or not _lost_a_port_race(self.log_path):
                    raise
                del exc  # another process took a port between probe and bind: pick new ones
        raise AssertionError("unreachable")

    def _start_once(self) -> EmulatorInfo:
        run_dir = STATE_DIR / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        _sweep_abandoned_workdirs(run_dir)
        self._workdir = Path(tempfile.mkdtemp(prefix=f"{self.name}-", dir=run_dir))
        workdir = self._workdir
        self.log_path.write_text("")  # one log per start; `prepare` steps append to it
        started = time.monotonic()
        try:
            plan = self.plan(workdir)
            self.prepare(plan, workdir, self.log_path)
            self._process = ManagedProcess(
                plan.argv, log_path=self.log_path, env=plan.env, cwd=plan.cwd or workdir
            )
            self._process.start()
            if self._process.leader is not None:
                leader = self._process.leader
                (workdir / _OWNER_FILE).write_text(f"{leader.pid} {leader.start_time}\n")
            info = dataclasses.replace(plan.info, pid=self._process.pid)
            self._wait_healthy(info, started + self.start_timeout)
        except BaseException:
            self.stop()  # whatever failed, even Ctrl-C, leaves nothing running
            raise
        self._info = info
        _running.add(self)
        return info

    def _wait_healthy(self, info: EmulatorInfo, deadline: float) -> None:
        assert self._process is not None
        last_error: BaseException | None = None
        pause = 0.05
        while True:
            code = self._process.poll()
            if code is not None:
                raise EmulatorStartError(self._failure(f"exited with code {code} while starting"))
            try:
                self.health_check(info, timeout=max(0.5, min(5.0, deadline - time.monotonic())))
                # The answer must come from our process, not from a stranger on the port.
                owned = {port for _, port in listening_sockets(self._process.processes())}
                if set(info.ports) <= owned:
                    return
                last_error = EmulatorError(f"ports {sorted(set(info.ports) - owned)} not ours yet")
            except Exception as exc:
                last_error = exc
            if time.monotonic() >= deadline:
                raise EmulatorStartError(
                    self._failure(
                        f"gave no healthy answer in {self.start_timeout:.0f} s "
                        f"(last error: {last_error!r})"
                    )
                )
            time.sleep(pause)
            pause = min(pause * 1.5, 0.5)

    def _failure(self, what: str) -> str:
        return (
            f"{self.name} {what}.\n--- last lines of {self.log_path} ---\n{log_tail(self.log_path)}"
        )

    def processes(self) -> set[ProcessRecord]:
        """The live processes started for this emulator (leader, group, descendants)."""
        return set() if self._process is None else self._process.processes()

    def stop(self) -> None:
        """Stop every process this emulator started; safe to call twice."""
        _running.discard(self)
        if self._process is not None:
            survivors = self._process.stop(self.stop_grace)
            self._process = None
            if survivors:
                raise EmulatorError(f"{self.name}: processes survived SIGKILL: {sorted(survivors)}")
        self._info = None
        self._remove_workdir()

    def detach(self) -> dict[str, Any]:
        """Leave the emulator running after this process exits; return what `down` needs."""
        if self._process is None or self._info is None or self._process.leader is None:
            raise EmulatorError(f"{self.name} is not running")
        records = self._process.processes()
        leader = self._process.leader
        self._process.detach()
        _running.discard(self)
        state = {
            "name": self.name,
            "pid": leader.pid,
            "pgid": leader.pid,
            "processes": [[record.pid, record.start_time] for record in sorted(records)],
            "ports": list(self._info.ports),
            "endpoints": dict(self._info.endpoints),
            "env": dict(self._info.env),
            "log": str(self.log_path),
            "workdir": str(self._workdir) if self._workdir else None,
        }
        self._process = None
        self._info = None
        self._workdir = None
        return state

    def _remove_workdir(self) -> None:
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


_OWNER_FILE = ".owner"
_ABANDONED_AFTER = 24 * 3600.0


def _sweep_abandoned_workdirs(run_dir: Path) -> None:
    """Remove work folders left by emulators that died without `stop()` (say, a killed pytest).

    A folder names its emulator's leader process in ``.owner``; one whose leader is
    gone is removed, and one with no ``.owner`` is removed once a day old.
    """
    for workdir in run_dir.iterdir():
        abandoned = False
        try:
            pid, start_time = map(int, (workdir / _OWNER_FILE).read_text().split())
            abandoned = not ProcessRecord(pid, start_time).is_alive()
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                abandoned = time.time() - workdir.stat().st_mtime > _ABANDONED_AFTER
        if abandoned:
            shutil.rmtree(workdir, ignore_errors=True)


def _lost_a_port_race(log_path: Path) -> bool:
    tail = log_tail(log_path, 80).lower()
    return any(marker in tail for marker in _BIND_ERRORS)


@atexit.register
def _stop_all_at_exit() -> None:
    for emulator in list(_running):
        with contextlib.suppress(Exception):
            emulator.stop()


# --- small wire helpers shared by the emulators -------------------------------------------


def http_request(
    url: str,
    *,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = 5.0,
) -> tuple[int, bytes]:
    """One HTTP request without any proxy; returns (status, body) for every status code."""
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    try:
        with opener.open(request, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read())


@functools.cache
def java_major_version(java: str = "java") -> int | None:
    """The major version of `java` on PATH, or None when there is none."""
    binary = shutil.which(java)
    if binary is None:
        return None
    try:
        out = subprocess.run(
            [binary, "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    for token in out.split():
        token = token.strip('"')
        if token[:1].isdigit():
            parts = token.replace("-", ".").replace("+", ".").replace("_", ".").split(".")
            if parts[0] == "1" and len(parts) > 1 and parts[1].isdigit():
                return int(parts[1])  # "1.8.0_392" style
            return int(parts[0]) if parts[0].isdigit() else None
    return None


def java_problem(minimum: int = 17) -> str | None:
    """None when a Java >= `minimum` is on PATH, else the reason and the fix."""
    major = java_major_version()
    if major is None:
        return f"no `java` on PATH (apt-get install openjdk-{minimum}-jre-headless)"
    if major < minimum:
        return f"java {major} found, {minimum}+ needed (apt-get install openjdk-{minimum}-jre-headless)"
    return None
