"""A 200 MiB streamed upload, its writer SIGKILLed after some parts, resumed by another process (issue 19).

On moto (S3, the default obstore engine, and the fsspec engine on a smaller
object), Azurite (Azure Blob), fake-gcs-server (GCS) and file://: the writer is
a subprocess that streams a seeded source through ``open(key, "wb",
resume=True)`` in 8 MiB parts and prints a line after each part; the test
kills it (SIGKILL) after some parts, checks that nothing is listed, resumes
with ``open(..., resume=True, source=...)`` in this process, and checks that
the resumed writer started where the dead one stopped (the parts it sent were
not sent again), that nothing is listed before the commit, that the object's
SHA-256 is the source's, and that ``abort_incomplete`` clears an abandoned
upload of another key (a resume of it starts from 0 afterwards).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from portable.storage import Bucket, open_bucket

MIB = 1 << 20
PART = 8 * MIB
KILL_AFTER = 5  # parts

WORKER = r"""
import sys
from portable.storage import open_bucket
url, key, path, part = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
bucket = open_bucket(url)
writer = bucket.open(key, "wb", resume=True, part_size=part)
print("resumed_from", writer.resumed_from, flush=True)
with open(path, "rb") as source:
    source.seek(writer.resumed_from)
    n = 0
    while chunk := source.read(part):
        writer.write(chunk)
        n += 1
        print("part", n, flush=True)
writer.close()
print("committed", flush=True)
"""


def make_source(path: Path, size: int, seed: int) -> str:
    """Write ``size`` seeded pseudo-random bytes to ``path``; return their SHA-256."""
    rng = random.Random(seed)
    digest = hashlib.sha256()
    with open(path, "wb") as out:
        left = size
        while left:
            block = rng.randbytes(min(left, 4 * MIB))
            out.write(block)
            digest.update(block)
            left -= len(block)
    return digest.hexdigest()


def stored_sha256(bucket: Bucket, key: str) -> str:
    digest = hashlib.sha256()
    with bucket.open(key, "rb") as stream:
        while chunk := stream.read(4 * MIB):
            digest.update(chunk)
    return digest.hexdigest()


def kill_after(url: str, key: str, source: Path, parts: int, env: dict[str, str]) -> int:
    """Run the writer until it reports ``parts`` parts, SIGKILL it; return the parts it reported."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, url, key, str(source), str(PART)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    done = 0
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("part"):
                done = int(line.split()[1])
                if done >= parts:
                    break
        else:
            raise AssertionError(f"the writer ended before {parts} parts: {proc.stderr.read() if proc.stderr else ''}")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return done


