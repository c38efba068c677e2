"""A real Kubernetes control plane without Docker: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, plus a stand-in kubelet that runs pods as local processes.

``bash scripts/install-emulators.sh`` builds the binaries from the Go module proxy into a
per-user cache outside the clone, keyed by version (``${XDG_CACHE_HOME:-~/.cache}/portable/
{k8s-v1.37.2,etcd-v3.6.8,kwok-v0.8.0}/``, each with a ``built-from`` stamp).

One harness process (``python -m tests.emulators.k8s supervise WORKDIR``) starts the pieces in
order, as its children: etcd; the apiserver on 127.0.0.1 (TLS from a CA made here, a static
token file, RBAC, a service-account key pair, ``--endpoint-reconciler-type=none``,
``--enable-priority-and-fairness=false``); the controller-manager (job, garbage-collector,
namespace, serviceaccount and pod-garbage-collector controllers); the scheduler; kwok. It then
registers two Nodes:

``kwok-0`` (label ``portable.dev/pods=kwok``)
    managed by kwok (annotation ``kwok.x-k8s.io/node=fake``) with the module's
    ``kustomize/stage/{node,pod}/fast`` stages: a Job's pod goes Running, then Succeeded with
    exit code 0, about a second after it is created, whatever its command. Nothing runs.
``local-0`` (label ``portable.dev/pods=local``)
    served by :class:`PodRunner` in the supervisor, a stand-in kubelet: it runs each pod's
    command (``command`` + ``args``, ``env`` with the downward API's ``fieldRef``,
    ``workingDir``) as a local process with the supervisor's environment (so the test venv's
    ``python`` and ``portable`` are the "image"), reports Running / Succeeded / Failed with the
    exit code, kills a deleted pod (SIGTERM, its grace period, SIGKILL) and serves
    ``containerLogs`` over HTTPS, so ``kubectl logs`` style requests through the apiserver work.
    The image is ignored: this is no container runtime.

A job is placed on one of them by a node selector (``k8s://...?node_selector=portable.dev/
pods=local``). On stop, the supervisor stops the runner's pods, kwok, the scheduler, the
controller-manager, the apiserver and then etcd, each by the PID it recorded.

``EmulatorInfo.endpoints``: ``server``, ``kubeconfig`` (a file holding the admin token),
``ca_file``, ``url`` (``k8s://portable/default?kubeconfig=...``), ``local_selector``,
``kwok_selector``. ``env``: ``KUBECONFIG`` and ``PORTABLE_K8S_URL``.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .harness import (
    LOOPBACK,
    REPO_ROOT,
    Emulator,
    EmulatorInfo,
    LaunchPlan,
    ProcessRecord,
    free_port,
)

K8S_VERSION = "1.37.2"  # also in scripts/install-emulators.sh
ETCD_VERSION = "3.6.8"
KWOK_VERSION = "0.8.0"
NAMESPACE = "default"
LOCAL_NODE, KWOK_NODE = "local-0", "kwok-0"
POD_LABEL = "portable.dev/pods"
_CONFIG = "cluster.json"


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "portable"


def binaries() -> dict[str, Path]:
    root = cache_root()
    k8s = root / f"k8s-v{K8S_VERSION}" / "bin"
    return {
        "etcd": root / f"etcd-v{ETCD_VERSION}" / "bin" / "etcd",
        "kube-apiserver": k8s / "kube-apiserver",
        "kube-controller-manager": k8s / "kube-controller-manager",
        "kube-scheduler": k8s / "kube-scheduler",
        "kwok": root / f"kwok-v{KWOK_VERSION}" / "bin" / "kwok",
    }


def kwok_stages() -> list[Path]:
    stages = cache_root() / f"kwok-v{KWOK_VERSION}" / "stages"
    return [stages / "node-fast.yaml", stages / "pod-fast.yaml"]


# --- a tiny API client (urllib: the harness depends on no Kubernetes library) -------------------


class Api:
    """Bearer-token JSON requests to the apiserver, verified against the cluster's CA."""

    def __init__(self, server: str, token: str, ca_file: Path) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.context = ssl.create_default_context(cafile=str(ca_file))
        self.opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=self.context)
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        timeout: float = 10.0,
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with self.opener.open(req, timeout=timeout) as resp:
                raw = resp.read()
                status = int(resp.status)
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), int(exc.code)
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, out = self.request(method, path, body, **kw)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {str(out)[:300]}")
        return out

    def watch(self, path: str, timeout: float = 300.0) -> Iterator[dict[str, Any]]:
        sep = "&" if "?" in path else "?"
        url = f"{self.server}{path}{sep}watch=true&timeoutSeconds={int(timeout)}"
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
        with self.opener.open(req, timeout=timeout + 10) as resp:
            for line in resp:
                if line.strip():
                    yield json.loads(line)


