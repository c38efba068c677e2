"""What only ``k8s://`` has: the Job a spec becomes, spot placement per flavour, URL errors,
idempotent submit from racing processes, and preemption through a DisruptionTarget eviction."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from portable.compute import JobSpec, JobState, Launcher, open_launcher
from portable.errors import InvalidArgument, InvalidURL, NotFound, PermissionDenied, Unsupported
from portable.testing.compute_suite import contract_profile, poll_until
from tests.emulators.k8s import IMAGE, Api, k8s_url

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def kwok(kwok_url: str) -> Iterator[Launcher]:
    with open_launcher(kwok_url, profile=contract_profile(kwok_url)) as launcher:
        yield launcher


@pytest.fixture
def local(local_url: str) -> Iterator[Launcher]:
    with open_launcher(local_url, profile=contract_profile(local_url)) as launcher:
        yield launcher


def _job(api: Api, namespace: str, name: str) -> dict[str, Any]:
    return api.ok("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")  # type: ignore[no-any-return]


def test_a_spec_becomes_an_indexed_job(kwok: Launcher, k8s_api: Api, k8s_namespace: str, unique_name: str) -> None:
    spec = JobSpec(
        command=["python3", "train.py", "--epochs", "3"],
        name="Trainer_1",
        env={"MODE": "fast"},
        workdir="/srv/app",
        resources={"cpu": 0.5, "memory": "2Gi", "gpu": 1},
        retries=2,
        timeout=4.5,
        labels={"suite": unique_name, "team": "ml-"},
        checkpoint_url="file:///tmp/ckpt",
    )
    job = kwok.submit(spec)
    raw = _job(k8s_api, k8s_namespace, job.id)
    assert job.id.startswith("trainer-1-")
    js = raw["spec"]
    assert (js["completions"], js["parallelism"], js["completionMode"], js["backoffLimitPerIndex"]) == (1, 1, "Indexed", 2)
    assert js["activeDeadlineSeconds"] == 5
    assert js["podFailurePolicy"]["rules"] == [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]
    pod = js["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["terminationGracePeriodSeconds"] == 1
    assert pod["nodeSelector"] == {"portable.dev/pods": "kwok"}
    container = pod["containers"][0]
    assert container["image"] == IMAGE and container["workingDir"] == "/srv/app"
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert container["command"][-4:] == ["python3", "train.py", "--epochs", "3"]
    assert container["resources"] == {
        "requests": {"cpu": "500m", "memory": "2Gi"},
        "limits": {"cpu": "500m", "memory": "2Gi", "nvidia.com/gpu": "1"},
    }
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["MODE"] == "fast" and env["PORTABLE_JOB_ID"] == job.id and env["PORTABLE_JOB_NAME"] == "Trainer_1"
    assert env["PORTABLE_CHECKPOINT_URL"] == "file:///tmp/ckpt"
    assert env["PORTABLE_K8S_FAILURES"] == {
        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.annotations['batch.kubernetes.io/job-index-failure-count']"}
    }
    labels = raw["metadata"]["labels"]
    assert labels["labels.portable.dev/suite"] == unique_name
    assert "labels.portable.dev/team" not in labels, "'ml-' is no valid label value: it lives in the annotation only"
    status = job.wait(timeout=60)
    assert status.state is JobState.SUCCEEDED
    assert status.labels == {"suite": unique_name, "team": "ml-"}
    assert [s.job_id for s in kwok.list({"suite": unique_name, "team": "ml-"})] == [job.id]


@pytest.mark.parametrize(
    ("flavor", "selector", "affinity", "tolerations"),
    [
        ("gke", {"cloud.google.com/gke-spot": "true"}, None,
         [{"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]),
        ("eks", {}, [{"karpenter.sh/capacity-type": "spot"}, {"eks.amazonaws.com/capacityType": "SPOT"}], None),
        ("aks", {"kubernetes.azure.com/scalesetpriority": "spot"}, None,
         [{"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}]),
    ],
)
@pytest.mark.parametrize("asked_by", ["url", "spec"])
def test_spot_maps_to_each_clouds_labels_and_taints(
    k8s: dict[str, str], k8s_api: Api, k8s_namespace: str, unique_name: str,
    flavor: str, selector: dict[str, str], affinity: list[dict[str, str]] | None, tolerations: list[dict[str, str]] | None,
    asked_by: str,
) -> None:
    # spot for every job of the launcher (?spot=true), or for one job (resources={"spot": True})
    url = k8s_url(k8s, k8s_namespace, "kwok", f"flavor={flavor}" + ("&spot=true" if asked_by == "url" else ""))
    resources = {"spot": True} if asked_by == "spec" else None
    with open_launcher(url, profile=contract_profile(url)) as launcher:
        assert launcher.capabilities.spot
        job = launcher.submit(JobSpec(command=["true"], labels={"suite": unique_name}, resources=resources))
        pod = _job(k8s_api, k8s_namespace, job.id)["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"portable.dev/pods": "kwok", **selector}
        assert pod.get("tolerations") == tolerations
        if affinity is None:
            assert "affinity" not in pod
        else:
            terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            assert terms == [
                {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in term.items()]}
                for term in affinity
            ]
        # no node here is a spot node: the pod stays unscheduled and the job PENDING
        time.sleep(1.5)
        assert launcher.get(job.id).status().state is JobState.PENDING
        launcher.get(job.id).cancel()
        assert launcher.get(job.id).wait(timeout=30).state is JobState.CANCELLED


def test_a_spot_job_on_a_plain_cluster_is_refused_before_any_request(
    k8s: dict[str, str], k8s_api: Api, k8s_namespace: str, unique_name: str,
) -> None:
    url = k8s_url(k8s, k8s_namespace, "kwok", "")
    with open_launcher(url, profile=contract_profile(url)) as launcher:
        assert not launcher.capabilities.spot
        with pytest.raises(Unsupported, match="spot"):
            launcher.submit(JobSpec(command=["true"], labels={"suite": unique_name}, resources={"spot": True}))
        assert list(launcher.list({"suite": unique_name})) == []


@pytest.mark.parametrize(
    "query",
    [
        "flavor=openshift",
        "spot=true",
        "spot=maybe",
        "grace=-1",
        "node_selector=novalue",
        "node_selector=a=b,=c",
        "colour=blue",
        "token_env=PORTABLE_TEST_NO_SUCH_TOKEN",
        "server=https://127.0.0.1:1&token_env=PORTABLE_TEST_NO_SUCH_TOKEN",
    ],
)
def test_bad_url_is_refused_before_any_request(k8s: dict[str, str], query: str) -> None:
    os.environ.pop("PORTABLE_TEST_NO_SUCH_TOKEN", None)
    with pytest.raises(InvalidURL) as err:
        open_launcher(f"k8s://portable/default?kubeconfig={k8s['kubeconfig']}&{query}")
    assert str(err.value)


def test_bad_namespace_and_missing_kubeconfig_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidURL, match="DNS-1123"):
        open_launcher(f"k8s://portable/Not_A_Namespace?kubeconfig={tmp_path / 'none'}")
    with pytest.raises(InvalidURL, match="no Kubernetes configuration"):
        open_launcher(f"k8s://portable/default?kubeconfig={tmp_path / 'none'}")


def test_a_spec_without_image_or_with_a_reserved_env_is_refused(
    k8s: dict[str, str], k8s_namespace: str, unique_name: str
) -> None:
    url = f"k8s://portable/{k8s_namespace}?kubeconfig={k8s['kubeconfig']}"
    with open_launcher(url, profile=contract_profile(url)) as launcher:
        with pytest.raises(InvalidArgument, match="image"):
            launcher.submit(JobSpec(command=["true"], labels={"suite": unique_name}))
        with pytest.raises(InvalidArgument, match="PORTABLE_K8S_"):
            launcher.submit(JobSpec(command=["true"], image=IMAGE, env={"PORTABLE_K8S_X": "1"}, labels={"suite": unique_name}))
        assert launcher.list({"suite": unique_name}) == []


def test_a_job_not_submitted_by_portable_is_not_found(kwok: Launcher, k8s_api: Api, k8s_namespace: str) -> None:
    foreign = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "not-portable"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "nodeSelector": {"portable.dev/pods": "kwok"},
                                       "containers": [{"name": "c", "image": IMAGE}]}}},
    }
    k8s_api.ok("POST", f"/apis/batch/v1/namespaces/{k8s_namespace}/jobs", foreign)
    with pytest.raises(NotFound):
        kwok.get("not-portable")


_RACER = """
import sys, time
from pathlib import Path
from portable.compute import JobSpec, open_launcher
url, key, suite, go = sys.argv[1:5]
launcher = open_launcher(url)
while not Path(go).exists():
    time.sleep(0.001)
