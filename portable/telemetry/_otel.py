"""The OpenTelemetry instrumentation: one guard observer that makes a CLIENT span and metrics per call.

Imported only by :mod:`portable.telemetry` when opentelemetry-api is importable and a program
imported it (no provider can be set otherwise). :func:`refresh` registers :class:`OtelObserver`
once a real tracer or meter provider is set (the globals are proxies until then), and, while
none is, hooks opentelemetry-api's set-once guards so that the ``set_tracer_provider`` /
``set_meter_provider`` call itself registers it (see :func:`portable.telemetry.instrument`).

Spans (kind CLIENT), named per the semantic conventions:

* storage: ``{operation} {bucket}`` (``get acme-data``), with ``aws.s3.bucket`` / ``aws.s3.key``
  on s3, ``portable.storage.bucket`` / ``portable.storage.key`` elsewhere;
* messaging: ``{messaging.operation.name} {destination}`` (``publish orders``), with
  ``messaging.system``, ``messaging.destination.name``, ``messaging.operation.type``
  (send, receive, settle), ``messaging.message.id``, ``messaging.batch.message_count``;
* compute: ``{operation} {target}`` (``submit``, ``wait``, ``describe``...), with
  ``portable.compute.job.id`` where the call names a job;
* every span: ``portable.provider``, ``portable.operation``, ``portable.op_class``,
  ``cloud.provider`` (aws, gcp, azure), ``server.address`` / ``server.port`` for a network
  endpoint, ``portable.endpoint`` (redacted); ``error.type`` and status ERROR on failure; events
  ``retry`` (``portable.retry.attempt``, ``portable.retry.delay`` in s, ``error.type``),
  ``breaker.rejected`` (``portable.breaker.name``) and ``retry_budget.exhausted``.

Metrics: see :mod:`portable.telemetry._metrics`.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace as otel_trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ..driver.redaction import redact
from ._metrics import Instruments
from ._observe import CLAIM_OBSERVERS, CallInfo, add_observer, key_hash

__all__ = ["OtelObserver", "error_type", "instrument", "instrumented", "refresh", "uninstrument"]

SCOPE_NAME = "portable"

#: the scheme's cloud (``cloud.provider`` values of the conventions)
CLOUDS = {
    "s3": "aws", "sqs": "aws", "sns": "aws", "dynamodb": "aws", "batch": "aws",
    "gs": "gcp", "gcs": "gcp", "pubsub": "gcp", "firestore": "gcp", "cloudrun": "gcp",
    "az": "azure", "azblob": "azure", "abfs": "azure", "azqueue": "azure", "cosmos": "azure", "aci": "azure",
}  # fmt: skip
#: ``messaging.system`` values of the conventions; other schemes give their own name
MESSAGING_SYSTEMS = {"sqs": "aws_sqs", "pubsub": "gcp_pubsub", "kafka": "kafka", "azqueue": "azure_queue"}
#: ``messaging.operation.type`` by guard operation class
MESSAGING_TYPES = {"publish": "send", "receive": "receive", "ack": "settle"}
#: storage operations whose first argument is the object's key
_KEYED = frozenset({"get", "get_range", "head", "put", "delete", "open_read", "open_write", "exists"})
_AWS_REGION = re.compile(r"\.([a-z]{2}(?:-[a-z]+)+-\d)\.amazonaws\.com")


def error_type(exc: BaseException) -> str:
    """``error.type`` of ``exc``: a portable error's class name (``NotFound``), else the qualified class name."""
    cls = type(exc)
    if cls.__module__ == "portable.errors":
        return cls.__name__
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _server(endpoint: str) -> tuple[str, int | None] | None:
    """``(server.address, server.port)`` of a network endpoint; None for mem://, file://, sqlite://..."""
    if endpoint.startswith("chaos+"):
        endpoint = endpoint[len("chaos+") :]
    if "://" in endpoint:
        scheme, rest = endpoint.split("://", 1)
        if scheme not in ("http", "https", "grpc", "grpcs"):
            return None
        default = 443 if scheme in ("https", "grpcs") else 80
    else:
        rest, default = endpoint, None
    hostport = rest.split("/", 1)[0].rsplit("@", 1)[-1].split(",", 1)[0]  # a Kafka list: its first broker
    if not hostport or " " in hostport:
        return None
    host, sep, port = hostport.rpartition(":")
    if sep and port.isdigit():
        return host.strip("[]"), int(port)
    if default is None and "." not in hostport and hostport != "localhost":
        return None  # a bare name, not a host
    return hostport.strip("[]"), default


