"""Traces reach a real tracing backend: Jaeger (OTLP/HTTP in, its query API out).

Spans go through the OpenTelemetry SDK's ``BatchSpanProcessor`` and OTLP/HTTP exporter
(``opentelemetry-exporter-otlp-proto-http``) to the ``jaeger`` emulator, and are read
back over Jaeger's HTTP query API: ``/api/traces/{id}`` (the UI's API),
``/api/traces?service=`` (search) and ``/api/v3/traces/{id}`` (OTLP JSON).

The portable test runs in a child process: the global tracer provider can be set
once per process, and the one this worker's tests share (tests/telemetry/conftest.py)
exports to memory; the child sets its own, exporting to Jaeger, under a service name
no other test uses, so the parent can find the child's traces by searching for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

from portable.messaging import open_driver
from tests.emulators import create
from tests.emulators.fixtures import unavailable
from tests.emulators.harness import EmulatorInfo, http_request, is_listening, listening_sockets

#: How long a span may take from the exporter's flush to Jaeger's query API (a 200 ms batch).
ARRIVAL_TIMEOUT = 30.0
REPO_ROOT = Path(__file__).resolve().parents[2]


def query(info: EmulatorInfo, path: str) -> tuple[int, Any]:
    status, body = http_request(info.endpoints["query_url"] + path, timeout=10.0)
    return status, json.loads(body) if body else None


def poll(what: str, fetch: Callable[[], Any], timeout: float = ARRIVAL_TIMEOUT) -> Any:
    """Call ``fetch`` until it returns something truthy; fail with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fetch()
        if last:
            return last
        time.sleep(0.2)
    pytest.fail(f"{what}: not in Jaeger after {timeout:.0f} s (last answer: {last!r})")


def tags(span: dict[str, Any]) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in span.get("tags", [])}


def parent_of(span: dict[str, Any]) -> str | None:
    refs = [ref for ref in span.get("references", []) if ref["refType"] == "CHILD_OF"]
    return refs[0]["spanID"] if refs else None


def trace_by_id(info: EmulatorInfo, trace_id: str, spans: int) -> dict[str, Any] | None:
    """The trace ``trace_id`` (32 hex digits) from ``/api/traces/{id}``, once it has ``spans`` spans."""
    status, body = query(info, f"/api/traces/{trace_id}")
    if status != 200 or not body.get("data"):
        return None
    found: dict[str, Any] = body["data"][0]
    return found if len(found["spans"]) >= spans else None


