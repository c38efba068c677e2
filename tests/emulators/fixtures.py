"""Session-scoped pytest fixtures, one per emulator, each yielding an `EmulatorInfo`.

Load with ``pytest_plugins = ["tests.emulators.fixtures"]`` (or ``-p tests.emulators.fixtures``).

An emulator starts the first time a test asks for its fixture and stops at the end
of the session. When its tool is not installed the fixture skips, naming what to
install; with ``PORTABLE_REQUIRE_EMULATORS=1`` (CI) it fails instead, so a missing
install step cannot hide behind skips. An emulator that is installed but fails to
start always fails the test, with the last lines of its log.

Fixtures never export the emulator's `env` into the test process; a test that
wants the SDK's own discovery does ``for k, v in info.env.items():
monkeypatch.setenv(k, v)``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NoReturn

import pytest

from . import create
from .harness import Emulator, EmulatorInfo, EmulatorStartError, EmulatorUnavailable

REQUIRE_ENV = "PORTABLE_REQUIRE_EMULATORS"


def emulators_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it when ``PORTABLE_REQUIRE_EMULATORS=1``."""
    if emulators_required():
        pytest.fail(f"{reason} [{REQUIRE_ENV}=1, so this fails instead of skipping]", pytrace=False)
    pytest.skip(reason)


def run_emulator(name: str, emulator: Emulator | None = None) -> Iterator[EmulatorInfo]:
    """Start emulator `name` (or the `emulator` given), yield its info, stop it: the body of every fixture here."""
    emulator = emulator or create(name)
    ok, reason = emulator.available()
    if not ok:
        unavailable(f"emulator {name!r} is not installed: {reason}")
    try:
        info = emulator.start()
    except EmulatorUnavailable as exc:
        unavailable(str(exc))
    except EmulatorStartError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield info
    finally:
        emulator.stop()


@pytest.fixture(scope="session")
def moto_server() -> Iterator[EmulatorInfo]:
    """moto: endpoints ``endpoint_url``, ``region``; env ``AWS_*``."""
    yield from run_emulator("moto")


@pytest.fixture(scope="session")
def s3s_server() -> Iterator[EmulatorInfo]:
    """s3s-fs (bench/s3s-server): endpoints ``endpoint_url``, ``region``, ``root``; env ``AWS_*``."""
    yield from run_emulator("s3s")


@pytest.fixture(scope="session")
def azurite() -> Iterator[EmulatorInfo]:
    """Azurite: ``blob_endpoint``, ``queue_endpoint``, ``table_endpoint``, ``account_name``,
    ``account_key``, ``connection_string``; env ``AZURE_STORAGE_CONNECTION_STRING``."""
    yield from run_emulator("azurite")


@pytest.fixture(scope="session")
def fake_gcs() -> Iterator[EmulatorInfo]:
    """fake-gcs-server: ``endpoint_url``, ``project``; env ``STORAGE_EMULATOR_HOST``,
    ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``, ``GOOGLE_CLOUD_PROJECT``."""
    yield from run_emulator("fake-gcs")


@pytest.fixture(scope="session")
def pubsub_emulator() -> Iterator[EmulatorInfo]:
    """Pub/Sub: ``host_port``, ``PUBSUB_EMULATOR_HOST``, ``project``, ``rest_url``;
    env ``PUBSUB_EMULATOR_HOST``, ``PUBSUB_PROJECT_ID``."""
    yield from run_emulator("pubsub")


@pytest.fixture(scope="session")
def firestore_emulator() -> Iterator[EmulatorInfo]:
    """Firestore: ``host_port``, ``FIRESTORE_EMULATOR_HOST``, ``project``, ``rest_url``;
    env ``FIRESTORE_EMULATOR_HOST``, ``GOOGLE_CLOUD_PROJECT``."""
    yield from run_emulator("firestore")


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[EmulatorInfo]:
    """Apache Kafka (KRaft): ``bootstrap``, ``controller_port``; env ``KAFKA_BOOTSTRAP_SERVERS``."""
    yield from run_emulator("kafka")


@pytest.fixture(scope="session")
def tansu_broker() -> Iterator[EmulatorInfo]:
    """Tansu: ``bootstrap``; env ``KAFKA_BOOTSTRAP_SERVERS``."""
    yield from run_emulator("tansu")


@pytest.fixture(scope="session")
def pulsar_broker() -> Iterator[EmulatorInfo]:
    """Apache Pulsar 4.0.7 standalone: ``service_url``, ``admin_url``, ``cluster``; env
    ``PULSAR_SERVICE_URL``, ``PULSAR_ADMIN_URL``. One per pytest worker, ~460 MB RSS."""
    yield from run_emulator("pulsar")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmulatorInfo]:
    """redis-server: ``url``; env ``REDIS_URL``."""
    yield from run_emulator("redis")


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[EmulatorInfo]:
    """Kubernetes v1.37.2 (etcd, apiserver, controller-manager, scheduler, kwok, a local pod runner):
    endpoints ``server``, ``kubeconfig``, ``ca_file``, ``namespace``, ``url``, ``local_selector``,
    ``kwok_selector``; env ``KUBECONFIG``, ``PORTABLE_K8S_URL``."""
    yield from run_emulator("k8s")


@pytest.fixture(scope="session")
def jaeger() -> Iterator[EmulatorInfo]:
    """Jaeger v1.76.0 (v2 all-in-one, in-memory): endpoints ``otlp_endpoint``, ``otlp_traces_url``,
    ``query_url``, ``query_grpc``, ``health_url``; env ``OTEL_EXPORTER_OTLP_ENDPOINT``,
    ``OTEL_EXPORTER_OTLP_PROTOCOL``."""
    yield from run_emulator("jaeger")