# ---------------------------------------------------------------- the providers
@pytest.fixture(scope="module")
def s3_env(moto_server: Any) -> dict[str, str]:
    import boto3

    bucket = f"pt-resume-{uuid.uuid4().hex[:10]}"
    boto3.client(
        "s3",
        endpoint_url=moto_server.endpoints["endpoint_url"],
        region_name=moto_server.endpoints["region"],
        aws_access_key_id=moto_server.env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=moto_server.env["AWS_SECRET_ACCESS_KEY"],
    ).create_bucket(Bucket=bucket)
    env = {k: moto_server.env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION")}
    env["url"] = f"s3://{bucket}/{{prefix}}?endpoint_url={moto_server.endpoints['endpoint_url']}"
    return env


@pytest.fixture(scope="module")
def az_env(azurite: Any) -> dict[str, str]:
    from azure.storage.blob import BlobServiceClient

    container = f"pt-resume-{uuid.uuid4().hex[:10]}"
    BlobServiceClient.from_connection_string(azurite.endpoints["connection_string"]).create_container(container)
    return {
        "PORTABLE_TEST_RESUME_AZURITE": azurite.endpoints["connection_string"],
        "url": f"az://{container}/{{prefix}}?engine=fsspec&connection_string_env=PORTABLE_TEST_RESUME_AZURITE",
    }


@pytest.fixture(scope="module")
def gs_env(fake_gcs: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    endpoint = fake_gcs.endpoints["endpoint_url"].rstrip("/")
    bucket = f"pt-resume-{uuid.uuid4().hex[:10]}"
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project={fake_gcs.endpoints['project']}",
        data=json.dumps({"name": bucket}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    return {
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        "PORTABLE_RESUME_DIR": str(tmp_path_factory.mktemp("resume-state")),
        "url": f"gs://{bucket}/{{prefix}}?engine=fsspec&endpoint_url={endpoint}&token=anon",
    }


@pytest.fixture(scope="module")
def file_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {"url": f"file://{tmp_path_factory.mktemp('resume-file')}/{{prefix}}"}


#: (provider fixture, size, parts sent before the kill that the provider may not keep)
CASES = {
    "s3-obstore": ("s3_env", 200 * MIB, 0),
    "s3-fsspec": ("s3_env", 48 * MIB, 0),
    "azure": ("az_env", 200 * MIB, 0),
    # a GCS session holds the last bytes back for the request that carries the total size
    "gcs": ("gs_env", 200 * MIB, 1),
    "file": ("file_env", 200 * MIB, 0),
}


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, int, int, dict[str, str]]]:
    fixture, size, lag = CASES[request.param]
    env = dict(request.getfixturevalue(fixture))
    url = env.pop("url").format(prefix=f"r-{uuid.uuid4().hex[:8]}")
    if request.param == "s3-fsspec":
        url += "&engine=fsspec"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    yield url, size, lag, {**os.environ, **env}


def test_a_killed_upload_resumes_from_the_parts_the_provider_kept(
    case: tuple[str, int, int, dict[str, str]], tmp_path: Path
) -> None:
    url, size, lag, env = case
    source = tmp_path / "source.bin"
    expected = make_source(source, size, seed=19)
    sent = kill_after(url, "big/object.bin", source, KILL_AFTER, env)
    with open_bucket(url) as bucket:
        assert list(bucket.list()) == [], "a killed upload must leave nothing listed"
        with open(source, "rb") as src:
            writer: Any = bucket.open("big/object.bin", "wb", resume=True, source=src, part_size=PART)
            assert writer.resumed_from == src.tell() == writer.tell()
            assert (sent - lag) * PART <= writer.resumed_from <= sent * PART, (sent, writer.resumed_from)
            resent = 0
            while chunk := src.read(PART):
                writer.write(chunk)
                resent += len(chunk)
                if resent == PART:
                    assert list(bucket.list()) == [], "nothing is listed before the commit"
            writer.close()
        # the parts the killed writer got stored were not sent again
        assert resent == size - writer.resumed_from
        assert resent <= size - (sent - lag) * PART
        info = bucket.head("big/object.bin")
        assert info.size == size
        assert stored_sha256(bucket, "big/object.bin") == expected
        assert [o.key for o in bucket.list()] == ["big/object.bin"]


def test_abort_incomplete_clears_an_abandoned_upload(case: tuple[str, int, int, dict[str, str]], tmp_path: Path) -> None:
    url, _size, _lag, env = case
    source = tmp_path / "source.bin"
    make_source(source, 4 * PART, seed=7)
    kill_after(url, "abandoned.bin", source, 3, env)
    with open_bucket(url) as bucket:
        assert list(bucket.list()) == []
        removed = bucket.abort_incomplete(0)
        assert [entry.partition("#")[0] for entry in removed] == ["abandoned.bin"], removed
        writer: Any = bucket.open("abandoned.bin", "wb", resume=True, part_size=PART)
        assert writer.resumed_from == 0, "an aborted upload is not found again"
        writer.abort()
        assert list(bucket.list()) == []
        if url.startswith("file://"):
            root = Path(url[len("file://") :].partition("?")[0])
            assert not root.exists() or not [p for p in root.rglob("*") if p.is_file()], "no temporary file is left"
