"""Spans and metrics of real calls to each storage and messaging emulator, on both faces.

S3 and SQS on moto, Azure Blob and Storage Queue on Azurite, GCS on fake-gcs-server, Pub/Sub on
Google's emulator, Kafka on Apache Kafka 4: each test makes real requests over the wire and
reads the spans and metrics the OpenTelemetry SDK recorded in memory (the ``otel`` fixture).
A retry shows as a ``retry`` event on a call the emulator failed (``chaos+`` around the real
driver, or a stopped server); no attribute, event or status holds a secret.
"""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode

import portable.aio
from portable.errors import Unavailable
from portable.messaging import open_subscription, open_topic
from portable.resilience import ResiliencePolicy, RetryPolicy
from portable.storage import open_bucket
from portable.telemetry import add_observer
from portable.testing.chaos import chaos_of
from portable.testing.messaging_suite import poll, temporary_url

from .conftest import Telemetry
from .test_spans import EndOutageAfter

#: quick retries, no breaker (these tests count attempts), no retry budget
QUICK = ResiliencePolicy(
    retry=RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.02), breaker=None, retry_budget=None
)
AZURE_CONNECTION_ENV = "PORTABLE_TEST_TELEMETRY_AZURITE_CONNECTION_STRING"
AZURE_KEY_ENV = "PORTABLE_TEST_TELEMETRY_AZURITE_ACCOUNT_KEY"


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def everything_recorded(otel: Telemetry) -> str:
    """Every attribute, event attribute and status text of every span, and every metric attribute, as text."""
    parts: list[str] = []
    for span in otel.spans():
        parts.append(span.name)
        parts.append(repr(dict(span.attributes or {})))
        parts.extend(repr((e.name, dict(e.attributes or {}))) for e in span.events)
        parts.append(span.status.description or "")
    otel.collect()
    parts.extend(repr(a) for _, a, _ in otel._collected)
    return "\n".join(parts)


# -- emulator fixtures (the adapters' conftest files are not visible from here) ------------------
@pytest.fixture(scope="module")
def aws(moto_server: Any) -> Iterator[dict[str, str]]:
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
            mp.setenv(name, moto_server.env[name])
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            mp.delenv(name, raising=False)
        endpoint, region = moto_server.endpoints["endpoint_url"], moto_server.endpoints["region"]
        yield {"endpoint_url": endpoint, "region": region, "query": f"region={region}&endpoint_url={endpoint}"}


@pytest.fixture(scope="module")
def s3_bucket(aws: dict[str, str]) -> str:
    import boto3
    from botocore.config import Config

    name = f"pt-otel-{uuid.uuid4().hex[:10]}"
    client = boto3.client(
        "s3", endpoint_url=aws["endpoint_url"], region_name=aws["region"], config=Config(s3={"addressing_style": "path"})
    )
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="module")
def azure(azurite: Any) -> Iterator[dict[str, str]]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(AZURE_CONNECTION_ENV, azurite.endpoints["connection_string"])
        mp.setenv(AZURE_KEY_ENV, azurite.endpoints["account_key"])
        for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN"):
            mp.delenv(name, raising=False)
        yield dict(azurite.endpoints)


@pytest.fixture(scope="module")
def blob_container(azure: dict[str, str]) -> str:
    from azure.storage.blob import BlobServiceClient

    name = f"pt-otel-{uuid.uuid4().hex[:10]}"
    BlobServiceClient.from_connection_string(azure["connection_string"]).create_container(name)
    return name


