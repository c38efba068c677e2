"""docs/observability.md's set-up example, run as written against a real Jaeger.

The block marked ``<!-- jaeger: otlp -->`` sets the global tracer provider, so it runs
in a child process of its own, with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing its
exporter (constructed with no arguments, as a reader would) at the ``jaeger`` emulator.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.docs_pages import DOCS, ENVIRONMENT, blocks
from tests.emulators.harness import EmulatorInfo
from tests.telemetry.test_jaeger import parent_of, poll, query, tags

PAGE = DOCS / "observability.md"
REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_pages_otlp_example_sends_its_trace_to_jaeger(
    jaeger: EmulatorInfo, tmp_path: Path
) -> None:
    [block] = [b for b in blocks(PAGE, "python") if b.marker == ("jaeger", "otlp")]
    env = {
        k: v for k, v in os.environ.items() if k not in ENVIRONMENT and not k.startswith("OTEL_")
    }
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = jaeger.endpoints["otlp_endpoint"]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    program = "\n" * (block.line - 1) + block.code
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    def take_order_trace() -> dict[str, Any] | None:
        status, body = query(jaeger, "/api/traces?service=orders-service&limit=20")
        if status != 200:
            return None
        for found in body.get("data") or []:
            if any(s["operationName"] == "take order" for s in found["spans"]):
                return dict(found)
        return None

    found = poll("the page's 'take order' trace", take_order_trace)
    [root] = [s for s in found["spans"] if s["operationName"] == "take order"]
    assert parent_of(root) is None
    # portable's publish span is the application span's child, in its trace
    publish = [s for s in found["spans"] if parent_of(s) == root["spanID"]]
    assert publish, found["spans"]
    assert tags(publish[0]).get("messaging.destination.name") == "orders"
