"""Trace context through messages and jobs, on real queues: the handler's span is in the producer's trace.

Every provider that carries attributes is checked both faces: a message published
inside a span is handled, by ``Subscription.run`` / ``AsyncSubscription.run``, in a
``process`` span of the same trace whose parent is the producer's span (no span is
current in the loop's workers) and which links to it. The emulators are the
session fixtures of tests/emulators; nothing is mocked.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from portable import aio
from portable.cloudevents import CloudEvent
from portable.config import Profile
from portable.driver.messaging import OutgoingMessage
from portable.messaging import Message, open_driver, open_subscription, open_topic
from portable.resilience import ResiliencePolicy, RetryPolicy
from portable.testing.messaging_suite import poll

trace = pytest.importorskip("opentelemetry.trace", reason="opentelemetry-api is pinned in the venv")

PROVIDERS = ["sqlite", "sqs", "pubsub", "azqueue", "kafka"]


def ids(context: Any) -> str:
    """The version, trace id and span id of a traceparent (the flags follow)."""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-"


def traceparent(context: Any) -> str:
    return f"{ids(context)}{int(context.trace_flags):02x}"


def profile(url: str) -> Profile:
    return Profile(
        name="propagation", storage="mem://propagation", queue=url, jobs="local://./jobs",
        resilience=ResiliencePolicy(retry=RetryPolicy(max_attempts=3, initial_backoff=0.05), breaker=None),
    )  # fmt: skip


# -- the queues -------------------------------------------------------------------------------------
def _temporary(url: str, name: str) -> Iterator[str]:
    driver = open_driver(url)
    try:
        with driver.temporary(name) as temp:
            yield temp
    finally:
        driver.close()


@pytest.fixture(params=PROVIDERS)
def queue_url(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[str]:
    provider = request.param
    if provider == "sqlite":
        yield f"sqlite://{tmp_path / 'queue.db'}?name={unique_name}"
    elif provider == "sqs":
        moto = request.getfixturevalue("moto_server")
        for name in (
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_DEFAULT_REGION",
            "AWS_REGION",
        ):
            monkeypatch.setenv(name, moto.env[name])
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            monkeypatch.delenv(name, raising=False)
        query = f"region={moto.endpoints['region']}&endpoint_url={moto.endpoints['endpoint_url']}"
        yield from _temporary(f"sqs://base?{query}", unique_name)
    elif provider == "pubsub":
        emulator = request.getfixturevalue("pubsub_emulator")
        base = f"pubsub://{emulator.endpoints['project']}/topics/{unique_name}?endpoint={emulator.endpoints['host_port']}"
        yield from _temporary(base, unique_name)
    elif provider == "azqueue":
        azurite = request.getfixturevalue("azurite")
        monkeypatch.setenv("PT_PROPAGATION_AZURITE_KEY", azurite.endpoints["account_key"])
        query = f"queue_endpoint={azurite.endpoints['queue_endpoint']}&account_key_env=PT_PROPAGATION_AZURITE_KEY"
        base = f"azqueue://{azurite.endpoints['account_name']}/{unique_name}?{query}"
        yield from _temporary(base, unique_name)
    else:
        broker = request.getfixturevalue("kafka_broker")
        yield (
            f"kafka://{broker.endpoints['bootstrap']}/{unique_name}?group={unique_name}"
            "&session_timeout_ms=6000&partitions=1"
        )


# -- what the handler saw ---------------------------------------------------------------------------
class Seen:
    """What one handled message saw: the current span's context and the message's attributes."""

    def __init__(self) -> None:
        self.context: Any = None
        self.attributes: dict[str, str] = {}
        self.headers: tuple[tuple[str, bytes], ...] = ()
        self.done = threading.Event()

    def record(self, message: Any) -> None:
        self.context = trace.get_current_span().get_span_context()
        self.attributes = dict(message.attributes)
        self.headers = tuple(message.headers)
        self.done.set()


def consume_one_sync(url: str, seen: Seen) -> None:
    with open_subscription(url, profile=profile(url), lease=30) as sub:
        stop = threading.Event()

        def handler(message: Message) -> None:
            seen.record(message)
            stop.set()

        runner = threading.Thread(
            target=sub.run, args=(handler,),
            kwargs={"stop_event": stop, "handle_signals": False, "max_deliveries": None, "poll": 1.0},
            daemon=True,
        )  # fmt: skip
        runner.start()
        assert seen.done.wait(60), "the handler never ran"
        runner.join(60)
        assert not runner.is_alive()


async def consume_one_async(url: str, seen: Seen) -> None:
    async with aio.open_subscription(url, profile=profile(url), lease=30) as sub:
        stop = asyncio.Event()

        async def handler(message: Any) -> None:
            seen.record(message)
            stop.set()

        await asyncio.wait_for(
            sub.run(handler, stop_event=stop, handle_signals=False, max_deliveries=None, poll=1.0),
            90,
        )


def process_spans(otel: Any) -> list[Any]:
    return [s for s in otel.spans() if s.attributes.get("messaging.operation.type") == "process"]


@pytest.mark.parametrize("face", ["sync", "async"])
def test_the_handlers_span_is_in_the_producers_trace(queue_url: str, face: str, otel: Any) -> None:
    tracer = trace.get_tracer("tests.propagation")
    seen = Seen()
    with open_subscription(queue_url, profile=profile(queue_url), lease=30):
        pass  # Kafka: the group is there before the message is (the subscription reads from the start)
    with tracer.start_as_current_span("producer") as producer:
        if face == "sync":
            with open_topic(queue_url, profile=profile(queue_url)) as topic:
                topic.publish(b"traced", attributes={"kind": "test"})
        else:

            async def publish() -> None:
                async with aio.open_topic(queue_url, profile=profile(queue_url)) as topic:
                    await topic.publish(b"traced", attributes={"kind": "test"})

            asyncio.run(publish())
    produced = producer.get_span_context()
    if face == "sync":
        consume_one_sync(queue_url, seen)
    else:
        asyncio.run(consume_one_async(queue_url, seen))

    assert seen.attributes["kind"] == "test"
    assert seen.context.trace_id == produced.trace_id, (
        "the handler ran outside the producer's trace"
    )
    handled = [s for s in process_spans(otel) if s.context.span_id == seen.context.span_id]
    sends = [s for s in otel.spans() if s.attributes.get("messaging.operation.type") == "send"]
    assert len(handled) == 1, "the handler did not run inside the loop's process span"
    span = handled[0]
    # the message carries the guard's send span's context (a child of the producer's span)
    (send,) = sends
    assert send.parent is not None and send.parent.span_id == produced.span_id
    assert seen.attributes["traceparent"][:53] == ids(send.context)
    assert span.parent is not None and span.parent.span_id == send.context.span_id
    assert [link.context.span_id for link in span.links] == [send.context.span_id]
    assert span.kind == trace.SpanKind.CONSUMER
    assert span.name.startswith("process ")
    assert span.attributes["messaging.operation.name"] == "process"
    assert span.attributes["messaging.system"] == {
        "sqlite": "sqlite", "sqs": "aws_sqs", "pubsub": "gcp_pubsub", "azqueue": "azure_queue", "kafka": "kafka",
    }[queue_url.split(":", 1)[0]]  # fmt: skip
    acks = [e for e in span.events if e.name == "settle"]
    assert [e.attributes["messaging.operation.name"] for e in acks] == ["ack"]
    if queue_url.startswith(
        "kafka:"
    ):  # what a native Kafka consumer sees: the W3C header by its own name
        assert ("traceparent", seen.attributes["traceparent"].encode()) in seen.headers


# -- on mem://: the rules of injection --------------------------------------------------------------
def test_publish_outside_any_span_carries_its_send_spans_context(otel: Any, unique_name: str) -> None:
    """With no span of the caller's, the guard's send span is the messages' creation context (the conventions:
    with no "create" span, inject the send span's), so the consumer still joins the producer's trace."""
    url = f"mem://{unique_name}"
    with open_topic(url) as topic, open_subscription(url) as sub:
        topic.publish(b"a")
        topic.publish(b"b", attributes={"x": "1"})
        topic.publish_batch([b"c", OutgoingMessage(b"d", {"y": "2"})])
        got = {m.body: dict(m.attributes) for m in poll(sub, 4, 5)}
    sends = [s for s in otel.spans() if s.name == f"publish {unique_name}"]
    assert len(sends) == 3  # two publishes and one batch
    assert all(s.parent is None for s in sends)  # each is a root: no span of the caller's was current
    single_a, single_b, batch = (traceparent(s.context) for s in sends)
    assert got == {
        b"a": {"traceparent": single_a},
        b"b": {"x": "1", "traceparent": single_b},
        b"c": {"traceparent": batch},
        b"d": {"y": "2", "traceparent": batch},
    }


def test_a_callers_own_traceparent_is_kept(otel: Any, unique_name: str) -> None:
    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    url = f"mem://{unique_name}"
    tracer = trace.get_tracer("t")
    with (
        tracer.start_as_current_span("producer") as producer,
        open_topic(url) as topic,
        open_subscription(url) as sub,
    ):
        topic.publish(b"own", attributes={"traceparent": own})
        topic.publish_batch([OutgoingMessage(b"own-batch", {"traceparent": own}), b"plain"])
        topic.publish_event(
            CloudEvent(source="/t", type="t.t", id="1", extensions={"traceparent": own})
        )
        topic.publish_event(CloudEvent(source="/t", type="t.t", id="2"), mode="structured")
        got = {m.body: dict(m.attributes) for m in poll(sub, 5, 5)}
    mine = (
        f"{producer.get_span_context().trace_id:032x}"  # the send span's, in the producer's trace
    )
    assert got[b"own"]["traceparent"] == own
    assert got[b"own-batch"]["traceparent"] == own
    assert got[b"plain"]["traceparent"][3:35] == mine
    event = next(a for b, a in got.items() if a.get("ce_id") == "1")
    assert (
        event["ce_traceparent"] == own and "traceparent" not in event
    )  # the event's extension is its context
    structured = next(
        a for b, a in got.items() if b.startswith(b"{") and b'"id":"2"' in b.replace(b" ", b"")
    )
    assert structured["traceparent"][3:35] == mine


def test_tracestate_travels_with_traceparent(otel: Any, unique_name: str) -> None:
    from opentelemetry.trace import (
        NonRecordingSpan,
        SpanContext,
        TraceFlags,
        TraceState,
        set_span_in_context,
    )

    parent = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C, span_id=0xB7AD6B7169203331, is_remote=True,
        trace_flags=TraceFlags(1), trace_state=TraceState([("vendor", "v1")]),
    )  # fmt: skip
    url = f"mem://{unique_name}"
    remote = set_span_in_context(NonRecordingSpan(parent))
    with trace.get_tracer("t").start_as_current_span("p", context=remote), open_topic(url) as topic:
        topic.publish(b"x")
    with open_subscription(url) as sub:
        (message,) = poll(sub, 1, 5)
    assert message.attributes["tracestate"] == "vendor=v1"
    assert message.attributes["traceparent"].startswith("00-0af7651916cd43dd8448eb211c80319c-")


def test_no_trace_context_where_the_message_has_no_room(otel: Any, unique_name: str) -> None:
    url = f"mem://{unique_name}"
    with trace.get_tracer("t").start_as_current_span("producer"), open_topic(url) as topic:
        full = {f"a{i}": "v" for i in range(topic.capabilities.max_attributes)}
        topic.publish(b"full", attributes=full)  # at the limit: published, without the context
    with open_subscription(url) as sub:
        (message,) = poll(sub, 1, 5)
    assert dict(message.attributes) == full


def test_uninstrumented_nothing_is_added_and_no_span_is_made(otel: Any, unique_name: str) -> None:
    import portable.telemetry

    url = f"mem://{unique_name}"
    portable.telemetry.uninstrument()
    try:
        with trace.get_tracer("t").start_as_current_span("producer"), open_topic(url) as topic:
            topic.publish(b"a")
            topic.publish_batch([b"b"])
        with open_subscription(url, lease=5) as sub:
            stop = threading.Event()
            sub.run(
                lambda m: stop.set(),
                stop_event=stop,
                handle_signals=False,
                max_deliveries=None,
                poll=0.1,
            )
            stop.clear()
            got = poll(sub, 1, 5)
    finally:
        portable.telemetry.instrument()
    assert [dict(m.attributes) for m in got] == [{}]
    assert otel.names() == ["producer"]


def test_without_a_tracer_provider_nothing_is_added(tmp_path: Path) -> None:
    """A fresh process with the API installed but no provider (and one without the API at all)."""
    code = """