@pytest.fixture(scope="module")
def gcs(fake_gcs: Any) -> dict[str, str]:
    endpoint = fake_gcs.endpoints["endpoint_url"]
    bucket = f"pt-otel-{uuid.uuid4().hex[:10]}"
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project={fake_gcs.endpoints['project']}",
        data=json.dumps({"name": bucket}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    return {"endpoint_url": endpoint, "bucket": bucket}


def storage_url(kind: str, request: pytest.FixtureRequest, prefix: str) -> tuple[str, str]:
    """``(url, bucket name)`` of a fresh prefix on the ``kind`` emulator."""
    if kind == "s3":
        bucket = request.getfixturevalue("s3_bucket")
        query = request.getfixturevalue("aws")["query"]
        return f"s3://{bucket}/{prefix}?{query}", bucket
    if kind == "az":
        container = request.getfixturevalue("blob_container")
        request.getfixturevalue("azure")
        return f"az://{container}/{prefix}?connection_string_env={AZURE_CONNECTION_ENV}", container
    gcs = request.getfixturevalue("gcs")
    return f"gs://{gcs['bucket']}/{prefix}?endpoint_url={gcs['endpoint_url']}", gcs["bucket"]


STORAGE = {
    # kind: (cloud.provider, bucket attribute, key attribute)
    "s3": ("aws", "aws.s3.bucket", "aws.s3.key"),
    "az": ("azure", "portable.storage.bucket", "portable.storage.key"),
    "gs": ("gcp", "portable.storage.bucket", "portable.storage.key"),
}


# -- storage -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(STORAGE))
def test_storage_calls_on_the_emulator_are_spans_with_semantic_attributes(
    otel: Telemetry, kind: str, request: pytest.FixtureRequest, unique_name: str
) -> None:
    url, bucket_name = storage_url(kind, request, unique_name)
    with open_bucket(url) as bucket:
        otel.clear()  # opening may have probed the bucket
        bucket.put("obj.bin", b"0123456789")
        assert bucket.get("obj.bin") == b"0123456789"
        bucket.delete("obj.bin")
    cloud, bucket_attr, key_attr = STORAGE[kind]
    names = otel.names()
    assert names == [f"put {bucket_name}", f"get {bucket_name}", f"delete {bucket_name}"], names
    for span in otel.spans():
        a = attrs(span)
        assert span.kind is SpanKind.CLIENT
        assert a["cloud.provider"] == cloud
        assert a[bucket_attr] == bucket_name
        assert a[key_attr].endswith("obj.bin")
        assert a["server.address"] == "127.0.0.1" and isinstance(a["server.port"], int)
        assert span.status.status_code is StatusCode.UNSET
    assert otel.total("portable.client.io", network__io__direction="transmit", portable__operation="put") == 10
    assert otel.total("portable.client.io", network__io__direction="receive", portable__operation="get") == 10
    durations = otel.points("portable.client.operation.duration", portable__operation="get")
    assert [(a["portable.outcome"], p.count) for a, p in durations] == [("ok", 1)]
    assert 0 < durations[0][1].sum < 30


@pytest.mark.parametrize("kind", sorted(STORAGE))
def test_a_batch_on_the_emulator_is_one_span(
    otel: Telemetry, kind: str, request: pytest.FixtureRequest, unique_name: str
) -> None:
    url, bucket_name = storage_url(kind, request, unique_name)
    with open_bucket(url) as bucket:
        otel.clear()
        bucket.put_many({"a": b"1", "b": b"22", "c": b"333"})
        assert bucket.get_many(["a", "b", "c"]) == {"a": b"1", "b": b"22", "c": b"333"}
        bucket.delete_many(["a", "b", "c"])
    for op in ("put_many", "get_many", "delete_many"):
        span = otel.span(f"{op} {bucket_name}")
        assert attrs(span)["portable.storage.batch.count"] == 3
        assert attrs(span)["cloud.provider"] == STORAGE[kind][0]
    assert otel.total("portable.client.io", network__io__direction="receive", portable__operation="get_many") == 6


@pytest.mark.parametrize("kind", sorted(STORAGE))
def test_async_storage_calls_on_the_emulator_are_spans(
    otel: Telemetry, kind: str, request: pytest.FixtureRequest, unique_name: str
) -> None:
    url, bucket_name = storage_url(kind, request, unique_name)

    async def main() -> None:
        async with portable.aio.open_bucket(url) as bucket:
            await bucket.put("a.txt", b"abc")
            assert await bucket.get("a.txt") == b"abc"
            assert (await bucket.head("a.txt")).size == 3

    asyncio.run(main())
    for op in ("put", "get", "head"):
        span = otel.spans(f"{op} {bucket_name}")[-1]
        assert attrs(span)["portable.operation"] == op
        assert attrs(span)[STORAGE[kind][2]].endswith("a.txt")


@pytest.mark.parametrize("kind", sorted(STORAGE))
def test_a_call_the_emulator_failed_is_retried_with_retry_events(
    otel: Telemetry, kind: str, request: pytest.FixtureRequest, unique_name: str
) -> None:
    """chaos+ around the real driver: the first two attempts are refused, the third reaches the emulator."""
    url, bucket_name = storage_url(kind, request, unique_name)
    with open_bucket(f"chaos+{url}&error_rate=0", policy=QUICK) as bucket:
        bucket.put("k", b"v")
        otel.clear()
        chaos = chaos_of(bucket)
        chaos.start_outage("unavailable")
        remove = add_observer(EndOutageAfter(chaos, 2))
        try:
            assert bucket.get("k") == b"v"
        finally:
            remove()
    span = otel.span(f"get {bucket_name}")
    assert [e.name for e in span.events] == ["retry", "retry"]
    assert [e.attributes["portable.retry.attempt"] for e in span.events] == [1, 2]  # type: ignore[index]
    assert attrs(span)["cloud.provider"] == STORAGE[kind][0]
    assert otel.total("portable.client.retries", portable__target=bucket_name) == 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_stopped_server_gives_retry_events_then_an_error_span(otel: Telemetry, aws: dict[str, str]) -> None:
    """An S3 endpoint where nothing listens: every attempt fails, each but the last is a retry event."""
    port = free_port()
    url = f"s3://no-server/p?region={aws['region']}&endpoint_url=http://127.0.0.1:{port}"
    with open_bucket(url, policy=QUICK) as bucket, pytest.raises(Unavailable):
        bucket.get("k")
    span = otel.span("get no-server")
    assert [e.name for e in span.events] == ["retry", "retry"]
    assert {e.attributes["error.type"] for e in span.events} == {"Unavailable"}  # type: ignore[index]
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)["error.type"] == "Unavailable"
    assert attrs(span)["server.port"] == port
    assert otel.total("portable.client.requests", portable__target="no-server", portable__outcome="error") == 3


