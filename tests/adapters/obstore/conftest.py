"""Fixtures of the obstore engine's tests: moto (S3), Azurite (Azure Blob) and fake-gcs-server (GCS).

Buckets and containers are made with plain HTTP or the emulator's own API, so
that these tests need nothing but obstore and the emulators. Credentials go
into the environment for the session (the drivers read them only from there).
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from obstore_support import AZ_CONNECTION_ENV, AZ_KEY_ENV


@pytest.fixture(scope="session")
def aws(moto_server: Any) -> Iterator[dict[str, str]]:
    """moto's endpoint and region, with its credentials in the environment for the session."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
            mp.setenv(name, moto_server.env[name])
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        yield {"endpoint_url": moto_server.endpoints["endpoint_url"], "region": moto_server.endpoints["region"]}


@pytest.fixture(scope="session")
def s3_bucket(aws: dict[str, str]) -> str:
    """One bucket for the session (moto accepts an unsigned CreateBucket); tests use prefixes."""
    name = f"pto-{uuid.uuid4().hex[:12]}"
    req = urllib.request.Request(f"{aws['endpoint_url']}/{name}", method="PUT")
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
    return name


@pytest.fixture(scope="session")
def s3_query(aws: dict[str, str]) -> str:
    return f"region={aws['region']}&endpoint_url={aws['endpoint_url']}"


@pytest.fixture(scope="session")
def azure(azurite: Any) -> Iterator[dict[str, str]]:
    """Azurite's endpoints, with its secrets in two variables of the session's own."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(AZ_CONNECTION_ENV, azurite.endpoints["connection_string"])
        mp.setenv(AZ_KEY_ENV, azurite.endpoints["account_key"])
        for name in (
            "AZURE_STORAGE_CONNECTION_STRING",
            "AZURE_STORAGE_ACCOUNT_KEY",
            "AZURE_STORAGE_SAS_TOKEN",
            "AZURE_STORAGE_ACCOUNT_NAME",
        ):
            mp.delenv(name, raising=False)
        yield {
            "blob_endpoint": azurite.endpoints["blob_endpoint"],
            "account": azurite.endpoints["account_name"],
            "connection_string": azurite.endpoints["connection_string"],
        }


@pytest.fixture(scope="session")
def blob_container(azure: dict[str, str]) -> str:
    """One container for the session, made with the azure-storage-blob SDK (installed by portable-cloud-azure)."""
    from azure.storage.blob import BlobServiceClient

    name = f"pto-{uuid.uuid4().hex[:12]}"
    BlobServiceClient.from_connection_string(azure["connection_string"]).create_container(name)
    return name


@pytest.fixture(scope="session")
def gcs(fake_gcs: Any) -> dict[str, str]:
    """fake-gcs-server's endpoint and one bucket for the session (JSON API)."""
    endpoint = fake_gcs.endpoints["endpoint_url"].rstrip("/")
    name = f"pto-{uuid.uuid4().hex[:12]}"
    req = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project={fake_gcs.endpoints['project']}",
        data=json.dumps({"name": name}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
    return {"endpoint_url": endpoint, "bucket": name}
