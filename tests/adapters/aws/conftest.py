"""Fixtures of the AWS adapter tests: one moto server per session (tests/emulators).

moto accepts any credentials; they are set in the environment for the
session, because the drivers take credentials only from the SDK's chain.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def aws(moto_server: Any) -> Iterator[dict[str, str]]:
    """The moto endpoint and region, with credentials in the environment for the session."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
            mp.setenv(name, moto_server.env[name])
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            mp.delenv(name, raising=False)
        yield {"endpoint_url": moto_server.endpoints["endpoint_url"], "region": moto_server.endpoints["region"]}


@pytest.fixture(scope="session")
def query(aws: dict[str, str]) -> str:
    """The query string that points a driver at moto."""
    return f"region={aws['region']}&endpoint_url={aws['endpoint_url']}"


def boto3_client(aws: dict[str, str], service: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        service,
        endpoint_url=aws["endpoint_url"],
        region_name=aws["region"],
        config=Config(retries={"total_max_attempts": 3, "mode": "standard"}, s3={"addressing_style": "path"}),
    )


@pytest.fixture(scope="session")
def s3_bucket(aws: dict[str, str]) -> str:
    """One bucket for the session; each test works under its own prefix."""
    name = f"pt-{uuid.uuid4().hex[:12]}"
    boto3_client(aws, "s3").create_bucket(Bucket=name)
    return name
