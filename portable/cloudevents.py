"""CloudEvents 1.0 as an optional envelope on any portable topic.

A small hand-written mapping of the spec's attributes (no dependency), in the
two content modes of the protocol bindings:

* **binary**: each context attribute is a message attribute ``ce_<name>``
  (the Kafka binding's prefix; ``ce-`` is also read, as Pub/Sub's binding
  writes it), ``datacontenttype`` travels as ``content-type``, and the body is
  the event's data, untouched;
* **structured**: the body is the JSON event format (``data`` as JSON when the
  content type is JSON, as text for ``text/*``, else ``data_base64``) and the
  attribute ``content-type`` is ``application/cloudevents+json; charset=utf-8``.

>>> from portable.cloudevents import CloudEvent, to_message, from_message
>>> event = CloudEvent(id="42", source="/orders", type="order.created", data=b'{"n": 1}',
...                    datacontenttype="application/json")
>>> body, attributes = to_message(event)
>>> attributes["ce_type"], body
('order.created', b'{"n": 1}')
>>> from_message(body, attributes) == event
True

Events interoperate with other CloudEvents tools: a binary-mode Kafka record
or a structured JSON body written by the ``cloudevents`` SDK decodes here, and
back. ``source`` + ``id`` identify an event, so :meth:`Topic.publish_event`
uses them as the idempotency key and ``Subscription.run`` deduplicates on them.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import InvalidArgument

__all__ = ["STRUCTURED_CONTENT_TYPE", "CloudEvent", "dedup_key_of", "from_message", "to_message"]

STRUCTURED_CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"
_PREFIX = "ce_"
_CONTEXT = ("id", "source", "specversion", "type", "datacontenttype", "dataschema", "subject", "time")
_EXTENSION_NAME = re.compile(r"[a-z0-9]{1,20}")


@dataclass(frozen=True)
class CloudEvent:
    """A CloudEvent (spec 1.0).

    Attributes:
        id: unique within ``source``. Required.
        source: a URI-reference naming the producer context. Required.
        type: the kind of event (``com.example.order.created``). Required.
        data: the payload, bytes. Defaults to empty.
        datacontenttype: the payload's media type, e.g. ``application/json``.
        dataschema: a URI of the payload's schema.
        subject: what the event is about, within the source.
        time: when it happened (timezone-aware).
        extensions: further context attributes: names of 1-20 lower-case
            letters or digits, string values.
        specversion: always ``"1.0"``.
    """

    id: str
    source: str
    type: str
    data: bytes = b""
    datacontenttype: str | None = None
    dataschema: str | None = None
    subject: str | None = None
    time: dt.datetime | None = None
    extensions: Mapping[str, str] = field(default_factory=dict)
    specversion: str = "1.0"

    def __post_init__(self) -> None:
        for name in ("id", "source", "type"):
            value = getattr(self, name)
            if type(value) is not str or not value:
                raise InvalidArgument(f"a CloudEvent needs a non-empty str {name}, got {value!r}")
        if self.specversion != "1.0":
            raise InvalidArgument(f"only CloudEvents specversion 1.0 is supported, got {self.specversion!r}")
        if type(self.data) is not bytes:
            raise InvalidArgument(f"CloudEvent data must be bytes, got {type(self.data).__name__}")
        for name in ("datacontenttype", "dataschema", "subject"):
            value = getattr(self, name)
            if value is not None and (type(value) is not str or not value):
                raise InvalidArgument(f"CloudEvent {name} must be a non-empty str or None, got {value!r}")
        if self.time is not None and (not isinstance(self.time, dt.datetime) or self.time.tzinfo is None):
            raise InvalidArgument("CloudEvent time must be a timezone-aware datetime")
        for name, value in self.extensions.items():
            if not isinstance(name, str) or not _EXTENSION_NAME.fullmatch(name) or name in _CONTEXT or name == "data":
                raise InvalidArgument(
                    f"CloudEvent extension name {name!r} must be 1-20 lower-case letters or digits "
                    "and not a context attribute"
                )
            if type(value) is not str or not value:
                raise InvalidArgument(f"CloudEvent extension {name!r} must be a non-empty str")

    def dedup_key(self) -> str:
        """The idempotency key of the event: a digest of ``source`` and ``id`` (fits every provider)."""
        return _dedup(self.source, self.id)


def _dedup(source: str, event_id: str) -> str:
    import hashlib

    return "ce-" + hashlib.sha256(f"{source}\x00{event_id}".encode()).hexdigest()[:40]


def _time_text(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def _parse_time(text: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidArgument(f"CloudEvent time {text!r} is not RFC 3339") from None
    if value.tzinfo is None:
        raise InvalidArgument(f"CloudEvent time {text!r} has no timezone")
    return value


def _is_json(content_type: str | None) -> bool:
    if content_type is None:
        return True  # the JSON format's default
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json") or media == "text/json"


def to_message(
    event: CloudEvent, *, mode: Literal["binary", "structured"] = "binary"
) -> tuple[bytes, dict[str, str]]:
    """Encode ``event`` as (body, attributes) in ``mode``."""
    if mode == "binary":
        attributes = {
            f"{_PREFIX}id": event.id,
            f"{_PREFIX}source": event.source,
            f"{_PREFIX}specversion": event.specversion,
            f"{_PREFIX}type": event.type,
        }
        if event.datacontenttype is not None:
            attributes["content-type"] = event.datacontenttype
        if event.dataschema is not None:
            attributes[f"{_PREFIX}dataschema"] = event.dataschema
        if event.subject is not None:
            attributes[f"{_PREFIX}subject"] = event.subject
        if event.time is not None:
            attributes[f"{_PREFIX}time"] = _time_text(event.time)
        for name, value in event.extensions.items():
            attributes[f"{_PREFIX}{name}"] = value
        return event.data, attributes
    if mode != "structured":
        raise InvalidArgument(f"mode must be 'binary' or 'structured', got {mode!r}")
    doc: dict[str, Any] = {"specversion": event.specversion, "id": event.id, "source": event.source, "type": event.type}
    for name in ("datacontenttype", "dataschema", "subject"):
        value = getattr(event, name)
        if value is not None:
            doc[name] = value
    if event.time is not None:
        doc["time"] = _time_text(event.time)
    doc.update(event.extensions)
    if event.data:
        ctype = event.datacontenttype
        placed = False
        if _is_json(ctype):
            try:
                doc["data"] = json.loads(event.data)
                placed = True
            except ValueError:
                pass
        elif ctype is not None and ctype.lower().startswith("text/"):
            try:
                doc["data"] = event.data.decode("utf-8")
                placed = True
            except UnicodeDecodeError:
                pass
        if not placed:
            doc["data_base64"] = base64.b64encode(event.data).decode("ascii")
    body = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return body, {"content-type": STRUCTURED_CONTENT_TYPE}


def _is_structured(attributes: Mapping[str, str]) -> bool:
    ctype = attributes.get("content-type") or attributes.get("Content-Type") or ""
    return ctype.lower().startswith("application/cloudevents+json")


def _binary_get(attributes: Mapping[str, str], name: str) -> str | None:
    return attributes.get(f"ce_{name}") or attributes.get(f"ce-{name}")


def from_message(body: bytes, attributes: Mapping[str, str]) -> CloudEvent:
    """Decode (body, attributes) in either mode.

    Raises:
        InvalidArgument: it is not a CloudEvent, or a required attribute is missing.
    """
    if _is_structured(attributes):
        try:
            doc = json.loads(body)
        except ValueError:
            raise InvalidArgument("a structured CloudEvent body must be JSON") from None
        if not isinstance(doc, dict):
            raise InvalidArgument("a structured CloudEvent body must be a JSON object")
        data = b""
        if "data_base64" in doc:
            try:
                data = base64.b64decode(doc.pop("data_base64"), validate=True)
            except (binascii.Error, TypeError):
                raise InvalidArgument("CloudEvent data_base64 is not base64") from None
        elif "data" in doc:
            value = doc.pop("data")
            ctype = doc.get("datacontenttype")
            if isinstance(value, str) and not _is_json(ctype):
                data = value.encode("utf-8")
            else:
                data = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        fields_ = {str(k): v for k, v in doc.items()}
    else:
        if _binary_get(attributes, "specversion") is None:
            raise InvalidArgument("the message is not a CloudEvent: no ce_specversion attribute, no structured content-type")
        fields_ = {}
        for name, value in attributes.items():
            if name[:3] in ("ce_", "ce-"):
                fields_[name[3:]] = value
        ctype = attributes.get("content-type")
        if ctype is not None:
            fields_["datacontenttype"] = ctype
        data = body
    missing = [n for n in ("id", "source", "type", "specversion") if not fields_.get(n)]
    if missing:
        raise InvalidArgument(f"the CloudEvent lacks required attribute(s) {', '.join(missing)}")
    time_text = fields_.pop("time", None)
    known = {n: fields_.pop(n, None) for n in _CONTEXT if n != "time"}
    extensions = {k: str(v) for k, v in fields_.items()}
    return CloudEvent(
        id=str(known["id"]),
        source=str(known["source"]),
        type=str(known["type"]),
        specversion=str(known["specversion"]),
        data=data,
        datacontenttype=known["datacontenttype"],
        dataschema=known["dataschema"],
        subject=known["subject"],
        time=_parse_time(str(time_text)) if time_text else None,
        extensions=extensions,
    )


def dedup_key_of(body: bytes, attributes: Mapping[str, str]) -> str | None:
    """The idempotency key of a CloudEvent message (source + id), or None if it is not one."""
    source, event_id = _binary_get(attributes, "source"), _binary_get(attributes, "id")
    if source and event_id:
        return _dedup(source, event_id)
    if _is_structured(attributes):
        try:
            doc = json.loads(body)
        except ValueError:
            return None
        if isinstance(doc, dict) and doc.get("source") and doc.get("id"):
            return _dedup(str(doc["source"]), str(doc["id"]))
    return None