class _Shape:
    """What every call of one (guard, operation) shares: span name, attributes, metric attributes."""

    __slots__ = (
        "attributes",
        "batch",
        "keyed",
        "kind",
        "messaging_attributes",
        "messaging_type",
        "metric_attributes",
        "name",
        "s3",
    )

    messaging_type: str | None

    def __init__(self, info: CallInfo) -> None:
        provider, target, op = info.provider, info.target, info.operation
        domain = info.domain or _domain_of_class(info.op_class)
        attributes: dict[str, Any] = {
            "portable.provider": provider,
            "portable.operation": op,
            "portable.op_class": info.op_class,
        }
        if info.endpoint:
            attributes["portable.endpoint"] = redact(info.endpoint)
        cloud = CLOUDS.get(provider)
        if cloud:
            attributes["cloud.provider"] = cloud
            region = _AWS_REGION.search(info.endpoint)
            if region:
                attributes["cloud.region"] = region.group(1)
        server = _server(info.endpoint)
        if server is not None:
            attributes["server.address"] = server[0]
            if server[1] is not None:
                attributes["server.port"] = server[1]
        self.s3 = provider == "s3"
        self.keyed = domain == "storage" and op in _KEYED
        self.batch = domain == "storage" and op.endswith("_many")
        self.messaging_type = None
        self.messaging_attributes: dict[str, Any] = {}
        # the messaging conventions: a send span with no "create" span is PRODUCER (its context is the
        # messages' creation context); receive and settle are CLIENT, as is every other call
        self.kind = SpanKind.PRODUCER if MESSAGING_TYPES.get(info.op_class) == "send" else SpanKind.CLIENT
        if domain == "messaging" or info.op_class in MESSAGING_TYPES:
            self.messaging_type = MESSAGING_TYPES.get(info.op_class)
            op_name = "publish" if op == "publish_batch" else op
            attributes["messaging.system"] = MESSAGING_SYSTEMS.get(provider, provider)
            attributes["messaging.operation.name"] = op_name
            if self.messaging_type:
                attributes["messaging.operation.type"] = self.messaging_type
            if target:
                attributes["messaging.destination.name"] = target
            self.name = f"{op_name} {target}" if target else op_name
            self.messaging_attributes = {
                k: attributes[k]
                for k in ("messaging.system", "messaging.destination.name", "messaging.operation.name")
                if k in attributes
            }
        else:
            if target and domain == "storage":
                attributes["aws.s3.bucket" if self.s3 else "portable.storage.bucket"] = target
            elif target:
                attributes["portable.target"] = target
            self.name = f"{op} {target}" if target else op
        self.attributes = attributes
        metric: dict[str, Any] = {k: attributes[k] for k in ("portable.provider", "portable.operation", "cloud.provider") if k in attributes}
        if target:
            metric["portable.target"] = target
        if "server.address" in attributes:
            metric["server.address"] = attributes["server.address"]
        self.metric_attributes = metric


def _domain_of_class(op_class: str) -> str:
    if op_class in MESSAGING_TYPES:
        return "messaging"
    if op_class in ("submit", "control"):
        return "compute"
    return ""


_BYTES = (bytes, bytearray, memoryview)


def _body_size(item: Any) -> int:
    if isinstance(item, _BYTES):
        return len(item)
    if type(item) is tuple and len(item) == 2 and isinstance(item[1], _BYTES):
        return len(item[1])  # a batch's (key, data)
    body = getattr(item, "body", None)
    return len(body) if isinstance(body, _BYTES) else 0


def _batch(arg: Any) -> list[Any] | tuple[Any, ...] | None:
    """The items of a batch argument (a list, or the topic's lazy batch of messages and bodies)."""
    if isinstance(arg, (list, tuple)):
        return arg
    items = getattr(arg, "_items", None)
    return items if isinstance(items, list) else None