# --- the emulator ------------------------------------------------------------------------------


class KubernetesCluster(Emulator):
    name = "k8s"
    start_timeout = 120.0
    stop_grace = 30.0

    def available(self) -> tuple[bool, str]:
        for name, exe in binaries().items():
            stamp = exe.parent.parent / "built-from"
            if not exe.is_file() or not stamp.is_file():
                return False, f"{name} is not built ({exe}): bash scripts/install-emulators.sh (needs go)"
        missing = [str(p) for p in kwok_stages() if not p.is_file()]
        if missing:
            return False, f"kwok stages missing ({', '.join(missing)}): bash scripts/install-emulators.sh"
        if subprocess.run(["openssl", "version"], capture_output=True, check=False).returncode:
            return False, "openssl is not installed (apt-get install openssl)"
        return True, ""

    def plan(self, workdir: Path) -> LaunchPlan:
        ports = {
            name: free_port()
            for name in ("apiserver", "etcd", "etcd_peer", "controller_manager", "scheduler", "kwok", "kubelet")
        }
        server = f"https://{LOOPBACK}:{ports['apiserver']}"
        config = {"ports": ports, "server": server, "token": secrets.token_hex(24)}
        (workdir / _CONFIG).write_text(json.dumps(config))
        (workdir / _CONFIG).chmod(0o600)
        kubeconfig = workdir / "kubeconfig"
        url = f"k8s://portable/{NAMESPACE}?kubeconfig={kubeconfig}"
        info = EmulatorInfo(
            name=self.name,
            host=LOOPBACK,
            port=ports["apiserver"],
            pid=0,
            ports=(ports["apiserver"], ports["etcd"], ports["kubelet"]),
            endpoints={
                "server": server,
                "kubeconfig": str(kubeconfig),
                "ca_file": str(workdir / "pki" / "ca.crt"),
                "namespace": NAMESPACE,
                "url": url,
                "local_selector": f"{POD_LABEL}=local",
                "kwok_selector": f"{POD_LABEL}=kwok",
            },
            env={"KUBECONFIG": str(kubeconfig), "PORTABLE_K8S_URL": url},
        )
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        argv = [sys.executable, "-u", "-m", "tests.emulators.k8s", "supervise", str(workdir)]
        return LaunchPlan(argv=argv, info=info, env=env, cwd=REPO_ROOT)

    def health_check(self, info: EmulatorInfo, timeout: float) -> None:
        ready = Path(info.endpoints["kubeconfig"]).with_name("ready")
        if not ready.is_file():
            raise RuntimeError("the supervisor has not finished starting the cluster")
        api = admin_api(Path(info.endpoints["kubeconfig"]).parent)
        api.ok("GET", "/readyz", timeout=timeout)
        api.ok("GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default", timeout=timeout)

    def stop(self) -> None:
        # Ask the supervisor alone first: it stops its children in order (apiserver before etcd).
        process = self._process
        if process is not None and process.leader is not None:
            ordered_stop(process.leader, self.stop_grace, reap=process.poll)
        super().stop()


def admin_api(workdir: Path) -> Api:
    config = json.loads((workdir / _CONFIG).read_text())
    return Api(config["server"], config["token"], workdir / "pki" / "ca.crt")


def ordered_stop(leader: ProcessRecord, grace: float = 30.0, reap: Any = None) -> None:
    """SIGTERM the supervisor alone and wait for it (``reap``: the parent's ``Popen.poll``).

    It stops its children in order, the apiserver before etcd; the harness then ends whatever
    is left of the group. ``python -m tests.emulators down k8s`` does the same.
    """
    leader.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while leader.is_alive() and time.monotonic() < deadline:
        if reap is not None:
            reap()
        time.sleep(0.05)


