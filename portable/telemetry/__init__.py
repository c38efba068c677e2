"""Observability: what portable reports about every call it makes.

Portable instruments itself through :mod:`opentelemetry-api` when it is installed
(``pip install portable-cloud[otel]``) and a tracer or meter provider is set;
without either, each guarded call pays one flag check. The cost meter
(:mod:`portable.cost`) and the OpenTelemetry instrumentation are both
*observers* of the guard (:mod:`portable.telemetry._observe`): the guard tells
every registered observer when a call starts, when an attempt fails and when
the call ends.
"""

from __future__ import annotations

from ._observe import CallInfo, CallObserver, CallScope, add_observer, observing

__all__ = ["CallInfo", "CallObserver", "CallScope", "add_observer", "observing"]
