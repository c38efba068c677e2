"""Trace context through messages and jobs: W3C ``traceparent`` / ``tracestate``, the consumer's spans and metrics.

Publishing (both faces) asks :func:`message_context` for the attributes to add
to a message when it is made, and again inside the guarded publish call, where the
guard's ``send`` span is current (``Topic._sender``): the context in the W3C Trace Context form
(``traceparent``, and ``tracestate`` when it is not empty), written by
OpenTelemetry's ``TraceContextTextMapPropagator``, never the global propagator
(so no ``baggage`` or vendor header rides along, and the names are the same
on every provider). A message that already carries a ``traceparent`` (the
caller's own, or a CloudEvent's distributed-tracing extension, ``ce_traceparent``
/ ``ce-traceparent`` in binary mode) gets nothing added.

The consumer loops (``Subscription.run``, ``AsyncSubscription.run``) handle each
message inside :meth:`ConsumerTelemetry.processing`: a ``process`` span (kind CONSUMER) that
links to the message's creation context and, when no span is current in the
worker, has it as its parent too (semantic conventions: "Message creation
context as parent of Process span", single-message processing); when the loop
runs inside a span of the caller's, that span is the parent and the creation
context only a link (the conventions' default). Settling is recorded as
``settle`` events on the process span (the guard's own spans of the ack calls
are its children), the idempotency outcomes ``skipped`` / ``deferred`` as
events too.

Metrics (when a meter provider is set): ``messaging.process.duration``
(histogram, s), ``portable.messaging.consumer.in_flight`` (UpDownCounter,
``{message}``: messages whose handling is under way) and
``portable.messaging.consumer.lag`` (asynchronous gauge, ``{message}``: what
the driver's ``stats()`` says is available, read at collection time, one
request per collection per running loop, and only where the driver says).

Jobs: :func:`job_environment` gives ``TRACEPARENT`` (and ``TRACESTATE``) for a
job launched while a span is current, the variables the OpenTelemetry
environment-carrier proposal names.

On and off with the guard's own spans (:mod:`portable.telemetry._otel`): while
portable is instrumented (a real global provider set, or
:func:`portable.telemetry.instrument`), spans go to its tracer provider and
metrics to its meter provider; otherwise ("off": opentelemetry-api absent, no
provider, or ``uninstrument()``) nothing is added and no span is made, at the
cost of one check of the guard's observer list per publish.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ._observe import OBSERVERS

__all__ = [
    "TRACEPARENT",
    "TRACESTATE",
    "ConsumerTelemetry",
    "job_environment",
    "message_context",
    "messaging_system",
    "tracing",
]

log = logging.getLogger("portable.messaging")

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
#: the names a message's creation context may be under (plain; a binary-mode CloudEvent's extension)
_CARRIER_NAMES = (TRACEPARENT, "ce_traceparent", "ce-traceparent")

#: ``messaging.system`` per scheme: the conventions' well-known values where one applies
_SYSTEMS = {"sqs": "aws_sqs", "pubsub": "gcp_pubsub", "kafka": "kafka", "azqueue": "azure_queue"}

# The lazily imported API: None until first looked at, False when opentelemetry-api is absent.
_trace_api: Any = None
_lock = threading.Lock()


def _load_trace() -> Any:
    global _trace_api
    if _trace_api is None:
        try:
            from opentelemetry import trace
        except ImportError:
            _trace_api = False
        else:
            _trace_api = trace
    return _trace_api


def _observer() -> Any:
    """portable's OpenTelemetry observer while portable is instrumented (see :func:`portable.telemetry.instrument`), else None."""
    if not OBSERVERS:  # nothing observes the guard: off, at the cost of this check
        return None
    otel = sys.modules.get("portable.telemetry._otel")
    return None if otel is None else otel.instrumented()


def tracing() -> bool:
    """Whether portable makes spans now: it is instrumented with a tracer provider.

    The same switch as the guard's CLIENT spans: on when a real global tracer provider is
    set (or :func:`portable.telemetry.instrument` was called), off after ``uninstrument()``.
    """
    observer = _observer()
    return observer is not None and observer.tracer_provider is not None