# --- the supervisor (runs in its own process) --------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(pki: Path) -> None:
    """A CA, one serving certificate for 127.0.0.1 (apiserver and kubelet) and the SA key pair."""
    pki.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "3", "-subj", "/CN=portable-test-ca", cwd=pki)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "serving.key", "-out", "serving.csr",
             "-subj", "/CN=127.0.0.1", cwd=pki)
    (pki / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "serving.crt", "-days", "3", "-extfile", "san.ext", cwd=pki)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def write_kubeconfig(path: Path, server: str, token: str, ca_file: Path, namespace: str = NAMESPACE) -> None:
    """A kubeconfig with one context ``portable`` (YAML is a superset of JSON)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "portable", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "portable", "user": {"token": token}}],
        "contexts": [{"name": "portable", "context": {"cluster": "portable", "user": "portable", "namespace": namespace}}],
        "current-context": "portable",
    }
    path.write_text(json.dumps(config, indent=1))
    path.chmod(0o600)


class Supervisor:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.config = json.loads((workdir / _CONFIG).read_text())
        self.ports: dict[str, int] = self.config["ports"]
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.stopping = threading.Event()
        self.runner: PodRunner | None = None

    def log(self, text: str) -> None:
        print(f"[k8s {time.strftime('%H:%M:%S')}] {text}", flush=True)

    def spawn(self, name: str, argv: list[str]) -> None:
        log = (self.workdir / f"{name}.log").open("ab")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=self.workdir)
        self.children.append((name, proc))
        self.log(f"started {name} (pid {proc.pid})")

    def wait_for(self, what: str, check: Any, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for name, proc in self.children:
                if proc.poll() is not None:
                    tail = (self.workdir / f"{name}.log").read_text(errors="replace").splitlines()[-30:]
                    raise RuntimeError(f"{name} exited with {proc.returncode}:\n" + "\n".join(tail))
            with contextlib.suppress(Exception):
                if check():
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.1)

    def run(self) -> None:
        bins = binaries()
        wd, p = self.workdir, self.ports
        pki = wd / "pki"
        make_pki(pki)
        token = self.config["token"]
        (wd / "tokens.csv").write_text(f'{token},portable-admin,portable-admin,"system:masters"\n')
        kubeconfig = wd / "kubeconfig"
        write_kubeconfig(kubeconfig, self.config["server"], token, pki / "ca.crt")
        etcd = f"http://{LOOPBACK}:{p['etcd']}"
        peer = f"http://{LOOPBACK}:{p['etcd_peer']}"
        self.spawn("etcd", [str(bins["etcd"]), "--name=portable", f"--data-dir={wd / 'etcd'}",
                            f"--listen-client-urls={etcd}", f"--advertise-client-urls={etcd}",
                            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                            f"--initial-cluster=portable={peer}", "--unsafe-no-fsync"])
        self.spawn("kube-apiserver", [
            str(bins["kube-apiserver"]), f"--etcd-servers={etcd}", f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}", f"--secure-port={p['apiserver']}",
            f"--tls-cert-file={pki / 'serving.crt'}", f"--tls-private-key-file={pki / 'serving.key'}",
            f"--client-ca-file={pki / 'ca.crt'}", f"--token-auth-file={wd / 'tokens.csv'}",
            "--authorization-mode=RBAC", "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16", "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false", "--kubelet-preferred-address-types=InternalIP",
            f"--cert-dir={wd / 'apiserver-certs'}", "--profiling=false",
        ])
        api = admin_api(wd)
        self.wait_for("the apiserver", lambda: api.request("GET", "/readyz", timeout=2)[0] == 200, 90)
        common = [f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                  f"--authorization-kubeconfig={kubeconfig}", "--leader-elect=false",
                  f"--bind-address={LOOPBACK}"]
        self.spawn("kube-controller-manager", [
            str(bins["kube-controller-manager"]), *common, f"--secure-port={p['controller_manager']}",
            "--controllers=job-controller,garbage-collector-controller,namespace-controller,"
            "serviceaccount-controller,pod-garbage-collector-controller",
            f"--cert-dir={wd / 'cm-certs'}", "--use-service-account-credentials=false",
        ])
        self.spawn("kube-scheduler", [str(bins["kube-scheduler"]), *common, f"--secure-port={p['scheduler']}",
                                      f"--cert-dir={wd / 'scheduler-certs'}"])
        self.spawn("kwok", [
            str(bins["kwok"]), f"--kubeconfig={kubeconfig}", "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--server-address={LOOPBACK}:{p['kwok']}", f"--node-ip={LOOPBACK}",
            *[f"--config={stage}" for stage in kwok_stages()],
        ])
        self.register_nodes(api)
        self.runner = PodRunner(api, LOCAL_NODE, p["kubelet"], pki, self.stopping, self.log)
        self.runner.start()
        self.wait_for("the default service account",
                      lambda: api.request("GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default")[0] == 200)
        self.wait_for("the nodes to be Ready", lambda: all(_node_ready(api, n) for n in (LOCAL_NODE, KWOK_NODE)))
        (wd / "ready").write_text("ready\n")
        self.log("cluster ready")

    def register_nodes(self, api: Api) -> None:
        capacity = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"}
        kwok = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": KWOK_NODE, "annotations": {"kwok.x-k8s.io/node": "fake"},
                             "labels": {POD_LABEL: "kwok", "kubernetes.io/hostname": KWOK_NODE, "type": "kwok"}},
                "status": {"capacity": capacity, "allocatable": capacity}}
        api.ok("POST", "/api/v1/nodes", kwok)
        local = {"apiVersion": "v1", "kind": "Node",
                 "metadata": {"name": LOCAL_NODE,
                              "labels": {POD_LABEL: "local", "kubernetes.io/hostname": LOCAL_NODE}}}
        api.ok("POST", "/api/v1/nodes", local)
        now = _now()
        status = {"status": {
            "capacity": capacity, "allocatable": capacity,
            "addresses": [{"type": "InternalIP", "address": LOOPBACK}, {"type": "Hostname", "address": LOCAL_NODE}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.ports["kubelet"]}},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "portable PodRunner",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "nodeInfo": {"kubeletVersion": f"v{K8S_VERSION}", "operatingSystem": "linux", "architecture": "amd64",
                         "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
                         "containerRuntimeVersion": "portable-local://0", "kubeProxyVersion": ""},
        }}
        api.ok("PATCH", f"/api/v1/nodes/{LOCAL_NODE}/status", status,
               content_type="application/merge-patch+json")
        # The TaintNodesByCondition admission plugin gives a new Node the not-ready taint, and only
        # the node lifecycle controller (not run here) would take it away again.
        for node in (KWOK_NODE, LOCAL_NODE):
            api.ok("PATCH", f"/api/v1/nodes/{node}", {"spec": {"taints": None}},
                   content_type="application/merge-patch+json")

    def stop(self) -> None:
        self.stopping.set()
        if self.runner is not None:
            self.runner.stop_all()
        for name, proc in reversed(self.children):  # kwok ... apiserver, then etcd
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
            self.log(f"stopped {name}")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _node_ready(api: Api, name: str) -> bool:
    node = api.ok("GET", f"/api/v1/nodes/{name}")
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))


# --- the stand-in kubelet ------------------------------------------------------------------------


class _RunningPod:
    def __init__(self, uid: str, proc: subprocess.Popen[bytes], log_path: Path, started: str) -> None:
        self.uid = uid
        self.proc = proc
        self.log_path = log_path
        self.started = started
        self.killing = False
        self.done = threading.Event()


class PodRunner:
    """Runs the pods bound to one node as local processes and reports their status."""

    def __init__(self, api: Api, node: str, port: int, pki: Path, stopping: threading.Event, log: Any) -> None:
        self.api = api
        self.node = node
        self.port = port
        self.pki = pki
        self.stopping = stopping
        self.log = log
        self.logs_dir = pki.parent / "pod-logs"
        self.logs_dir.mkdir(exist_ok=True)
        self.pods: dict[str, _RunningPod] = {}  # "namespace/name" -> running pod
        self.lock = threading.Lock()

    def start(self) -> None:
        threading.Thread(target=self._watch_loop, name="pod-watch", daemon=True).start()
        threading.Thread(target=self._serve, name="kubelet-http", daemon=True).start()
        threading.Thread(target=self._heartbeat, name="node-heartbeat", daemon=True).start()

    def _heartbeat(self) -> None:
        while not self.stopping.wait(10):
            with contextlib.suppress(Exception):
                now = _now()
                self.api.request("PATCH", f"/api/v1/nodes/{self.node}/status", {"status": {"conditions": [
                    {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now}]}},
                    content_type="application/strategic-merge-patch+json")

    def _watch_loop(self) -> None:
        selector = urllib.parse.quote(f"spec.nodeName={self.node}")
        while not self.stopping.is_set():
            try:
                listing = self.api.ok("GET", f"/api/v1/pods?fieldSelector={selector}")
                for pod in listing["items"]:
                    self._sync(pod)
                version = listing["metadata"]["resourceVersion"]
                for event in self.api.watch(f"/api/v1/pods?fieldSelector={selector}&resourceVersion={version}", 120):
                    if self.stopping.is_set():
                        return
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._sync(event["object"])
            except Exception as exc:
                if not self.stopping.is_set():
                    self.log(f"pod watch: {exc!r}; again")
                    time.sleep(0.5)

    def _sync(self, pod: dict[str, Any]) -> None:
        meta, status = pod["metadata"], pod.get("status") or {}
        key = f"{meta['namespace']}/{meta['name']}"
        phase = status.get("phase", "Pending")
        with self.lock:
            running = self.pods.get(key)
            if running is not None and running.uid != meta["uid"]:
                running = None
            if meta.get("deletionTimestamp"):
                if running is not None and not running.done.is_set():
                    if not running.killing:
                        running.killing = True
                        grace = int(meta.get("deletionGracePeriodSeconds") or 0)
                        threading.Thread(target=self._kill, args=(running, grace), daemon=True).start()
                elif phase in ("Succeeded", "Failed") or running is None:
                    threading.Thread(target=self._finish_delete, args=(meta,), daemon=True).start()
                return
            if running is not None or phase in ("Succeeded", "Failed"):
                return
            self.pods[key] = self._launch(pod)

    def _launch(self, pod: dict[str, Any]) -> _RunningPod:
        meta, spec = pod["metadata"], pod["spec"]
        container = spec["containers"][0]
        argv = list(container.get("command") or []) + list(container.get("args") or [])
        env = dict(os.environ)
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = item["value"]
            elif "valueFrom" in item and "fieldRef" in item["valueFrom"]:
                env[item["name"]] = _field(pod, item["valueFrom"]["fieldRef"]["fieldPath"])
        cwd = container.get("workingDir") or None
        if cwd:
            Path(cwd).mkdir(parents=True, exist_ok=True)
        log_path = self.logs_dir / f"{meta['namespace']}_{meta['name']}_{meta['uid']}.log"
        out = log_path.open("ab")
        started = _now()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=env, cwd=cwd, start_new_session=True)
        except (OSError, ValueError, IndexError) as exc:  # no such program, or no command at all
            out.write(f"portable PodRunner: cannot start {argv[:1]}: {exc}\n".encode())
            out.close()
            proc = subprocess.Popen(["/bin/sh", "-c", "exit 128"], stdout=subprocess.DEVNULL)
        else:
            out.close()
        running = _RunningPod(meta["uid"], proc, log_path, started)
        self._patch_status(meta, {
            "phase": "Running", "startTime": started, "hostIP": LOOPBACK, "podIP": LOOPBACK,
            "conditions": _conditions(True, started),
            "containerStatuses": [{"name": container["name"], "image": container.get("image", ""), "imageID": "",
                                   "ready": True, "started": True, "restartCount": 0,
                                   "state": {"running": {"startedAt": started}}}],
        })
        threading.Thread(target=self._reap, args=(meta, container, running), daemon=True).start()
        return running

    def _reap(self, meta: dict[str, Any], container: dict[str, Any], running: _RunningPod) -> None:
        code = running.proc.wait()
        exit_code = code if code >= 0 else 128 - code
        finished = _now()
        terminated = {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                      "startedAt": running.started, "finishedAt": finished}
        status: dict[str, Any] = {
            "phase": "Succeeded" if exit_code == 0 else "Failed",
            "conditions": _conditions(False, finished),
            "containerStatuses": [{"name": container["name"], "image": container.get("image", ""), "imageID": "",
                                   "ready": False, "started": False, "restartCount": 0,
                                   "state": {"terminated": terminated}}],
        }
        with contextlib.suppress(Exception):
            self._patch_status(meta, status, retries=20)
        running.done.set()
        if running.killing:
            self._finish_delete(meta)

    def _kill(self, running: _RunningPod, grace: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(running.proc.pid, signal.SIGTERM)
        if not running.done.wait(max(grace, 0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(running.proc.pid, signal.SIGKILL)

    def _finish_delete(self, meta: dict[str, Any]) -> None:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                "preconditions": {"uid": meta["uid"]}}
        with contextlib.suppress(Exception):
            self.api.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body)

    def _patch_status(self, meta: dict[str, Any], status: dict[str, Any], retries: int = 5) -> None:
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        for attempt in range(retries):
            code, out = self.api.request("PATCH", path, {"status": status},
                                         content_type="application/strategic-merge-patch+json")
            if code < 300 or code == 404:
                return
            self.log(f"status of {meta['name']}: {code} {str(out)[:200]}")
            time.sleep(0.1 * (attempt + 1))

    def stop_all(self) -> None:
        with self.lock:
            pods = list(self.pods.values())
        for running in pods:
            if running.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(running.proc.pid, signal.SIGKILL)
                running.proc.wait(timeout=5)

    def log_of(self, namespace: str, name: str) -> _RunningPod | None:
        with self.lock:
            return self.pods.get(f"{namespace}/{name}")

    def _serve(self) -> None:
        runner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) < 3 or parts[0] != "containerLogs":
                    self.send_error(404, "only /containerLogs/NAMESPACE/POD/CONTAINER is served")
                    return
                running = runner.log_of(parts[1], parts[2])
                if running is None:
                    self.send_error(404, f"pod {parts[1]}/{parts[2]} has not run here")
                    return
                follow = urllib.parse.parse_qs(url.query).get("follow", ["false"])[0] == "true"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                with running.log_path.open("rb") as fh:
                    while True:
                        chunk = fh.read(65536)
                        if chunk:
                            self.wfile.write(chunk)
                            self.wfile.flush()
                            continue
                        if not follow or running.done.is_set():
                            rest = fh.read()
                            if rest:
                                self.wfile.write(rest)
                            return
                        time.sleep(0.02)

        server = http.server.ThreadingHTTPServer((LOOPBACK, self.port), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.pki / "serving.crt"), str(self.pki / "serving.key"))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        server.daemon_threads = True
        server.serve_forever(poll_interval=0.5)


def _conditions(ready: bool, when: str) -> list[dict[str, str]]:
    flag = "True" if ready else "False"
    return [
        {"type": "Initialized", "status": "True", "lastTransitionTime": when},
        {"type": "Ready", "status": flag, "lastTransitionTime": when},
        {"type": "ContainersReady", "status": flag, "lastTransitionTime": when},
    ]


def _field(pod: dict[str, Any], path: str) -> str:
    """The downward API's ``fieldRef``: ``metadata.name``, ``metadata.annotations['k']`` and the like."""
    meta = pod["metadata"]
    for group in ("annotations", "labels"):
        prefix = f"metadata.{group}['"
        if path.startswith(prefix) and path.endswith("']"):
            return str((meta.get(group) or {}).get(path[len(prefix) : -2], ""))
    simple = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
              "metadata.uid": meta.get("uid"), "spec.nodeName": pod["spec"].get("nodeName"),
              "spec.serviceAccountName": pod["spec"].get("serviceAccountName"),
              "status.hostIP": LOOPBACK, "status.podIP": LOOPBACK}
    return str(simple.get(path) or "")


