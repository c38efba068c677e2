"""What a Bucket call asks of its driver: each argument checked and normalised, for both faces.

:class:`~portable.storage.Bucket` and :class:`portable.aio.AsyncBucket` call
these functions and hand what they return to their driver (sync or async), so
one sequence of checks serves both faces: the same typed error, raised before
any request, whichever face was called. Each function raises what the sync
method's docstring promises; none touches the network.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping

from ..driver.storage import ListPage, ObjectInfo, StorageCapabilities, WriteOptions, check_key
from ..errors import InvalidArgument, TooLarge, Unsupported
from ._checks import (
    NO_WRITE_OPTIONS,
    check_prefix,
    checked_bytes,
    checked_write_options,
    is_clearly_valid_key,
)

__all__ = [
    "age",
    "copy_many_request",
    "copy_prefix_request",
    "keys_request",
    "list_page_request",
    "open_read_request",
    "open_write_request",
    "page_entries",
    "put_many_request",
    "put_request",
    "range_request",
    "signed_url_request",
]


def age(older_than: object) -> dt.timedelta:
    """``older_than`` of ``abort_incomplete``/``list_incomplete`` as a timedelta, else InvalidArgument."""
    if isinstance(older_than, dt.timedelta):
        delta = older_than
    elif type(older_than) in (int, float) and math.isfinite(older_than):  # type: ignore[arg-type]
        delta = dt.timedelta(seconds=older_than)  # type: ignore[arg-type]
    else:
        raise InvalidArgument(f"older_than must be seconds (a finite number) or a timedelta, got {older_than!r}")
    if delta < dt.timedelta(0):
        raise InvalidArgument(f"older_than must be >= 0, got {delta}")
    return delta


def range_request(key: str, start: object, end: object, max_key: int) -> None:
    """Check ``get_range``'s arguments: a portable key, ``0 <= start <= end`` (``end`` None: to the end)."""
    check_key(key, max_key)
    if type(start) is not int or start < 0:
        raise InvalidArgument(f"start must be an int >= 0, got {start!r}")
    if end is not None and (type(end) is not int or end < start):
        raise InvalidArgument(f"end must be an int >= start ({start}), got {end!r}")


def put_request(
    key: str,
    data: object,
    caps: StorageCapabilities,
    provider: str,
    content_type: str | None,
    metadata: Mapping[str, str] | None,
    if_none_match: str | None,
    if_match: str | None,
    cache_control: str | None,
    content_encoding: str | None,
    content_disposition: str | None,
) -> tuple[bytes, WriteOptions]:
    """Check a ``put``: return its bytes and WriteOptions, or raise InvalidKey/InvalidArgument/TooLarge/Unsupported.

    The common put (a short plain key, ``bytes``, no option) takes the fast
    path: a glance at the key and one shared empty WriteOptions.
    """
    if not is_clearly_valid_key(key):
        check_key(key, caps.max_key_bytes)
    raw = data if type(data) is bytes else checked_bytes(data)
    if (
        content_type is None and metadata is None and if_none_match is None and if_match is None
        and cache_control is None and content_encoding is None and content_disposition is None
    ):
        options = NO_WRITE_OPTIONS
    else:
        options = checked_write_options(
            content_type, metadata, if_none_match, if_match, caps, provider,
            cache_control=cache_control, content_encoding=content_encoding,
            content_disposition=content_disposition,
        )
    limit = caps.max_object_bytes
    if limit is not None and len(raw) > limit:
        raise TooLarge(f"{len(raw)} bytes is over {provider}://'s single-put limit of {limit}")
    return raw, options


def list_page_request(
    prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
) -> None:
    """Check ``list_page``'s (and ``list``'s) arguments."""
    check_prefix(prefix)
    if delimiter is not None and delimiter != "/":
        raise InvalidArgument(f"delimiter must be '/' or None, got {delimiter!r}")
    if start_after is not None and type(start_after) is not str:
        raise InvalidArgument("start_after must be a str key")
    if type(page_size) is not int or not 1 <= page_size <= 1000:
        raise InvalidArgument(f"page_size must be an int from 1 to 1000, got {page_size!r}")
    if token is not None and type(token) is not str:
        raise InvalidArgument("token must be a str from a previous page's next_token")


def page_entries(page: ListPage) -> list[ObjectInfo]:
    """A listing page's objects and common prefixes as one list in lexical order (what ``list`` yields)."""
    entries = page.objects
    if page.prefixes:
        entries = [*entries, *(ObjectInfo(key=p, is_prefix=True) for p in page.prefixes)]
        entries.sort(key=lambda e: e.key)
    return entries