import sys
if sys.argv[1] == "absent":
    sys.modules["opentelemetry"] = None  # opentelemetry-api not installed
from portable.messaging import open_subscription, open_topic
from portable.testing.messaging_suite import poll
with open_topic("mem://q") as topic, open_subscription("mem://q") as sub:
    topic.publish(b"a")
    topic.publish(b"b", attributes={"k": "v"})
    print(sorted(str(sorted(m.attributes)) for m in poll(sub, 2, 5)))
print("opentelemetry.sdk" in sys.modules)
"""
    for mode in ("no-provider", "absent"):
        out = subprocess.run(
            [sys.executable, "-c", code, mode],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert out.stdout.split("\n")[:2] == ["[\"['k']\", '[]']", "False"], out.stdout + out.stderr


# -- the consumer loop: failures, skips, metrics ----------------------------------------------------
def test_a_failed_handler_marks_its_span_and_the_nack_is_a_settle_event(
    otel: Any, unique_name: str
) -> None:
    url = f"mem://{unique_name}"
    with trace.get_tracer("t").start_as_current_span("producer"), open_topic(url) as topic:
        topic.publish(b"boom")
    calls: list[int] = []
    with open_subscription(url, lease=5) as sub:
        stop = threading.Event()

        def handler(message: Message) -> None:
            calls.append(message.delivery_attempt)
            if len(calls) == 1:
                raise ValueError("first try fails")
            stop.set()

        sub.run(
            handler,
            stop_event=stop,
            handle_signals=False,
            max_deliveries=None,
            backoff=0.01,
            poll=0.1,
        )
    first, second = sorted(process_spans(otel), key=lambda s: s.start_time)
    assert first.status.status_code == trace.StatusCode.ERROR
    assert first.attributes["error.type"] == "ValueError"
    assert [e.name for e in first.events] == ["exception", "settle"]
    assert first.events[1].attributes["messaging.operation.name"] == "nack"
    assert second.status.status_code != trace.StatusCode.ERROR
    assert (
        first.context.trace_id == second.context.trace_id
    )  # both deliveries are in the producer's trace


def test_an_idempotency_skip_is_an_event(otel: Any, unique_name: str, tmp_path: Path) -> None:
    from portable.idempotency import open_store

    url = f"mem://{unique_name}"
    store = open_store(f"sqlite://{tmp_path / 'keys.db'}")
    with open_topic(url) as topic:
        # one key by an attribute (the key itself would make mem:// drop the repeat at publish)
        topic.publish_batch(
            [OutgoingMessage(b"once", {"k": "k1"}), OutgoingMessage(b"once", {"k": "k1"})]
        )
    handled: list[bytes] = []
    with open_subscription(url, lease=5) as sub:
        stop = threading.Event()

        def handler(message: Message) -> None:
            handled.append(message.body)

        runner = threading.Thread(
            target=sub.run, args=(handler,),
            kwargs={"stop_event": stop, "handle_signals": False, "max_deliveries": None, "idempotency": store, "poll": 0.1,
                    "idempotency_key": lambda m: m.attributes["k"]},
        )  # fmt: skip
        runner.start()
        deadline = time.monotonic() + 20
        while len(process_spans(otel)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        stop.set()
        runner.join(30)
    assert handled == [b"once"]
    events = [
        [e.name for e in s.events] for s in sorted(process_spans(otel), key=lambda s: s.start_time)
    ]
    assert events == [["settle"], ["settle", "portable.idempotency"]]
    # the loop's claims are claim spans too, inside each message's process span
    claims = sorted(otel.spans("claim SqliteStore"), key=lambda s: s.start_time)
    assert [c.attributes["portable.idempotency.outcome"] for c in claims] == ["acquired", "completed"]  # type: ignore[index]
    by_id = {s.context.span_id: s for s in process_spans(otel)}
    assert all(c.parent is not None and c.parent.span_id in by_id for c in claims)


def test_the_loop_meters_in_flight_messages_and_processing_time(
    otel: Any, unique_name: str, tmp_path: Path
) -> None:
    url = f"sqlite://{tmp_path / 'queue.db'}?name={unique_name}"
    with open_topic(url) as topic:
        topic.publish_batch([b"1", b"2", b"3"])
    in_flight_seen: list[int] = []
    with open_subscription(url, lease=5) as sub:
        stop = threading.Event()
        count = [0]

        def handler(message: Message) -> None:
            in_flight_seen.append(in_flight(otel, unique_name))
            count[0] += 1
            if count[0] == 3:
                stop.set()

        sub.run(handler, stop_event=stop, handle_signals=False, max_deliveries=None, poll=0.1)
    assert in_flight_seen == [1, 1, 1]
    assert in_flight(otel, unique_name) == 0
    assert otel.total("messaging.process.duration", messaging__destination__name=unique_name) == 3


def in_flight(otel: Any, destination: str) -> int:
    """The in-flight UpDownCounter now (cumulative: its last point)."""
    points = otel.points(
        "portable.messaging.consumer.in_flight", messaging__destination__name=destination
    )
    return int(points[-1][1]) if points else 0


# -- jobs --------------------------------------------------------------------------------------------
def test_a_job_launched_in_a_span_sees_traceparent(otel: Any, tmp_path: Path) -> None:
    from portable.compute import JobSpec, open_launcher
    from tests.compute.conftest import stop_supervisor

    root = tmp_path / "jobs"
    root.mkdir()
    code = "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('TRACEPARENT', 'TRACESTATE')}))"
    try:
        with open_launcher(f"local://{root}?grace=0.2") as launcher:
            with trace.get_tracer("t").start_as_current_span("submitter") as submitter:
                traced = launcher.submit(
                    JobSpec(command=[sys.executable, "-c", code], name="traced")
                )
                own = launcher.submit(
                    JobSpec(
                        command=[sys.executable, "-c", code],
                        name="own",
                        env={"TRACEPARENT": "mine"},
                    )
                )
                keyed = launcher.submit(
                    JobSpec(
                        command=[sys.executable, "-c", code], name="keyed", idempotency_key="k1"
                    )
                )
            with trace.get_tracer("t").start_as_current_span("resubmitter"):
                # the same key from another trace is the same job (the trace is not in its fingerprint)
                again = launcher.submit(
                    JobSpec(
                        command=[sys.executable, "-c", code], name="keyed", idempotency_key="k1"
                    )
                )
            untraced = launcher.submit(
                JobSpec(command=[sys.executable, "-c", code], name="untraced")
            )
            outputs = {}
            for job in (traced, own, keyed, untraced):
                job.wait(timeout=60)
                outputs[job.id] = json.loads(
                    [line for line in job.logs() if line.startswith("{")][-1]
                )
    finally:
        stop_supervisor(root)
    context = submitter.get_span_context()
    assert outputs[traced.id] == {"TRACEPARENT": traceparent(context), "TRACESTATE": None}
    assert outputs[own.id] == {"TRACEPARENT": "mine", "TRACESTATE": None}
    assert outputs[untraced.id] == {"TRACEPARENT": None, "TRACESTATE": None}
    assert again.id == keyed.id
    assert outputs[keyed.id] == {"TRACEPARENT": traceparent(context), "TRACESTATE": None}


def test_azure_queue_bare_bodies_stay_bare_and_the_envelope_carries_the_context(
    azurite: Any, unique_name: str, monkeypatch: pytest.MonkeyPatch, otel: Any
) -> None:
    """What a native Azure Storage Queue reader sees: a bare body stays bare; portable's envelope holds the context."""
    import base64

    from azure.storage.queue import QueueClient

    monkeypatch.setenv("PT_PROPAGATION_AZURITE_KEY", azurite.endpoints["account_key"])
    query = f"queue_endpoint={azurite.endpoints['queue_endpoint']}&account_key_env=PT_PROPAGATION_AZURITE_KEY"
    client = QueueClient.from_connection_string(azurite.endpoints["connection_string"], unique_name)
    client.create_queue()
    try:
        url = f"azqueue://{azurite.endpoints['account_name']}/{unique_name}?{query}"
        with (
            trace.get_tracer("t").start_as_current_span("producer") as producer,
            open_topic(url) as topic,
        ):
            topic.publish(b"bare")
            topic.publish(b"wrapped", attributes={"kind": "test"})
        texts = [base64.b64decode(m.content) for m in client.peek_messages(max_messages=2)]
    finally:
        client.delete_queue()
    assert texts[0] == b"bare"
    header = texts[1].split(b"\n")[1]
    assert texts[1].startswith(b"portable/1 sha256=") and texts[1].endswith(b"\nwrapped")
    carried = json.loads(header)["a"]
    assert carried["kind"] == "test"
    assert carried["traceparent"].startswith(f"00-{producer.get_span_context().trace_id:032x}-")


