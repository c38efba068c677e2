"""``k8s://`` — Kubernetes batch/v1 Jobs through lightkube.

URLs:
    ``k8s://[CONTEXT]/[NAMESPACE]?options``. ``CONTEXT`` is a kubeconfig context (empty: the
    current one, or the in-cluster service account when the process runs in a pod);
    ``NAMESPACE`` defaults to the context's namespace, else ``default``.
    ``k8s:///batch`` (current context, namespace ``batch``),
    ``k8s://prod-gke/jobs?flavor=gke&spot=true``,
    ``k8s:///jobs?server=https://10.0.0.1:6443&token_env=K8S_TOKEN&ca_file=/etc/k8s/ca.crt``.

Options:
    ``kubeconfig`` (path): the kubeconfig file. Defaults to in-cluster config, then
    ``$KUBECONFIG``, then ``~/.kube/config`` (lightkube's ``KubeConfig.from_env``).
    ``server`` (https URL): talk to this apiserver instead of a kubeconfig's; with
    ``token_env`` (the name of an environment variable holding a bearer token: tokens never go
    in URLs), ``ca_file`` (the apiserver's CA bundle) or ``insecure`` (bool, skip TLS checks).
    ``flavor`` (``plain`` | ``gke`` | ``eks`` | ``aks``): which cloud's spot node labels and
    taints to use. Defaults to ``plain``, which has none.
    ``spot`` (bool): run every job of this launcher on spot / preemptible nodes (needs a flavor).
    ``image`` (str): the image of specs that name none.
    ``node_selector`` (``key=value,key=value``): node labels every pod must match.
    ``service_account`` (str): the pods' service account. Defaults to the namespace's default.
    ``grace`` (float seconds): the pods' termination grace period on cancel. Defaults to 30.
    ``wrap`` (bool): run the command under ``/bin/sh`` so that PORTABLE_JOB_ATTEMPT is set
    (below). Defaults to true; turn it off for images without a shell.
    ``gpu_resource`` (str): the extended resource a GPU is. Defaults to ``nvidia.com/gpu``
    (GKE, EKS and AKS's NVIDIA device plugins); ``amd.com/gpu`` for AMD.
    ``request_timeout`` (float seconds): per API request. Defaults to 30.

What a JobSpec becomes (see :func:`portable_k8s._manifest.job_manifest`):
    one Job, ``completionMode: Indexed`` with one completion, ``backoffLimitPerIndex =
    retries``, ``restartPolicy: Never``; ``command`` -> the container's command (inside the
    ``/bin/sh`` wrapper); ``env`` -> env plus PORTABLE_JOB_ID (the Job's name),
    PORTABLE_JOB_NAME, PORTABLE_CHECKPOINT_URL; PORTABLE_JOB_ATTEMPT is 1 + the job
    controller's ``batch.kubernetes.io/job-index-failure-count`` + ``...-ignored-failure-count``
    pod annotations (the downward API); ``workdir`` -> workingDir; ``resources`` -> requests
    and limits (cpu, ``memory`` in Mi, GPUs as ``gpu_resource`` limits); ``timeout`` ->
    ``activeDeadlineSeconds`` of the Job; ``labels`` -> Job labels ``labels.portable.dev/<key>``
    (and exactly, in the ``portable.dev/labels`` annotation). Spot: node selector, node
    affinity and tolerations per flavour (docs/adapters/k8s.md has the table).

Idempotent submit:
    a spec with an idempotency key becomes the Job ``pk-<32 hex of the key's SHA-256>``: the
    apiserver creates one object of a name, atomically, so whichever of many racing processes
    creates first wins and the others get 409 and read it (IdempotencyConflict when its
    ``portable.dev/fingerprint`` annotation differs). The key lasts as long as the Job object.

States (from the Job's conditions, not by guessing from pods):
    ``Complete`` (or ``SuccessCriteriaMet``) -> SUCCEEDED; ``Failed`` -> FAILED
    (``DeadlineExceeded``: "timed out after Ns"; else the last pod's exit code); a cancelled
    Job -> CANCELLED once its pods are gone; a ready pod -> RUNNING; else PENDING.

Preemption:
    a pod that fails with a ``DisruptionTarget`` condition (spot reclaim through graceful node
    shutdown, eviction, scheduler preemption, pod GC of a lost node) is ignored by the Job's pod
    failure policy: the job controller starts a new pod, the attempt does not use up a retry,
    and the job resumes from its checkpoint. :meth:`K8sLauncher.preempt` does what a reclaim
    does: it evicts the running pod through the Eviction API with the grace period asked for.

cancel:
    sets ``spec.suspend`` and the ``portable.dev/cancelled`` annotation: the job controller
    deletes the pods (SIGTERM, the grace period, SIGKILL) and the Job object stays, so status
    and list go on answering CANCELLED. Delete the Job yourself (``propagationPolicy:
    Background``) to forget it, or give it a TTL controller.

Names and limits:
    The namespace is a DNS-1123 label (InvalidURL otherwise, before any request). A Job's
    name, which is its portable job id, is ``<spec name, lower-cased, [^a-z0-9-] as '-', at
    most 40>-<10 random hex>``, or ``pk-<digest>`` with an idempotency key. Env names
    starting ``PORTABLE_K8S_`` are the driver's (InvalidArgument). A spec needs an image (its
    own or the URL's; InvalidArgument otherwise). Label values that are no valid Kubernetes
    label value (``"ml-"``) are kept in the annotation only and matched client-side by list.

Errors:
    lightkube's ``ApiError`` by HTTP status through ``portable.driver.http.code_of_status``
    (404 NOT_FOUND, 401/403 PERMISSION_DENIED, 409 ALREADY_EXISTS, 429 THROTTLED with
    ``Retry-After``, 5xx and 410 UNAVAILABLE); httpx2 timeouts DEADLINE_EXCEEDED, transport
    errors UNAVAILABLE; a Job without the ``portable.dev/managed`` label is NOT_FOUND.

As:
    ``lightkube.Client`` (the driver's own; do not close it).

Capabilities:
    containers, gpus, logs, cancel, checkpoints, preempt, timeouts, retries,
    idempotent_submit, detached.

Known differences:
    * ``timeout`` bounds the whole Job (``activeDeadlineSeconds``), all attempts together,
      not each attempt; a timed-out job is not retried, as everywhere.
    * The job controller waits between failed attempts (10 s, then doubling, Kubernetes'
      pod failure backoff); a preempted attempt is replaced at once.
    * A preempted (evicted) pod is deleted, and its log with it: ``logs()`` yields the
      output of the pods that still exist. Pods of failed attempts stay, with their logs.
    * ``cancel`` suspends the Job and keeps it (see above); deleting it is up to you.
    * ``wait`` watches; ``logs(follow=True)`` streams the running pod's log and looks for the
      next attempt's pod every 0.1 s.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import datetime as dt
import json
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx2
from lightkube import ApiError, Client
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.config.models import Cluster, User
from lightkube.core.exceptions import ConfigError
from lightkube.models.meta_v1 import DeleteOptions, ObjectMeta
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod, PodEviction
from lightkube.types import PatchType

from portable.driver.compute import ComputeCapabilities, ComputeDriver, JobSpec, JobState, JobStatus
from portable.driver.http import HTTP_STATUS_CODES, code_of_status
from portable.errors import ErrorCode, IdempotencyConflict, InvalidURL
from portable.urls import ParsedURL

from ._manifest import (
    ANN,
    FAILURES,
    FLAVORS,
    IGNORED_FAILURES,
    LABEL,
    Settings,
    job_manifest,
    job_name,
    parse_node_selector,
    valid_namespace,
)

__all__ = ["K8sLauncher", "JobNotFound"]

_STATUS_CODES = {**HTTP_STATUS_CODES, 409: ErrorCode.ALREADY_EXISTS, 410: ErrorCode.UNAVAILABLE}


class JobNotFound(KeyError):
    """No portable Job of this name in the namespace."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "no such job"