_propagator: Any = None


def _trace_propagator() -> Any:
    global _propagator
    if _propagator is None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        _propagator = TraceContextTextMapPropagator()
    return _propagator


def message_context(attributes: Mapping[str, str] | None) -> dict[str, str] | None:
    """The trace attributes to add to a message published with ``attributes``, or None for none.

    None when tracing is off, when no valid span is current, or when
    ``attributes`` already hold a ``traceparent`` (a caller's own creation
    context is never overwritten). Else ``{"traceparent": ..., "tracestate": ...}``
    (``tracestate`` only when the span's is not empty).
    """
    if not tracing():
        return None
    if attributes and any(name in attributes for name in _CARRIER_NAMES):
        return None
    return _current_carrier()


#: What a message made while no span is current carries until the guard's ``send`` span gives it that
#: span's context (:func:`publish_context`): a traceparent of the real one's length (so the size and
#: attribute-count checks made when the message is built still hold) whose all-zero ids W3C Trace
#: Context says a reader must ignore, should it ever travel.
UNSET_CONTEXT: Mapping[str, str] = {TRACEPARENT: "00-" + "0" * 32 + "-" + "0" * 16 + "-00"}


def publish_context(attributes: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """The trace attributes a message published with ``attributes`` is built with, or None for none.

    :func:`message_context`, except that with tracing on and no span current it is
    :data:`UNSET_CONTEXT`: the guard's ``send`` span, current inside the publish
    call, is then the message's creation context (the conventions: with no "create"
    span, the send span's context is injected), so a publish outside any span of the
    caller's still starts a trace the consumer joins.
    """
    if not tracing():
        return None
    if attributes and any(name in attributes for name in _CARRIER_NAMES):
        return None
    return _current_carrier() or UNSET_CONTEXT


def _current_carrier() -> dict[str, str] | None:
    """The current span's context as ``TraceContextTextMapPropagator.inject`` writes it, or None.

    Written here rather than through the propagator (3-4 times faster; a publish asks
    twice): ``00-{trace id}-{span id}-{flags}`` and the trace state's header, as the
    propagator does (tests/telemetry/test_propagation.py compares the two).
    """
    api = _trace_api if _trace_api else _load_trace()
    context = api.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    carrier = {TRACEPARENT: f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"}
    state = context.trace_state
    if state:
        carrier[TRACESTATE] = state.to_header()
    return carrier


def job_environment(env: Mapping[str, str]) -> dict[str, str] | None:
    """``TRACEPARENT`` / ``TRACESTATE`` for a job launched now, or None (tracing off, no span, or ``env`` sets one)."""
    if not tracing():
        return None
    if "TRACEPARENT" in env or "TRACESTATE" in env:
        return None
    carrier = _current_carrier()
    if carrier is None:
        return None
    out = {"TRACEPARENT": carrier[TRACEPARENT]}
    if carrier.get(TRACESTATE):
        out["TRACESTATE"] = carrier[TRACESTATE]
    return out


def creation_context(attributes: Mapping[str, str]) -> Any:
    """The span context a received message was created in (its ``traceparent``), or None."""
    traceparent = attributes.get(TRACEPARENT) or attributes.get("ce_traceparent") or attributes.get("ce-traceparent")
    if not traceparent:
        return None
    carrier = {TRACEPARENT: traceparent}
    tracestate = attributes.get(TRACESTATE) or attributes.get("ce_tracestate") or attributes.get("ce-tracestate")
    if tracestate:
        carrier[TRACESTATE] = tracestate
    api = _load_trace()
    context = _trace_propagator().extract(carrier)
    span_context = api.get_current_span(context).get_span_context()
    return span_context if span_context.is_valid else None


def messaging_system(provider: str) -> str:
    """``messaging.system`` of a scheme, as the guard's spans give it (``aws_sqs``, ``gcp_pubsub``, ``kafka``)."""
    otel = sys.modules.get("portable.telemetry._otel")
    systems: Mapping[str, str] = getattr(otel, "MESSAGING_SYSTEMS", None) or _SYSTEMS
    return systems.get(provider, provider)


def destination_name(url: str) -> str:
    """The queue, topic or subscription a URL names, for span names and attributes (never a secret).

    ``?name=`` where the URL has it (``sqlite://``), else its last path segment, else its host part.
    """
    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query))
    name = options.get("name") or parts.path.rstrip("/").rsplit("/", 1)[-1] or parts.netloc.rsplit("@", 1)[-1]
    return name or parts.scheme


