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


@pytest.fixture(scope="session")
def batch_queue(aws: dict[str, str]) -> dict[str, str]:
    """A Batch job queue and job definition on moto, which runs no container.

    moto without Docker needs ``{"batch": {"use_docker": false}}`` (its
    /moto-api/config): then every job moves straight to SUCCEEDED.
    """
    import json
    import urllib.request

    req = urllib.request.Request(
        aws["endpoint_url"] + "/moto-api/config",
        data=json.dumps({"batch": {"use_docker": False}}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert json.loads(resp.read())["batch"]["use_docker"] is False
    suffix = uuid.uuid4().hex[:10]
    iam = boto3_client(aws, "iam")
    batch = boto3_client(aws, "batch")
    role = iam.create_role(RoleName=f"pt-batch-{suffix}", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    env = batch.create_compute_environment(
        computeEnvironmentName=f"pt-ce-{suffix}", type="UNMANAGED", state="ENABLED", serviceRole=role
    )
    queue = batch.create_job_queue(
        jobQueueName=f"pt-q-{suffix}",
        state="ENABLED",
        priority=1,
        computeEnvironmentOrder=[{"order": 1, "computeEnvironment": env["computeEnvironmentArn"]}],
    )
    batch.register_job_definition(
        jobDefinitionName=f"pt-jd-{suffix}",
        type="container",
        containerProperties={"image": "python:3.11-slim", "vcpus": 1, "memory": 512, "command": ["true"]},
    )
    return {"queue": queue["jobQueueName"], "definition": f"pt-jd-{suffix}"}