def sent_bytes(args: tuple[Any, ...]) -> int:
    """Bytes a call sends: its bytes-like arguments and its messages' bodies."""
    total = 0
    for arg in args:
        items = _batch(arg)
        if items is not None:
            total += sum(_body_size(item) for item in items)
        else:
            total += _body_size(arg)
    return total


def received_bytes(result: Any) -> int:
    """Bytes a call received: a bytes-like result, or the bodies of the messages it returned."""
    if isinstance(result, (bytes, bytearray, memoryview)):
        return len(result)
    if isinstance(result, list):
        return sum(_body_size(item) for item in result)  # messages, or a batch's (key, data) pairs
    return 0


class _Scope:
    """One observed call: its span (if tracing) and what its metrics need."""

    __slots__ = ("info", "observer", "retries", "sent", "shape", "span", "started", "token")

    def __init__(self, observer: OtelObserver, info: CallInfo, shape: _Shape, span: Any, token: Any) -> None:
        self.observer = observer
        self.info = info
        self.shape = shape
        self.span = span
        self.token = token
        self.sent = 1  # attempts sent to the provider (the first, unless a breaker refuses it)
        self.retries = 0
        self.started = time.perf_counter()

    def attempt_failed(self, attempt: int, exc: BaseException, retry_in: float | None) -> None:
        if retry_in is None:
            return  # the call's end reports it
        self.retries += 1
        self.sent = attempt + 1
        kind = error_type(exc)
        if self.span is not None:
            self.span.add_event(
                "retry",
                {"portable.retry.attempt": attempt, "portable.retry.delay": float(retry_in), "error.type": kind},
            )
        instruments = self.observer.instruments
        if instruments is not None:
            instruments.retries.add(1, {**self.shape.metric_attributes, "error.type": kind})

    def rejected(self, exc: BaseException) -> None:
        breaker = getattr(exc, "breaker", None)
        if breaker:
            self.sent -= 1  # the attempt it refused was never sent
        if self.span is not None:
            if breaker:
                self.span.add_event("breaker.rejected", {"portable.breaker.name": str(breaker)})
            else:
                self.span.add_event("retry_budget.exhausted", {"error.type": error_type(exc)})
        instruments = self.observer.instruments
        if instruments is not None:
            what = "breaker" if breaker else "retry_budget"
            instruments.rejections.add(1, {**self.shape.metric_attributes, "portable.rejected_by": what})

    def ended(self, error: BaseException | None, result: Any) -> None:
        elapsed = time.perf_counter() - self.started
        shape, info = self.shape, self.info
        kind = None if error is None else error_type(error)
        span = self.span
        if span is not None:
            try:
                if self.retries:
                    span.set_attribute("portable.retry.count", self.retries)
                if shape.messaging_type is not None:
                    _messaging_result(span, info, result)
                if kind is not None:
                    span.set_attribute("error.type", kind)
                    span.set_status(Status(StatusCode.ERROR, redact(str(error))[:300]))
                span.end()
            finally:
                if self.token is not None:
                    try:
                        otel_context.detach(self.token)
                    except Exception:
                        pass
        instruments = self.observer.instruments
        if instruments is not None:
            attrs = dict(shape.metric_attributes)
            attrs["portable.outcome"] = "ok" if kind is None else "error"
            if kind is not None:
                attrs["error.type"] = kind
            instruments.duration.record(elapsed, attrs)
            if self.sent > 0:
                instruments.requests.add(self.sent, attrs)
            sent = sent_bytes(info.args)
            if sent:
                instruments.io.add(sent, {**shape.metric_attributes, "network.io.direction": "transmit"})
            got = received_bytes(result) if error is None else 0
            if got:
                instruments.io.add(got, {**shape.metric_attributes, "network.io.direction": "receive"})
            if shape.messaging_type == "send":
                count = _message_count(info)
                if count:
                    sent_attrs = dict(shape.messaging_attributes)
                    if kind is not None:
                        sent_attrs["error.type"] = kind
                    instruments.sent_messages.add(count, sent_attrs)
            elif shape.messaging_type == "receive" and error is None and isinstance(result, list) and result:
                instruments.consumed_messages.add(len(result), shape.messaging_attributes)


