"""Apache Pulsar 4.0.7 standalone: broker, one bookie and a RocksDB metadata store in one JVM.

The jars come from Maven Central through ``tests/emulators/pulsar-pom.xml``
(``mvn dependency:copy-dependencies``, done once by ``scripts/install-emulators.sh``) into
``${XDG_CACHE_HOME:-~/.cache}/portable/pulsar-4.0.7/lib``, outside the clone and keyed by
version, with a ``.complete`` stamp. There is no distribution tarball and no shell script:
the harness writes a minimal ``standalone.conf`` and runs
``java -cp 'lib/*' org.apache.pulsar.PulsarStandaloneStarter --config standalone.conf
-nfw -nss`` (no functions worker, no stream storage).

Every listener is on 127.0.0.1 on ports the harness picked (Pulsar cannot bind port 0
and report it): the binary protocol (``brokerServicePort``), the admin REST API
(``webServicePort``) and the bookie (``--bookkeeper-port``; ``bookieBindAddress`` keeps it
off 0.0.0.0). The bookie's own HTTP server and the stats HTTP port are turned off.

Adapter notes:
    - ``service_url`` is ``pulsar://127.0.0.1:<port>``; ``admin_url`` is
      ``http://127.0.0.1:<port>``. Tenant ``public`` and namespace ``public/default``
      exist; topics auto-create on first use.
    - ``brokerDeduplicationEnabled=true``: a producer with a name and sequence ids is
      deduplicated by the broker (portable's ``publish_dedup``).
    - ``acknowledgmentAtBatchIndexLevelEnabled=true``: one message of a batch can be acked
      or nacked alone (the client must ask for it with ``batch_index_ack_enabled``).
    - ~460 MB RSS; ready in 5-10 s idle, up to a minute on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
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

PULSAR_VERSION = "4.0.7"
PULSAR_POM = Path(__file__).with_name("pulsar-pom.xml")
PULSAR_HOME = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "portable" / f"pulsar-{PULSAR_VERSION}"
PULSAR_LIB = PULSAR_HOME / "lib"
#: Written by the install script once every jar is copied, so a half-done copy is not used.
PULSAR_COMPLETE_MARKER = PULSAR_LIB / ".complete"
CLUSTER = "standalone"
_PULSAR_JVM = [
    "-Xms128m", "-Xmx768m", "-XX:MaxDirectMemorySize=512m", "-XX:+UseSerialGC",
    "-Djava.awt.headless=true", "-Dpulsar.allocator.exit_on_oom=true",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports", "java.management/sun.management=ALL-UNNAMED",
]  # fmt: skip

_LOG4J2 = """\
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c{1})%n
rootLogger.level = WARN
rootLogger.appenderRefs = stdout
rootLogger.appenderRef.stdout.ref = STDOUT
logger.pulsar.name = org.apache.pulsar
logger.pulsar.level = INFO
"""


def standalone_conf(*, broker_port: int, web_port: int, data: Path) -> str:
    settings = {
        "clusterName": CLUSTER,
        "bindAddress": LOOPBACK,
        "advertisedAddress": LOOPBACK,
        "brokerServicePort": str(broker_port),
        "webServicePort": str(web_port),
        "bookieBindAddress": LOOPBACK,
        "bookieAdvertisedAddress": LOOPBACK,
        "listeningInterface": "lo",
        "allowLoopback": "true",
        "httpServerEnabled": "false",  # the bookie's own HTTP admin server
        "managedLedgerDefaultEnsembleSize": "1",
        "managedLedgerDefaultWriteQuorum": "1",
        "managedLedgerDefaultAckQuorum": "1",
        "configurationMetadataStoreUrl": f"rocksdb://{data / 'metadata'}",
        "brokerDeduplicationEnabled": "true",
        "acknowledgmentAtBatchIndexLevelEnabled": "true",
        "allowAutoTopicCreation": "true",
        "allowAutoTopicCreationType": "non-partitioned",
        "functionsWorkerEnabled": "false",
        "systemTopicEnabled": "true",
        "topicLevelPoliciesEnabled": "true",
        "delayedDeliveryEnabled": "true",
        "delayedDeliveryTickTimeMillis": "100",
        "numIOThreads": "2",
        "numHttpServerThreads": "4",
        "numExecutorThreadPoolSize": "2",
        "dbStorage_writeCacheMaxSizeMb": "32",
        "dbStorage_readAheadCacheMaxSizeMb": "32",
        "journalDirectory": str(data / "bookkeeper" / "journal"),
        "ledgerDirectories": str(data / "bookkeeper" / "ledgers"),
        "exposeTopicLevelMetricsInPrometheus": "false",
        "webSocketServiceEnabled": "false",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


class PulsarStandalone(Emulator):
    name = "pulsar"
    stop_grace = 20.0
    start_timeout = 240.0  # 5-10 s idle; much longer on 2 shared cores under load

    def available(self) -> tuple[bool, str]:
        problem = java_problem(17)
        if problem:
            return False, problem
        if not PULSAR_COMPLETE_MARKER.exists():
            return False, (
                f"Pulsar {PULSAR_VERSION} jars are not in {PULSAR_LIB}: {INSTALL_SCRIPT} "
                f"(mvn -f {PULSAR_POM} dependency:copy-dependencies -DoutputDirectory={PULSAR_LIB})"
            )
        return True, ""

    def plan(self, workdir: Path) -> LaunchPlan:
        broker_port, web_port, bookie_port = free_port(), free_port(), free_port()
        data = workdir / "data"
        conf = workdir / "standalone.conf"
        conf.write_text(standalone_conf(broker_port=broker_port, web_port=web_port, data=data))
        log4j = workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2)
        java = shutil.which("java")
        assert java is not None
        argv = [
            java, *_PULSAR_JVM, f"-Dlog4j2.configurationFile={log4j}",
            "-cp", f"{PULSAR_LIB}/*", "org.apache.pulsar.PulsarStandaloneStarter",
            "--config", str(conf), "-nfw", "-nss",
            "--advertised-address", LOOPBACK,
            "--bookkeeper-port", str(bookie_port),
            "--bookkeeper-dir", str(data / "bookkeeper"),
            "--metadata-dir", str(data / "metadata"),
        ]  # fmt: skip
        service_url = f"pulsar://{LOOPBACK}:{broker_port}"
        admin_url = f"http://{LOOPBACK}:{web_port}"
        info = EmulatorInfo(
            name=self.name,
            host=LOOPBACK,
            port=broker_port,
            pid=0,
            ports=(broker_port, web_port),
            endpoints={"service_url": service_url, "admin_url": admin_url, "cluster": CLUSTER},
            env={"PULSAR_SERVICE_URL": service_url, "PULSAR_ADMIN_URL": admin_url},
        )
        return LaunchPlan(argv=argv, info=info)

    def health_check(self, info: EmulatorInfo, timeout: float) -> None:
        admin = info.endpoints["admin_url"]
        status, body = http_request(f"{admin}/admin/v2/clusters", timeout=timeout)
        if status != 200 or CLUSTER not in json.loads(body or b"[]"):
            raise RuntimeError(f"GET /admin/v2/clusters answered {status}: {body[:200]!r}")
        # The namespace exists only once the standalone finished its bootstrap.
        status, body = http_request(f"{admin}/admin/v2/namespaces/public", timeout=timeout)
        if status != 200 or "public/default" not in json.loads(body or b"[]"):
            raise RuntimeError(f"GET /admin/v2/namespaces/public answered {status}: {body[:200]!r}")


def wire_check(info: EmulatorInfo) -> None:
    """A real admin round trip (create a topic and a subscription, read its stats, delete it),
    for ``tests/test_emulators_harness.py``'s ``WIRE_CHECKS`` (needs no pulsar-client)."""
    admin = info.endpoints["admin_url"]
    path = "/admin/v2/persistent/public/default/wire-check"
    status, body = http_request(f"{admin}{path}/subscription/wire", method="PUT", timeout=30)
    if status not in (204, 409):
        raise AssertionError(f"PUT subscription answered {status}: {body[:200]!r}")
    try:
        status, body = http_request(f"{admin}{path}/stats", timeout=30)
        assert status == 200, (status, body[:200])
        assert "wire" in json.loads(body)["subscriptions"], body[:200]
    finally:
        http_request(f"{admin}{path}?force=true", method="DELETE", timeout=30)
