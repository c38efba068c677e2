"""Without Google credentials, every GCP URL fails at open with PermissionDenied saying what to do."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from portable.errors import PermissionDenied
from portable.idempotency import open_store
from portable.messaging import open_topic
from portable.storage import open_bucket


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No key file, no gcloud config, no emulator, and no probe of the GCE metadata server."""
    from google.auth.compute_engine import _metadata

    for name in (
        "GOOGLE_APPLICATION_CREDENTIALS",
        "STORAGE_EMULATOR_HOST",
        "PUBSUB_EMULATOR_HOST",
        "FIRESTORE_EMULATOR_HOST",
        "CLOUDSDK_CONFIG",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", True)  # read at import; keeps traffic off 169.254.169.254


@pytest.mark.parametrize(
    ("open_", "url", "hint"),
    [
        (open_bucket, "gs://some-bucket?engine=fsspec", "endpoint_url="),
        (open_topic, "pubsub://test-project/topics/abc", "endpoint="),
        (open_store, "firestore://test-project/records", "endpoint="),
    ],
)
def test_missing_credentials_are_a_permission_error_that_says_what_to_do(
    no_credentials: None, open_: Callable[[str], object], url: str, hint: str
) -> None:
    with pytest.raises(PermissionDenied, match="GOOGLE_APPLICATION_CREDENTIALS") as info:
        open_(url)
    assert hint in str(info.value)
