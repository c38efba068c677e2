"""Local emulators for the contract tests: start on 127.0.0.1, health-check, stop by PID.

Use the pytest fixtures in `tests.emulators.fixtures` (``moto_server``, ``azurite``,
``fake_gcs``, ``pubsub_emulator``, ``firestore_emulator``, ``kafka_broker``,
``tansu_broker``, ``redis_server``, ``s3s_server``, ``k8s_cluster``, ``jaeger``), or from a
shell::

    python -m tests.emulators up kafka redis    # prints endpoints, records PIDs
    python -m tests.emulators status
    python -m tests.emulators down              # stops exactly what `up` started

``bash scripts/install-emulators.sh`` installs every tool they need.
"""

from __future__ import annotations

from .azurite import Azurite
from .google_emulators import FakeGcs, FirestoreEmulator, PubSubEmulator
from .harness import (
    Emulator,
    EmulatorError,
    EmulatorInfo,
    EmulatorStartError,
    EmulatorUnavailable,
    ProcessRecord,
    free_port,
    is_listening,
)
from .jaeger import Jaeger
from .k8s import KubernetesCluster
from .kafka_brokers import KafkaBroker, TansuBroker
from .moto_server import MotoServer
from .pulsar import PulsarStandalone
from .redis_server import RedisServer
from .s3s_server import S3sServer

#: Every emulator by the name that the CLI, the fixtures and the logs use.
EMULATORS: dict[str, type[Emulator]] = {
    cls.name: cls
    for cls in (
        MotoServer,
        Azurite,
        FakeGcs,
        PubSubEmulator,
        FirestoreEmulator,
        KafkaBroker,
        TansuBroker,
        RedisServer,
        S3sServer,
        KubernetesCluster,
        Jaeger,
        PulsarStandalone,
    )
}


def create(name: str) -> Emulator:
    """A new, stopped emulator; `KeyError` lists the known names."""
    try:
        return EMULATORS[name]()
    except KeyError:
        raise KeyError(f"no emulator {name!r}; known: {', '.join(EMULATORS)}") from None


__all__ = [
    "EMULATORS",
    "Azurite",
    "Emulator",
    "EmulatorError",
    "EmulatorInfo",
    "EmulatorStartError",
    "EmulatorUnavailable",
    "FakeGcs",
    "FirestoreEmulator",
    "Jaeger",
    "KafkaBroker",
    "KubernetesCluster",
    "MotoServer",
    "ProcessRecord",
    "PubSubEmulator",
    "RedisServer",
    "S3sServer",
    "TansuBroker",
    "create",
    "free_port",
    "is_listening",
]
