"""Bucket URLs on the emulators for the transfer tests: moto (S3), Azurite (Blob), fake-gcs-server (GCS).

Each fixture makes one bucket (container) for the session and yields a URL
template with a ``{prefix}`` to fill, so every test works under its own
prefix, plus the environment a subprocess needs to open it.
"""

from __future__ import annotations

import json
import os
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

AZ_CONNECTION_ENV = "PORTABLE_TEST_TRANSFER_AZURITE"


@dataclass(frozen=True)
class Place:
    """A bucket URL template (``{prefix}`` to fill) and the environment variables it needs."""

    template: str
    env: dict[str, str] = field(default_factory=dict)

    def url(self, prefix: str) -> str:
        return self.template.format(prefix=prefix)


@pytest.fixture(scope="session")
def s3_place(moto_server: Any) -> Iterator[Place]:
    endpoint = moto_server.endpoints["endpoint_url"]
    env = {name: moto_server.env[name] for name in
           ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION")}
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        bucket = f"ptr-{uuid.uuid4().hex[:12]}"
        with urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=30) as r:
            assert r.status == 200
        region = moto_server.endpoints["region"]
        yield Place(f"s3://{bucket}/{{prefix}}?region={region}&endpoint_url={endpoint}", env)


@pytest.fixture(scope="session")
def az_place(azurite: Any) -> Iterator[Place]:
    blob = pytest.importorskip("azure.storage.blob", reason="the Azure adapter is not installed")
    BlobServiceClient = blob.BlobServiceClient
    conn = azurite.endpoints["connection_string"]
    name = f"ptr-{uuid.uuid4().hex[:12]}"
    BlobServiceClient.from_connection_string(conn).create_container(name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(AZ_CONNECTION_ENV, conn)
        yield Place(f"az://{name}/{{prefix}}?connection_string_env={AZ_CONNECTION_ENV}", {AZ_CONNECTION_ENV: conn})


@pytest.fixture(scope="session")
def gs_place(fake_gcs: Any) -> Iterator[Place]:
    endpoint = fake_gcs.endpoints["endpoint_url"]
    bucket = f"ptr-{uuid.uuid4().hex[:12]}"
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project={fake_gcs.endpoints['project']}",
        data=json.dumps({"name": bucket}).encode(), headers={"Content-Type": "application/json"}, method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    env = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        yield Place(f"gs://{bucket}/{{prefix}}?engine=fsspec&endpoint_url={endpoint}", env)


def child_env(*places: Place) -> dict[str, str]:
    """The environment of a subprocess that opens these places."""
    env = dict(os.environ)
    for place in places:
        env.update(place.env)
    return env