def v3_spans(info: EmulatorInfo, trace_id: str) -> dict[str, dict[str, Any]]:
    """The spans of trace ``trace_id`` by span id, as OTLP JSON from ``/api/v3/traces/{id}``."""
    status, body = query(info, f"/api/v3/traces/{trace_id}")
    assert status == 200, body
    return {
        span["spanId"]: span
        for resource in body["result"]["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    }


# --- the backend itself -----------------------------------------------------------------


def test_jaeger_binds_loopback_only_and_stops_clean() -> None:
    """The harness's promise for every emulator, for this one: 127.0.0.1 only, nothing left."""
    emulator = create("jaeger")
    ok, reason = emulator.available()
    if not ok:
        unavailable(reason)
    info = emulator.start()
    try:
        processes = emulator.processes()
        assert info.pid in {record.pid for record in processes}
        sockets = listening_sockets(processes)
        assert {port for _, port in sockets} >= set(info.ports)
        # no listener but the ones the config names (no 4317, 16686, 8888, 13133 defaults)
        assert {port for _, port in sockets} == set(info.ports), sockets
        assert all(address == "127.0.0.1" for address, _ in sockets), sockets
        status, body = query(info, "/api/services")
        assert status == 200 and body["data"] in ([], None)
    finally:
        emulator.stop()
    assert [record for record in processes if record.is_alive()] == []
    assert [port for port in info.ports if is_listening(port)] == []


def test_sdk_spans_reach_jaeger_over_otlp_http(jaeger: EmulatorInfo) -> None:
    """The exporter pipeline on its own: a parent and a child span made here, found by id."""
    service = f"portable-test-{uuid.uuid4().hex[:12]}"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=jaeger.endpoints["otlp_traces_url"], timeout=10)
        )
    )
    tracer = provider.get_tracer("tests.telemetry.test_jaeger")
    with tracer.start_as_current_span("parent", kind=SpanKind.PRODUCER) as parent:
        parent.set_attribute("messaging.system", "portable-test")
        with tracer.start_as_current_span("child", kind=SpanKind.CLIENT) as child:
            child.set_attribute("portable.note", "made by the test")
    assert provider.force_flush(10_000)
    provider.shutdown()
    trace_id = format(parent.get_span_context().trace_id, "032x")
    parent_id = format(parent.get_span_context().span_id, "016x")

    found = poll(f"trace {trace_id}", lambda: trace_by_id(jaeger, trace_id, 2))
    by_name = {span["operationName"]: span for span in found["spans"]}
    assert set(by_name) == {"parent", "child"}
    assert {span["traceID"] for span in found["spans"]} == {trace_id}
    assert by_name["parent"]["spanID"] == parent_id and parent_of(by_name["parent"]) is None
    assert parent_of(by_name["child"]) == parent_id
    assert tags(by_name["parent"])["span.kind"] == "producer"
    assert tags(by_name["parent"])["messaging.system"] == "portable-test"
    assert tags(by_name["child"])["portable.note"] == "made by the test"
    process = found["processes"][by_name["child"]["processID"]]
    assert process["serviceName"] == service

    # the same trace through the v3 API (OTLP JSON) and through search by service
    otlp = v3_spans(jaeger, trace_id)
    assert sorted(span["name"] for span in otlp.values()) == ["child", "parent"]
    assert otlp[by_name["child"]["spanID"]]["parentSpanId"] == parent_id
    status, body = query(jaeger, f"/api/traces?service={service}&limit=10")
    assert status == 200 and [t["traceID"] for t in body["data"]] == [trace_id]


# --- portable's spans, producer to consumer ---------------------------------------------

CHILD = r"""
import json, sys, threading
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

endpoint, service, url = sys.argv[1:4]
provider = TracerProvider(resource=Resource.create({"service.name": service}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=10)))
trace.set_tracer_provider(provider)

import portable.messaging as pm

topic = pm.open_topic(url)
subscription = pm.open_subscription(url)
tracer = trace.get_tracer("tests.telemetry.test_jaeger.child")
with tracer.start_as_current_span("produce greeting") as producer:
    message_id = topic.publish(b"hello, jaeger", attributes={"kind": "greeting"})
seen = {"message_id": message_id, "producer_span_id": format(producer.get_span_context().span_id, "016x")}
done = threading.Event()

def handler(message):
    context = trace.get_current_span().get_span_context()
    seen["handler_trace_id"] = format(context.trace_id, "032x")
    seen["handler_span_id"] = format(context.span_id, "016x")
    seen["body"] = message.body.decode()
    seen["traceparent"] = message.attributes.get("traceparent")
    with tracer.start_as_current_span("handler work"):
        pass
    done.set()

stats = subscription.run(handler, stop_event=done, handle_signals=False, poll=0.2, drain_timeout=10)
seen["acked"] = stats.acked
topic.close()
subscription.close()
assert provider.force_flush(10_000)
provider.shutdown()
print(json.dumps(seen))
"""


def run_child(
    jaeger: EmulatorInfo, service: str, url: str, extra_env: dict[str, str]
) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AWS_"))}
    env.update(extra_env)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, jaeger.endpoints["otlp_traces_url"], service, url],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO_ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def find_joined_trace(jaeger: EmulatorInfo, service: str) -> dict[str, Any] | None:
    """The child's trace that holds its producer's span and the handler's, found by service."""
    status, body = query(jaeger, f"/api/traces?service={service}&limit=20")
    if status != 200:
        return None
    for found in body.get("data") or []:
        names = {span["operationName"] for span in found["spans"]}
        if {"produce greeting", "handler work"} <= names:
            return dict(found)
    return None


