"""Spans, attributes and events of guarded calls on the embedded providers (mem://, file://, sqlite://).

Each test reads what the OpenTelemetry SDK recorded in memory (the ``otel`` fixture of
tests/telemetry/conftest.py): one CLIENT span per guarded call, named and attributed per the
semantic conventions, with ``retry`` and ``breaker.rejected`` events.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

import portable.aio
from portable.errors import CircuitOpen, NotFound, Unavailable
from portable.idempotency import MemoryStore, SqliteStore, fingerprint, run_once
from portable.messaging import open_subscription, open_topic
from portable.resilience import BreakerPolicy, ResiliencePolicy, RetryPolicy
from portable.storage import open_bucket
from portable.telemetry import add_observer
from portable.telemetry._observe import key_hash
from portable.testing.chaos import chaos_of

from .conftest import Telemetry

#: quick retries and a breaker that opens after 4 failed calls out of 4
QUICK = ResiliencePolicy(
    retry=RetryPolicy(max_attempts=3, initial_backoff=0.001, max_backoff=0.002),
    breaker=BreakerPolicy(window=4, min_calls=4, failure_rate=1.0, open_seconds=60),
    retry_budget=None,
)


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


# -- storage -------------------------------------------------------------------------------
def test_a_put_and_a_get_on_mem_are_client_spans_named_operation_and_bucket(otel: Telemetry) -> None:
    with open_bucket("mem://span-names") as bucket:
        bucket.put("reports/1.json", b"12345")
        assert bucket.get("reports/1.json") == b"12345"
    assert otel.names() == ["put span-names", "get span-names"]
    put = otel.span("put span-names")
    assert put.kind is SpanKind.CLIENT
    assert put.status.status_code is StatusCode.UNSET
    assert attrs(put) == {
        "portable.provider": "mem",
        "portable.operation": "put",
        "portable.op_class": "write",
        "portable.endpoint": "mem://span-names",
        "portable.storage.bucket": "span-names",
        "portable.storage.key": "reports/1.json",
    }
    assert put.instrumentation_scope is not None and put.instrumentation_scope.name == "portable"
    assert attrs(otel.span("get span-names"))["portable.operation"] == "get"


def test_a_failed_call_has_error_type_and_status_error(otel: Telemetry) -> None:
    with open_bucket("mem://span-errors") as bucket, pytest.raises(NotFound):
        bucket.get("missing")
    span = otel.span("get span-errors")
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)["error.type"] == "NotFound"
    assert "missing" in (span.status.description or "")
    assert not span.events  # NotFound is not retried


def test_file_bucket_spans_name_the_folder(otel: Telemetry, tmp_path: Path) -> None:
    root = tmp_path / "files-bucket"
    root.mkdir()
    with open_bucket(f"file://{root}") as bucket:
        bucket.put("a/b.txt", b"xyz")
        assert bucket.head("a/b.txt").size == 3
        bucket.delete("a/b.txt")
    assert otel.names() == ["put files-bucket", "head files-bucket", "delete files-bucket"]
    assert {attrs(s)["portable.provider"] for s in otel.spans()} == {"file"}
    assert attrs(otel.span("delete files-bucket"))["portable.storage.key"] == "a/b.txt"


class EndOutageAfter:
    """An observer that ends a chaos outage after ``n`` failed attempts (so the next attempt succeeds)."""

    def __init__(self, chaos: Any, n: int) -> None:
        self.chaos, self.left = chaos, n

    def started(self, info: Any) -> EndOutageAfter:
        return self

    def attempt_failed(self, attempt: int, exc: BaseException, retry_in: float | None) -> None:
        self.left -= 1
        if self.left == 0:
            self.chaos.end_outage()

    def rejected(self, exc: BaseException) -> None:
        pass

    def ended(self, error: BaseException | None, result: Any) -> None:
        pass


def test_a_retried_call_has_one_retry_event_per_retry_then_succeeds(otel: Telemetry) -> None:
    with open_bucket("chaos+mem://span-retry?error_rate=0", policy=QUICK) as bucket:
        bucket.put("k", b"v")
        otel.clear()
        chaos = chaos_of(bucket)
        chaos.start_outage("unavailable")
        remove = add_observer(EndOutageAfter(chaos, 2))
        try:
            assert bucket.get("k") == b"v"
        finally:
            remove()
    span = otel.span("get span-retry")
    assert span.status.status_code is StatusCode.UNSET
    retries = [e for e in span.events if e.name == "retry"]
    assert [e.attributes["portable.retry.attempt"] for e in retries] == [1, 2]  # type: ignore[index]
    assert all(e.attributes["error.type"] == "Unavailable" for e in retries)  # type: ignore[index]
    assert all(0 <= e.attributes["portable.retry.delay"] <= 0.01 for e in retries)  # type: ignore[index,operator]
    assert attrs(span)["portable.retry.count"] == 2
    assert otel.total("portable.client.retries", portable__operation="get") == 2
    assert otel.total("portable.client.requests", portable__operation="get") == 3
    assert otel.total("portable.client.operation.duration", portable__operation="get") == 1


def test_an_open_breaker_refuses_with_a_breaker_rejected_event(otel: Telemetry) -> None:
    with open_bucket("chaos+mem://span-breaker?error_rate=0", policy=QUICK) as bucket:
        chaos_of(bucket).start_outage("unavailable")
        for _ in range(4):
            with pytest.raises(Unavailable):
                bucket.get("k")
        otel.clear()
        with pytest.raises(CircuitOpen):
            bucket.get("k")
    span = otel.span("get span-breaker")
    assert [e.name for e in span.events] == ["breaker.rejected"]
    assert span.events[0].attributes["portable.breaker.name"].endswith(":read")  # type: ignore[index,union-attr]
    assert attrs(span)["error.type"] == "CircuitOpen"
    assert span.status.status_code is StatusCode.ERROR
    assert otel.total("portable.client.rejections", portable__rejected_by="breaker") == 1
    assert otel.points("portable.client.requests") == []  # the refused call sent nothing
    assert otel.total("portable.client.operation.duration", portable__outcome="error") == 1


def test_a_spent_retry_budget_is_a_retry_budget_exhausted_event(otel: Telemetry) -> None:
    from portable.resilience import RetryBudget

    policy = ResiliencePolicy(
        retry=RetryPolicy(max_attempts=5, initial_backoff=0.001, max_backoff=0.002),
        breaker=None,
        retry_budget=RetryBudget(ratio=0, min_per_second=0, max_tokens=1),
    )
    with open_bucket("chaos+mem://span-budget?error_rate=0", policy=policy) as bucket:
        chaos_of(bucket).start_outage("unavailable")
        with pytest.raises(Unavailable, match="retry budget"):
            bucket.get("k")
    span = otel.span("get span-budget")
    assert [e.name for e in span.events] == ["retry", "retry_budget.exhausted"]
    assert span.events[1].attributes["error.type"] == "Unavailable"  # type: ignore[index]
    assert attrs(span)["error.type"] == "Unavailable"
    assert otel.total("portable.client.requests", portable__target="span-budget") == 2
    assert otel.total("portable.client.rejections", portable__rejected_by="retry_budget") == 1


def test_breaker_state_changes_are_counted(otel: Telemetry) -> None:
    with open_bucket("chaos+mem://span-breaker-metric?error_rate=0", policy=QUICK) as bucket:
        with chaos_of(bucket).outage("unavailable"):
            for _ in range(4):
                with pytest.raises(Unavailable):
                    bucket.get("k")
        bucket._guard.breaker("read").force("closed")  # type: ignore[union-attr]
    changes = otel.points("portable.breaker.state_changes")
    states = sorted((a["portable.breaker.previous_state"], a["portable.breaker.state"]) for a, _ in changes)
    assert states == [("closed", "open"), ("open", "closed")]
    assert all(a["portable.breaker.name"].startswith("mem:chaos+mem://span-breaker-metric") for a, _ in changes)


def test_spans_nest_under_the_callers_span(otel: Telemetry) -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as parent, open_bucket("mem://span-parent") as bucket:
        bucket.put("k", b"v")
    child = otel.span("put span-parent")
    assert child.parent is not None and child.parent.span_id == parent.get_span_context().span_id
    assert child.context.trace_id == parent.get_span_context().trace_id


def test_driver_code_runs_inside_the_call_span(otel: Telemetry) -> None:
    """What a driver does (an SDK's own instrumentation, a propagator) sees the call's span as current."""
    seen: list[Any] = []
    with open_bucket("mem://span-current") as bucket:
        guard = bucket._guard
        guard.call("read", "probe span-current", lambda: seen.append(trace.get_current_span()))
    span = otel.span("probe span-current")
    assert seen[0].get_span_context().span_id == span.context.span_id
    assert trace.get_current_span() is trace.INVALID_SPAN  # detached again


def test_secrets_in_an_endpoint_or_an_error_never_reach_a_span(otel: Telemetry) -> None:
    """The endpoint attribute is redacted, and so is the status text a failure leaves."""
    from portable.driver import Classifier
    from portable.resilience import Guard

    guard = Guard("s3", "https://127.0.0.1:9/acct?sig=SIGSECRET123&x=1", Classifier(), QUICK, target="b")

    def fails() -> None:
        raise RuntimeError("denied: password=PWSECRET456 Authorization: Bearer TOKSECRET789")

    with pytest.raises(Exception, match="denied"):
        guard.call("read", "get k", fails)
    [span] = otel.spans()
    text = repr(dict(span.attributes or {})) + (span.status.description or "") + repr(
        [dict(e.attributes or {}) for e in span.events]
    )
    for secret in ("SIGSECRET123", "PWSECRET456", "TOKSECRET789"):
        assert secret not in text
    assert attrs(span)["portable.endpoint"].startswith("https://127.0.0.1:9/acct?sig=***")
    assert attrs(span)["server.address"] == "127.0.0.1" and attrs(span)["server.port"] == 9


def test_a_driver_batch_is_one_span_with_its_size(otel: Telemetry) -> None:
    with open_bucket("mem://span-batch") as bucket:
        bucket.put_many({"a": b"1", "b": b"22", "c": b"333"})
        assert bucket.get_many(["a", "b", "c"]) == {"a": b"1", "b": b"22", "c": b"333"}
        bucket.copy_many({"a": "a2"})
        bucket.delete_many(["a", "b"])
    assert otel.names() == ["put_many span-batch", "get_many span-batch", "copy_many span-batch", "delete_many span-batch"]
    assert attrs(otel.span("put_many span-batch"))["portable.storage.batch.count"] == 3
    assert attrs(otel.span("delete_many span-batch"))["portable.storage.batch.count"] == 2
    assert otel.total("portable.client.io", network__io__direction="transmit", portable__operation="put_many") == 6
    assert otel.total("portable.client.io", network__io__direction="receive", portable__operation="get_many") == 6


def test_an_async_driver_batch_is_one_span(otel: Telemetry) -> None:
    async def main() -> None:
        async with portable.aio.open_bucket("mem://span-abatch") as bucket:
            await bucket.put_many({"a": b"1", "b": b"22"})
            assert await bucket.get_many(["a", "b"]) == {"a": b"1", "b": b"22"}
            await bucket.delete_many(["a", "b"])

    asyncio.run(main())
    assert otel.names() == ["put_many span-abatch", "get_many span-abatch", "delete_many span-abatch"]
    assert attrs(otel.span("get_many span-abatch"))["portable.storage.batch.count"] == 2


def test_an_item_that_failed_in_a_batch_is_retried_alone_in_a_span_of_its_own(otel: Telemetry) -> None:
    with open_bucket("chaos+mem://span-batch-retry?error_rate=0", policy=QUICK) as bucket:
        bucket.put("a", b"1")
        otel.clear()
        chaos = chaos_of(bucket)
        chaos.start_outage("unavailable")
        remove = add_observer(EndOutageAfter(chaos, 1))  # the batch's item fails, then its first retry
        try:
            assert bucket.get_many(["a"]) == {"a": b"1"}
        finally:
            remove()
    assert otel.names() == ["get_many span-batch-retry", "get span-batch-retry"]
    alone = otel.span("get span-batch-retry")
    assert [e.name for e in alone.events] == ["retry"]
    assert attrs(alone)["portable.storage.key"] == "a"


# -- async face ----------------------------------------------------------------------------
def test_the_async_face_makes_the_same_spans(otel: Telemetry) -> None:
    async def main() -> None:
        async with portable.aio.open_bucket("mem://span-async") as bucket:
            await bucket.put("k", b"abc")
            assert await bucket.get("k") == b"abc"
            with pytest.raises(NotFound):
                await bucket.get("nope")

    asyncio.run(main())
    assert otel.names() == ["put span-async", "get span-async", "get span-async"]
    ok, failed = otel.spans("get span-async")
    assert attrs(ok)["portable.storage.key"] == "k" and attrs(failed)["error.type"] == "NotFound"
    assert otel.total("portable.client.io", network__io__direction="receive", portable__target="span-async") == 3


def test_concurrent_async_calls_each_get_their_own_span_under_their_task(otel: Telemetry) -> None:
    tracer = trace.get_tracer("test")

    async def one(bucket: Any, i: int) -> int:
        with tracer.start_as_current_span(f"task-{i}"):
            await bucket.put(f"k{i}", b"x")
            return trace.get_current_span().get_span_context().span_id

    async def main() -> list[int]:
        async with portable.aio.open_bucket("mem://span-gather") as bucket:
            return list(await asyncio.gather(*(one(bucket, i) for i in range(8))))

    parents = asyncio.run(main())
    puts = otel.spans("put span-gather")
    assert len(puts) == 8
    assert sorted(p.parent.span_id for p in puts) == sorted(parents)  # type: ignore[union-attr]


# -- messaging -----------------------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["mem", "sqlite"])
def test_publish_receive_ack_are_send_receive_settle_spans(otel: Telemetry, scheme: str, tmp_path: Path) -> None:
    url = "mem://span-orders" if scheme == "mem" else f"sqlite://{tmp_path}/q.db?name=span-orders"
    with open_topic(url) as topic, open_subscription(url) as sub:
        message_id = topic.publish(b"hello")
        topic.publish_batch([b"a", b"bb"])
        got = sub.receive(max_messages=3, wait=1)
        assert len(got) == 3
        for message in got:
            message.ack()
    system = "mem" if scheme == "mem" else "sqlite"
    publish = otel.spans("publish span-orders")
    assert len(publish) == 2
    single, batch = publish
    assert attrs(single)["messaging.operation.type"] == "send"
    assert attrs(single)["messaging.system"] == system
    assert attrs(single)["messaging.destination.name"] == "span-orders"
    assert attrs(single)["messaging.message.id"] == message_id
    assert attrs(batch)["messaging.batch.message_count"] == 2
    assert attrs(batch)["portable.operation"] == "publish_batch"
    receives = otel.spans("receive span-orders")
    assert receives and all(attrs(r)["messaging.operation.type"] == "receive" for r in receives)
    assert sum(attrs(r).get("messaging.batch.message_count", 0) for r in receives) == 3
    acks = otel.spans("ack span-orders")
    assert len(acks) == 3 and all(attrs(a)["messaging.operation.type"] == "settle" for a in acks)
    # a send span (no "create" span) is PRODUCER, as the messaging conventions say; every other call CLIENT
    assert all(s.kind is (SpanKind.PRODUCER if s.name.startswith("publish ") else SpanKind.CLIENT) for s in otel.spans())
    assert any(s.kind is SpanKind.PRODUCER for s in otel.spans())
    assert otel.total("portable.client.io", network__io__direction="transmit", portable__target="span-orders") == 8
    assert otel.total("portable.client.io", network__io__direction="receive", portable__target="span-orders") == 8
    sent = otel.points("messaging.client.sent.messages")
    assert sum(v for _, v in sent) == 3
    assert {a["messaging.destination.name"] for a, _ in sent} == {"span-orders"}
    assert {a["messaging.system"] for a, _ in sent} == {system}
    assert otel.total("messaging.client.consumed.messages", messaging__destination__name="span-orders") == 3


def test_async_publish_and_receive_on_sqlite(otel: Telemetry, tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/aq.db?name=span-aorders"

    async def main() -> None:
        async with portable.aio.open_topic(url) as topic, portable.aio.open_subscription(url) as sub:
            await topic.publish(b"hello")
            [message] = await sub.receive(max_messages=1, wait=1)
            await message.ack()

    asyncio.run(main())
    assert attrs(otel.span("publish span-aorders"))["messaging.operation.type"] == "send"
    assert any(attrs(r).get("messaging.batch.message_count") == 1 for r in otel.spans("receive span-aorders"))
    assert attrs(otel.span("ack span-aorders"))["messaging.operation.type"] == "settle"


# -- idempotency ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_claims_are_spans_with_the_key_hash_and_the_outcome_event(
    otel: Telemetry, kind: str, tmp_path: Path
) -> None:
    store = MemoryStore() if kind == "memory" else SqliteStore(str(tmp_path / "idem.db"))
    key = "order-4711"
    assert run_once(store, key, fingerprint(b"charge"), lambda: {"ok": 1}) == {"ok": 1}
    assert run_once(store, key, fingerprint(b"charge"), lambda: {"ok": 2}) == {"ok": 1}
    first, second = otel.spans(f"claim {type(store).__name__}")  # a low-cardinality name
    assert attrs(first)["portable.idempotency.key_hash"] == attrs(second)["portable.idempotency.key_hash"] == key_hash(key)
    assert [e.attributes["portable.idempotency.outcome"] for e in (*first.events, *second.events)] == [  # type: ignore[index]
        "acquired",
        "completed",
    ]
    assert [e.name for e in first.events] == ["idempotency.outcome"]
    assert key not in str([attrs(s) for s in otel.spans()])  # the key itself is not recorded
    assert attrs(first)["portable.idempotency.store"] == type(store).__name__
    assert otel.total("portable.idempotency.claims", portable__idempotency__outcome="completed") == 1
    assert otel.total("portable.idempotency.claims", portable__idempotency__outcome="acquired") == 1


def test_an_async_claim_is_a_span_too(otel: Telemetry) -> None:
    from portable.idempotency import arun_once

    store = MemoryStore()

    async def effect() -> int:
        return 7

    async def main() -> None:
        assert await arun_once(store, "a-key", fingerprint(b"x"), effect) == 7
        assert await arun_once(store, "a-key", fingerprint(b"x"), effect) == 7

    asyncio.run(main())
    spans = otel.spans("claim MemoryStore")
    assert {attrs(s)["portable.idempotency.key_hash"] for s in spans} == {key_hash("a-key")}
    assert [attrs(s)["portable.idempotency.outcome"] for s in spans] == ["acquired", "completed"]


# -- compute -------------------------------------------------------------------------------
def test_launcher_calls_are_spans_submit_and_wait(otel: Telemetry, tmp_path: Path) -> None:
    import sys

    from portable.compute import JobSpec, open_launcher

    with open_launcher(f"local://{tmp_path}/jobs") as launcher:
        job = launcher.submit(JobSpec(name="span-job", command=[sys.executable, "-c", "print(1)"]))
        assert job.wait(timeout=60).state == "SUCCEEDED"
    names = otel.names()
    assert "submit jobs" in names and "wait jobs" in names, names
    wait = otel.spans("wait jobs")[-1]
    assert attrs(wait)["portable.compute.job.id"] == job.id
    assert attrs(otel.span("submit jobs"))["portable.op_class"] == "submit"


@pytest.mark.parametrize(
    ("endpoint", "server"),
    [
        ("https://s3.eu-west-1.amazonaws.com", ("s3.eu-west-1.amazonaws.com", 443)),
        ("http://127.0.0.1:5000", ("127.0.0.1", 5000)),
        ("http://[::1]:10000/devstoreaccount1/c", ("::1", 10000)),
        ("chaos+http://127.0.0.1:9", ("127.0.0.1", 9)),
        ("10.0.0.1:9092,10.0.0.2:9092", ("10.0.0.1", 9092)),
        ("localhost:8085", ("localhost", 8085)),
        ("pubsub.googleapis.com", ("pubsub.googleapis.com", None)),
        ("mem://orders", None),
        ("file:///tmp/x", None),
        ("sqlite:///tmp/q.db", None),
        ("", None),
    ],
)
def test_server_address_and_port_of_an_endpoint(endpoint: str, server: tuple[str, int | None] | None) -> None:
    from portable.telemetry._otel import _server

    assert _server(endpoint) == server
