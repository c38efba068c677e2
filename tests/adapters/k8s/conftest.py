"""Fixtures of the Kubernetes adapter tests: one control plane per session (tests/emulators/k8s.py),
one fresh namespace per session, and launcher URLs for its two nodes.

``local``: pods land on ``local-0``, whose stand-in kubelet runs their commands as processes of
this machine (the image is ignored), so exit codes, logs, retries, timeouts, cancel and
preemption are real. ``kwok``: pods land on ``kwok-0``, where kwok's fast stages fake the pod
lifecycle (Running, then Succeeded with exit code 0, about a second later); nothing runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.emulators.k8s import Api, admin_api, k8s_url, make_namespace


@pytest.fixture(scope="session")
def k8s(k8s_cluster: Any) -> dict[str, str]:
    return dict(k8s_cluster.endpoints)


@pytest.fixture(scope="session")
def k8s_api(k8s: dict[str, str]) -> Api:
    """The admin's API client of the harness (urllib; not the driver's library)."""
    return admin_api(Path(k8s["kubeconfig"]).parent)


@pytest.fixture(scope="session")
def k8s_namespace(k8s_api: Api) -> Iterator[str]:
    name = make_namespace(k8s_api, f"pt-{uuid.uuid4().hex[:10]}")
    yield name
    k8s_api.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
def local_url(k8s: dict[str, str], k8s_namespace: str) -> str:
    return k8s_url(k8s, k8s_namespace, "local")


@pytest.fixture
def kwok_url(k8s: dict[str, str], k8s_namespace: str) -> str:
    return k8s_url(k8s, k8s_namespace, "kwok")
