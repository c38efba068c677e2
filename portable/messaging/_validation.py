"""What every provider accepts, checked before any request: bodies, attributes, keys and seconds.

The rules are the ones :mod:`portable.messaging` states; each check raises the
typed error a caller sees (InvalidArgument, InvalidKey) with what to change.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from ..driver.messaging import RESERVED_PREFIX, MessagingCapabilities
from ..errors import InvalidArgument, InvalidKey

_ATTRIBUTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_RESERVED_NAME = re.compile(r"(?i)(portable\.|goog|aws\.|amazon\.)")
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # tab and newlines are allowed
_PRINTABLE_TOKEN = re.compile(r"[!-~]{1,128}")

#: attribute names that passed the name check and are not reserved by a cloud (portable.* may be)
_CHECKED_NAMES: set[str] = set()


def as_body(body: object) -> bytes:
    """``body`` as bytes (a bytearray or memoryview is copied).

    Raises:
        InvalidArgument: it is a str or another type.
    """
    if type(body) is bytes:
        return body
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    if isinstance(body, str):
        raise InvalidArgument("a message body must be bytes, got str; encode it first, e.g. text.encode('utf-8')")
    raise InvalidArgument(f"a message body must be bytes, got {type(body).__name__}")


def check_token(what: str, value: object) -> str:
    """Return ``value`` if it is 1-128 printable ASCII characters without spaces (an ordering or idempotency key).

    Raises:
        InvalidKey: it is not.
    """
    if type(value) is str and 0 < len(value) <= 128 and value.isascii() and value.isprintable() and " " not in value:
        return value
    if type(value) is not str or not _PRINTABLE_TOKEN.fullmatch(value):
        shown = value[:60] if isinstance(value, str) else type(value).__name__
        raise InvalidKey(
            f"{what} must be 1-128 printable ASCII characters without spaces, got {shown!r}"
        )
    return value


def _check_attribute_name(name: object, allow_reserved: bool) -> None:
    if type(name) is not str or not _ATTRIBUTE_NAME.fullmatch(name) or ".." in name or name[-1] == ".":
        raise InvalidKey(
            f"attribute name {name!r} must be 1-128 of A-Z a-z 0-9 _ . -, starting with a letter "
            "or digit, without '..' or a trailing '.'"
        )
    reserved = _RESERVED_NAME.match(name)
    if reserved and not (allow_reserved and name.startswith(RESERVED_PREFIX)):
        raise InvalidKey(
            f"attribute name {name!r} is reserved (portable., goog, aws., amazon. prefixes); rename it"
        )
    if len(_CHECKED_NAMES) < 4096:
        _CHECKED_NAMES.add(name)


def _check_attribute_value(name: str, value: object) -> int:
    """Check one attribute value the slow way; return its size in UTF-8 bytes."""
    if type(value) is not str:
        raise InvalidArgument(
            f"attribute {name!r} must be a str, got {type(value).__name__}; convert it, e.g. str(value)"
        )
    if not value:
        raise InvalidArgument(f"attribute {name!r} is empty; SQS rejects empty values, so portable does too")
    try:
        encoded = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgument(f"attribute {name!r} is not valid UTF-8 (it holds a lone surrogate)") from None
    if encoded > 1024:
        raise InvalidArgument(f"attribute {name!r} is {encoded} bytes; the limit is 1,024 (Pub/Sub's)")
    if _CONTROL_CHARACTERS.search(value):
        raise InvalidArgument(f"attribute {name!r} holds a control character; remove it")
    return encoded


def check_attributes(attributes: object, *, allow_reserved: bool = False) -> tuple[dict[str, str], int]:
    """Validate message attributes; return them as a dict and their size in bytes.

    Raises:
        InvalidKey: a bad or reserved attribute name.
        InvalidArgument: attributes that are not a mapping, or a bad value.
    """
    if type(attributes) is not dict and not isinstance(attributes, Mapping):
        raise InvalidArgument(f"attributes must be a mapping of str to str, got {type(attributes).__name__}")
    out: dict[str, str] = {}
    size = 0
    checked = _CHECKED_NAMES
    for name, value in attributes.items():
        if name not in checked:
            _check_attribute_name(name, allow_reserved)
        elif not allow_reserved and name.startswith(RESERVED_PREFIX):
            raise InvalidKey(f"attribute name {name!r} is reserved (portable. prefix); rename it")
        if type(value) is str and 0 < len(value) <= 1024 and value.isascii() and value.isprintable():
            encoded = len(value)  # the common case: short printable ASCII, nothing more to check
        else:
            encoded = _check_attribute_value(name, value)
        out[name] = value
        size += len(name) + encoded
    return out, size


def attribute_text(text: str, limit: int) -> str:
    """``text`` made a valid attribute value: control characters blanked, at most ``limit`` UTF-8 bytes."""
    text = _CONTROL_CHARACTERS.sub(" ", text) or "-"
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    return encoded[: limit - 3].decode("utf-8", "ignore") + "..."


def finite_seconds(value: object) -> float | None:
    """``value`` as finite float seconds, or None if it is not a real number."""
    if type(value) not in (int, float) or not math.isfinite(value):  # type: ignore[arg-type]
        return None
    return float(value)  # type: ignore[arg-type]


def check_seconds(name: str, value: object) -> float:
    """``value`` as float seconds.

    Raises:
        InvalidArgument: it is not a finite number >= 0.
    """
    number = finite_seconds(value)
    if number is None or number < 0:
        raise InvalidArgument(f"{name} must be a number of seconds >= 0, got {value!r}")
    return number


def _round_up(seconds: float, capabilities: MessagingCapabilities) -> float:
    grain = capabilities.lease_granularity_seconds
    return math.ceil(seconds / grain - 1e-9) * grain if grain > 0 else seconds


def check_lease(seconds: object, capabilities: MessagingCapabilities, provider: str) -> float:
    """A lease in seconds as the provider takes it: at least its minimum, rounded up to its granularity.

    Raises:
        InvalidArgument: not a number > 0, or over ``capabilities.max_lease_seconds``.
    """
    number = finite_seconds(seconds)
    if number is None or number <= 0:
        raise InvalidArgument(f"a lease must be a number of seconds > 0, got {seconds!r}")
    value = _round_up(max(number, capabilities.min_lease_seconds), capabilities)
    if value > capabilities.max_lease_seconds:
        raise InvalidArgument(
            f"a lease of {seconds}s is over {provider}://'s maximum of {capabilities.max_lease_seconds:g}s"
        )
    return value


def check_delay(delay: object, capabilities: MessagingCapabilities, provider: str) -> float:
    """A nack delay in seconds, rounded up to the provider's granularity.

    Raises:
        InvalidArgument: not a number >= 0, or over ``capabilities.max_lease_seconds``.
    """
    number = finite_seconds(delay)
    if number is None or number < 0:
        raise InvalidArgument(f"a nack delay must be a number of seconds >= 0, got {delay!r}")
    if number > capabilities.max_lease_seconds:
        raise InvalidArgument(
            f"a nack delay of {delay}s is over {provider}://'s maximum of {capabilities.max_lease_seconds:g}s"
        )
    return _round_up(number, capabilities)