def _message_count(info: CallInfo) -> int:
    """How many messages a publish call sends: one, or its batch's size."""
    if info.operation != "publish_batch":
        return 1
    items = _batch(info.args[0]) if info.args else None
    return 0 if items is None else len(items)


def _messaging_result(span: Any, info: CallInfo, result: Any) -> None:
    """The messaging attributes a call's arguments and result give (ids, batch sizes)."""
    op = info.operation
    if op == "publish" and isinstance(result, str):
        span.set_attribute("messaging.message.id", result)
    elif op == "publish_batch" and info.args:
        items = _batch(info.args[0])
        if items is not None:
            span.set_attribute("messaging.batch.message_count", len(items))
    elif op == "receive" and isinstance(result, list):
        span.set_attribute("messaging.batch.message_count", len(result))
        if len(result) == 1:
            found = getattr(result[0], "id", None)
            if isinstance(found, str):
                span.set_attribute("messaging.message.id", found)


class OtelObserver:
    """The guard observer that makes a span per call (PRODUCER for a publish, else CLIENT; tracing on) and records metrics (metrics on).

    Args:
        tracer_provider: where spans go, or None for no spans.
        meter_provider: where metrics go, or None for no metrics.
    """

    def __init__(self, tracer_provider: Any, meter_provider: Any) -> None:
        __version__ = str(getattr(sys.modules.get("portable"), "__version__", ""))
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.tracer = None if tracer_provider is None else tracer_provider.get_tracer(SCOPE_NAME, __version__)
        self.instruments = None if meter_provider is None else Instruments(meter_provider.get_meter(SCOPE_NAME, __version__))
        self._shapes: dict[tuple[str, ...], _Shape] = {}

    def started(self, info: CallInfo) -> _Scope:
        key = (info.provider, info.endpoint, info.target, info.domain, info.op_class, info.operation)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = _Shape(info)
        span = token = None
        if self.tracer is not None:
            attributes = shape.attributes
            if shape.keyed and info.args and isinstance(info.args[0], str):
                attributes = {**attributes, ("aws.s3.key" if shape.s3 else "portable.storage.key"): info.args[0]}
            elif shape.batch and info.args and isinstance(info.args[0], list):
                attributes = {**attributes, "portable.storage.batch.count": len(info.args[0])}
            elif info.domain == "compute" and info.args and isinstance(info.args[0], str):
                attributes = {**attributes, "portable.compute.job.id": info.args[0]}
            span = self.tracer.start_span(shape.name, kind=shape.kind, attributes=attributes)
            token = otel_context.attach(otel_trace.set_span_in_context(span))
        return _Scope(self, info, shape, span, token)


    def claimed(
        self, store: object, key: str, claim: Any, error: BaseException | None, started_ns: int, ended_ns: int
    ) -> None:
        """One idempotency claim: a span ``claim {store class}`` with the outcome as an event, and a count."""
        outcome = "error" if error is not None else str(getattr(claim, "status", "unknown"))
        kind = None if error is None else error_type(error)
        store_kind = type(store).__name__
        if self.tracer is not None:
            hashed = key_hash(key)
            attributes: dict[str, Any] = {
                "portable.idempotency.store": store_kind,
                "portable.idempotency.key_hash": hashed,
                "portable.idempotency.outcome": outcome,
            }
            starts = getattr(claim, "starts", None)
            if isinstance(starts, int):
                attributes["portable.idempotency.starts"] = starts
            # a low-cardinality name (the conventions' advice): the key's hash is an attribute, not the name
            span = self.tracer.start_span(f"claim {store_kind}", attributes=attributes, start_time=started_ns)
            event: dict[str, Any] = {"portable.idempotency.outcome": outcome}
            if kind is not None:
                event["error.type"] = kind
            span.add_event("idempotency.outcome", event, timestamp=ended_ns)
            if kind is not None:
                span.set_attribute("error.type", kind)
                span.set_status(Status(StatusCode.ERROR, redact(str(error))[:300]))
            span.end(end_time=ended_ns)
        if self.instruments is not None:
            attrs = {"portable.idempotency.store": store_kind, "portable.idempotency.outcome": outcome}
            if kind is not None:
                attrs["error.type"] = kind
            self.instruments.claims.add(1, attrs)