class _Instruments:
    """The consumer's instruments on one meter provider, made on the first loop that meters with it."""

    def __init__(self, meter_provider: Any) -> None:
        meter = meter_provider.get_meter("portable.messaging")
        self.duration = meter.create_histogram(
            "messaging.process.duration", unit="s", description="Duration of processing operation."
        )
        self.in_flight = meter.create_up_down_counter(
            "portable.messaging.consumer.in_flight", unit="{message}",
            description="Messages a consumer loop is handling now (received, handler or settling under way).",
        )  # fmt: skip
        self.loops: weakref.WeakSet[ConsumerTelemetry] = weakref.WeakSet()
        meter.create_observable_gauge(
            "portable.messaging.consumer.lag", callbacks=[self._observe_lag], unit="{message}",
            description="Messages available to a running consumer loop and not yet received (the driver's stats()).",
        )  # fmt: skip

    def _observe_lag(self, options: Any) -> Iterator[Any]:
        from opentelemetry.metrics import Observation

        for loop in list(self.loops):
            available = loop.lag()
            if available is not None:
                yield Observation(available, loop.metric_attributes)


#: the instruments per meter provider (instrument() may be given another provider later)
_instruments: dict[int, tuple[Any, _Instruments]] = {}
#: the error types of the message being handled in this thread or task (for the duration's error.type)
_handling: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("portable_handling", default=None)


def _consumer_instruments(meter_provider: Any) -> _Instruments:
    with _lock:
        known = _instruments.get(id(meter_provider))
        if known is None or known[0] is not meter_provider:
            known = _instruments[id(meter_provider)] = (meter_provider, _Instruments(meter_provider))
        return known[1]


