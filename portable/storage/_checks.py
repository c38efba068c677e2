"""The argument checks of :class:`~portable.storage.Bucket`: keys, prefixes, data and write options.

Each check raises the portable error that says what to fix, before any driver
sees the argument. The key check itself is :func:`portable.driver.storage.check_key`
(drivers use it too); what lives here is the Bucket's side.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..driver.storage import BAD_KEY_CHARS, StorageCapabilities, WriteOptions, bad_char_named
from ..errors import InvalidArgument, InvalidKey, TooLarge, Unsupported

#: A user metadata name every provider stores as given (case aside).
METADATA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")

#: The options of a write with no content type, metadata or condition (the common put).
NO_WRITE_OPTIONS = WriteOptions()

#: The longest value of a ``cache_control``, ``content_encoding`` or ``content_disposition`` header.
MAX_HEADER_CHARS = 1024

#: A header value every provider stores as given: printable ASCII (space to ``~``).
_HEADER_VALUE = re.compile(r"[ -~]+")


def is_clearly_valid_key(key: object) -> bool:
    """Whether ``key`` is valid at a glance, so the full :func:`check_key` can be skipped.

    True only for the common key: a short printable ``str`` with no ``/`` at
    either end, no ``.`` and no ``//``. False says nothing: the caller runs the
    full check then.
    """
    return (
        type(key) is str
        and 0 < len(key) <= 255
        and key.isprintable()
        and key[0] != "/"
        and key[-1] != "/"
        and "." not in key
        and "//" not in key
    )


def check_prefix(prefix: object) -> str:
    """Return ``prefix`` if it can prefix portable keys, else raise InvalidKey.

    The empty prefix is valid (everything); a prefix may end with ``/`` but not
    start with one.
    """
    if type(prefix) is not str:
        raise InvalidKey(f"a prefix must be a str, got {type(prefix).__name__}")
    if prefix and prefix[0] == "/":
        raise InvalidKey(f"prefix {prefix[:60]!r} must not start with '/'")
    bad = bad_char_named(prefix) if prefix else None
    if bad is not None:
        raise InvalidKey(
            f"prefix {prefix[:60]!r} holds the control or line-separator character {bad}; "
            "no key can hold one (C0/C1 controls, U+2028, U+2029)"
        )
    return prefix


def checked_bytes(data: object) -> bytes:
    """Return ``data`` as ``bytes`` (copying a bytearray or memoryview), else raise InvalidArgument."""
    if type(data) is bytes:
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    if isinstance(data, str):
        raise InvalidArgument("data must be bytes, got str; encode it first, e.g. text.encode('utf-8')")
    raise InvalidArgument(f"data must be bytes, bytearray or memoryview, got {type(data).__name__}")


def checked_write_options(
    content_type: str | None,
    metadata: Mapping[str, str] | None,
    if_none_match: str | None,
    if_match: str | None,
    caps: StorageCapabilities,
    provider: str,
    *,
    cache_control: str | None = None,
    content_encoding: str | None = None,
    content_disposition: str | None = None,
) -> WriteOptions:
    """Return the WriteOptions of a put or streamed write, with metadata names lower-cased.

    Metadata is user metadata whatever its names (``cache-control`` too): HTTP
    headers come only from ``content_type`` and the three header arguments.

    Raises:
        InvalidArgument: a condition, metadata entry, content type or header is
            malformed, or both conditions are given.
        Unsupported: ``provider`` does not enforce the condition asked for.
        TooLarge: the metadata is over ``caps.max_metadata_bytes``.
    """
    if if_none_match is not None and if_none_match != "*":
        raise InvalidArgument(f"if_none_match takes only '*' (create only), got {if_none_match!r}")
    if if_none_match is not None and if_match is not None:
        raise InvalidArgument("pass if_none_match or if_match, not both")
    if if_match is not None and (type(if_match) is not str or not if_match):
        raise InvalidArgument("if_match must be a non-empty etag string from head() or put()")
    if if_none_match and not caps.conditional_create:
        raise Unsupported(f"{provider}:// does not enforce create-only writes", provider=provider)
    if if_match and not caps.conditional_update:
        raise Unsupported(f"{provider}:// does not enforce etag-conditional writes", provider=provider)
    meta: Mapping[str, str] = {}
    if metadata:
        total = 0
        for name, value in metadata.items():
            if type(name) is not str or not METADATA_NAME.match(name):
                raise InvalidArgument(
                    f"metadata name {name!r} must be 1-128 ASCII letters, digits, '-' or '_', "
                    "starting with a letter or digit"
                )
            if type(value) is not str or not value.isascii() or BAD_KEY_CHARS.search(value):
                raise InvalidArgument(f"metadata {name!r} must be a printable ASCII str")
            total += len(name) + len(value)
        if caps.max_metadata_bytes is not None and total > caps.max_metadata_bytes:
            raise TooLarge(f"metadata is {total} bytes; {provider}:// allows {caps.max_metadata_bytes}")
        meta = {k.lower(): v for k, v in metadata.items()}
    if content_type is not None and (type(content_type) is not str or BAD_KEY_CHARS.search(content_type)):
        raise InvalidArgument(f"content_type must be a str such as 'application/json', got {content_type!r}")
    headers: dict[str, str | None] = {
        "cache_control": cache_control,
        "content_encoding": content_encoding,
        "content_disposition": content_disposition,
    }
    for header, given in headers.items():
        if given is not None:
            check_header_value(header, given)
    if not meta and content_type is None and if_match is None and not if_none_match and not any(headers.values()):
        return NO_WRITE_OPTIONS
    return WriteOptions(
        content_type, meta, bool(if_none_match), if_match,
        cache_control=cache_control, content_encoding=content_encoding, content_disposition=content_disposition,
    )


def check_header_value(name: str, value: object) -> str:
    """Return ``value`` if it can be the stored HTTP header ``name``, else raise InvalidArgument.

    A value is 1 to :data:`MAX_HEADER_CHARS` printable ASCII characters (space
    to ``~``): what every provider stores and returns unchanged. Encode anything
    else first (RFC 8187's ``filename*=UTF-8''...`` for a disposition).
    """
    if type(value) is not str:
        raise InvalidArgument(f"{name} must be a str such as 'max-age=3600', got {type(value).__name__}")
    if not value or len(value) > MAX_HEADER_CHARS:
        raise InvalidArgument(f"{name} must be 1 to {MAX_HEADER_CHARS:,} characters, got {len(value):,}")
    if not _HEADER_VALUE.fullmatch(value):
        raise InvalidArgument(
            f"{name} {value[:60]!r} must be printable ASCII (no control characters, no non-ASCII: "
            "encode a file name as RFC 8187 filename*=UTF-8''...)"
        )
    return value



def check_size_request(size: object, mode: str, resuming: bool) -> int | None:
    """Return ``open(..., size=)`` checked (both faces): None, or the stream's length in bytes.

    Raises:
        InvalidArgument: ``size`` is not an int >= 0, is given for mode ``"rb"``,
            or comes with ``resume=True``.
    """
    if size is None:
        return None
    if mode != "wb":
        raise InvalidArgument(f"size= is for mode 'wb', not {mode!r}")
    if type(size) is not int or size < 0:
        raise InvalidArgument(f"size must be an int >= 0 (the stream's length in bytes), got {size!r}")
    if resuming:
        raise InvalidArgument("size= cannot be combined with resume=True (a resumed upload is sent in parts)")
    return size


def check_resume_request(
    resume: object,
    source: object,
    if_none_match: str | None,
    if_match: str | None,
    caps: StorageCapabilities,
    provider: str,
    limitation: str = "",
) -> bool:
    """Return whether a streamed write resumes, after checking ``resume`` and ``source`` (both faces).

    Raises:
        InvalidArgument: ``resume`` is not a bool; ``source`` is given without
            ``resume=True``, or is not a readable, seekable binary file.
        Unsupported: ``provider`` cannot resume a write (see
            ``capabilities.resumable_writes``), or a condition is asked for with it.
    """
    if type(resume) is not bool:
        raise InvalidArgument(f"resume must be True or False, got {resume!r}")
    if not resume:
        if source is not None:
            raise InvalidArgument("source= is the file a resumed write continues from: pass it with resume=True")
        return False
    if not caps.resumable_writes:
        raise Unsupported(
            f"{provider}:// cannot resume a streamed write (capabilities.resumable_writes is False): "
            f"{limitation or 'its driver keeps no upload that a later process could find and continue'}; "
            "write without resume=True",
            provider=provider,
        )
    if if_none_match is not None or if_match is not None:
        raise Unsupported(
            "resume=True does not take if_none_match / if_match: a resumed upload's condition would be "
            "checked only at its last commit, long after the parts went up; check with head() first, "
            "or write without resume",
            provider=provider,
        )
    if source is not None:
        for need in ("read", "seek", "seekable"):
            if not callable(getattr(source, need, None)):
                raise InvalidArgument(
                    f"source must be a readable, seekable binary file (open(path, 'rb')), got {type(source).__name__}"
                )
        if not source.seekable():  # type: ignore[attr-defined]
            raise InvalidArgument("source must be seekable: the resumed write seeks it past the parts already uploaded")
    return True