job = launcher.submit(JobSpec(command=["true"], idempotency_key=key, labels={"suite": suite}))
print("job", job.id, flush=True)
"""


@pytest.mark.parametrize("kill_after", [0.0, 0.05, 0.2])
def test_two_processes_submitting_one_key_make_exactly_one_job(
    kwok_url: str, kwok: Launcher, unique_name: str, tmp_path: Path, kill_after: float
) -> None:
    """Both racers start at once; one is SIGKILLed ``kill_after`` s in: one Job, whoever won."""
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "adapters" / "k8s"), os.environ.get("PYTHONPATH", "")])}
    racers = [
        subprocess.Popen([sys.executable, "-c", _RACER, kwok_url, f"key-{unique_name}", unique_name, str(go)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    time.sleep(2.0)  # both imported and waiting at the barrier
    go.write_text("go")
    time.sleep(kill_after)
    racers[0].send_signal(signal.SIGKILL)
    out, err = racers[1].communicate(timeout=60)
    racers[0].wait(timeout=10)
    assert racers[1].returncode == 0, err
    survivor = out.split()[1]
    jobs = kwok.list({"suite": unique_name})
    assert [s.job_id for s in jobs] == [survivor]
    again = kwok.submit(JobSpec(command=["true"], idempotency_key=f"key-{unique_name}", labels={"suite": unique_name}))
    assert again.id == survivor
    assert again.wait(timeout=60).state is JobState.SUCCEEDED


def _pod_events(api: Api, namespace: str, job_id: str, into: list[dict[str, Any]]) -> threading.Thread:
    """Collect every pod of ``job_id`` as the apiserver reports it (a watch, in a thread)."""

    def run() -> None:
        with contextlib.suppress(Exception):
            for event in api.watch(f"/api/v1/namespaces/{namespace}/pods?labelSelector=portable.dev/job={job_id}", 60):
                into.append(event["object"])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_preemption_is_an_eviction_with_a_disruption_target(
    local: Launcher, k8s_api: Api, k8s_namespace: str, unique_name: str, tmp_path: Path
) -> None:
    """The evicted pod fails with DisruptionTarget; the Job's policy ignores it (retries=0, yet it goes on)."""
    gate = tmp_path / "go"
    code = (
        "import os, time\n"
        "print('attempt', os.environ['PORTABLE_JOB_ATTEMPT'], flush=True)\n"
        "while os.environ['PORTABLE_JOB_ATTEMPT'] == '1' or not os.path.exists(os.environ['GATE']): time.sleep(0.01)"
    )
    job = local.submit(JobSpec(command=[sys.executable, "-c", code], image=IMAGE, env={"GATE": str(gate)},
                               labels={"suite": unique_name}))
    seen: list[dict[str, Any]] = []
    _pod_events(k8s_api, k8s_namespace, job.id, seen)
    poll_until(lambda: job.status().state is JobState.RUNNING, 60, "the job to run")
    # the pod watch runs in its own thread and may see the Running pod after the Job says RUNNING
    poll_until(lambda: any(p["status"].get("phase") == "Running" for p in seen), 60, "the watch to see the pod run")
    first = next(p for p in seen if p["status"].get("phase") == "Running")["metadata"]["uid"]
    local.preempt(job.id, grace=0.5)
    poll_until(lambda: any(p["metadata"]["uid"] != first for p in seen), 60, "a replacement pod")
    evicted = [p for p in seen if p["metadata"]["uid"] == first]
    reasons = {c.get("reason") for p in evicted for c in p["status"].get("conditions") or [] if c["type"] == "DisruptionTarget"}
    assert reasons == {"EvictionByEvictionAPI"}, evicted[-1:]
    assert any(p["status"].get("phase") == "Failed" for p in evicted), "the stand-in kubelet reports the killed pod Failed"
    gate.write_text("go")
    status = job.wait(timeout=60)
    assert status.state is JobState.SUCCEEDED, status
    assert (status.attempts, status.preemptions) == (2, 1)
    assert "attempt 2" in list(job.logs())