@pytest.fixture(params=["sqlite", "sqs"])
def traced_queue(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, str, dict[str, str]]]:
    """``(messaging.system, queue URL, environment)`` of a queue named ``traced``: sqlite, SQS on moto."""
    if request.param == "sqlite":
        yield "sqlite", f"sqlite://{tmp_path}/queue.db?name=traced", {}
        return
    moto: EmulatorInfo = request.getfixturevalue("moto_server")
    env = {k: moto.env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")}
    query = f"region={moto.endpoints['region']}&endpoint_url={moto.endpoints['endpoint_url']}"
    name = f"traced-{uuid.uuid4().hex[:8]}"
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        driver = open_driver(f"sqs://{name}?{query}")
        try:
            with driver.temporary(name) as url:
                yield "aws_sqs", url, env
        finally:
            driver.close()


def test_published_and_consumed_message_is_one_trace_in_jaeger(
    jaeger: EmulatorInfo, traced_queue: tuple[str, str, dict[str, str]]
) -> None:
    """Publish through portable, consume with ``Subscription.run``, find the joined trace in Jaeger."""
    system, url, env = traced_queue
    service = f"portable-test-{uuid.uuid4().hex[:12]}"
    seen = run_child(jaeger, service, url, env)
    assert seen["body"] == "hello, jaeger" and seen["acked"] == 1

    found = poll(
        f"a trace of service {service} with the producer's and the handler's spans",
        lambda: find_joined_trace(jaeger, service),
    )
    spans = found["spans"]
    by_id = {span["spanID"]: span for span in spans}
    [producer] = [s for s in spans if s["operationName"] == "produce greeting"]
    [publish] = [s for s in spans if tags(s).get("messaging.operation.type") == "send"]
    [process] = [s for s in spans if tags(s).get("messaging.operation.type") == "process"]
    [work] = [s for s in spans if s["operationName"] == "handler work"]

    # one trace: the producer's, which the message carried and the handler ran in
    trace_id = found["traceID"]
    assert trace_id == seen["handler_trace_id"]
    assert seen["traceparent"].split("-")[1] == trace_id
    assert {s["traceID"] for s in (producer, publish, process, work)} == {trace_id}
    assert producer["spanID"] == seen["producer_span_id"] and parent_of(producer) is None
    # portable's publish span is the producer's child and the message's creation context (the
    # messaging conventions' "send" span, when there is no "create" span): the message carried
    # it, and the process span has it as parent and links to it. Jaeger's model keeps one
    # reference per span id, typed by the link: FOLLOWS_FROM.
    assert parent_of(publish) == producer["spanID"]
    assert seen["traceparent"].split("-")[2] == publish["spanID"]
    refs = [(ref["refType"], ref["spanID"]) for ref in process["references"]]
    assert refs == [("FOLLOWS_FROM", publish["spanID"])]
    otlp = v3_spans(jaeger, trace_id)
    assert otlp[process["spanID"]]["parentSpanId"] == publish["spanID"]
    assert [link["spanId"] for link in otlp[process["spanID"]]["links"]] == [publish["spanID"]]
    assert process["spanID"] == seen["handler_span_id"]
    assert parent_of(work) == process["spanID"]
    # the messaging conventions on both ends
    publish_tags, process_tags = tags(publish), tags(process)
    destination = publish_tags["messaging.destination.name"]
    assert destination.startswith("traced")
    assert destination == process_tags["messaging.destination.name"]
    assert publish_tags["messaging.system"] == process_tags["messaging.system"] == system
    assert publish_tags["messaging.message.id"] == seen["message_id"]
    assert process_tags["messaging.message.id"] == seen["message_id"]
    assert publish["operationName"] == f"publish {destination}"
    assert process["operationName"] == f"process {destination}"
    assert process_tags["span.kind"] == "consumer"
    assert publish_tags["span.kind"] == "producer"
    # the ack settles the message inside the process span
    settles = [s for s in spans if tags(s).get("messaging.operation.type") == "settle"]
    assert [parent_of(s) for s in settles] == [process["spanID"]]
    # and the same trace by id: the search above is not the only way in
    same = trace_by_id(jaeger, trace_id, len(spans))
    assert same is not None and {s["spanID"] for s in same["spans"]} == set(by_id)
