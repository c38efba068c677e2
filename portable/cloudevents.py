"""CloudEvents 1.0 as an optional envelope on any portable topic.

A small hand-written mapping of the spec's attributes (no dependency), in the
two content modes of the protocol bindings:

* **binary**: each context attribute is a message attribute named with the
  provider's binding prefix (table below), ``datacontenttype`` travels as
  ``content-type``, and the body is the event's data, untouched;
* **structured**: the body is the JSON event format and the attribute
  ``content-type`` is ``application/cloudevents+json; charset=utf-8``.
  ``data`` keeps its exact bytes: JSON data is embedded as the very text it
  was (``b'{"order": 42}'`` stays ``b'{"order": 42}'``, spaces included),
  ``text/*`` data as a JSON string, anything else (and JSON data that is not
  strict UTF-8 JSON without surrounding whitespace) as ``data_base64``.

>>> from portable.cloudevents import CloudEvent, to_message, from_message
>>> event = CloudEvent(id="42", source="/orders", type="order.created", data=b'{"n": 1}',
...                    datacontenttype="application/json")
>>> body, attributes = to_message(event)
>>> attributes["ce_type"], body
('order.created', b'{"n": 1}')
>>> from_message(body, attributes) == event
True
>>> to_message(event, provider="pubsub")[1]["ce-type"]
'order.created'
>>> body, attributes = to_message(event, mode="structured")
>>> from_message(body, {}).data  # no content-type attribute: the body still reads as an event
b'{"n": 1}'

Binary mode, per provider (``provider`` is the topic's scheme, ``Topic.provider``):

=============  ===============  ==============================================
provider       attribute names  binding
=============  ===============  ==============================================
``pubsub``     ``ce-id`` ...    the Pub/Sub protocol binding (``ce-`` prefix)
``kafka``      ``ce_id`` ...    the Kafka protocol binding (``ce_`` headers)
``sqs``        ``ce_id`` ...    none published; ``ce_`` as Kafka's. At most
                                ``capabilities.max_attributes`` (9 beside
                                portable's body marker): an event that needs
                                more is refused up front, use structured mode
``azqueue``    ``ce_id`` ...    none; the attributes ride in portable's
                                envelope (see the Azure Queue page), so a
                                native consumer sees structured mode better
``mem``,       ``ce_id`` ...    portable's own (the Kafka form)
``sqlite``,
others
=============  ===============  ==============================================

``datacontenttype`` is the attribute ``content-type`` on every provider (both
bindings say so). Reading accepts ``ce_`` and ``ce-`` on every provider, and
``content-type`` in any letter case (the Pub/Sub binding writes
``Content-Type``).

A message is read as, in this order: structured when its ``content-type``
attribute is ``application/cloudevents+json``; binary when it has a
``ce_specversion`` / ``ce-specversion`` attribute; structured when it has no
such attributes and its body is a JSON object with ``specversion``, ``id``,
``source`` and ``type`` (native SQS and Azure Queue producers cannot set a
``content-type`` attribute); anything else is not an event.

Events interoperate with other CloudEvents tools: a binary-mode Kafka record,
a binary-mode Pub/Sub message or a structured JSON body written by the
``cloudevents`` SDK decodes here, and back. ``source`` + ``id`` identify an
event, so :meth:`Topic.publish_event` uses them as the idempotency key and
``Subscription.run`` deduplicates on them.
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

__all__ = [
    "STRUCTURED_CONTENT_TYPE",
    "CloudEvent",
    "binary_prefix",
    "dedup_key_of",
    "from_message",
    "to_message",
]

STRUCTURED_CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"
#: The binary-mode attribute prefix of each provider whose binding differs from the default.
_BINARY_PREFIXES: Mapping[str, str] = {"pubsub": "ce-"}
_DEFAULT_PREFIX = "ce_"
_CONTEXT = ("id", "source", "specversion", "type", "datacontenttype", "dataschema", "subject", "time")
_EXTENSION_NAME = re.compile(r"[a-z0-9]{1,20}")
_JSON_SPACE = " \t\n\r"


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


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _exact_json_text(data: bytes) -> str | None:
    """``data`` as text if it is strict JSON (UTF-8, no NaN) that embeds as itself, else None.

    Surrounding whitespace is not kept by a JSON value's span, so such data
    is not embedded (it travels as ``data_base64``, byte for byte).
    """
    try:
        text = data.decode("utf-8")
        json.loads(text, parse_constant=_refuse_constant)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    if not text or text[0] in _JSON_SPACE or text[-1] in _JSON_SPACE:
        return None
    return text


def binary_prefix(provider: str | None) -> str:
    """The binary-mode attribute prefix of ``provider`` (a scheme such as ``"pubsub"``).

    ``ce-`` on Pub/Sub (its protocol binding), ``ce_`` everywhere else (the
    Kafka binding's form). A wrapped scheme (``chaos+pubsub``) is its inner one.
    """
    if provider is None:
        return _DEFAULT_PREFIX
    return _BINARY_PREFIXES.get(provider.rpartition("+")[2].lower(), _DEFAULT_PREFIX)


def to_message(
    event: CloudEvent,
    *,
    mode: Literal["binary", "structured"] = "binary",
    provider: str | None = None,
    max_attributes: int | None = None,
) -> tuple[bytes, dict[str, str]]:
    """Encode ``event`` as (body, attributes) in ``mode``.

    Args:
        event: the event.
        mode: ``binary`` (attributes + data as the body) or ``structured``
            (the JSON event format as the body).
        provider: the scheme of the topic it goes to (``Topic.provider``),
            which picks the binary binding's attribute names (see the module
            docstring). Defaults to the ``ce_`` form.
        max_attributes: how many attributes the event may use (the topic's
            ``capabilities.max_attributes`` less what portable adds, such as
            the idempotency key). Defaults to no limit.

    Raises:
        InvalidArgument: a bad ``mode``, or a binary event that needs more
            than ``max_attributes`` attributes (nothing is cut: the error
            names the count and the fix, ``mode="structured"``).
    """
    if mode == "binary":
        prefix = binary_prefix(provider)
        attributes = {
            f"{prefix}id": event.id,
            f"{prefix}source": event.source,
            f"{prefix}specversion": event.specversion,
            f"{prefix}type": event.type,
        }
        if event.datacontenttype is not None:
            attributes["content-type"] = event.datacontenttype
        if event.dataschema is not None:
            attributes[f"{prefix}dataschema"] = event.dataschema
        if event.subject is not None:
            attributes[f"{prefix}subject"] = event.subject
        if event.time is not None:
            attributes[f"{prefix}time"] = _time_text(event.time)
        for name, value in event.extensions.items():
            attributes[f"{prefix}{name}"] = value
        if max_attributes is not None and len(attributes) > max_attributes:
            where = f"{provider}://" if provider else "the topic"
            raise InvalidArgument(
                f"this CloudEvent needs {len(attributes)} attributes in binary mode and {where} carries "
                f"{max_attributes} beside portable's own; publish it with mode='structured' (the whole "
                "event in the body, no attribute limit) or drop optional attributes or extensions"
            )
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
    raw_json: str | None = None
    if event.data:
        ctype = event.datacontenttype
        if _is_json(ctype):
            raw_json = _exact_json_text(event.data)
        elif ctype is not None and ctype.lower().startswith("text/"):
            try:
                doc["data"] = event.data.decode("utf-8")
            except UnicodeDecodeError:
                pass
        if raw_json is None and "data" not in doc:
            doc["data_base64"] = base64.b64encode(event.data).decode("ascii")
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    if raw_json is not None:  # the data's own text, not a re-serialisation of it
        text = f'{text[:-1]},"data":{raw_json}}}'
    return text.encode("utf-8"), {"content-type": STRUCTURED_CONTENT_TYPE}


def _content_type(attributes: Mapping[str, str]) -> str | None:
    value = attributes.get("content-type")
    if value is not None:
        return value
    for name, value in attributes.items():
        if name.lower() == "content-type":
            return value
    return None


def _is_structured(attributes: Mapping[str, str]) -> bool:
    return (_content_type(attributes) or "").lower().startswith("application/cloudevents+json")


def _binary_get(attributes: Mapping[str, str], name: str) -> str | None:
    return attributes.get(f"ce_{name}") or attributes.get(f"ce-{name}")


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in _JSON_SPACE:
        at += 1
    return at


def _members(text: str) -> tuple[dict[str, Any], str | None]:
    """The members of the JSON object ``text``, and the exact text of its ``data`` member (or None).

    Raises:
        ValueError: ``text`` is not one JSON object (a duplicate name keeps its last value, as json does).
    """
    decoder = json.JSONDecoder(parse_constant=_refuse_constant)
    at = _skip_space(text, 0)
    if text[at : at + 1] != "{":
        raise ValueError("not a JSON object")
    members: dict[str, Any] = {}
    data_text: str | None = None
    at = _skip_space(text, at + 1)
    if text[at : at + 1] == "}":
        at += 1
    else:
        while True:
            if text[at : at + 1] != '"':
                raise ValueError("a member name must be a string")
            name, at = json.decoder.scanstring(text, at + 1)  # type: ignore[attr-defined]
            at = _skip_space(text, at)
            if text[at : at + 1] != ":":
                raise ValueError("':' expected")
            start = _skip_space(text, at + 1)
            value, at = decoder.raw_decode(text, start)
            members[name] = value
            if name == "data":
                data_text = text[start:at]
            at = _skip_space(text, at)
            if text[at : at + 1] == ",":
                at = _skip_space(text, at + 1)
                continue
            if text[at : at + 1] != "}":
                raise ValueError("',' or '}' expected")
            at += 1
            break
    if _skip_space(text, at) != len(text):
        raise ValueError("text after the JSON object")
    return members, data_text


def _parse_structured(body: bytes) -> tuple[dict[str, Any], str | None]:
    """The members of a structured event's body and the exact text of its ``data``.

    Raises:
        InvalidArgument: the body is not a UTF-8 JSON object.
    """
    try:
        return _members(body.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and JSONDecodeError too
        raise InvalidArgument("a structured CloudEvent body must be a UTF-8 JSON object") from None


def _looks_structured(body: bytes) -> dict[str, Any] | None:
    """The members of ``body`` if it is a JSON CloudEvent by its own shape, else None (cheap for other bodies)."""
    start = body[:64].lstrip(_JSON_SPACE.encode())
    if not start.startswith(b"{") or b'"specversion"' not in body:
        return None
    try:
        members, _ = _members(body.decode("utf-8"))
    except ValueError:
        return None
    if members.get("specversion") != "1.0":
        return None
    if not all(isinstance(members.get(n), str) and members[n] for n in ("id", "source", "type")):
        return None
    return members


def from_message(body: bytes, attributes: Mapping[str, str]) -> CloudEvent:
    """Decode (body, attributes) in either mode (the order of the checks is in the module docstring).

    Raises:
        InvalidArgument: it is not a CloudEvent, or a required attribute is missing.
    """
    binary = not _is_structured(attributes) and _binary_get(attributes, "specversion") is not None
    if not binary and not _is_structured(attributes) and _looks_structured(body) is None:
        raise InvalidArgument(
            "the message is not a CloudEvent: no ce_specversion attribute, no structured content-type, "
            "and the body is not a JSON CloudEvent"
        )
    if not binary:
        doc, data_text = _parse_structured(body)
        data = b""
        if "data_base64" in doc:
            try:
                data = base64.b64decode(doc.pop("data_base64"), validate=True)
            except (binascii.Error, TypeError, ValueError):
                raise InvalidArgument("CloudEvent data_base64 is not base64") from None
            doc.pop("data", None)
        elif "data" in doc:
            value = doc.pop("data")
            ctype = doc.get("datacontenttype")
            if isinstance(value, str) and not _is_json(ctype if isinstance(ctype, str) else None):
                data = value.encode("utf-8")
            else:
                assert data_text is not None
                data = data_text.encode("utf-8")  # the exact text the producer wrote
        fields_ = {str(k): v for k, v in doc.items()}
        for name in ("id", "source", "type", "specversion", "datacontenttype", "dataschema", "subject", "time"):
            if fields_.get(name) is not None and not isinstance(fields_[name], str):
                raise InvalidArgument(f"CloudEvent {name} must be a JSON string, got {fields_[name]!r}")
    else:
        fields_ = {}
        for name, value in attributes.items():
            if name[:3] in ("ce_", "ce-"):
                fields_[name[3:]] = value
        ctype = _content_type(attributes)
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
    """The idempotency key of a CloudEvent message (source + id), or None if it is not one.

    A body is parsed only when the attributes say it is a structured event,
    or when there are no CloudEvent attributes and it starts like a JSON
    CloudEvent (``{`` and a ``"specversion"`` member).
    """
    source, event_id = _binary_get(attributes, "source"), _binary_get(attributes, "id")
    if source and event_id:
        return _dedup(source, event_id)
    doc: dict[str, Any] | None
    if _is_structured(attributes):
        try:
            doc, _ = _members(body.decode("utf-8"))
        except ValueError:
            return None
    elif _binary_get(attributes, "specversion") is None:
        doc = _looks_structured(body)
    else:
        return None
    if doc and isinstance(doc.get("source"), str) and isinstance(doc.get("id"), str) and doc["source"] and doc["id"]:
        return _dedup(doc["source"], doc["id"])
    return None
