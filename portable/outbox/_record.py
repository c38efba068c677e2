"""The outbox record: what is stored under ``.outbox/`` for one object write, and its checks."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import InvalidArgument, InvalidKey

__all__ = ["OBJECT_TAG", "OutboxRecord", "check_attributes", "check_idempotency_key", "default_idempotency_key"]

#: User metadata the outbox puts on each object it writes: the write's idempotency key. The
#: relay publishes a record only once the object under its key carries its own key here.
OBJECT_TAG = "portable-outbox-key"

_TOKEN = re.compile(r"[!-~]{1,128}")
_ATTRIBUTE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def check_idempotency_key(value: object) -> str:
    """``value`` if it is 1-128 printable ASCII characters without spaces, else InvalidKey."""
    if type(value) is not str or not _TOKEN.fullmatch(value):
        shown = value[:60] if isinstance(value, str) else type(value).__name__
        raise InvalidKey(f"an outbox idempotency key must be 1-128 printable ASCII characters without spaces, "
                         f"got {shown!r}")
    return value


def check_attributes(attributes: object) -> dict[str, str]:
    """A copy of ``attributes`` if it maps attribute names to non-empty str values, else InvalidArgument.

    The topic checks the rest (sizes, reserved names) when the relay publishes;
    these are the rules every provider shares, checked before anything is written.
    """
    if attributes is None:
        return {}
    if not isinstance(attributes, Mapping):
        raise InvalidArgument(f"attributes must be a mapping of str to str, got {type(attributes).__name__}")
    out: dict[str, str] = {}
    for name, value in attributes.items():
        if type(name) is not str or not _ATTRIBUTE.fullmatch(name) or name.lower().startswith("portable."):
            raise InvalidArgument(
                f"attribute name {name!r} must be 1-128 of [A-Za-z0-9_.-], start with a letter or digit, "
                "and not start with 'portable.'"
            )
        if type(value) is not str or not value:
            raise InvalidArgument(f"attribute {name!r} must have a non-empty str value, got {value!r}")
        out[name] = value
    return out


def default_idempotency_key(key: str, sha256: str) -> str:
    """The idempotency key of writing bytes with SHA-256 ``sha256`` under ``key``: the same write, the same key."""
    digest = hashlib.sha256(f"{key}\n{sha256}".encode()).hexdigest()
    return f"outbox-{digest[:48]}"


@dataclass(frozen=True, slots=True)
class OutboxRecord:
    """One recorded event: the object write it belongs to and the message to publish.

    Attributes:
        key: the object's key.
        idempotency_key: the write's key; the message carries it as ``portable.idempotency_key``.
        size, sha256: the object's size and SHA-256 (hex) as written.
        event: the message body.
        attributes: the message attributes.
        event_key: the message's ordering key, or None.
        created: when the record was written (seconds since the epoch, the writer's clock).
        committed: the writer saw its object committed and marked the record so (the relay then
            publishes it whatever the key holds now: a later write may have replaced the object).
        record_key: where the record is stored (under the outbox prefix).
    """

    key: str
    idempotency_key: str
    size: int
    sha256: str
    event: bytes
    attributes: Mapping[str, str] = field(default_factory=dict)
    event_key: str | None = None
    created: float = field(default_factory=time.time)
    committed: bool = False
    record_key: str = ""

    def same_write(self, other: OutboxRecord) -> bool:
        """Whether ``other`` records the very same write and event (a retry), not a reuse of the key."""
        return (self.key, self.idempotency_key, self.size, self.sha256, self.event, dict(self.attributes),
                self.event_key) == (other.key, other.idempotency_key, other.size, other.sha256, other.event,
                                    dict(other.attributes), other.event_key)

    def to_bytes(self) -> bytes:
        return json.dumps({
            "v": 1, "key": self.key, "idempotency_key": self.idempotency_key, "size": self.size,
            "sha256": self.sha256, "event": base64.b64encode(self.event).decode(),
            "attributes": dict(self.attributes), "event_key": self.event_key, "created": self.created,
            "committed": self.committed,
        }, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, record_key: str) -> OutboxRecord:
        """The record stored under ``record_key``.

        Raises:
            InvalidArgument: it is not an outbox record of a version this code reads.
        """
        try:
            raw = json.loads(data)
            if raw.get("v") != 1:
                raise ValueError(f"version {raw.get('v')!r}")
            return cls(
                key=raw["key"], idempotency_key=raw["idempotency_key"], size=int(raw["size"]),
                sha256=raw["sha256"], event=base64.b64decode(raw["event"]), attributes=dict(raw["attributes"]),
                event_key=raw["event_key"], created=float(raw["created"]), committed=bool(raw["committed"]),
                record_key=record_key,
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidArgument(f"{record_key!r} is not an outbox record this version reads: {exc}") from exc