def test_no_secret_reaches_any_attribute(otel: Telemetry, azure: dict[str, str], blob_container: str) -> None:
    """Azurite's account key travels in the connection string; no span, event or metric shows it."""
    key = azure["account_key"]
    url = f"az://{blob_container}/secrets?connection_string_env={AZURE_CONNECTION_ENV}"
    with open_bucket(url, policy=QUICK) as bucket:
        bucket.put("k", b"v")
        with pytest.raises(Exception):  # noqa: B017 - any failure will do; its text is what is checked
            bucket.get("missing")
    text = everything_recorded(otel)
    assert otel.spans() and "k" in text
    assert key not in text and key[:20] not in text
    assert "AccountKey" not in text and "SharedKey" not in text


# -- messaging -----------------------------------------------------------------------------
@contextmanager
def queue_url(kind: str, request: pytest.FixtureRequest, name: str) -> Iterator[str]:
    if kind == "sqs":
        query = request.getfixturevalue("aws")["query"]
        yield from temporary_url(f"sqs://base?{query}", name)  # type: ignore[misc]
    elif kind == "azqueue":
        azure = request.getfixturevalue("azure")
        base = f"azqueue://{azure['account_name']}/base?queue_endpoint={azure['queue_endpoint']}&account_key_env={AZURE_KEY_ENV}"
        yield from temporary_url(base, name)  # type: ignore[misc]
    elif kind == "pubsub":
        info = request.getfixturevalue("pubsub_emulator")
        base = f"pubsub://{info.endpoints['project']}/topics/{name}?endpoint={info.endpoints['host_port']}"
        yield from temporary_url(base, name)  # type: ignore[misc]
    else:
        broker = request.getfixturevalue("kafka_broker")
        yield f"kafka://{broker.endpoints['bootstrap']}/{name}?group={name}&session_timeout_ms=6000"


