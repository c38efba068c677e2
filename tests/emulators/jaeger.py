"""Jaeger v2 (all-in-one, in-memory storage): OTLP over HTTP in, the query HTTP API out.

``bash scripts/install-emulators.sh`` builds ``github.com/jaegertracing/jaeger/cmd/jaeger``
v1.76.0 from the Go module proxy into a per-user cache outside the clone, keyed by
version: ``${XDG_CACHE_HOME:-~/.cache}/portable/jaeger-v1.76.0/bin/jaeger``, with a
``built-from`` stamp (version, Go version, package); a binary with another stamp is
reported as not installed (rebuild), never run stale.

Jaeger v2 is an OpenTelemetry Collector distribution: it takes one YAML file
(``--config``), which `plan` writes to the work folder. Every listener binds
127.0.0.1 on a free port: the OTLP/HTTP receiver (``otlp_endpoint``, spans go to
``{otlp_endpoint}/v1/traces``), the query service's HTTP API (``query_url``: the
UI's ``/api/traces/{trace_id}``, ``/api/services`` and the v3 API under
``/api/v3/``), its gRPC API and the health-check extension (``health_url``). No
OTLP/gRPC receiver, no Jaeger/Zipkin receivers, no sampling server, no
Prometheus endpoint for Jaeger's own metrics (``metrics.level: none``).

Notes for test authors:
    - Storage is memory only (``max_traces`` 100 000): it starts empty and is lost on stop.
    - The pipeline batches for 200 ms (``processors.batch.timeout``), so a span becomes
      queryable a fraction of a second after the exporter's POST returns: poll the
      query API, do not read it once.
    - Trace ids in the query API are 32 lowercase hex digits (``format(trace_id, "032x")``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .harness import (
    LOOPBACK,
    Emulator,
    EmulatorInfo,
    LaunchPlan,
    free_port,
    http_request,
)

JAEGER_VERSION = "1.76.0"
PACKAGE = "github.com/jaegertracing/jaeger/cmd/jaeger"
#: Batch timeout of the traces pipeline (see the module notes).
BATCH_TIMEOUT = "200ms"


def cache_dir() -> Path:
    """Where the install script builds Jaeger: per user, outside any clone, keyed by version."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "portable" / f"jaeger-v{JAEGER_VERSION}"


def binary() -> Path:
    return cache_dir() / "bin" / "jaeger"


def stamp_matches(stamp: str) -> bool:
    """Whether a ``built-from`` stamp names this version and package (any Go version)."""
    fields = dict(part.split("=", 1) for part in stamp.split() if "=" in part)
    return fields.get("jaeger") == JAEGER_VERSION and fields.get("packages") == PACKAGE


def config_yaml(*, otlp_http: int, query_http: int, query_grpc: int, health: int) -> str:
    """The ``--config`` file: in-memory storage, OTLP/HTTP in, query API out, all on loopback.

    Written as JSON, which is YAML, so no YAML library is needed to produce it.
    """
    config = {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query", "healthcheckv2"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["batch"],
                    "exporters": ["jaeger_storage_exporter"],
                }
            },
            "telemetry": {
                "resource": {"service.name": "jaeger"},
                "metrics": {"level": "none"},
                "logs": {"level": "info"},
            },
        },
        "extensions": {
            "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": 100_000}}}},
            "jaeger_query": {
                "storage": {"traces": "memstore"},
                "http": {"endpoint": f"{LOOPBACK}:{query_http}"},
                "grpc": {"endpoint": f"{LOOPBACK}:{query_grpc}"},
            },
            "healthcheckv2": {
                "use_v2": True,
                "http": {"endpoint": f"{LOOPBACK}:{health}"},
            },
        },
        "receivers": {
            "otlp": {"protocols": {"http": {"endpoint": f"{LOOPBACK}:{otlp_http}"}}},
        },
        "processors": {"batch": {"timeout": BATCH_TIMEOUT}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
    }
    return json.dumps(config, indent=2) + "\n"


