"""Fixtures of the Kubernetes adapter tests: one control plane per session (tests/emulators/k8s.py),
one fresh namespace per session, and launcher URLs for its two nodes.

``local``: pods land on ``local-0``, whose stand-in kubelet runs their commands as processes of
this machine (the image is ignored), so exit codes, logs, retries, timeouts, cancel and
preemption are real. ``kwok``: pods land on ``kwok-0``, where kwok's fast stages fake the pod
lifecycle (Running, then Succeeded with exit code 0, about a second later); nothing runs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.emulators.k8s import Api, admin_api

IMAGE = "python:3.11-slim"  # what a real cluster would pull; the local runner ignores it


@pytest.fixture(scope="session")
def k8s(k8s_cluster: Any) -> dict[str, str]:
    return dict(k8s_cluster.endpoints)


@pytest.fixture(scope="session")
def k8s_api(k8s: dict[str, str]) -> Api:
    """The admin's API client of the harness (urllib; not the driver's library)."""
    return admin_api(Path(k8s["kubeconfig"]).parent)


def make_namespace(api: Api, name: str) -> str:
    api.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    deadline = time.monotonic() + 30
    while api.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] != 200:
        assert time.monotonic() < deadline, f"namespace {name} got no default service account"
        time.sleep(0.05)
    return name


@pytest.fixture(scope="session")
def k8s_namespace(k8s_api: Api) -> Iterator[str]:
    name = make_namespace(k8s_api, f"pt-{uuid.uuid4().hex[:10]}")
    yield name
    k8s_api.request("DELETE", f"/api/v1/namespaces/{name}")


def k8s_url(k8s: dict[str, str], namespace: str, node: str, extra: str = "") -> str:
    selector = k8s["local_selector"] if node == "local" else k8s["kwok_selector"]
    url = f"k8s://portable/{namespace}?kubeconfig={k8s['kubeconfig']}&node_selector={selector}&image={IMAGE}&grace=1"
    return url + (f"&{extra}" if extra else "")


@pytest.fixture
def local_url(k8s: dict[str, str], k8s_namespace: str) -> str:
    return k8s_url(k8s, k8s_namespace, "local")


@pytest.fixture
def kwok_url(k8s: dict[str, str], k8s_namespace: str) -> str:
    return k8s_url(k8s, k8s_namespace, "kwok")
