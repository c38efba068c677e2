"""Fixtures of the GCP adapter tests: fake-gcs-server, the Pub/Sub and Firestore emulators.

The emulators are started once per session by ``tests/emulators`` (the
``fake_gcs``, ``pubsub_emulator`` and ``firestore_emulator`` fixtures). Each
test works under its own prefix, topic or collection (``unique_name``).
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def gcs(fake_gcs: Any) -> dict[str, str]:
    """The fake-gcs-server endpoint and one bucket created for the session."""
    endpoint = fake_gcs.endpoints["endpoint_url"]
    bucket = f"pt-{uuid.uuid4().hex[:12]}"
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project={fake_gcs.endpoints['project']}",
        data=json.dumps({"name": bucket}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    return {"endpoint_url": endpoint, "bucket": bucket}


@pytest.fixture(scope="session")
def signing_key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A service-account JSON key made here, with a fresh RSA key: enough to sign V4 URLs offline."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    info = {
        "type": "service_account",
        "project_id": "test-project",
        "private_key_id": uuid.uuid4().hex,
        "private_key": pem,
        "client_email": "signer@test-project.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    path = tmp_path_factory.mktemp("gcp-keys") / "signer.json"
    path.write_text(json.dumps(info))
    return path
