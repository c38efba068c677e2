"""The cost meter's OpenTelemetry metrics, read back with the SDK's in-memory reader.

The meter exports to the provider it is given (here one of the test's own, so
the process-wide provider is not touched); with no real provider it exports
nothing and makes no instrument.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.metrics", reason="the otel extra (opentelemetry-sdk) is not installed")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from portable.cost import CostMeter, CostSettings
from portable.cost._otel import CostInstruments
from portable.telemetry._observe import CallInfo


def _points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], float]]]:
    out: dict[str, list[tuple[dict[str, Any], float]]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out[metric.name] = [(dict(p.attributes or {}), p.value) for p in metric.data.data_points]
                assert metric.unit == {"portable.cost.requests": "{request}", "portable.cost.usd": "{USD}",
                                       "portable.cost.transfer": "By"}[metric.name]  # fmt: skip
    return out


def _call(meter: CostMeter, operation: str, args: tuple[Any, ...], result: Any, failures: int = 0) -> None:
    info = CallInfo("s3", "https://s3.us-east-1.amazonaws.com", "read", operation, f"{operation} k", args, "photos")  # type: ignore[call-arg]
    scope = meter.started(info)
    assert scope is not None
    for n in range(failures):
        scope.attempt_failed(n + 1, RuntimeError("503"), 0.1)
    scope.ended(None, result)


def test_requests_usd_and_bytes_are_exported_per_bucket_and_class() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    meter = CostMeter(CostSettings(egress="internet"), meter_provider=provider)
    _call(meter, "get", ("k",), b"x" * 2048, failures=1)  # two GETs
    _call(meter, "put", ("k", b"y" * 100, None), None)
    points = _points(reader)

    requests = {p[0]["portable.cost.price_class"]: p[1] for p in points["portable.cost.requests"]}
    assert requests == {"tier2": 2, "tier1": 1}
    attrs = points["portable.cost.requests"][0][0]
    assert attrs["cloud.provider"] == "aws"
    assert attrs["portable.cost.service"] == "s3-standard"
    assert attrs["portable.cost.resource"] == "photos"

    usd = {p[0]["portable.cost.price_class"]: p[1] for p in points["portable.cost.usd"]}
    assert usd["tier2"] == pytest.approx(2 * 0.0004 / 1000)
    assert usd["tier1"] == pytest.approx(0.005 / 1000)
    assert usd["egress"] == pytest.approx(2048 / 1024**3 * 0.09)
    assert sum(usd.values()) == pytest.approx(meter.report().usd)

    moved = {p[0]["portable.cost.direction"]: p[1] for p in points["portable.cost.transfer"]}
    assert moved == {"out": 2048, "in": 100}
    provider.shutdown()


def test_no_real_provider_means_no_instruments(monkeypatch: pytest.MonkeyPatch) -> None:
    from portable.telemetry import _otel

    monkeypatch.setattr(_otel, "_real_meter_provider", lambda: None)  # the global is the proxy
    assert CostInstruments.if_provider_set() is None
    assert CostMeter(CostSettings())._export is None
    meter = CostMeter(CostSettings(), export=False)
    assert meter._export is None
