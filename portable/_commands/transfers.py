"""``portable cp|mv|sync``: copy objects between any two places, local or on any provider.

    portable cp SRC DST                    # one object; DST/ or an existing folder keeps SRC's name
    portable cp -r SRC DST                 # a tree, through portable.transfer (verified, resumable by rerun)
    portable mv [-r] SRC DST               # a verified copy, then the source is deleted
    portable sync SRC DST [--delete]       # make DST hold what SRC holds
    options: --include/--exclude PATTERN (in order, last match wins), --dry-run,
             --checksum (compare SHA-256 of both sides), --size-only, --json, --quiet, --debug

A tree copy opens both buckets at their prefixes, so ``SRC/a/b`` goes to ``DST/a/b``;
objects the destination already holds are skipped (``--checksum`` decides by content),
so a copy killed at any point is finished by running it again. A single-object ``cp``
streams the object (its content type, headers and metadata go with it) and checks
the stored size; ``mv`` also reads the copy back and compares its SHA-256 before it
deletes the source.

``--json`` prints JSON Lines: one object per line for each object's result
(``{"key", "status", "size", "reason", "verified", "error"}``) and a last
``{"summary": {...}}`` line.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from typing import Any

from .. import transfer
from ..errors import NotFound
from ..storage import Bucket
from ..transfer import ChecksumMismatch, ObjectResult, TransferReport
from ._errors import error_line
from ._options import add_filters, add_output_flags, default_bucket, key_filter, open_place_bucket
from ._output import Output, TransferBar, count_in_background
from ._targets import Place, UsageError, object_name, place_of
from .objects import object_place, warn_if_mem

__all__ = ["register"]

_CHUNK = 8 * 1024 * 1024


def _checksum(args: argparse.Namespace) -> transfer.Checksum:
    if args.checksum and args.size_only:
        raise UsageError("--checksum and --size-only contradict each other: choose one")
    return "full" if args.checksum else "size" if args.size_only else "auto"


def _show_results(out: Output, report: TransferReport, scheme: str) -> None:
    """Each object's result as JSON Lines, each failure as a line on stderr, dry-run plans on stdout."""
    for result in report.results:
        if out.json:
            out.emit({
                "key": result.key, "status": result.status, "size": result.size, "reason": result.reason,
                "verified": result.verified, "dry_run": report.dry_run,
                "error": None if result.error is None else f"{type(result.error).__name__}: {result.error}",
            })
        elif result.status == "failed" and result.error is not None:
            line = error_line(result.error, scheme=scheme, debug=out.debug).replace("portable: ", "", 1)
            print(f"portable: failed {result.key}: {line}", file=sys.stderr)
        elif report.dry_run and result.status in ("copied", "deleted"):
            verb = "would copy" if result.status == "copied" else "would delete"
            out.line(f"{verb}: {result.key} ({result.reason})" if result.reason else f"{verb}: {result.key}")


def _count(bucket: Bucket, keep: Any) -> tuple[int, int]:
    objects = total = 0
    for info in bucket.list(""):
        if keep is None or keep(info.key):
            objects += 1
            total += info.size
    return objects, total


def _tree(args: argparse.Namespace, out: Output, src: Place, dst: Place, mode: str) -> int:
    src_url, dst_url = src.rooted(), dst.rooted()
    if src_url == dst_url:
        raise UsageError(f"{args.src!r} and {args.dst!r} are the same place; nothing to {mode}")
    keep = key_filter(args.filters)
    checksum = _checksum(args)
    with open_place_bucket(src_url, args) as source, open_place_bucket(dst_url, args) as target:
        with out.transfer_bar(f"{mode} {src.shown()}") as bar:
            count_in_background(lambda: _count(source, keep), bar)
            tick = bar.tick if bar is not None else None
            if mode == "sync":
                report = transfer.sync(source, target, delete=args.delete, dry_run=args.dry_run, checksum=checksum,
                                       progress=tick, key_filter=keep)
            else:
                report = transfer.copy(source, target, dry_run=args.dry_run, checksum=checksum, progress=tick,
                                       key_filter=keep)
        _show_results(out, report, src.scheme or dst.scheme)
        extra = ""
        if mode == "move" and not args.dry_run:
            done = [r.key for r in report.results if r.status in ("copied", "skipped")]
            for start in range(0, len(done), 1000):
                source.delete_many(done[start:start + 1000])
            extra = f"{len(done)} source object{'s' if len(done) != 1 else ''} deleted"
    out.summary(report, verb={"move": "moved", "sync": "synced"}.get(mode, "copied"), extra=extra)
    return 0 if report.ok else 1


