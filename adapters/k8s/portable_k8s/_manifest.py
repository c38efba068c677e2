"""What a :class:`~portable.driver.compute.JobSpec` becomes on Kubernetes: names, the Job manifest,
and the spot placement of each managed Kubernetes flavour.

Everything here is pure (dicts in, dicts out), so the mapping is testable without a cluster.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from portable.driver.compute import JobSpec, Resources
from portable.errors import InvalidArgument, InvalidURL

__all__ = [
    "ANN",
    "FLAVORS",
    "LABEL",
    "SPOT_PLACEMENT",
    "Placement",
    "Settings",
    "job_manifest",
    "job_name",
    "key_digest",
    "parse_node_selector",
]

#: Annotation keys the driver writes on each Job (the portable facts Kubernetes has no field for).
ANN = {
    "name": "portable.dev/name",
    "fingerprint": "portable.dev/fingerprint",
    "labels": "portable.dev/labels",
    "key": "portable.dev/idempotency-key",
    "submitted": "portable.dev/submitted-ns",
    "cancelled": "portable.dev/cancelled",
}
#: Label keys: ``managed`` marks portable's Jobs and their pods; a portable label ``k`` is ``labels.portable.dev/k``.
LABEL = {
    "managed": "portable.dev/managed",
    "key": "portable.dev/idempotency-key-digest",
    "job": "portable.dev/job",
    "prefix": "labels.portable.dev/",
}
#: The job controller's per-index counters on each pod (Indexed Jobs with backoffLimitPerIndex).
FAILURES = "batch.kubernetes.io/job-index-failure-count"
IGNORED_FAILURES = "batch.kubernetes.io/job-index-ignored-failure-count"
#: Env names the driver sets for the wrapper; a spec may not use the prefix.
RESERVED_PREFIX = "PORTABLE_K8S_"
_FAILURES_ENV, _PREEMPTIONS_ENV = "PORTABLE_K8S_FAILURES", "PORTABLE_K8S_PREEMPTIONS"
_ATTEMPT_WRAPPER = (
    f'PORTABLE_JOB_ATTEMPT=$((1 + ${{{_FAILURES_ENV}:-0}} + ${{{_PREEMPTIONS_ENV}:-0}})); '
    f"export PORTABLE_JOB_ATTEMPT; unset {_FAILURES_ENV} {_PREEMPTIONS_ENV}; "
)
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Placement:
    """Where spot pods go on one flavour: node labels to select (ANDed), node-affinity terms
    (ORed: any one label set matches), and the tolerations of the spot nodes' taints."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    any_of: tuple[Mapping[str, str], ...] = ()
    tolerations: tuple[Mapping[str, str], ...] = ()


