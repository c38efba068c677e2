"""The "off" paths: no opentelemetry, or no provider set, produce nothing and raise nothing; and
turning on by setting a provider later, after portable was imported and buckets were opened.

Each case runs in a fresh interpreter (the global providers can be set once per process, and
these tests must see a process where none was set).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from portable.storage import open_bucket

from .conftest import Telemetry

#: a block that makes every opentelemetry module unimportable, as if the package were absent
BLOCK_OTEL = """
import importlib.abc, sys
class _NoOtel(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NoOtel())
"""

#: what every case does: storage, messaging and an idempotent call, then reports what it saw
WORKLOAD = """
from portable.idempotency import MemoryStore, fingerprint, run_once
from portable.messaging import open_subscription, open_topic
from portable.storage import open_bucket
from portable.telemetry._observe import CLAIM_OBSERVERS, OBSERVERS

def workload(name):
    with open_bucket(f"mem://{name}") as bucket:
        bucket.put("k", b"v")
        assert bucket.get("k") == b"v"
    with open_topic(f"mem://{name}") as topic, open_subscription(f"mem://{name}") as sub:
        topic.publish(b"m")
        [m] = sub.receive(wait=1)
        m.ack()
    assert run_once(MemoryStore(), "key", fingerprint(b"p"), lambda: 1) == 1
"""


def run(script: str) -> dict[str, object]:
    """Run ``script`` in a fresh interpreter with this tree's packages; it prints one JSON line last."""
    env = dict(os.environ)
    for name in ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER", "OTEL_SDK_DISABLED"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_without_opentelemetry_nothing_is_observed_and_nothing_raises() -> None:
    seen = run(
        BLOCK_OTEL
        + WORKLOAD
        + """
import json, sys
import portable.telemetry
from portable.errors import MissingDependency
workload("no-otel")
try:
    portable.telemetry.instrument()
    refused = False
except MissingDependency as exc:
    refused = "portable-cloud[otel]" in str(exc)
portable.telemetry.uninstrument()  # a no-op, not an error
workload("no-otel-2")
print(json.dumps({
    "observers": len(OBSERVERS), "claim_observers": len(CLAIM_OBSERVERS), "refused": refused,
    "otel_loaded": any(m.startswith("opentelemetry") for m in sys.modules),
}))
"""
    )
    assert seen == {"observers": 0, "claim_observers": 0, "refused": True, "otel_loaded": False}


def test_with_the_api_but_no_provider_nothing_is_observed() -> None:
    seen = run(
        WORKLOAD
        + """
import json
from opentelemetry import metrics, trace  # imported, but no provider is set: the globals are proxies
import portable.telemetry
workload("no-provider")
instrumented = portable.telemetry.instrument()
workload("no-provider-2")
print(json.dumps({"observers": len(OBSERVERS), "claim_observers": len(CLAIM_OBSERVERS), "instrumented": instrumented}))
"""
    )
    assert seen == {"observers": 0, "claim_observers": 0, "instrumented": False}


def test_portable_never_imports_opentelemetry_by_itself() -> None:
    seen = run(
        WORKLOAD
        + """
import json, sys
workload("never-imported")
print(json.dumps({"loaded": sorted(m for m in sys.modules if m.startswith("opentelemetry"))}))
"""
    )
    assert seen == {"loaded": []}


SDK = """
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
exporter = InMemorySpanExporter()
tracer_provider = TracerProvider()
tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
reader = InMemoryMetricReader()
meter_provider = MeterProvider(metric_readers=[reader])

def metric_names():
    data = reader.get_metrics_data()
    return sorted({m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}) if data else []
"""


def test_a_provider_set_after_buckets_were_opened_turns_tracing_on_at_once() -> None:
    """opentelemetry imported, a bucket opened, then the provider set: the bucket's next call is a span."""
    seen = run(
        SDK
        + """
import json
from opentelemetry import trace
from portable.storage import open_bucket
bucket = open_bucket("mem://late")
bucket.put("before", b"1")
before = [s.name for s in exporter.get_finished_spans()]
trace.set_tracer_provider(tracer_provider)
bucket.put("after", b"2")
print(json.dumps({"before": before, "after": [s.name for s in exporter.get_finished_spans()]}))
"""
    )
    assert seen == {"before": [], "after": ["put late"]}


def test_a_provider_set_before_opentelemetry_was_seen_turns_on_with_the_next_bucket_opened() -> None:
    """portable imported and a bucket opened before the program imported opentelemetry at all."""
    seen = run(
        """
import json
from portable.storage import open_bucket
first = open_bucket("mem://first")
first.put("k", b"1")
"""
        + SDK
        + """
from opentelemetry import metrics, trace
trace.set_tracer_provider(tracer_provider)
metrics.set_meter_provider(meter_provider)
first.put("k", b"2")  # no guard was made since: not seen yet
second = open_bucket("mem://second")  # a guard is made: providers are looked for
first.put("k", b"3")
second.put("k", b"4")
print(json.dumps({"spans": [s.name for s in exporter.get_finished_spans()], "metrics": metric_names()}))
"""
    )
    assert seen["spans"] == ["put first", "put second"]
    assert "portable.client.operation.duration" in seen["metrics"]  # type: ignore[operator]


def test_a_meter_provider_alone_gives_metrics_and_no_spans() -> None:
    seen = run(
        SDK
        + WORKLOAD
        + """
import json
from opentelemetry import metrics, trace
metrics.set_meter_provider(meter_provider)
workload("metrics-only")
print(json.dumps({"observers": len(OBSERVERS), "spans": len(exporter.get_finished_spans()), "metrics": metric_names()}))
"""
    )
    assert seen["observers"] == 1 and seen["spans"] == 0
    assert {"portable.client.operation.duration", "portable.client.requests", "portable.idempotency.claims"} <= set(
        seen["metrics"]  # type: ignore[arg-type]
    )


def test_uninstrumented_calls_record_nothing(otel: Telemetry) -> None:
    import portable.telemetry
    from portable.telemetry._observe import OBSERVERS

    portable.telemetry.uninstrument()
    assert not OBSERVERS
    with open_bucket("mem://off-again") as bucket:  # a guard made: it must not turn itself back on
        bucket.put("k", b"v")
    assert not OBSERVERS
    assert otel.spans() == []
    assert otel.points("portable.client.requests") == []


@pytest.mark.parametrize("broken", ["started", "ended"])
def test_a_broken_observer_never_fails_the_call(otel: Telemetry, broken: str) -> None:
    from typing import Any

    from portable.telemetry import add_observer

    class Broken:
        def started(self, info: Any) -> Any:
            if broken == "started":
                raise RuntimeError("observer bug")
            return self

        def attempt_failed(self, *args: Any) -> None:
            raise RuntimeError("observer bug")

        def rejected(self, exc: BaseException) -> None:
            raise RuntimeError("observer bug")

        def ended(self, error: BaseException | None, result: Any) -> None:
            raise RuntimeError("observer bug")

    remove = add_observer(Broken())
    try:
        with open_bucket("mem://broken-observer") as bucket:
            bucket.put("k", b"v")
            assert bucket.get("k") == b"v"
    finally:
        remove()
    assert otel.names() == ["put broken-observer", "get broken-observer"]  # the others still hear of it
