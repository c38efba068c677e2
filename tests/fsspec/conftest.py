"""Fixtures of the fsspec bridge tests: BucketFileSystem over mem://, file:// and moto's S3."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fsspec", reason="the fsspec bridge needs fsspec: pip install 'portable-cloud[fsspec]'")

from portable.fsspec import BucketFileSystem
from portable.storage import Bucket, open_bucket

#: mem://, file://, and S3 on moto through both engines (obstore, and s3fs: ``engine=fsspec``).
STORAGES = ("mem", "file", "s3", "s3-fsspec")


@pytest.fixture(scope="session")
def moto_s3(moto_server: Any) -> Iterator[dict[str, str]]:
    """moto's endpoint with credentials in the environment for the session, and one S3 bucket."""
    import boto3

    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
            mp.setenv(name, moto_server.env[name])
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            mp.delenv(name, raising=False)
        endpoint, region = moto_server.endpoints["endpoint_url"], moto_server.endpoints["region"]
        name = f"pt-fs-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=endpoint, region_name=region).create_bucket(Bucket=name)
        yield {"bucket": name, "query": f"region={region}&endpoint_url={endpoint}"}


def bucket_url(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A fresh, empty bucket's URL of ``kind`` (one of :data:`STORAGES`)."""
    unique = uuid.uuid4().hex[:12]
    if kind == "mem":
        return f"mem://fs-{unique}"
    if kind == "file":
        return f"file://{tmp_path / 'objects'}"
    s3 = request.getfixturevalue("moto_s3")
    engine = "fsspec" if kind == "s3-fsspec" else "obstore"
    return f"s3://{s3['bucket']}/{unique}?{s3['query']}&engine={engine}"


@pytest.fixture(params=STORAGES)
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return bucket_url(request.param, tmp_path, request)


@pytest.fixture
def bucket(storage_url: str) -> Iterator[Bucket]:
    with open_bucket(storage_url) as b:
        yield b


@pytest.fixture
def bfs(bucket: Bucket) -> BucketFileSystem:
    return bucket.fs()