class ConsumerTelemetry:
    """What one consumer loop records: a ``process`` span per message, settle events, its metrics.

    Made when a loop starts (``ConsumerTelemetry.of``: None while portable is not
    instrumented, so an untraced loop pays one check per run), with the tracer and
    meter providers portable is instrumented with.

    Args:
        observer: portable's OpenTelemetry observer (its ``tracer_provider`` / ``meter_provider``).
        provider: the scheme.
        destination: the queue or subscription's name (the guard's target), or "" to read it from ``url``.
        url: the subscription's URL, redacted.
        stats: the subscription's ``stats`` (a request), read for the lag gauge.
    """

    def __init__(
        self, observer: Any, provider: str, destination: str, url: str, stats: Callable[[], Any] | None
    ) -> None:
        self.system = messaging_system(provider)
        self.destination = destination or destination_name(url)
        self.span_name = f"process {self.destination}"
        self.metric_attributes = {"messaging.system": self.system, "messaging.destination.name": self.destination}
        self._stats = stats
        self._lag_known = stats is not None
        tracers, meters = observer.tracer_provider, observer.meter_provider
        _load_trace()
        self._tracer = None if tracers is None else tracers.get_tracer("portable.messaging")
        self._instruments = None if meters is None else _consumer_instruments(meters)

    @classmethod
    def of(
        cls, provider: str, destination: str, url: str, stats: Callable[[], Any] | None = None
    ) -> ConsumerTelemetry | None:
        """The telemetry of a loop on ``url``, or None while portable is not instrumented."""
        observer = _observer()
        if observer is None:
            return None
        return cls(observer, provider, destination, url, stats)

    def __enter__(self) -> ConsumerTelemetry:
        if self._instruments is not None:
            self._instruments.loops.add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._instruments is not None:
            self._instruments.loops.discard(self)

    def lag(self) -> int | None:
        """What ``stats().available`` says now, or None (the driver does not say, or the call failed)."""
        if not self._lag_known or self._stats is None:
            return None
        try:
            available: int | None = self._stats().available
        except Exception as exc:  # the collector's thread must not fail; the next collection tries again
            log.debug("consumer lag: stats() failed: %s", exc)
            return None
        if available is None:
            self._lag_known = False  # the driver never says: stop asking
        return available

    @contextlib.contextmanager
    def processing(self, message: Any) -> Iterator[Any]:
        """Handle ``message`` inside its ``process`` span (the current span meanwhile); yield the span or None."""
        started = time.perf_counter()
        instruments = self._instruments
        if instruments is not None:
            instruments.in_flight.add(1, self.metric_attributes)
        failure: list[str] = []
        token = _handling.set(failure)
        try:
            if self._tracer is None:
                yield None
            else:
                with self._span(message) as span:
                    yield span
        except BaseException as exc:
            failure.append(type(exc).__qualname__)
            raise
        finally:
            _handling.reset(token)
            if instruments is not None:
                instruments.in_flight.add(-1, self.metric_attributes)
                attributes = self.metric_attributes
                if failure:
                    attributes = {**attributes, "error.type": failure[-1]}
                instruments.duration.record(time.perf_counter() - started, attributes)

    @contextlib.contextmanager
    def _span(self, message: Any) -> Iterator[Any]:
        api = _trace_api
        assert self._tracer is not None
        creation = creation_context(message.attributes)
        links = [] if creation is None else [api.Link(creation)]
        parent = None
        if creation is not None and not api.get_current_span().get_span_context().is_valid:
            parent = api.set_span_in_context(api.NonRecordingSpan(creation))
        attributes = {
            "messaging.system": self.system,
            "messaging.destination.name": self.destination,
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.message.id": str(message.id),
            "portable.messaging.delivery_attempt": int(message.delivery_attempt),
        }
        with self._tracer.start_as_current_span(
            self.span_name, context=parent, kind=api.SpanKind.CONSUMER, links=links, attributes=attributes,
            record_exception=True, set_status_on_exception=True,
        ) as span:  # fmt: skip
            yield span

    def handler_failed(self, exc: BaseException) -> None:
        """The handler raised ``exc`` (the loop goes on to nack or dead-letter): the span records it."""
        failure = _handling.get()
        if failure is not None:
            failure.append(type(exc).__qualname__)
        if self._tracer is None:
            return
        api = _trace_api
        span = api.get_current_span()
        if not span.is_recording():
            return
        span.record_exception(exc)
        span.set_attribute("error.type", type(exc).__qualname__)
        span.set_status(api.Status(api.StatusCode.ERROR, type(exc).__name__))

    def event(self, what: str) -> None:
        """Record one step of the loop on the current process span: a settlement or an idempotency outcome.

        ``what`` is a :class:`~portable.messaging.RunStats` field: ``acked``, ``nacked``,
        ``dead_lettered``, ``released``, ``lost`` are ``settle`` events; ``skipped`` and
        ``deferred`` are ``portable.idempotency`` events.
        """
        if self._tracer is None:
            return
        event = _EVENTS.get(what)
        if event is None:
            return
        span = _trace_api.get_current_span()
        if span.is_recording():
            span.add_event(event[0], event[1])


#: RunStats field -> (event name, attributes) on the process span
_EVENTS: dict[str, tuple[str, dict[str, str]]] = {
    "acked": ("settle", {"messaging.operation.name": "ack", "messaging.operation.type": "settle"}),
    "nacked": ("settle", {"messaging.operation.name": "nack", "messaging.operation.type": "settle"}),
    "dead_lettered": ("settle", {"messaging.operation.name": "dead_letter", "messaging.operation.type": "settle"}),
    "released": ("settle", {"messaging.operation.name": "release", "messaging.operation.type": "settle"}),
    "lost": ("settle", {"messaging.operation.name": "lost", "messaging.operation.type": "settle",
                        "error.type": "lease_lost"}),
    "skipped": ("portable.idempotency", {"portable.idempotency.outcome": "completed",
                                         "portable.messaging.outcome": "skipped"}),
    "deferred": ("portable.idempotency", {"portable.idempotency.outcome": "in_progress",
                                          "portable.messaging.outcome": "deferred"}),
}  # fmt: skip