def supervise(workdir: Path) -> int:
    supervisor = Supervisor(workdir)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        supervisor.run()
        while not stop.wait(0.5):
            for name, proc in supervisor.children:
                if proc.poll() is not None:
                    supervisor.log(f"{name} exited with {proc.returncode}; stopping the cluster")
                    stop.set()
        return 0
    except Exception as exc:
        supervisor.log(f"FAILED: {exc}")
        return 1
    finally:
        supervisor.stop()



# --- helpers for the adapter tests (tests/adapters/k8s) ------------------------------------------

IMAGE = "python:3.11-slim"  # what a real cluster would pull; the local runner ignores it


def make_namespace(api: Api, name: str) -> str:
    api.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    deadline = time.monotonic() + 30
    while api.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] != 200:
        if time.monotonic() > deadline:
            raise RuntimeError(f"namespace {name} got no default service account")
        time.sleep(0.05)
    return name


def k8s_url(k8s: dict[str, str], namespace: str, node: str, extra: str = "") -> str:
    selector = k8s["local_selector"] if node == "local" else k8s["kwok_selector"]
    url = f"k8s://portable/{namespace}?kubeconfig={k8s['kubeconfig']}&node_selector={selector}&image={IMAGE}&grace=1"
    return url + (f"&{extra}" if extra else "")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "supervise":
        sys.exit(supervise(Path(sys.argv[2])))
    sys.exit("usage: python -m tests.emulators.k8s supervise WORKDIR")