def _time(text: Any) -> dt.datetime | None:
    if not text:
        return None
    if isinstance(text, dt.datetime):
        return text if text.tzinfo else text.replace(tzinfo=dt.UTC)
    return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))


def _conditions(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}


def _int(text: Any) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        return 0


def _terminated(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            return dict(term)
    return None


def _pod_order(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod["metadata"]
    return (str(meta.get("creationTimestamp") or ""), str(meta["name"]))


def status_of(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> JobStatus:
    """A portable status from a Job and its pods (oldest first)."""
    meta, spec, st = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    ann = meta.get("annotations") or {}
    conds = _conditions(job)
    pods = sorted(pods, key=_pod_order)
    newest = pods[-1] if pods else None
    counts = (newest or {}).get("metadata", {}).get("annotations") or {}
    failures, preemptions = _int(counts.get(FAILURES)), _int(counts.get(IGNORED_FAILURES))
    attempts = (1 + failures + preemptions) if newest is not None else 0
    # pods the controller deleted (a deadline, a replaced pod) are gone, but the Job counted them
    counted = _int(st.get("failed")) + _int(st.get("succeeded")) + _int(st.get("active")) + preemptions
    attempts = max(attempts, counted)
    last_exit = next((t for t in (_terminated(p) for p in reversed(pods)) if t), None)
    exit_code = None if last_exit is None else int(last_exit.get("exitCode", 0))
    reason: str | None = None
    finished: dt.datetime | None = None
    cancelled = ann.get(ANN["cancelled"])
    if "Complete" in conds or "SuccessCriteriaMet" in conds:
        state, exit_code = JobState.SUCCEEDED, 0 if exit_code is None else exit_code
        finished = _time((conds.get("Complete") or conds["SuccessCriteriaMet"]).get("lastTransitionTime"))
    elif "Failed" in conds:
        state = JobState.FAILED
        cond = conds["Failed"]
        finished = _time(cond.get("lastTransitionTime"))
        if cond.get("reason") == "DeadlineExceeded":
            reason = f"timed out after {spec.get('activeDeadlineSeconds')}s"
        elif exit_code is not None:
            why = (last_exit or {}).get("message") or (last_exit or {}).get("reason")
            reason = f"exit code {exit_code}" + (f" ({why})" if why and why not in ("Error",) else "")
        else:
            reason = f"{cond.get('reason') or 'failed'}: {cond.get('message') or ''}".strip(": ")
    elif cancelled is not None and not _int(st.get("active")) and not any(
        (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed") for p in pods
    ):
        state, reason = JobState.CANCELLED, f"cancelled: {cancelled}" if cancelled else "cancelled"
        suspended = conds.get("Suspended") or {}
        finished = _time(suspended.get("lastTransitionTime")) or _time(meta.get("creationTimestamp"))
    elif _int(st.get("ready")) or any(
        (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        for p in pods
    ):
        state = JobState.RUNNING
    else:
        state = JobState.PENDING
    started = min((t for t in (_time((p.get("status") or {}).get("startTime")) for p in pods) if t), default=None)
    labels = ann.get(ANN["labels"])
    created = _time(meta.get("creationTimestamp"))
    if finished is not None and created is not None:
        finished = max(finished, created)
    return JobStatus(
        job_id=str(meta["name"]),
        name=str(ann.get(ANN["name"]) or meta["name"]),
        state=state,
        exit_code=exit_code if state.terminal or exit_code is not None else None,
        reason=reason,
        attempts=attempts,
        preemptions=preemptions,
        labels=json.loads(labels) if labels else {},
        idempotency_key=ann.get(ANN["key"]),
        created=created,
        started=started,
        finished=finished if state.terminal else None,
    )


class K8sLauncher(ComputeDriver):
    """Jobs in one namespace of one Kubernetes cluster."""

    scheme = "k8s"
    capabilities = ComputeCapabilities(containers=True, gpus=True, preempt=True)

    def __init__(self, config: SingleConfig | KubeConfig, settings: Settings, *, request_timeout: float = 30.0) -> None:
        self.settings = settings
        if settings.flavor != "plain":  # the flavor names the cloud's spot node labels: per-job spot works
            self.capabilities = dataclasses.replace(type(self).capabilities, spot=True)
        self.namespace = settings.namespace
        # Any: lightkube's overloads type the resource classes, not the dicts this driver works in
        self.client: Any = Client(config, namespace=settings.namespace, timeout=httpx2.Timeout(request_timeout),
                             field_manager="portable", trust_env=False)
        server = self.client.config.cluster.server
        self.endpoint = f"{server}/namespaces/{settings.namespace}"

    @classmethod
    def from_url(cls, url: ParsedURL) -> K8sLauncher:
        context = url.host or None
        path = url.path.strip("/")
        if "/" in path:
            raise InvalidURL(f"{url}: write k8s://[CONTEXT]/NAMESPACE, one path segment")
        kubeconfig = url.take_str("kubeconfig")
        server = url.take_str("server")
        token_env = url.take_str("token_env")
        ca_file = url.take_str("ca_file")
        insecure = url.take("insecure", bool, False)
        flavor = url.take_str("flavor", "plain") or "plain"
        if flavor not in FLAVORS:
            raise InvalidURL(f"flavor={flavor!r} in {url}: one of {', '.join(FLAVORS)}")
        spot = url.take("spot", bool, False)
        if spot and flavor == "plain":
            raise InvalidURL(f"spot=true in {url} needs flavor=gke|eks|aks: a plain cluster has no spot node label")
        grace = url.take("grace", float, 30.0)
        if not 0 <= grace <= 3600:
            raise InvalidURL(f"grace in {url} must be 0 to 3600 seconds, got {grace}")
        request_timeout = url.take("request_timeout", float, 30.0)
        if not 0.1 <= request_timeout <= 600:
            raise InvalidURL(f"request_timeout in {url} must be 0.1 to 600 seconds, got {request_timeout}")
        settings_kw: dict[str, Any] = {
            "flavor": flavor,
            "spot": spot,
            "image": url.take_str("image"),
            "node_selector": parse_node_selector(url.take_str("node_selector"), url),
            "service_account": url.take_str("service_account"),
            "grace": grace,
            "wrap": url.take("wrap", bool, True),
            "gpu_resource": url.take_str("gpu_resource", "nvidia.com/gpu") or "nvidia.com/gpu",
        }
        url.done()
        if path:
            valid_namespace(path, url)
        config = _load_config(url, context, kubeconfig, server, token_env, ca_file, insecure)
        namespace = valid_namespace(path or config.namespace or "default", url)
        return cls(config, Settings(namespace=namespace, **settings_kw), request_timeout=request_timeout)

    def __repr__(self) -> str:
        return f"K8sLauncher(endpoint={self.endpoint!r}, flavor={self.settings.flavor!r})"

    # -- submit ----------------------------------------------------------
    def submit(self, spec: JobSpec) -> JobStatus:
        name = job_name(spec)
        manifest = job_manifest(spec, name, self.settings)
        try:
            created = self.client.create(Job.from_dict(manifest))
        except ApiError as exc:
            if exc.status.code != 409 or spec.idempotency_key is None:
                raise
            existing = self._job(name)
            fingerprint = (existing["metadata"].get("annotations") or {}).get(ANN["fingerprint"])
            if fingerprint != spec.fingerprint():
                raise IdempotencyConflict(
                    f"idempotency key {spec.idempotency_key[:60]!r} was used for job {name} with another spec",
                    provider=self.scheme,
                ) from None
            return status_of(existing, self._pods(name))
        return status_of(created.to_dict(), [])

    # -- reading ---------------------------------------------------------
    def _job(self, job_id: str) -> dict[str, Any]:
        try:
            job: dict[str, Any] = self.client.get(Job, job_id).to_dict()
        except ApiError as exc:
            if exc.status.code == 404:
                raise JobNotFound(f"no Job {job_id!r} in namespace {self.namespace} of {self.endpoint}") from None
            raise
        if (job["metadata"].get("labels") or {}).get(LABEL["managed"]) != "true":
            raise JobNotFound(f"Job {job_id!r} in namespace {self.namespace} was not submitted by portable")
        return job

    def _pods(self, job_id: str | None = None) -> builtins.list[dict[str, Any]]:
        labels: dict[str, str] = {LABEL["managed"]: "true"}
        if job_id is not None:
            labels[LABEL["job"]] = job_id
        return [p.to_dict() for p in self.client.list(Pod, labels=labels)]

    def describe(self, job_id: str) -> JobStatus:
        return status_of(self._job(job_id), self._pods(job_id))

    def list_jobs(self, labels: Mapping[str, str]) -> Iterator[JobStatus]:
        selector: dict[str, str] = {LABEL["managed"]: "true"}
        for key, value in labels.items():
            if value and value[0].isalnum() and value[-1].isalnum():
                selector[LABEL["prefix"] + key] = value
        jobs = []
        for obj in self.client.list(Job, labels=selector):
            job = obj.to_dict()
            ann = job["metadata"].get("annotations") or {}
            mine = json.loads(ann.get(ANN["labels"]) or "{}")
            if all(mine.get(k) == v for k, v in labels.items()):
                jobs.append(job)
        jobs.sort(key=lambda j: (_int((j["metadata"].get("annotations") or {}).get(ANN["submitted"])), j["metadata"]["name"]))
        by_job: dict[str, builtins.list[dict[str, Any]]] = {}
        if jobs:
            for pod in self._pods():
                by_job.setdefault((pod["metadata"].get("labels") or {}).get(LABEL["job"], ""), []).append(pod)
        return iter([status_of(j, by_job.get(j["metadata"]["name"], [])) for j in jobs])

    def wait(self, job_id: str, timeout: float) -> JobStatus:
        """Watch the Job (no polling) until a terminal condition, or ``timeout`` seconds."""
        end = time.monotonic() + timeout
        status = self.describe(job_id)
        while not status.done:
            left = end - time.monotonic()
            if left <= 0:
                return status
            version = self.client.get(Job, job_id).metadata.resourceVersion
            status = self.describe(job_id)  # anything that happened before `version` is in this read
            if status.done:
                break
            try:
                for _kind, obj in self.client.watch(
                    Job, fields={"metadata.name": job_id}, resource_version=version,
                    server_timeout=max(1, min(60, math.ceil(left))),
                ):
                    job = obj.to_dict()
                    if _conditions(job).keys() & {"Complete", "SuccessCriteriaMet", "Failed"} or (
                        (job["metadata"].get("annotations") or {}).get(ANN["cancelled"]) is not None
                        and not _int((job.get("status") or {}).get("active"))
                    ):
                        break
                    if time.monotonic() >= end:
                        break
            except ApiError as exc:
                if exc.status.code != 410:  # 410 Gone: the version is too old; read and watch again
                    raise
            status = self.describe(job_id)
        return status

    # -- cancel, preempt ---------------------------------------------------
    def terminate(self, job_id: str, reason: str) -> None:
        if self.describe(job_id).done:
            return
        patch = {"metadata": {"annotations": {ANN["cancelled"]: reason[:1000]}}, "spec": {"suspend": True}}
        self.client.patch(Job, job_id, patch, patch_type=PatchType.MERGE)

    def preempt(self, job_id: str, grace: float | None) -> None:
        """Evict the running pod (Eviction API, so it fails with a DisruptionTarget condition)."""
        if self.describe(job_id).done:
            return
        for pod in self._pods(job_id):
            meta = pod["metadata"]
            if (pod.get("status") or {}).get("phase") != "Running" or meta.get("deletionTimestamp"):
                continue
            options = DeleteOptions(gracePeriodSeconds=None if grace is None else math.ceil(grace))
            eviction = PodEviction(metadata=ObjectMeta(name=meta["name"], namespace=self.namespace), deleteOptions=options)
            try:
                self.client.create(eviction, name=meta["name"], namespace=self.namespace)
            except ApiError as exc:
                if exc.status.code != 404:  # it ended meanwhile
                    raise

    # -- logs ------------------------------------------------------------
    def logs(self, job_id: str, follow: bool) -> Iterator[str]:
        self._job(job_id)  # NotFound now, not at the first line
        return self._log_lines(job_id, follow)

    def _log_lines(self, job_id: str, follow: bool) -> Iterator[str]:
        done: set[str] = set()
        given: dict[str, int] = {}  # lines of each pod already yielded (a re-read starts over)
        while True:
            job = self._job(job_id)
            pods = sorted(self._pods(job_id), key=_pod_order)
            for pod in pods:
                uid = pod["metadata"]["uid"]
                if uid in done:
                    continue
                phase = (pod.get("status") or {}).get("phase", "Pending")
                if phase == "Pending":
                    if not follow:
                        done.add(uid)
                        continue
                    break  # not started yet: look again below
                terminal = phase in ("Succeeded", "Failed")
                with contextlib.suppress(ApiError):  # a pod deleted meanwhile has no log to give
                    lines = self.client.log(pod["metadata"]["name"], follow=follow and not terminal, newlines=False)
                    for index, line in enumerate(lines):
                        if index >= given.get(uid, 0):
                            given[uid] = index + 1
                            yield line.rstrip("\r")
                if terminal or not follow or self._pod_gone_or_done(pod):
                    done.add(uid)
            if not follow or (status_of(job, pods).done and all(p["metadata"]["uid"] in done for p in pods)):
                return
            time.sleep(0.1)

    def _pod_gone_or_done(self, pod: Mapping[str, Any]) -> bool:
        try:
            now = self.client.get(Pod, pod["metadata"]["name"]).to_dict()
        except ApiError:
            return True
        return now["metadata"]["uid"] != pod["metadata"]["uid"] or (now.get("status") or {}).get("phase") in (
            "Succeeded",
            "Failed",
        )

    # -- classification and escape hatches ------------------------------
    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, JobNotFound):
            return ErrorCode.NOT_FOUND
        if isinstance(exc, ApiError):
            # 409 is AlreadyExists (or a conflicting update), 410 an expired watch version
            return code_of_status(exc.status.code or 0, _STATUS_CODES)
        if isinstance(exc, httpx2.TimeoutException):
            return ErrorCode.DEADLINE_EXCEEDED
        if isinstance(exc, httpx2.TransportError):
            return ErrorCode.UNAVAILABLE
        return super().code_of(exc)

    def retry_after(self, exc: BaseException) -> float | None:
        if isinstance(exc, ApiError) and exc.response is not None:
            with contextlib.suppress(TypeError, ValueError):
                return float(exc.response.headers.get("Retry-After", ""))
        return super().retry_after(exc)

    def as_(self, kind: type[Any]) -> Any:
        return self.client if isinstance(self.client, kind) else None

    def close(self) -> None:
        self.client.close()


def _load_config(
    url: ParsedURL,
    context: str | None,
    kubeconfig: str | None,
    server: str | None,
    token_env: str | None,
    ca_file: str | None,
    insecure: bool,
) -> SingleConfig:
    """The one cluster + user a URL names; InvalidURL saying what is missing otherwise."""
    if server is not None:
        if kubeconfig is not None or context is not None:
            raise InvalidURL(f"{url}: give either server=... or a kubeconfig/context, not both")
        if not server.startswith("https://") and not server.startswith("http://"):
            raise InvalidURL(f"server={server!r} in {url} must be an http(s) URL")
        user = None
        if token_env is not None:
            token = os.environ.get(token_env)
            if not token:
                raise InvalidURL(f"token_env={token_env} in {url} names an environment variable that is not set")
            user = User(token=token)
        cluster = Cluster(server=server, certificate_auth=ca_file, insecure=insecure)
        found = KubeConfig.from_one(cluster=cluster, user=user, context_name="url").get()
    else:
        if token_env is not None or ca_file is not None or insecure:
            raise InvalidURL(f"{url}: token_env, ca_file and insecure go with server=...")
        try:
            config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
            found = config.get(context)
        except ConfigError as exc:
            where = f"kubeconfig={kubeconfig}" if kubeconfig else "in-cluster config, $KUBECONFIG or ~/.kube/config"
            raise InvalidURL(f"{url}: no Kubernetes configuration from {where}: {exc}") from None
    if found is None:
        raise InvalidURL(f"{url}: the kubeconfig has no current context; name one: k8s://CONTEXT/NAMESPACE")
    return found
