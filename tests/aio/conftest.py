"""Fixtures of the async-face tests: a moto S3 bucket (tests/emulators), a URL per test under it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def moto_s3(moto_server: Any) -> Iterator[str]:
    """``s3://<bucket>`` on moto, with its credentials in the environment for the session; yields the URL query."""
    import boto3
    from botocore.config import Config

    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
            mp.setenv(name, moto_server.env[name])
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            mp.delenv(name, raising=False)
        endpoint, region = moto_server.endpoints["endpoint_url"], moto_server.endpoints["region"]
        bucket = f"pt-aio-{uuid.uuid4().hex[:10]}"
        boto3.client(
            "s3", endpoint_url=endpoint, region_name=region, config=Config(s3={"addressing_style": "path"})
        ).create_bucket(Bucket=bucket)
        yield f"s3://{bucket}/{{prefix}}?engine=fsspec&region={region}&endpoint_url={endpoint}"


@pytest.fixture(params=["file", "moto"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Any, unique_name: str) -> str:
    """A fresh, empty bucket URL: a folder (file://) or a prefix in the moto bucket (s3://)."""
    if request.param == "file":
        return f"file://{tmp_path / 'bucket'}"
    template: str = request.getfixturevalue("moto_s3")
    return template.replace("{prefix}", unique_name)