_RESUMING_JOB = """
import os, sys, time
import portable.checkpoint
ckpt = portable.checkpoint.from_env()
state = ckpt.load(default={"next": 1, "total": 0, "resumed_at": []})
state["resumed_at"].append([int(os.environ["PORTABLE_JOB_ATTEMPT"]), state["next"]])
ckpt.save(state)
for i in range(state["next"], 61):
    state["total"] += i
    state["next"] = i + 1
    if i % 10 == 0:
        ckpt.save(state)
    time.sleep(0.02)
ckpt.save(state)
"""


def test_a_preempted_pod_resumes_from_its_checkpoint_on_a_bucket(
    local: Launcher, unique_name: str, tmp_path: Path
) -> None:
    """Preempted mid-run, the job's second pod starts where the first one's last checkpoint left off."""
    from portable.checkpoint import open_checkpoint

    url = f"file://{tmp_path / 'bucket'}/{unique_name}"
    job = local.submit(JobSpec(command=[sys.executable, "-c", _RESUMING_JOB], image=IMAGE, checkpoint_url=url,
                               labels={"suite": unique_name}))
    ckpt = open_checkpoint(url)

    def progressed() -> bool:
        return bool(ckpt.load() and ckpt.load()["next"] > 20)

    poll_until(progressed, 60, "the job's checkpoints past step 20")
    job.preempt(grace=0.5)
    status = job.wait(timeout=90)
    assert status.state is JobState.SUCCEEDED, status
    assert (status.preemptions, status.attempts) == (1, 2)
    state = ckpt.load()
    assert state["total"] == sum(range(61))
    (first, second) = state["resumed_at"]
    assert first == [1, 1]
    assert second[0] == 2 and second[1] > 20 and (second[1] - 1) % 10 == 0, state