def test_inside_a_span_of_its_own_the_loop_links_to_the_producer(
    otel: Any, unique_name: str
) -> None:
    """The conventions' default when processing happens in another span's scope: that span is the parent."""
    url = f"mem://{unique_name}"
    tracer = trace.get_tracer("t")
    with tracer.start_as_current_span("producer") as producer, open_topic(url) as topic:
        topic.publish(b"x")

    async def consume() -> Any:
        async with aio.open_subscription(url, lease=5) as sub:
            stop = asyncio.Event()

            async def handler(message: Any) -> None:
                stop.set()

            with tracer.start_as_current_span("consumer-app") as app:
                await sub.run(
                    handler, stop_event=stop, handle_signals=False, max_deliveries=None, poll=0.1
                )
            return app

    app = asyncio.run(consume())
    (span,) = process_spans(otel)
    assert span.parent is not None and span.parent.span_id == app.get_span_context().span_id
    (link,) = span.links
    assert link.context.trace_id == producer.get_span_context().trace_id


def test_the_context_is_written_as_the_w3c_propagator_writes_it(otel: Any) -> None:
    from opentelemetry.trace import (
        NonRecordingSpan,
        SpanContext,
        TraceFlags,
        TraceState,
        set_span_in_context,
    )
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from portable.telemetry._propagation import job_environment, message_context

    for flags, state in [(1, [("vendor", "v1"), ("other", "x=y")]), (0, [])]:
        parent = SpanContext(
            trace_id=0x0AF7651916CD43DD8448EB211C80319C, span_id=0xB7AD6B7169203331, is_remote=True,
            trace_flags=TraceFlags(flags), trace_state=TraceState(state),
        )  # fmt: skip
        with trace.get_tracer("t").start_as_current_span(
            "p", context=set_span_in_context(NonRecordingSpan(parent))
        ):
            expected: dict[str, str] = {}
            TraceContextTextMapPropagator().inject(expected)
            assert message_context(None) == expected
            assert job_environment({}) == {name.upper(): value for name, value in expected.items()}
            assert message_context({"traceparent": "00-mine"}) is None
            assert job_environment({"TRACESTATE": "mine"}) is None


@pytest.mark.parametrize("queue_url", ["sqs"], indirect=True)
def test_a_native_sqs_reader_sees_string_message_attributes(queue_url: str, otel: Any) -> None:
    """What boto3's receive_message answers for a message portable published in a span."""
    from botocore.client import BaseClient

    tracer = trace.get_tracer("t")
    with (
        tracer.start_as_current_span("producer") as producer,
        open_topic(queue_url, profile=profile(queue_url)) as topic,
    ):
        topic.publish(b"native", attributes={"kind": "test"})
        driver: Any = topic._driver
        raw = topic.as_(BaseClient).receive_message(
            QueueUrl=driver.queue_url, WaitTimeSeconds=2, MessageAttributeNames=["All"]
        )
    (message,) = raw["Messages"]
    attributes = message["MessageAttributes"]
    assert message["Body"] == "native"
    assert attributes["kind"] == {"DataType": "String", "StringValue": "test"}
    assert attributes["traceparent"]["DataType"] == "String"
    assert attributes["traceparent"]["StringValue"].startswith(
        f"00-{producer.get_span_context().trace_id:032x}-"
    )
