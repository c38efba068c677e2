"""Verified, resumable copy and sync between any two buckets, on any providers.

>>> import portable.storage, portable.transfer
>>> src = portable.storage.open_bucket("mem://transfer-doc-src")
>>> dst = portable.storage.open_bucket("mem://transfer-doc-dst")
>>> _ = src.put("a.txt", b"hello", content_type="text/plain", metadata={"owner": "ops"})
>>> report = portable.transfer.sync(src, dst)
>>> report.copied, report.failed, dst.head("a.txt").metadata["owner"]
(1, 0, 'ops')
>>> portable.transfer.sync(src, dst).skipped    # a rerun copies only what is missing or different
1

``copy`` copies the objects named (``keys=``) or under ``prefix`` that the
destination does not already hold; ``sync`` does the same for a whole prefix
and, with ``delete=True``, removes what only the destination has. Each object:

* is read with one ``get`` and written with one atomic ``put`` when it fits
  in one part (``part_size``); a larger one streams into ``Bucket.open(key,
  "wb")`` from ranged GETs, two fetched ahead of the upload: memory per
  worker is a few parts whatever the object's size; ``concurrency`` objects
  move at once;
* keeps its content type, ``cache_control``, ``content_encoding``,
  ``content_disposition`` and user metadata, where the destination keeps them;
* is verified end to end: the MD5 of every part is computed as it is copied
  and compared with the destination's stored MD5 where the provider exposes
  one (S3's etag), else with the bytes read back; a mismatch is a failed
  result (:class:`ChecksumMismatch`) and the bad copy is deleted;
* is tried again, step by step, after a retryable error (a cut stream, a
  failed read-back), up to twice;
* becomes visible only when complete: a transfer killed at any point leaves
  no partial object, and a rerun copies only what is missing or different.

What "already holds" means is ``checksum=`` (docs/transfer.md has the table
per pair of providers): ``"auto"`` (sizes, then S3 MD5 etags where both sides
have them, else the destination not older than the source), ``"size"``, or
``"full"`` (SHA-256 of both sides, read).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from ..driver.storage import ObjectInfo, check_key
from ..errors import InvalidArgument
from ..storage import DEFAULT_PART_SIZE, Bucket, open_bucket
from ._engine import DEFAULT_CONCURRENCY, Checksum, check_plan, merged, run_transfer
from ._report import (
    ChecksumMismatch,
    ObjectResult,
    Progress,
    ProgressCallback,
    Status,
    TransferReport,
)

__all__ = [
    "Checksum",
    "ChecksumMismatch",
    "KeyFilter",
    "ObjectResult",
    "Progress",
    "ProgressCallback",
    "Status",
    "TransferReport",
    "copy",
    "sync",
]

def _bucket(side: str, value: object) -> tuple[Bucket, bool]:
    """The Bucket of ``value`` (a Bucket or a URL) and whether it was opened here (and must be closed)."""
    if isinstance(value, Bucket):
        return value, False
    if isinstance(value, str):
        return open_bucket(value), True
    raise InvalidArgument(f"{side} must be a Bucket or a bucket URL, got {type(value).__name__}")


def _key_list(keys: object) -> list[str]:
    if isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
        raise InvalidArgument(f"keys must be an iterable of str keys (a list), got {type(keys).__name__}")
    out = list(dict.fromkeys(keys))  # a key named twice is copied once
    for key in out:
        if type(key) is not str:
            raise InvalidArgument(f"keys must hold str keys, got {type(key).__name__}")
        check_key(key)
    return out


#: Decides, from a key relative to the transfer's prefix, whether the transfer looks at it at all.
KeyFilter = Callable[[str], bool]

Item = tuple[str, ObjectInfo | None, ObjectInfo | None]


def _filtered(items: Iterable[Item], key_filter: KeyFilter, prefix: str) -> Iterator[Item]:
    """The items whose key (relative to ``prefix``) ``key_filter`` keeps: the others are neither copied nor deleted."""
    cut = len(prefix)
    for item in items:
        kept = key_filter(item[0][cut:])
        if type(kept) is not bool:
            raise InvalidArgument(
                f"key_filter must return True or False, got {kept!r} for key {item[0][cut:]!r}"
            )
        if kept:
            yield item


def _run(
    src: Bucket | str, dst: Bucket | str, *, keys: object, prefix: str, delete: bool, dry_run: bool,
    checksum: object, verify: object, concurrency: object, part_size: object, progress: ProgressCallback | None,
    key_filter: KeyFilter | None,
) -> TransferReport:
    if type(prefix) is not str:
        raise InvalidArgument(f"prefix must be a str, got {type(prefix).__name__}")
    if isinstance(src, str) and isinstance(dst, str) and src == dst:
        raise InvalidArgument(f"source and destination are the same bucket URL {src!r}")
    if src is dst:
        raise InvalidArgument("source and destination are the same Bucket")
    if progress is not None and not callable(progress):
        raise InvalidArgument("progress must be a callable taking a Progress, or None")
    if key_filter is not None and not callable(key_filter):
        raise InvalidArgument(f"key_filter must be a callable taking a key and returning a bool, or None, "
                              f"got {type(key_filter).__name__}")
    wanted = None if keys is None else _key_list(keys)
    if wanted is not None and prefix:
        raise InvalidArgument("give keys= or prefix=, not both (keys are full keys of the source)")
    opened: list[Bucket] = []
    try:
        source, close_src = _bucket("src", src)
        if close_src:
            opened.append(source)
        target, close_dst = _bucket("dst", dst)
        if close_dst:
            opened.append(target)
        plan = check_plan(checksum, verify, dry_run, part_size, concurrency, target)
        items: Iterable[Item]
        if wanted is not None:
            items = ((key, None, None) for key in wanted)
        else:
            items = merged(source, target, prefix)
        if key_filter is not None:
            items = _filtered(items, key_filter, prefix)
        return run_transfer(source, target, items, looked_up=wanted is None, delete=delete and wanted is None,
                            plan=plan, progress=progress)
    finally:
        for bucket in opened:
            bucket.close()


def copy(
    src: Bucket | str,
    dst: Bucket | str,
    *,
    keys: Iterable[str] | None = None,
    prefix: str = "",
    concurrency: int = DEFAULT_CONCURRENCY,
    checksum: Checksum = "auto",
    verify: bool = True,
    dry_run: bool = False,
    part_size: int = DEFAULT_PART_SIZE,
    progress: ProgressCallback | None = None,
    key_filter: KeyFilter | None = None,
) -> TransferReport:
    """Copy objects from ``src`` to ``dst`` (same keys), skipping those ``dst`` already holds.

    Args:
        src, dst: Buckets, or bucket URLs (opened here and closed after).
        keys: the source keys to copy (each checked first: InvalidKey; one
            named twice is copied once); a key missing from the source is a
            failed result (NotFound). Defaults to every key under ``prefix``.
        prefix: copy the keys under this prefix (listed in lexical order).
            Not with ``keys``.
        concurrency: objects in flight at once, 1 to 256. Defaults to 8.
        checksum: ``"auto"``, ``"size"`` or ``"full"``: how an object already
            at the destination is recognised (module docstring). Defaults to
            ``"auto"``.
        verify: check every copy end to end (stored MD5 where the destination
            exposes one, else a read-back). Defaults to True.
        dry_run: report what would be copied, writing nothing.
        part_size: bytes per uploaded part, at least the destination's
            ``min_part_bytes``. Defaults to 8 MiB.
        progress: called with a :class:`Progress` for every chunk copied and
            every object finished; never concurrently (so it need not lock).
        key_filter: called with each key relative to ``prefix`` (the whole
            key with ``keys=``); a key it returns False for is left alone (not
            copied, not reported). It must return a bool (else
            InvalidArgument). The CLI's ``--include``/``--exclude`` build one.

    Returns:
        A :class:`TransferReport`: per-object results (copied, skipped, failed
        with the typed error) and totals. A failed object never stops the others.

    Raises:
        InvalidArgument: bad arguments, before any request.
        PortableError: listing the source or the destination failed (nothing
            was decided); per-object errors are in the report instead.
    """
    return _run(src, dst, keys=keys, prefix=prefix, delete=False, dry_run=dry_run, checksum=checksum,
                verify=verify, concurrency=concurrency, part_size=part_size, progress=progress,
                key_filter=key_filter)


def sync(
    src: Bucket | str,
    dst: Bucket | str,
    *,
    prefix: str = "",
    delete: bool = False,
    dry_run: bool = False,
    checksum: Checksum = "auto",
    verify: bool = True,
    concurrency: int = DEFAULT_CONCURRENCY,
    part_size: int = DEFAULT_PART_SIZE,
    progress: ProgressCallback | None = None,
    key_filter: KeyFilter | None = None,
) -> TransferReport:
    """Make ``dst`` hold what ``src`` holds under ``prefix``: copy what is missing or different.

    Both listings are walked side by side (a page each at a time). With
    ``delete=True``, keys under ``prefix`` that only ``dst`` has are deleted
    after every copy is done, and only if none failed (else they are kept and
    reported as skipped, saying why). ``key_filter`` applies to both sides:
    a key it drops is neither copied nor, with ``delete=True``, deleted from
    ``dst``. Other arguments as for :func:`copy`.

    Raises:
        InvalidArgument: bad arguments, before any request.
        PortableError: a listing failed.
    """
    if type(delete) is not bool:
        raise InvalidArgument(f"delete must be True or False, got {delete!r}")
    return _run(src, dst, keys=None, prefix=prefix, delete=delete, dry_run=dry_run, checksum=checksum,
                verify=verify, concurrency=concurrency, part_size=part_size, progress=progress,
                key_filter=key_filter)