# -- registration ---------------------------------------------------------------------------

_lock = threading.RLock()
_registered: OtelObserver | None = None
_remove: Callable[[], None] | None = None
_explicit = False
_disabled = False
_hooked = False


def _real_tracer_provider() -> Any:
    provider = otel_trace.get_tracer_provider()
    if isinstance(provider, (otel_trace.ProxyTracerProvider, otel_trace.NoOpTracerProvider)):
        return None
    return provider


def _real_meter_provider() -> Any:
    provider = otel_metrics.get_meter_provider()
    if isinstance(provider, otel_metrics.NoOpMeterProvider) or type(provider).__name__ == "_ProxyMeterProvider":
        return None
    return provider


def _register(tracer_provider: Any, meter_provider: Any) -> OtelObserver | None:
    global _registered, _remove
    from ._breakers import watch_breakers

    if _registered is not None and (
        _registered.tracer_provider is tracer_provider and _registered.meter_provider is meter_provider
    ):
        return _registered
    if _remove is not None:
        _remove()
        _remove = None
    if _registered is not None and _registered in CLAIM_OBSERVERS:
        CLAIM_OBSERVERS.remove(_registered)
    _registered = None
    if tracer_provider is None and meter_provider is None:
        watch_breakers(None)
        return None
    observer = OtelObserver(tracer_provider, meter_provider)
    _registered = observer
    _remove = add_observer(observer)
    CLAIM_OBSERVERS.append(observer)
    watch_breakers(observer.instruments)
    return observer


def refresh() -> OtelObserver | None:
    """Register the observer for the global providers if either is real (no-op after :func:`instrument`)."""
    with _lock:
        if _explicit or _disabled:
            return _registered
        tracer_provider, meter_provider = _real_tracer_provider(), _real_meter_provider()
        if tracer_provider is None or meter_provider is None:
            _hook_set_once()
        return _register(tracer_provider, meter_provider)


def instrument(tracer_provider: Any = None, meter_provider: Any = None) -> OtelObserver | None:
    """Instrument portable with these providers (default: the global ones, when real) from now on."""
    global _explicit, _disabled
    with _lock:
        _disabled = False
        _explicit = tracer_provider is not None or meter_provider is not None
        if tracer_provider is None:
            tracer_provider = _real_tracer_provider()
        if meter_provider is None:
            meter_provider = _real_meter_provider()
        if not _explicit:
            _hook_set_once()
        return _register(tracer_provider, meter_provider)


def uninstrument() -> None:
    """Stop instrumenting, until :func:`instrument` turns it on again (providers set meanwhile do not)."""
    global _explicit, _disabled
    with _lock:
        _explicit = False
        _disabled = True
        _register(None, None)


def instrumented() -> OtelObserver | None:
    """The registered observer, or None."""
    return _registered


def _hook_set_once() -> None:
    """Make opentelemetry-api's ``set_*_provider`` register the observer the moment it sets one.

    The API keeps each global behind a ``Once`` (``_TRACER_PROVIDER_SET_ONCE``,
    ``_METER_PROVIDER_SET_ONCE``, in 1.27 to 1.45 at least); wrapping that object's
    ``do_once`` is the one point every way of setting a provider passes through (the set
    functions and the ``OTEL_PYTHON_*_PROVIDER`` variables). Where the API has none, this does
    nothing and :func:`portable.telemetry._observe.check_providers` (each guard made) remains.
    """
    global _hooked
    if _hooked:
        return
    _hooked = True
    import importlib

    for module_name, name in (
        ("opentelemetry.trace", "_TRACER_PROVIDER_SET_ONCE"),
        ("opentelemetry.metrics._internal", "_METER_PROVIDER_SET_ONCE"),
    ):
        try:
            once = getattr(importlib.import_module(module_name), name)
            original = once.do_once
        except Exception:
            continue

        def do_once(func: Callable[[], None], _original: Callable[[Callable[[], None]], bool] = original) -> bool:
            did = _original(func)
            if did:
                try:
                    refresh()
                except Exception:
                    pass
            return did

        try:
            once.do_once = do_once
        except Exception:
            continue
