"""The Role in docs/adapters/k8s.md is enough, on an apiserver with RBAC on: a ServiceAccount bound
to exactly that Role runs the driver (submit, status, list, wait, logs, preempt, cancel), and a
Role without ``pods/eviction`` cannot preempt."""

from __future__ import annotations

import re
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from portable.compute import JobSpec, JobState, open_launcher
from portable.errors import PermissionDenied
from portable.testing.compute_suite import contract_profile, poll_until
from tests.emulators.k8s import IMAGE, Api, make_namespace, write_kubeconfig

ROOT = Path(__file__).resolve().parents[3]


def documented_role() -> dict[str, Any]:
    doc = (ROOT / "docs" / "adapters" / "k8s.md").read_text()
    section = doc[doc.index("## RBAC") :]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "docs/adapters/k8s.md has no yaml block under ## RBAC"
    role: dict[str, Any] = yaml.safe_load(block.group(1))
    assert role["kind"] == "Role"
    return role


def account_kubeconfig(api: Api, k8s: dict[str, str], namespace: str, role: dict[str, Any], tmp_path: Path) -> Path:
    """A ServiceAccount bound to ``role`` alone, and a kubeconfig holding a token of it."""
    name = role["metadata"]["name"]
    api.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles", role)
    api.ok("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
           {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})
    api.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    })
    grant = api.ok("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                   {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    path = tmp_path / f"kubeconfig-{name}"
    write_kubeconfig(path, k8s["server"], grant["status"]["token"], Path(k8s["ca_file"]), namespace)
    return path


@pytest.fixture
def rbac_namespace(k8s_api: Api) -> Any:
    name = make_namespace(k8s_api, f"pt-rbac-{uuid.uuid4().hex[:8]}")
    yield name
    k8s_api.request("DELETE", f"/api/v1/namespaces/{name}")


def test_the_documented_role_runs_the_driver(
    k8s: dict[str, str], k8s_api: Api, rbac_namespace: str, tmp_path: Path, unique_name: str
) -> None:
    kubeconfig = account_kubeconfig(k8s_api, k8s, rbac_namespace, documented_role(), tmp_path)
    url = f"k8s://portable/{rbac_namespace}?kubeconfig={kubeconfig}&node_selector={k8s['local_selector']}&image={IMAGE}&grace=1"
    with open_launcher(url, profile=contract_profile(url)) as launcher:
        code = "import os, time\nprint('attempt', os.environ['PORTABLE_JOB_ATTEMPT'], flush=True)\ntime.sleep(0.3 if os.environ['PORTABLE_JOB_ATTEMPT'] == '2' else 120)"
        job = launcher.submit(JobSpec(command=[sys.executable, "-c", code], labels={"suite": unique_name}))
        poll_until(lambda: job.status().state is JobState.RUNNING, 60, "the job to run")
        assert [s.job_id for s in launcher.list({"suite": unique_name})] == [job.id]
        launcher.preempt(job.id, grace=0.5)
        status = job.wait(timeout=60)
        assert status.state is JobState.SUCCEEDED and status.preemptions == 1, status
        assert "attempt 2" in list(job.logs())
        slow = launcher.submit(JobSpec(command=[sys.executable, "-c", "import time; time.sleep(120)"],
                                       labels={"suite": unique_name}))
        slow.cancel()
        assert slow.wait(timeout=60).state is JobState.CANCELLED


def test_without_pods_eviction_preempt_is_permission_denied(
    k8s: dict[str, str], k8s_api: Api, rbac_namespace: str, tmp_path: Path, unique_name: str
) -> None:
    role = documented_role()
    role["metadata"]["name"] = "portable-jobs-no-eviction"
    role["rules"] = [r for r in role["rules"] if r["resources"] != ["pods/eviction"]]
    kubeconfig = account_kubeconfig(k8s_api, k8s, rbac_namespace, role, tmp_path)
    url = f"k8s://portable/{rbac_namespace}?kubeconfig={kubeconfig}&node_selector={k8s['local_selector']}&image={IMAGE}&grace=1"
    with open_launcher(url, profile=contract_profile(url)) as launcher:
        job = launcher.submit(JobSpec(command=[sys.executable, "-c", "import time; time.sleep(120)"],
                                      labels={"suite": unique_name}))
        poll_until(lambda: job.status().state is JobState.RUNNING, 60, "the job to run")
        with pytest.raises(PermissionDenied):
            launcher.preempt(job.id, grace=0.5)
        job.cancel()
        assert job.wait(timeout=60).state is JobState.CANCELLED