#: The spot/preemptible mapping per ``?flavor=``; ``plain`` has none (a plain cluster names no spot label).
SPOT_PLACEMENT: dict[str, Placement] = {
    # GKE Spot VMs: node label cloud.google.com/gke-spot=true; GKE taints spot pools
    # (cloud.google.com/gke-spot=true:NoSchedule) when a pool is created with --spot and a taint.
    "gke": Placement(
        node_selector={"cloud.google.com/gke-spot": "true"},
        tolerations=({"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},),
    ),
    # EKS: Karpenter labels karpenter.sh/capacity-type=spot; managed node groups label
    # eks.amazonaws.com/capacityType=SPOT. Either kind of node will do.
    "eks": Placement(any_of=({"karpenter.sh/capacity-type": "spot"}, {"eks.amazonaws.com/capacityType": "SPOT"})),
    # AKS spot node pools: label and taint kubernetes.azure.com/scalesetpriority=spot (NoSchedule).
    "aks": Placement(
        node_selector={"kubernetes.azure.com/scalesetpriority": "spot"},
        tolerations=(
            {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot", "effect": "NoSchedule"},
        ),
    ),
}
FLAVORS = ("plain", *SPOT_PLACEMENT)


@dataclass(frozen=True)
class Settings:
    """The launcher-wide choices a URL makes (see :mod:`portable_k8s.jobs` for each option)."""

    namespace: str
    flavor: str = "plain"
    spot: bool = False
    image: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    service_account: str | None = None
    grace: float = 30.0
    wrap: bool = True
    gpu_resource: str = "nvidia.com/gpu"


def parse_node_selector(text: str | None, url: object) -> dict[str, str]:
    """``key=value,key2=value2`` -> a dict; InvalidURL naming the bad pair otherwise."""
    out: dict[str, str] = {}
    for pair in filter(None, (text or "").split(",")):
        key, sep, value = pair.partition("=")
        if not sep or not _QUALIFIED.match(key) or not _LABEL_VALUE.match(value):
            raise InvalidURL(
                f"node_selector pair {pair!r} in {url} must be KEY=VALUE with a Kubernetes label key and value"
            )
        out[key] = value
    return out


def key_digest(key: str) -> str:
    """32 hex characters of the key's SHA-256: the Job's name is ``pk-<digest>``."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def job_name(spec: JobSpec) -> str:
    """A DNS-1123 label: ``pk-<digest of the key>`` (only the key decides it, so any resubmit of
    the key meets the first Job), else ``<name>-<10 random hex>``."""
    if spec.idempotency_key is not None:
        return f"pk-{key_digest(spec.idempotency_key)}"
    base = re.sub(r"[^a-z0-9-]+", "-", spec.name.lower()).strip("-")[:40].rstrip("-") or "job"
    return f"{base}-{secrets.token_hex(5)}"


def _label_value(text: str) -> str | None:
    return text if _LABEL_VALUE.match(text) else None


def _env(spec: JobSpec, name: str) -> list[dict[str, Any]]:
    for key in spec.env:
        if key.startswith(RESERVED_PREFIX):
            raise InvalidArgument(f"env {key}: k8s:// reserves names starting with {RESERVED_PREFIX}; rename it")
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in spec.env.items()]
    env += [{"name": "PORTABLE_JOB_ID", "value": name}, {"name": "PORTABLE_JOB_NAME", "value": spec.name}]
    if spec.checkpoint_url is not None:
        env.append({"name": "PORTABLE_CHECKPOINT_URL", "value": spec.checkpoint_url})
    for env_name, annotation in ((_FAILURES_ENV, FAILURES), (_PREEMPTIONS_ENV, IGNORED_FAILURES)):
        env.append({"name": env_name, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{annotation}']"}}})
    return env


def _resources(res: Resources, gpu_resource: str) -> dict[str, Any]:
    requests: dict[str, str] = {}
    out: dict[str, Any] = {}
    if res.cpu is not None:
        requests["cpu"] = f"{res.cpu:g}"
    if res.memory_mib is not None:
        requests["memory"] = f"{res.memory_mib}Mi"
    limits = dict(requests)
    if res.gpu:
        limits[gpu_resource] = str(res.gpu)  # extended resources: limits only (requests default to them)
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _placement(settings: Settings, spot: bool) -> dict[str, Any]:
    pod: dict[str, Any] = {}
    selector = dict(settings.node_selector)
    tolerations: list[dict[str, Any]] = []
    if spot:
        placement = SPOT_PLACEMENT.get(settings.flavor)
        if placement is None:
            raise InvalidArgument(
                f"spot capacity on k8s:// needs ?flavor=gke|eks|aks (the cloud's spot node labels); "
                f"flavor={settings.flavor} names none"
            )
        selector.update(placement.node_selector)
        tolerations += [dict(t) for t in placement.tolerations]
        if placement.any_of:
            terms = [
                {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in term.items()]}
                for term in placement.any_of
            ]
            pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    if selector:
        pod["nodeSelector"] = selector
    if tolerations:
        pod["tolerations"] = tolerations
    return pod


def job_manifest(spec: JobSpec, name: str, settings: Settings) -> dict[str, Any]:
    """The batch/v1 Job for ``spec``, named ``name``.

    One Indexed completion with ``backoffLimitPerIndex = retries``, so the job controller puts
    each pod's failure count in its annotations (the wrapper turns it into PORTABLE_JOB_ATTEMPT);
    a pod failure policy that ignores pods with a ``DisruptionTarget`` condition (preemption,
    eviction, node shutdown), so a preempted attempt does not use up a retry; the timeout as the
    Job's ``activeDeadlineSeconds``.
    """
    image = spec.image or settings.image
    if not image:
        raise InvalidArgument("k8s:// runs containers: give the JobSpec an image, or the URL ?image=IMAGE")
    res = spec.resources if isinstance(spec.resources, Resources) else Resources()
    spot = bool(getattr(res, "spot", False)) or settings.spot
    command = list(spec.command)
    if settings.wrap:
        command = ["/bin/sh", "-c", _ATTEMPT_WRAPPER + 'exec "$@"', "portable-job", *command]
    container: dict[str, Any] = {"name": "job", "image": image, "command": command, "env": _env(spec, name)}
    if spec.workdir is not None:
        container["workingDir"] = spec.workdir
    resources = _resources(res, settings.gpu_resource)
    if resources:
        container["resources"] = resources
    labels = {LABEL["managed"]: "true"}
    for key, value in spec.labels.items():
        fitted = _label_value(value)
        if fitted is not None:
            labels[LABEL["prefix"] + key] = fitted
    annotations = {
        ANN["name"]: spec.name,
        ANN["fingerprint"]: spec.fingerprint(),
        ANN["labels"]: json.dumps(dict(spec.labels), sort_keys=True, separators=(",", ":")),
        ANN["submitted"]: str(time.time_ns()),
    }
    if spec.idempotency_key is not None:
        labels[LABEL["key"]] = key_digest(spec.idempotency_key)
        annotations[ANN["key"]] = spec.idempotency_key
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": math.ceil(settings.grace),
        "containers": [container],
        **_placement(settings, spot),
    }
    if settings.service_account:
        pod_spec["serviceAccountName"] = settings.service_account
    job_spec: dict[str, Any] = {
        "completions": 1,
        "parallelism": 1,
        "completionMode": "Indexed",
        "backoffLimitPerIndex": spec.retries,
        "podFailurePolicy": {
            "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
        },
        "template": {
            "metadata": {"labels": {LABEL["managed"]: "true", LABEL["job"]: name}},
            "spec": pod_spec,
        },
    }
    if spec.timeout is not None:
        job_spec["activeDeadlineSeconds"] = max(1, math.ceil(spec.timeout))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": settings.namespace, "labels": labels, "annotations": annotations},
        "spec": job_spec,
    }


def command_line(manifest: Mapping[str, Any]) -> str:
    """The container's argv as one shell-quoted line, for people (reprs, errors)."""
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    return shlex.join(container["command"])


def valid_namespace(namespace: str, url: object) -> str:
    if not _K8S_NAME.match(namespace):
        raise InvalidURL(f"namespace {namespace!r} in {url} must be a DNS-1123 label (a-z, 0-9, '-', at most 63)")
    return namespace