def signed_url_request(
    key: str, method: object, expires: float | dt.timedelta, caps: StorageCapabilities, provider: str
) -> dt.timedelta:
    """Check ``signed_url``'s arguments; return the expiry as a timedelta."""
    check_key(key, caps.max_key_bytes)
    if method not in ("GET", "PUT"):
        raise InvalidArgument(f"method must be 'GET' or 'PUT', got {method!r}")
    delta = expires if isinstance(expires, dt.timedelta) else dt.timedelta(seconds=expires)
    if not dt.timedelta(seconds=1) <= delta <= dt.timedelta(days=7):
        raise InvalidArgument(f"expires must be between 1 second and 7 days, got {delta}")
    if not caps.signed_urls:
        raise Unsupported(f"{provider}:// cannot sign URLs", provider=provider)
    return delta


def open_read_request(
    key: str,
    mode: object,
    max_key: int,
    *write_options: object,
) -> bool:
    """Check ``open``'s key and mode; return True for a read (``"rb"``), False for a write (``"wb"``).

    ``write_options`` are the write-only arguments as given: any of them set
    on a read raises InvalidArgument.
    """
    check_key(key, max_key)
    if mode == "rb":
        content_type, metadata, if_none_match, if_match, *headers = write_options
        if content_type or metadata or if_none_match or if_match or any(h is not None for h in headers):
            raise InvalidArgument("write options apply to mode 'wb' only")
        return True
    if mode != "wb":
        raise InvalidArgument(f"mode must be 'rb' or 'wb', got {mode!r}")
    return False


def open_write_request(
    part_size: object,
    caps: StorageCapabilities,
    provider: str,
    content_type: str | None,
    metadata: Mapping[str, str] | None,
    if_none_match: str | None,
    if_match: str | None,
    cache_control: str | None,
    content_encoding: str | None,
    content_disposition: str | None,
) -> WriteOptions:
    """Check a streamed write's part size and options; return its WriteOptions."""
    if type(part_size) is not int or part_size < caps.min_part_bytes:
        raise InvalidArgument(
            f"part_size must be an int >= {caps.min_part_bytes} on {provider}://, got {part_size!r}"
        )
    return checked_write_options(
        content_type, metadata, if_none_match, if_match, caps, provider,
        cache_control=cache_control, content_encoding=content_encoding, content_disposition=content_disposition,
    )


# -- batches ------------------------------------------------------------------
def keys_request(keys: Iterable[str], max_key: int) -> list[str]:
    """The keys of a batch, each checked (InvalidKey before any request).

    Raises InvalidArgument for one ``str`` in place of an iterable of keys
    (it would be read as one key per character).
    """
    if isinstance(keys, str):
        raise InvalidArgument("keys must be an iterable of keys, not one str: pass [key]")
    return [check_key(k, max_key) for k in keys]


def put_many_request(
    items: Mapping[str, bytes] | Iterable[tuple[str, bytes]],
    caps: StorageCapabilities,
    provider: str,
    content_type: str | None,
    metadata: Mapping[str, str] | None,
    cache_control: str | None,
    content_encoding: str | None,
    content_disposition: str | None,
) -> tuple[list[tuple[str, bytes]], WriteOptions]:
    """Check a ``put_many``: return its ``(key, bytes)`` pairs and the WriteOptions every object shares."""
    pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
    checked = [(check_key(k, caps.max_key_bytes), checked_bytes(v)) for k, v in pairs]
    options = checked_write_options(
        content_type, metadata, None, None, caps, provider,
        cache_control=cache_control, content_encoding=content_encoding, content_disposition=content_disposition,
    )
    return checked, options


def copy_many_request(pairs: Mapping[str, str] | Iterable[tuple[str, str]], max_key: int) -> list[tuple[str, str]]:
    """Check a ``copy_many``: every key, and no destination twice."""
    items = list(pairs.items()) if isinstance(pairs, Mapping) else list(pairs)
    checked = [(check_key(src, max_key), check_key(dst, max_key)) for src, dst in items]
    targets = [dst for _, dst in checked]
    if len(set(targets)) != len(targets):
        twice = next(dst for dst in targets if targets.count(dst) > 1)
        raise InvalidArgument(f"copy_many: destination {twice[:200]!r} appears more than once")
    return checked


def copy_prefix_request(src_prefix: str, dst_prefix: str) -> tuple[str, str]:
    """Check a ``copy_prefix``: two valid prefixes, neither a prefix of the other."""
    src = check_prefix(src_prefix)
    dst = check_prefix(dst_prefix)
    if src.startswith(dst) or dst.startswith(src):
        raise InvalidArgument(
            f"copy_prefix: {src!r} and {dst!r} overlap (one is a prefix of the other); "
            "copy to a prefix outside the source"
        )
    return src, dst

