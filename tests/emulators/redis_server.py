"""redis-server from Debian, in memory only (``--save '' --appendonly no``)."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from .harness import LOOPBACK, Emulator, EmulatorInfo, LaunchPlan, free_port

REDIS_PACKAGE = "redis-server"


def redis_binary() -> str | None:
    return shutil.which("redis-server") or next(
        (p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server") if Path(p).exists()), None
    )


def redis_command(host: str, port: int, *args: str, timeout: float = 5.0) -> bytes:
    """Send one command in RESP and return the raw first reply line (e.g. ``b"+PONG"``)."""
    frame = f"*{len(args)}\r\n".encode()
    for arg in args:
        raw = arg.encode()
        frame += b"$%d\r\n%s\r\n" % (len(raw), raw)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(frame)
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
    return reply.split(b"\r\n", 1)[0]


class RedisServer(Emulator):
    name = "redis"
    stop_grace = 5.0

    def available(self) -> tuple[bool, str]:
        if redis_binary() is None:
            return False, f"no redis-server: apt-get install {REDIS_PACKAGE} (or {_hint()})"
        return True, ""

    def plan(self, workdir: Path) -> LaunchPlan:
        port = free_port()
        binary = redis_binary()
        assert binary is not None
        argv = [
            binary,
            "--port", str(port),
            "--bind", LOOPBACK,
            "--save", "",
            "--appendonly", "no",
            "--dir", str(workdir),
            "--daemonize", "no",
            "--logfile", "",
        ]  # fmt: skip
        url = f"redis://{LOOPBACK}:{port}/0"
        info = EmulatorInfo(
            name=self.name,
            host=LOOPBACK,
            port=port,
            pid=0,
            ports=(port,),
            endpoints={"url": url},
            env={"REDIS_URL": url},
        )
        return LaunchPlan(argv=argv, info=info)

    def health_check(self, info: EmulatorInfo, timeout: float) -> None:
        reply = redis_command(info.host, info.port, "PING", timeout=timeout)
        if reply != b"+PONG":
            raise RuntimeError(f"redis answered {reply!r} to PING")


def _hint() -> str:
    return "bash scripts/install-emulators.sh"
