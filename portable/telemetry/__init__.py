"""Observability: what portable reports about every call it makes.

Portable instruments itself through :mod:`opentelemetry-api` when it is installed
(``pip install portable-cloud[otel]``) and a tracer or meter provider is set;
without either, each guarded call pays one flag check. The cost meter
(:mod:`portable.cost`) and the OpenTelemetry instrumentation are both
*observers* of the guard (:mod:`portable.telemetry._observe`): the guard tells
every registered observer when a call starts, when an attempt fails and when
the call ends.

When does the instrumentation turn on? Portable never imports opentelemetry itself
unless asked. Once a program has imported it, portable looks for a real (non-proxy)
global tracer or meter provider whenever a guard is made (each bucket, topic,
subscription, launcher or store opened; at most every 100 ms) and then hooks
opentelemetry-api's provider setters, so that a ``set_tracer_provider`` /
``set_meter_provider`` made later turns it on at that moment. :func:`instrument`
does it at once (and takes explicit providers); :func:`uninstrument` stops it.
"""

from __future__ import annotations

from typing import Any

from ._observe import CallInfo, CallObserver, CallScope, add_observer, observing

__all__ = ["CallInfo", "CallObserver", "CallScope", "add_observer", "instrument", "observing", "uninstrument"]


def instrument(tracer_provider: Any = None, meter_provider: Any = None) -> bool:
    """Trace and meter every portable call from now on, through OpenTelemetry.

    Args:
        tracer_provider: where spans go. Defaults to the global one (if a real one is set).
        meter_provider: where metrics go. Defaults to the global one (if a real one is set).

    Returns:
        Whether anything is instrumented now (False: no real provider is set or given yet;
        one set later through opentelemetry-api's setters turns it on then).

    Raises:
        MissingDependency: opentelemetry-api is not installed (``pip install portable-cloud[otel]``).
    """
    try:
        from . import _otel
    except ImportError as exc:
        from ..errors import MissingDependency

        raise MissingDependency(
            "portable.telemetry.instrument needs opentelemetry-api: pip install 'portable-cloud[otel]'"
        ) from exc
    return _otel.instrument(tracer_provider, meter_provider) is not None


def uninstrument() -> None:
    """Stop tracing and metering portable calls (no-op when opentelemetry-api is absent)."""
    try:
        from . import _otel
    except ImportError:
        return
    _otel.uninstrument()
