"""The `portable` command run through its installed entry point, and a bucket on each provider's emulator.

`run(...)` starts `/work/main/.venv/bin/portable` (the console script next to the
test's Python) with this worktree first on PYTHONPATH, in a clean environment:
no PORTABLE_* variable, no AWS/Google/Azure credentials unless a place adds its
own, HOME in the test's folder (no ~/.aws), and every cloud metadata service
pointed at a closed loopback port, so no SDK looks beyond this machine.

Each place fixture makes one bucket (container) per session and yields a
`Place`; `place.url(path)` is a URL of that bucket with the options it needs
(`s3://bucket/path?endpoint_url=...&engine=...`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
EXE = shutil.which("portable", path=str(Path(sys.executable).parent)) or "portable"
#: A loopback port nothing listens on (the discard port): where metadata services are "found".
CLOSED = "127.0.0.1:9"
AZ_ENV = "PORTABLE_TEST_CLI_AZURITE"

_CLOUD_PREFIXES = ("AWS_", "AZURE_", "GOOGLE_", "GCE_", "GCLOUD", "CLOUDSDK_", "STORAGE_EMULATOR", "PORTABLE_")


def clean_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of one `portable` run (module docstring)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_CLOUD_PREFIXES)}
    env.update(
        HOME=str(home),
        PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_METADATA_ENDPOINT=f"http://{CLOSED}",
        AWS_CONFIG_FILE=str(home / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(home / "no-aws-credentials"),
        GCE_METADATA_HOST=CLOSED,
        GCE_METADATA_IP=CLOSED,
        NO_COLOR="1",
    )
    env.update(extra or {})
    return env


@dataclass
class Result:
    code: int
    out: str
    err: str
    raw: bytes

    def lines(self) -> list[str]:
        return self.out.splitlines()

    def json_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


@dataclass(frozen=True)
class Place:
    """A bucket on an emulator: URL template pieces and the environment it needs."""

    scheme: str
    bucket: str
    query: str
    env: dict[str, str] = field(default_factory=dict)

    def url(self, path: str = "") -> str:
        return f"{self.scheme}://{self.bucket}/{path}?{self.query}"


@pytest.fixture
def run(tmp_path: Path):
    """`run(*args, env=..., stdin=b"...")` -> Result; runs in tmp_path."""

    def go(*args: str, env: dict[str, str] | None = None, stdin: bytes | None = None, cwd: Path | None = None,
           timeout: float = 120) -> Result:
        proc = subprocess.run(
            [EXE, *args], cwd=cwd or tmp_path, env=clean_env(tmp_path, env), input=stdin if stdin is not None else b"",
            capture_output=True, timeout=timeout,
        )
        return Result(proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"),
                      proc.stdout)

    return go


def _moto_place(moto_server: Any, engine: str) -> Place:
    endpoint = moto_server.endpoints["endpoint_url"]
    bucket = f"pcli-{uuid.uuid4().hex[:12]}"
    with urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=30) as r:
        assert r.status == 200
    env = {name: moto_server.env[name] for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")}
    return Place("s3", bucket, f"endpoint_url={endpoint}&engine={engine}", env)


@pytest.fixture(scope="session")
def s3_obstore(moto_server: Any) -> Place:
    pytest.importorskip("portable_obstore", reason="the obstore adapter is not installed")
    return _moto_place(moto_server, "obstore")


@pytest.fixture(scope="session")
def s3_fsspec(moto_server: Any) -> Place:
    pytest.importorskip("portable_aws", reason="the AWS adapter is not installed")
    return _moto_place(moto_server, "fsspec")


@pytest.fixture(scope="session")
def az_place(azurite: Any) -> Iterator[Place]:
    blob = pytest.importorskip("azure.storage.blob", reason="the Azure adapter is not installed")
    conn = azurite.endpoints["connection_string"]
    name = f"pcli-{uuid.uuid4().hex[:12]}"
    blob.BlobServiceClient.from_connection_string(conn).create_container(name)
    yield Place("az", name, f"connection_string_env={AZ_ENV}", {AZ_ENV: conn})


@pytest.fixture(scope="session")
def gs_place(fake_gcs: Any) -> Place:
    pytest.importorskip("portable_gcp", reason="the GCP adapter is not installed")
    endpoint = fake_gcs.endpoints["endpoint_url"]
    bucket = f"pcli-{uuid.uuid4().hex[:12]}"
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project={fake_gcs.endpoints['project']}",
        data=json.dumps({"name": bucket}).encode(), headers={"Content-Type": "application/json"}, method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    return Place("gs", bucket, f"endpoint_url={endpoint}&engine=fsspec", {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"})


def make_tree(root: Path) -> dict[str, bytes]:
    """A small tree of files under ``root``: key -> bytes."""
    files = {
        "a.txt": b"alpha\n",
        "b.log": b"bravo log\n",
        "sub/c.txt": b"charlie " * 100,
        "sub/deep/d.log": os.urandom(70_000),
        "sub/e.csv": b"x,y\n1,2\n",
    }
    for key, data in files.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files