MESSAGING = {"sqs": "aws_sqs", "azqueue": "azure_queue", "pubsub": "gcp_pubsub", "kafka": "kafka"}


def destination(span: Any) -> str:
    return str(attrs(span).get("messaging.destination.name", ""))


@pytest.mark.parametrize("kind", sorted(MESSAGING))
def test_publish_receive_ack_on_the_emulator_are_messaging_spans(
    otel: Telemetry, kind: str, request: pytest.FixtureRequest, unique_name: str
) -> None:
    with queue_url(kind, request, unique_name) as url, open_topic(url) as topic, open_subscription(url) as sub:
        otel.clear()
        message_id = topic.publish(b"payload-1")
        got = poll(sub, 1, timeout=30)
        assert [m.body for m in got] == [b"payload-1"]
        got[0].ack()
    spans = otel.spans()
    by_type: dict[str, list[Any]] = {}
    for span in spans:
        by_type.setdefault(str(attrs(span).get("messaging.operation.type")), []).append(span)
    [publish] = by_type["send"]
    assert attrs(publish)["messaging.system"] == MESSAGING[kind]
    assert attrs(publish)["messaging.operation.name"] == "publish"
    assert publish.name == f"publish {destination(publish)}" and destination(publish)
    assert attrs(publish)["messaging.message.id"] == message_id
    assert publish.kind is SpanKind.PRODUCER  # a send span with no "create" span (the messaging conventions)
    receives = by_type["receive"]
    assert all(r.kind is SpanKind.CLIENT for r in receives)
    assert sum(attrs(r).get("messaging.batch.message_count", 0) for r in receives) == 1
    assert all(r.name == f"receive {destination(r)}" for r in receives)
    [ack] = by_type["settle"]
    assert attrs(ack)["portable.operation"] == "ack"
    assert otel.total("portable.client.io", network__io__direction="transmit", portable__operation="publish") == 9
    assert otel.total("portable.client.io", network__io__direction="receive", portable__operation="receive") == 9


@pytest.mark.parametrize("kind", sorted(MESSAGING))
def test_async_publish_and_receive_on_the_emulator_are_spans(
    otel: Telemetry, kind: str, request: pytest.FixtureRequest, unique_name: str
) -> None:
    with queue_url(kind, request, unique_name) as url:

        async def main() -> None:
            async with portable.aio.open_topic(url) as topic, portable.aio.open_subscription(url) as sub:
                await topic.publish(b"async-1")
                got: list[Any] = []
                for _ in range(60):
                    got += await sub.receive(max_messages=1, wait=0.5)
                    if got:
                        break
                assert [m.body for m in got] == [b"async-1"]
                await got[0].ack()

        asyncio.run(main())
    types = [attrs(s).get("messaging.operation.type") for s in otel.spans()]
    assert types.count("send") == 1 and types.count("settle") == 1 and "receive" in types
    assert {attrs(s)["messaging.system"] for s in otel.spans() if "messaging.system" in attrs(s)} == {MESSAGING[kind]}


def test_a_publish_the_emulator_failed_is_retried_with_retry_events(
    otel: Telemetry, request: pytest.FixtureRequest, unique_name: str
) -> None:
    with queue_url("sqs", request, unique_name) as url:
        chaos = f"chaos+{url}&error_rate=0"
        with open_topic(chaos, policy=QUICK) as topic:
            controller = chaos_of(topic)
            controller.start_outage("unavailable")
            remove = add_observer(EndOutageAfter(controller, 1))
            try:
                topic.publish(b"once")
            finally:
                remove()
    [publish] = [s for s in otel.spans() if attrs(s).get("messaging.operation.type") == "send"]
    assert [e.name for e in publish.events] == ["retry"]
    assert attrs(publish)["messaging.system"] == "aws_sqs"