def _stream(
    source: Bucket, src_key: str, target: Bucket, dst_key: str, bar: TransferBar | None, read_back: bool
) -> ObjectResult:
    """Stream one object with its headers and metadata; check the stored size (and with ``read_back`` the SHA-256)."""
    info = source.head(src_key)
    digest = hashlib.sha256()
    with source.open(src_key, "rb") as reader, target.open(
        dst_key,
        "wb",
        content_type=info.content_type,
        metadata=dict(info.metadata) or None,
        cache_control=info.cache_control,
        content_encoding=info.content_encoding,
        content_disposition=info.content_disposition,
        part_size=max(target.capabilities.min_part_bytes, _CHUNK),
    ) as writer:
        while chunk := reader.read(_CHUNK):
            writer.write(chunk)
            digest.update(chunk)
            if bar is not None:
                bar.advance(len(chunk))
    stored = target.head(dst_key)
    if stored.size != info.size:
        target.delete(dst_key)
        raise ChecksumMismatch(f"{dst_key}: {stored.size} bytes stored, {info.size} read from the source; removed")
    verified = "size"
    if read_back:
        again = hashlib.sha256()
        with target.open(dst_key, "rb") as check:
            while chunk := check.read(_CHUNK):
                again.update(chunk)
        if again.digest() != digest.digest():
            target.delete(dst_key)
            raise ChecksumMismatch(f"{dst_key}: the copy read back differs from the source (SHA-256); removed")
        verified = "read-back"
    return ObjectResult(dst_key, "copied", info.size, "copy", verified)


def _one(args: argparse.Namespace, out: Output, src: Place, dst: Place, move: bool) -> int:
    if args.filters or getattr(args, "delete", False):
        raise UsageError("--include/--exclude apply to trees: add -r")
    started = time.monotonic()
    same = src.bucket == dst.bucket
    if same and src.key == dst.key:
        raise UsageError(f"{args.src!r} and {args.dst!r} are the same object")
    with open_place_bucket(src.bucket, args) as source:
        if args.dry_run:
            size = source.head(src.key).size
            result = ObjectResult(dst.key, "copied", size, f"from {src.key}")
        elif same:
            size = source.head(src.key).size
            source.copy(src.key, dst.key)
            result = ObjectResult(dst.key, "copied", size, "server-side copy", "")
        else:
            with open_place_bucket(dst.bucket, args) as target:
                total = source.head(src.key).size
                with out.transfer_bar(f"{src.key} -> {dst.key}", total) as bar:
                    if bar is not None:
                        bar.set_total(1, total)
                    result = _stream(source, src.key, target, dst.key, bar, read_back=move)
        if move and not args.dry_run:
            source.delete(src.key)
    report = TransferReport(results=[result], dry_run=args.dry_run, seconds=time.monotonic() - started)
    _show_results(out, report, src.scheme or dst.scheme)
    out.summary(report, verb="moved" if move else "copied")
    return 0


def _copy(args: argparse.Namespace, mode: str) -> int:
    out = Output(args)
    _checksum(args)  # contradictory flags are bad usage, whatever is copied
    dst = place_of(args.dst, default_bucket(args))
    warn_if_mem(dst, out)
    if mode == "sync" or args.recursive:
        src = place_of(args.src, default_bucket(args))
        if src.local and not os.path.exists(src.path):
            raise NotFound(f"no such file or folder: {src.path}")
        if not (src.local and os.path.isfile(src.path)):
            return _tree(args, out, src, dst, mode)
    src = object_place(args.src, args)
    if dst.is_dir_like:
        dst = dst.child(object_name(src))
    return _one(args, out, src, dst, mode == "move")


def _cmd_cp(args: argparse.Namespace) -> int:
    return _copy(args, "copy")


def _cmd_mv(args: argparse.Namespace) -> int:
    return _copy(args, "move")


def _cmd_sync(args: argparse.Namespace) -> int:
    return _copy(args, "sync")


def register(sub: Any) -> None:
    for name, func, help_text in (
        ("cp", _cmd_cp, "copy an object, or with -r a tree, between any two places"),
        ("mv", _cmd_mv, "move: a verified copy, then the source is deleted"),
        ("sync", _cmd_sync, "make DST hold what SRC holds (with --delete: only that)"),
    ):
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("src", metavar="SRC", help="s3://bucket/key, gs://, az://, ./path, file://, mem://, or KEY")
        p.add_argument("dst", metavar="DST", help="the same forms; a trailing / (or a folder) keeps SRC's name")
        p.add_argument("--bucket", help="the bucket of bare KEY arguments (default: the profile's storage)")
        if name == "sync":
            p.set_defaults(recursive=True)
            p.add_argument("--delete", action="store_true", help="delete what only DST has (after all copies, "
                           "and only if none failed)")
        else:
            p.add_argument("-r", "--recursive", action="store_true", help="copy every object under SRC")
        p.add_argument("--dry-run", action="store_true", help="print what would be done; write nothing")
        p.add_argument("--checksum", action="store_true",
                       help="decide what is already there by SHA-256 of both sides (reads both)")
        p.add_argument("--size-only", action="store_true", help="decide what is already there by size alone")
        add_filters(p)
        add_output_flags(p, json_help="JSON Lines: one line per object, then a {\"summary\": ...} line")
        p.set_defaults(func=func)
