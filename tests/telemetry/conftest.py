"""The OpenTelemetry SDK, installed once per test process, and a fixture that reads what it recorded.

The global tracer and meter providers can be set once per process, so the first test that
asks for :func:`otel` sets them (an SDK ``TracerProvider`` exporting to an
``InMemorySpanExporter`` through a ``SimpleSpanProcessor``, and a ``MeterProvider`` read by an
``InMemoryMetricReader`` with DELTA temporality), and every later one reuses them. Each test
starts with no span and no metric point recorded, and portable instrumented
(:func:`portable.telemetry.instrument`); at its end portable is uninstrumented again, so the
other tests of the same worker process pay nothing.

Other test files (propagation, cost, Jaeger) use it too::

    def test_something(otel):
        with open_bucket("mem://t") as bucket:
            bucket.put("k", b"v")
        span = otel.span("put t")
        assert span.attributes["portable.storage.key"] == "k"
        assert otel.points("portable.client.requests")  # [(attributes, value), ...]
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the telemetry tests need opentelemetry-sdk (the dev extra)")

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import portable.telemetry

_DELTA = {
    Counter: AggregationTemporality.DELTA,
    UpDownCounter: AggregationTemporality.CUMULATIVE,
    Histogram: AggregationTemporality.DELTA,
    ObservableCounter: AggregationTemporality.DELTA,
    ObservableUpDownCounter: AggregationTemporality.CUMULATIVE,
    ObservableGauge: AggregationTemporality.CUMULATIVE,
}


class Telemetry:
    """What the SDK recorded: finished spans and metric points since the test began."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.reader = InMemoryMetricReader(preferred_temporality=_DELTA)  # type: ignore[arg-type]
        resource = Resource.create({"service.name": "portable-tests"})
        self.tracer_provider = TracerProvider(resource=resource)
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.meter_provider = MeterProvider(metric_readers=[self.reader], resource=resource)
        self._collected: list[tuple[str, dict[str, Any], Any]] = []

    # -- spans -----------------------------------------------------------------------------
    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """The finished spans, in the order they ended (only those called ``name`` if given)."""
        found = list(self.exporter.get_finished_spans())
        return found if name is None else [s for s in found if s.name == name]

    def span(self, name: str) -> ReadableSpan:
        """The one finished span called ``name`` (fails if there are none or several)."""
        found = self.spans(name)
        assert len(found) == 1, f"{len(found)} spans called {name!r}; all: {[s.name for s in self.spans()]}"
        return found[0]

    def names(self) -> list[str]:
        """The names of the finished spans, in the order they ended."""
        return [s.name for s in self.spans()]

    # -- metrics ---------------------------------------------------------------------------
    def collect(self) -> None:
        """Read the metric points recorded since the last read (DELTA) into :meth:`points`."""
        data = self.reader.get_metrics_data()
        if data is None:
            return
        for resource_metrics in data.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:  # a histogram point
                            value = point
                        self._collected.append((metric.name, dict(point.attributes or {}), value))

    def points(self, name: str, **where: Any) -> list[tuple[dict[str, Any], Any]]:
        """``(attributes, value)`` of every point of metric ``name`` since the test began.

        ``where`` filters by attribute (dots as ``__``: ``portable__operation="put"``); a
        histogram's value is its data point (``.count``, ``.sum``, ``.bucket_counts``).
        """
        self.collect()
        wanted = {k.replace("__", "."): v for k, v in where.items()}
        return [
            (attrs, value)
            for metric, attrs, value in self._collected
            if metric == name and all(attrs.get(k) == v for k, v in wanted.items())
        ]

    def total(self, name: str, **where: Any) -> float:
        """The sum of a counter's points (a histogram's: of their counts) matching ``where``."""
        return sum(getattr(v, "count", v) for _, v in self.points(name, **where))

    def metric_names(self) -> set[str]:
        self.collect()
        return {metric for metric, _, _ in self._collected}

    def clear(self) -> None:
        """Forget every span and metric point recorded so far."""
        self.exporter.clear()
        self.reader.get_metrics_data()  # DELTA: what was recorded until now is read and dropped
        self._collected.clear()


_lock = threading.Lock()
_installed: Telemetry | None = None


def installed_telemetry() -> Telemetry:
    """The SDK providers of this process, set as the global ones on first use."""
    global _installed
    with _lock:
        if _installed is None:
            telemetry = Telemetry()
            trace.set_tracer_provider(telemetry.tracer_provider)
            metrics.set_meter_provider(telemetry.meter_provider)
            assert trace.get_tracer_provider() is telemetry.tracer_provider, "another test set a tracer provider"
            _installed = telemetry
        return _installed


@pytest.fixture(scope="session")
def otel_providers() -> Telemetry:
    """The process's SDK providers (set once per worker process; see :func:`otel`)."""
    return installed_telemetry()


@pytest.fixture
def otel(otel_providers: Telemetry) -> Iterator[Telemetry]:
    """Portable instrumented with the in-memory SDK for one test, starting with nothing recorded."""
    assert portable.telemetry.instrument(), "portable did not instrument itself with the SDK providers"
    otel_providers.clear()
    try:
        yield otel_providers
    finally:
        portable.telemetry.uninstrument()
        otel_providers.clear()
