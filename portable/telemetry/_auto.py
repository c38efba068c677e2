"""When the OpenTelemetry instrumentation turns itself on: a look at each guard made."""

from __future__ import annotations

import sys
import time

__all__ = ["CHECK_INTERVAL", "check_providers"]


#: when :func:`check_providers` may look again (monotonic seconds), and how often at most
_next_check = 0.0
CHECK_INTERVAL = 0.1


def check_providers() -> None:
    """Register the OpenTelemetry observer if a tracer or meter provider was set since the last look.

    Called whenever a guard is made (each bucket, topic, subscription, launcher or store
    opened), at most once per :data:`CHECK_INTERVAL` seconds. It costs a look into
    ``sys.modules`` while nothing imported opentelemetry (no provider can be set then);
    :func:`portable.telemetry.instrument` does the same at once, whenever called.
    """
    global _next_check
    if "opentelemetry.trace" not in sys.modules and "opentelemetry.metrics" not in sys.modules:
        return
    now = time.monotonic()
    if now < _next_check:
        return
    _next_check = now + CHECK_INTERVAL
    try:
        from ._otel import refresh

        refresh()
    except Exception:  # instrumentation must never fail opening a bucket
        pass