def test_cancel_keeps_the_record_and_stops_the_pod(local: Launcher, k8s_api: Api, k8s_namespace: str, unique_name: str) -> None:
    job = local.submit(JobSpec(command=[sys.executable, "-c", "import time; time.sleep(120)"], image=IMAGE,
                               labels={"suite": unique_name}))
    poll_until(lambda: job.status().state is JobState.RUNNING, 60, "the job to run")
    job.cancel()
    status = job.wait(timeout=60)
    assert status.state is JobState.CANCELLED and status.reason and "cancel" in status.reason
    raw = _job(k8s_api, k8s_namespace, job.id)
    assert raw["spec"]["suspend"] is True
    pods = k8s_api.ok("GET", f"/api/v1/namespaces/{k8s_namespace}/pods?labelSelector=portable.dev/job={job.id}")["items"]
    assert all(p["status"].get("phase") in ("Succeeded", "Failed") for p in pods)
    assert [s.state for s in local.list({"suite": unique_name})] == [JobState.CANCELLED]


def test_an_explicit_server_with_a_token_from_the_environment(
    k8s: dict[str, str], k8s_api: Api, k8s_namespace: str, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PORTABLE_TEST_K8S_TOKEN", k8s_api.token)
    url = (
        f"k8s:///{k8s_namespace}?server={k8s['server']}&token_env=PORTABLE_TEST_K8S_TOKEN&ca_file={k8s['ca_file']}"
        f"&node_selector={k8s['kwok_selector']}&image={IMAGE}"
    )
    with open_launcher(url, profile=contract_profile(url)) as launcher:
        assert k8s_api.token not in repr(launcher)
        job = launcher.submit(JobSpec(command=["true"], labels={"suite": unique_name}))
        assert job.wait(timeout=60).state is JobState.SUCCEEDED
    monkeypatch.setenv("PORTABLE_TEST_K8S_TOKEN", "not-a-token")
    with open_launcher(url, profile=contract_profile(url)) as launcher, pytest.raises(PermissionDenied):
        launcher.list({"suite": unique_name})