class Jaeger(Emulator):
    name = "jaeger"
    start_timeout = 60.0
    stop_grace = 10.0

    def available(self) -> tuple[bool, str]:
        exe = binary()
        if not exe.is_file():
            return False, f"{exe} is not built: bash scripts/install-emulators.sh (needs go)"
        stamp = cache_dir() / "built-from"
        if not stamp.is_file() or not stamp_matches(stamp.read_text()):
            return False, (
                f"{exe} has no built-from stamp for jaeger v{JAEGER_VERSION}: "
                "bash scripts/install-emulators.sh rebuilds it"
            )
        return True, ""

    def plan(self, workdir: Path) -> LaunchPlan:
        otlp_http, query_http, query_grpc, health = (free_port() for _ in range(4))
        config = workdir / "jaeger.yaml"
        config.write_text(
            config_yaml(
                otlp_http=otlp_http, query_http=query_http, query_grpc=query_grpc, health=health
            )
        )
        otlp = f"http://{LOOPBACK}:{otlp_http}"
        query = f"http://{LOOPBACK}:{query_http}"
        info = EmulatorInfo(
            name=self.name,
            host=LOOPBACK,
            port=otlp_http,
            pid=0,
            ports=(otlp_http, query_http, query_grpc, health),
            endpoints={
                "otlp_endpoint": otlp,
                "otlp_traces_url": f"{otlp}/v1/traces",
                "query_url": query,
                "query_grpc": f"{LOOPBACK}:{query_grpc}",
                "health_url": f"http://{LOOPBACK}:{health}/status",
            },
            env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": otlp,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
        )
        return LaunchPlan(argv=[str(binary()), "--config", str(config)], info=info)

    def health_check(self, info: EmulatorInfo, timeout: float) -> None:
        # Jaeger's own health extension, then the two listeners a test uses: the query API
        # must answer JSON and the OTLP receiver must accept an (empty) export request.
        status, body = http_request(info.endpoints["health_url"], timeout=timeout)
        if status != 200:
            raise RuntimeError(f"jaeger health answered {status}: {body[:200]!r}")
        status, body = http_request(info.endpoints["query_url"] + "/api/services", timeout=timeout)
        if status != 200 or "data" not in json.loads(body):
            raise RuntimeError(f"jaeger query answered {status}: {body[:200]!r}")
        status, body = http_request(
            info.endpoints["otlp_traces_url"],
            method="POST",
            headers={"Content-Type": "application/json"},
            body=b"{}",
            timeout=timeout,
        )
        if status != 200:
            raise RuntimeError(f"jaeger OTLP receiver answered {status}: {body[:200]!r}")


def round_trip(info: EmulatorInfo, timeout: float = 30.0) -> None:
    """Send one span as OTLP/JSON and read it back by trace id: the emulator's wire check.

    For ``tests/test_emulators_harness.py``'s ``WIRE_CHECKS`` (needs no OpenTelemetry package).
    """
    import secrets
    import time

    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    now = time.time_ns()
    payload = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "harness"}}]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "tests.emulators.jaeger"},
                        "spans": [
                            {
                                "traceId": trace_id,
                                "spanId": span_id,
                                "name": "harness round trip",
                                "kind": 1,
                                "startTimeUnixNano": str(now - 1_000_000),
                                "endTimeUnixNano": str(now),
                            }
                        ],
                    }
                ],
            }
        ]
    }
    status, body = http_request(
        info.endpoints["otlp_traces_url"],
        method="POST",
        headers={"Content-Type": "application/json"},
        body=json.dumps(payload).encode(),
        timeout=timeout,
    )
    if status != 200:
        raise AssertionError(f"OTLP export answered {status}: {body[:200]!r}")
    deadline = time.monotonic() + timeout
    while True:
        status, body = http_request(
            f"{info.endpoints['query_url']}/api/traces/{trace_id}", timeout=timeout
        )
        if status == 200:
            [found] = json.loads(body)["data"]
            [span] = found["spans"]
            if (span["spanID"], span["operationName"]) != (span_id, "harness round trip"):
                raise AssertionError(f"jaeger returned another span: {span!r}")
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"span {trace_id} not queryable after {timeout} s: {status}")
        time.sleep(0.1)
