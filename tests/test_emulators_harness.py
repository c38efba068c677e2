"""The emulator harness: each emulator starts on loopback, answers a real request over
the wire, and leaves no process and no listener behind once stopped."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.emulators import EMULATORS, EmulatorInfo, create, harness
from tests.emulators import azurite as azurite_module
from tests.emulators.fixtures import REQUIRE_ENV, unavailable
from tests.emulators.harness import (
    REPO_ROOT,
    free_port,
    is_listening,
    is_loopback,
    listening_sockets,
)
from tests.emulators.kafka_brokers import KAFKA_POM, KAFKA_VERSION
from tests.emulators.kafka_wire import api_versions, check_broker
from tests.emulators.pulsar import wire_check as check_pulsar
from tests.emulators.redis_server import redis_command

# --- one minimal real request per emulator --------------------------------------------

# Generous: the first request to a cold JVM on a loaded 2-core machine can take seconds.
TIMEOUT = 30.0


def http_request(url: str, **kwargs: Any) -> tuple[int, bytes]:
    return harness.http_request(url, timeout=TIMEOUT, **kwargs)


def shared_key_request(url: str, method: str = "GET") -> tuple[int, bytes]:
    return azurite_module.shared_key_request(url, method=method, timeout=TIMEOUT)


def check_moto(info: EmulatorInfo) -> None:
    if importlib.util.find_spec("boto3") is None:  # moto[server] brings boto3; be safe
        status, body = http_request(info.endpoints["endpoint_url"] + "/")
        assert status == 200 and b"ListAllMyBucketsResult" in body
        return
    import boto3  # type: ignore[import-untyped]

    s3 = boto3.client(
        "s3",
        endpoint_url=info.endpoints["endpoint_url"],
        region_name=info.endpoints["region"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.create_bucket(Bucket="harness-bucket")
    names = [bucket["Name"] for bucket in s3.list_buckets()["Buckets"]]
    assert names == ["harness-bucket"]


def check_azurite(info: EmulatorInfo) -> None:
    blob = info.endpoints["blob_endpoint"]
    status, body = shared_key_request(f"{blob}/harness?restype=container", method="PUT")
    assert status == 201, body
    status, body = shared_key_request(f"{blob}/?comp=list")
    assert status == 200 and b"<Name>harness</Name>" in body, body
    queue = info.endpoints["queue_endpoint"]
    status, body = shared_key_request(f"{queue}/harness-queue", method="PUT")
    assert status == 201, body
    # Checked without an assert, so a failure cannot print the key.
    if f"BlobEndpoint={blob};" not in info.endpoints["connection_string"]:
        pytest.fail("the connection string does not name the blob endpoint")


def check_fake_gcs(info: EmulatorInfo) -> None:
    url = info.endpoints["endpoint_url"]
    headers = {"Content-Type": "application/json"}
    created = json.dumps({"name": "harness-bucket"}).encode()
    status, body = http_request(
        f"{url}/storage/v1/b?project=test-project", method="POST", headers=headers, body=created
    )
    assert status == 200, body
    status, body = http_request(
        f"{url}/upload/storage/v1/b/harness-bucket/o?uploadType=media&name=a/b.txt",
        method="POST",
        headers={"Content-Type": "text/plain"},
        body=b"hello",
    )
    assert status == 200, body
    # The XML-style object path only resolves because of -public-host 127.0.0.1:<port>.
    assert http_request(f"{url}/harness-bucket/a/b.txt") == (200, b"hello")
    assert info.env["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] == "false"


def check_pubsub(info: EmulatorInfo) -> None:
    topics = f"{info.endpoints['rest_url']}/v1/projects/{info.endpoints['project']}/topics"
    headers = {"Content-Type": "application/json"}
    status, body = http_request(f"{topics}/harness", method="PUT", headers=headers, body=b"{}")
    assert status == 200, body
    status, body = http_request(topics)
    assert status == 200 and b"topics/harness" in body, body


def check_firestore(info: EmulatorInfo) -> None:
    base = f"{info.endpoints['rest_url']}/v1/projects/{info.endpoints['project']}"
    doc = f"{base}/databases/(default)/documents/harness"
    fields = json.dumps({"fields": {"ok": {"booleanValue": True}}}).encode()
    headers = {"Content-Type": "application/json", "Authorization": "Bearer owner"}
    status, body = http_request(
        f"{doc}?documentId=one", method="POST", headers=headers, body=fields
    )
    assert status == 200, body
    status, body = http_request(f"{doc}/one", headers=headers)
    assert status == 200 and json.loads(body)["fields"] == {"ok": {"booleanValue": True}}


def check_kafka_protocol(info: EmulatorInfo) -> None:
    versions = api_versions(info.host, info.port, timeout=TIMEOUT)
    assert 0 in versions and 1 in versions  # Produce, Fetch
    brokers = check_broker(info.host, info.port, timeout=TIMEOUT)
    assert info.endpoints["bootstrap"] == f"{brokers[0].host}:{brokers[0].port}"


def check_redis(info: EmulatorInfo) -> None:
    assert redis_command(info.host, info.port, "PING") == b"+PONG"
    assert redis_command(info.host, info.port, "SET", "harness", "1") == b"+OK"
    assert redis_command(info.host, info.port, "GET", "harness") == b"$1"


def check_s3s(info: EmulatorInfo) -> None:
    import boto3  # type: ignore[import-untyped]
    from botocore.config import Config

    s3 = boto3.client(
        "s3",
        endpoint_url=info.endpoints["endpoint_url"],
        region_name=info.endpoints["region"],
        aws_access_key_id=info.env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=info.env["AWS_SECRET_ACCESS_KEY"],
        config=Config(s3={"addressing_style": "path"}),
    )
    s3.create_bucket(Bucket="harness-bucket")
    s3.put_object(Bucket="harness-bucket", Key="k", Body=b"v")
    assert s3.get_object(Bucket="harness-bucket", Key="k")["Body"].read() == b"v"


def check_k8s(info: EmulatorInfo) -> None:
    from tests.emulators.k8s import K8S_VERSION, admin_api

    api = admin_api(Path(info.endpoints["kubeconfig"]).parent)
    assert api.ok("GET", "/version")["gitVersion"] == f"v{K8S_VERSION}"
    nodes = {n["metadata"]["name"] for n in api.ok("GET", "/api/v1/nodes")["items"]}
    assert nodes == {"local-0", "kwok-0"}
    # RBAC is on: a token the apiserver does not know is refused
    status, _ = type(api)(api.server, "not-a-token", Path(info.endpoints["ca_file"])).request("GET", "/api/v1/nodes")
    assert status == 401


def check_jaeger(info: EmulatorInfo) -> None:
    from tests.emulators.jaeger import round_trip

    round_trip(info)  # an OTLP/JSON span in, read back by its trace id over the query API


WIRE_CHECKS: dict[str, Callable[[EmulatorInfo], None]] = {
    "moto": check_moto,
    "azurite": check_azurite,
    "fake-gcs": check_fake_gcs,
    "pubsub": check_pubsub,
    "firestore": check_firestore,
    "kafka": check_kafka_protocol,
    "tansu": check_kafka_protocol,
    "redis": check_redis,
    "s3s": check_s3s,
    "k8s": check_k8s,
    "jaeger": check_jaeger,
    "pulsar": check_pulsar,
}


def test_every_emulator_has_a_wire_check() -> None:
    assert set(WIRE_CHECKS) == set(EMULATORS)


@pytest.mark.parametrize("name", list(EMULATORS))
def test_start_answer_stop_leaves_nothing_behind(name: str) -> None:
    emulator = create(name)
    ok, reason = emulator.available()
    if not ok:
        unavailable(reason)
    started = time.monotonic()
    info = emulator.start()
    try:
        startup = time.monotonic() - started
        processes = emulator.processes()
        assert info.pid in {record.pid for record in processes}
        assert info.host == "127.0.0.1" and info.port == info.ports[0]
        for port in info.ports:
            assert port < 32768 and is_listening(port), port
        WIRE_CHECKS[name](info)
        processes |= emulator.processes()
        sockets = listening_sockets(processes)
        assert {port for _, port in sockets} >= set(info.ports)
        assert all(is_loopback(address) for address, _ in sockets), sockets
        print(f"{name}: healthy {startup:.1f} s after launch; listening on {sorted(sockets)}")
    finally:
        emulator.stop()
    assert [record for record in processes if record.is_alive()] == []
    assert listening_sockets(processes) == set()
    # The ports the harness chose; a Java emulator's own ephemeral ports may be
    # taken by someone else's process the moment they are freed, so not those.
    assert [port for port in info.ports if is_listening(port)] == []
    assert emulator.processes() == set()
    assert emulator.info is None


# --- fixtures, CLI and small pieces -----------------------------------------------------


def test_fixture_starts_lazily_and_yields_info(redis_server: EmulatorInfo) -> None:
    assert redis_command(redis_server.host, redis_server.port, "PING") == b"+PONG"
    assert redis_server.endpoints["url"] == f"redis://127.0.0.1:{redis_server.port}/0"


def test_unavailable_skips_by_default_and_fails_when_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install thing"):
        unavailable("needs: apt-get install thing")
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="apt-get install thing"):
        unavailable("needs: apt-get install thing")


def test_info_repr_hides_credentials() -> None:
    info = EmulatorInfo(
        name="azurite",
        host="127.0.0.1",
        port=1,
        pid=2,
        endpoints={"account_key": "s3cret", "connection_string": "AccountKey=s3cret"},
        env={"AZURE_STORAGE_CONNECTION_STRING": "AccountKey=s3cret"},
    )
    assert "s3cret" not in repr(info) and "s3cret" not in str(info)


def test_free_ports_are_free_and_below_the_ephemeral_range() -> None:
    ports = {free_port() for _ in range(20)}
    assert len(ports) == 20
    assert all(20000 <= port < 32768 and not is_listening(port) for port in ports)


def test_kafka_pom_pins_the_version_the_harness_expects() -> None:
    match = re.search(r"<kafka.version>([^<]+)</kafka.version>", KAFKA_POM.read_text())
    assert match and match.group(1) == KAFKA_VERSION


def test_cli_up_status_down_stops_exactly_what_it_started(tmp_path: object) -> None:
    if not create("redis").available()[0]:
        unavailable(create("redis").available()[1])
    state_path = os.path.join(str(tmp_path), f"state-{uuid.uuid4().hex}.json")
    env = dict(os.environ, PORTABLE_EMULATOR_STATE=state_path)

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "tests.emulators", *args],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    cli("up", "redis")
    with open(state_path) as handle:
        entry = json.load(handle)["redis"]
    pid, port = entry["pid"], entry["ports"][0]
    assert redis_command("127.0.0.1", port, "PING") == b"+PONG"
    assert "redis: running" in cli("status")
    assert f"stopped (pid {pid})" in cli("down")
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        # Orphaned after `up` exited; init reaps it. A zombie holds no port.
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.05)
    assert not is_listening(port)
    with open(state_path) as handle:
        assert json.load(handle) == {}
