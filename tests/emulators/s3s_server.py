"""s3s-fs: a second S3 implementation (Rust, crates.io ``s3s-fs``), file-backed, SigV4-checked.

The server is bench/s3s-server: s3s-fs 0.14.1 behind an accept loop of our own
(TCP_NODELAY). ``bash scripts/install-emulators.sh`` builds it with
``cargo build --release --locked`` into a per-user cache outside the clone,
keyed by version: ``${XDG_CACHE_HOME:-~/.cache}/portable/s3s-server-0.14.1/``,
so a fresh clone (CI's) reuses the binary; a stamp file there holds the hash
of the crate's sources the binary was built from, and a binary with another
stamp is reported as not installed (rebuild), never run stale.

Adapter notes:
    - Path-style addressing only; credentials ``testing``/``testing`` (the same
      as moto's, so both can share a test session's environment); region
      ``us-east-1``. Requests must be SigV4-signed (an unsigned one is 403).
    - Buckets are folders of its root (a fresh one per start), objects files:
      a key and a "folder" of the same name cannot coexist, a key's longest
      path segment is the file system's 255 bytes, and conditional writes are
      checked and then written without a lock (races can have two winners).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .harness import (
    LOOPBACK,
    REPO_ROOT,
    Emulator,
    EmulatorInfo,
    LaunchPlan,
    free_port,
    http_request,
)

S3S_VERSION = "0.14.1"
CRATE = REPO_ROOT / "bench" / "s3s-server"
#: The files whose content decides whether a built binary is current.
SOURCES = ("Cargo.toml", "Cargo.lock", "src/main.rs")
ACCESS_KEY = SECRET_KEY = "testing"


def cache_dir() -> Path:
    """Where the install script builds the server: per user, outside any clone, keyed by version."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "portable" / f"s3s-server-{S3S_VERSION}"


def binary() -> Path:
    return cache_dir() / "target" / "release" / "portable-s3s-server"


def source_hash() -> str:
    """The SHA-256 of the crate's sources, as the install script writes it to ``built-from``."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + (CRATE / name).read_bytes() + b"\0")
    return digest.hexdigest()


class S3sServer(Emulator):
    name = "s3s"
    start_timeout = 30.0

    def available(self) -> tuple[bool, str]:
        exe = binary()
        if not exe.is_file():
            return False, f"{exe} is not built: bash scripts/install-emulators.sh (needs cargo)"
        stamp = cache_dir() / "built-from"
        if not stamp.is_file() or stamp.read_text().strip() != source_hash():
            return False, (
                f"{exe} was built from other sources than bench/s3s-server: "
                "bash scripts/install-emulators.sh rebuilds it"
            )
        return True, ""

    def plan(self, workdir: Path) -> LaunchPlan:
        port = free_port()
        url = f"http://{LOOPBACK}:{port}"
        root = workdir / "data"
        root.mkdir()
        info = EmulatorInfo(
            name=self.name,
            host=LOOPBACK,
            port=port,
            pid=0,
            ports=(port,),
            endpoints={"endpoint_url": url, "region": "us-east-1", "root": str(root)},
            env={
                "AWS_ENDPOINT_URL": url,
                "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_REGION": "us-east-1",
            },
        )
        argv = [
            str(binary()),
            "--host",
            LOOPBACK,
            "--port",
            str(port),
            "--access-key",
            ACCESS_KEY,
            "--secret-key",
            SECRET_KEY,
            str(root),
        ]
        return LaunchPlan(argv=argv, info=info)

    def health_check(self, info: EmulatorInfo, timeout: float) -> None:
        # An unsigned request is refused with this exact S3 error: the server is up and is s3s.
        status, body = http_request(info.endpoints["endpoint_url"] + "/", timeout=timeout)
        if status != 403 or b"Signature is required" not in body:
            raise RuntimeError(f"s3s answered {status}: {body[:200]!r}")
