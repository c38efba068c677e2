"""``portable ls|cat|put|rm|stat|du``: look at and change objects, named by URL, path or key.

    portable ls [URL] [-r] [--json]               # ls s3://bucket, ls s3://bucket/prefix/, ls ./dir
    portable cat URL                               # the object's bytes on stdout
    portable put URL|KEY [FILE|-]                  # FILE (or '-', stdin) as the object
    portable rm URL... [-r] [--include P --exclude P] [--dry-run]
    portable stat URL [--json]                     # size, etag, modified, headers, metadata
    portable du [URL] [--include P --exclude P] [--json]

Arguments are read as :mod:`portable._commands._targets` says. ``--json`` prints
JSON Lines: one JSON object per line (``ls``: one per entry; ``stat``, ``du``:
one; ``rm``: one per key and a last ``{"summary": ...}``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from typing import IO, Any

from ..driver.storage import ObjectInfo
from ..errors import NotFound
from ..storage import Bucket
from ._options import add_filters, add_output_flags, default_bucket, key_filter, open_place_bucket
from ._output import Output, human_size, info_record
from ._targets import Place, UsageError, place_of

__all__ = ["object_place", "register", "warn_if_mem"]

_CHUNK = 8 * 1024 * 1024
_MEM_WARNING = (
    "mem:// keeps objects in this process's memory only: what is written there is gone when this "
    "command exits; write to file://, a local path or a cloud URL to keep it"
)


def warn_if_mem(place: Place, out: Output) -> None:
    """Warn (on stderr) that a ``mem://`` destination ends with the process."""
    if place.scheme.rpartition("+")[2] == "mem" or (place.bucket or "").lower().startswith("mem://"):
        out.warn(_MEM_WARNING)


def object_place(text: str, args: argparse.Namespace, *, what: str = "object") -> Place:
    """The place of one object; UsageError when ``text`` names a folder or a whole bucket."""
    place = place_of(text, default_bucket(args))
    if place.is_dir_like:
        hint = "use -r for a folder" if place.local else "add the key: URL/KEY"
        raise UsageError(f"{text!r} names a folder or a whole bucket, not an {what}; {hint}")
    if place.local and not os.path.exists(place.path):
        raise NotFound(f"no such file: {place.path}")
    return place


def _cmd_ls(args: argparse.Namespace) -> int:
    out = Output(args)
    place = place_of(args.url, default_bucket(args)) if args.url else None
    if place is not None and place.local and not os.path.exists(place.path):
        raise NotFound(f"no such file or folder: {place.path}")
    bucket_url, prefix = (place.bucket, place.key) if place is not None else (args.bucket, "")
    with open_place_bucket(bucket_url, args) as bucket:
        for entry in bucket.list(prefix, delimiter=None if args.recursive else "/"):
            if out.json:
                out.emit(info_record(entry))
            elif entry.is_prefix:
                out.line(f"{'PRE':>12}  {entry.key}")
            else:
                when = entry.modified.strftime("%Y-%m-%d %H:%M:%S") if entry.modified else "-"
                size = human_size(entry.size) if args.human else str(entry.size)
                out.line(f"{size:>12}  {when}  {entry.key}")
    return 0


def _cmd_cat(args: argparse.Namespace) -> int:
    place = object_place(args.url, args)
    with open_place_bucket(place.bucket, args) as bucket, bucket.open(place.key, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            sys.stdout.buffer.write(chunk)
    sys.stdout.buffer.flush()
    return 0


def _put_source(file: str | None) -> tuple[IO[bytes], str | None]:
    """The stream to upload and the local file's name (None for stdin)."""
    if file is None and sys.stdin.isatty():
        raise UsageError(
            "put: no FILE given and stdin is a terminal; name the file (portable put URL ./file) "
            "or pipe the data in with '-' (producer | portable put URL -)"
        )
    if file in (None, "-"):
        return sys.stdin.buffer, None
    path = file[len("file://"):] if file.startswith("file://") else file
    try:
        return open(os.path.expanduser(path), "rb"), path
    except FileNotFoundError:
        raise NotFound(f"no such file: {path}") from None
    except IsADirectoryError:
        raise UsageError(f"put: {path} is a folder; put takes one file (use `portable cp -r` for a folder)") from None


def _cmd_put(args: argparse.Namespace) -> int:
    out = Output(args)
    source, name = _put_source(args.file)
    try:
        place = place_of(args.url, default_bucket(args))
        if place.is_dir_like:
            if name is None:
                raise UsageError(f"put: {args.url!r} names a folder; give the object's key (URL/KEY) for stdin")
            place = place.child(os.path.basename(name))
        warn_if_mem(place, out)
        written = 0
        with open_place_bucket(place.bucket, args) as bucket, bucket.open(
            place.key,
            "wb",
            content_type=args.content_type,
            if_none_match="*" if args.if_none_match else None,
            part_size=max(bucket.capabilities.min_part_bytes, _CHUNK),
        ) as stream:
            while chunk := source.read(_CHUNK):
                stream.write(chunk)
                written += len(chunk)
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    if out.json:
        out.emit({"key": place.key, "size": written, "status": "written"})
    else:
        out.note(f"wrote {place.key} ({human_size(written)})")
    return 0


def _tree_keys(bucket: Bucket, args: argparse.Namespace) -> Iterator[ObjectInfo]:
    """Every object of ``bucket`` (opened at the prefix) that --include/--exclude keep."""
    keep = key_filter(args.filters)
    for info in bucket.list(""):
        if keep is None or keep(info.key):
            yield info


def _cmd_rm(args: argparse.Namespace) -> int:
    out = Output(args)
    verb = "would delete" if args.dry_run else "deleted"
    count = 0
    if args.recursive:
        for text in args.urls:
            place = place_of(text, default_bucket(args))
            with open_place_bucket(place.rooted(), args) as bucket:
                batch: list[str] = []
                for info in _tree_keys(bucket, args):
                    count += 1
                    batch.append(info.key)
                    _show_deleted(out, info.key, verb, args.dry_run)
                    if len(batch) >= 1000:
                        _delete(bucket, batch, args.dry_run)
                _delete(bucket, batch, args.dry_run)
    else:
        if args.filters:
            raise UsageError("rm: --include/--exclude filter the keys under a prefix: add -r")
        for text in args.urls:
            place = place_of(text, default_bucket(args))
            if place.is_dir_like:
                raise UsageError(f"rm: {text!r} names a folder or a whole bucket; add -r to delete what is under it")
            with open_place_bucket(place.bucket, args) as bucket:
                _delete(bucket, [place.key], args.dry_run)
            count += 1
            _show_deleted(out, place.key, verb, args.dry_run)
    if out.json:
        out.emit({"summary": {"deleted": count, "dry_run": args.dry_run}})
    else:
        out.note(f"{'dry run: would delete' if args.dry_run else 'deleted'} {count} object{'s' if count != 1 else ''}")
    return 0


def _show_deleted(out: Output, key: str, verb: str, dry_run: bool) -> None:
    if out.json:
        out.emit({"key": key, "status": "deleted", "dry_run": dry_run})
    elif dry_run:
        out.line(f"{verb}: {key}")


def _delete(bucket: Bucket, batch: list[str], dry_run: bool) -> None:
    if batch and not dry_run:
        bucket.delete_many(batch)
    batch.clear()


def _cmd_stat(args: argparse.Namespace) -> int:
    out = Output(args)
    place = object_place(args.url, args)
    with open_place_bucket(place.bucket, args) as bucket:
        info = bucket.head(place.key)
    record = info_record(info, full=True)
    if out.json:
        out.emit(record)
        return 0
    for name, value in record.items():
        if name == "metadata":
            for meta_name, meta_value in sorted(value.items()):
                out.line(f"{'metadata.' + meta_name:<20} {meta_value}")
        elif value is not None:
            shown = f"{value} ({human_size(value)})" if name == "size" else value
            out.line(f"{name:<20} {shown}")
    return 0


def _cmd_du(args: argparse.Namespace) -> int:
    out = Output(args)
    place = place_of(args.url, default_bucket(args)) if args.url else None
    if place is not None and place.local and not os.path.exists(place.path):
        raise NotFound(f"no such file or folder: {place.path}")
    url = place.rooted() if place is not None else args.bucket
    objects = total = 0
    with open_place_bucket(url, args) as bucket:
        for info in _tree_keys(bucket, args):
            objects += 1
            total += info.size
    shown = place.shown() if place is not None else (args.bucket or "(the profile's bucket)")
    if out.json:
        out.emit({"url": shown, "objects": objects, "bytes": total})
    else:
        out.line(f"{objects} object{'s' if objects != 1 else ''}, {human_size(total)} ({total} bytes)  {shown}")
    return 0


def register(sub: Any) -> None:
    def command(name: str, help_text: str, func: Any, json_help: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--bucket", help="the bucket of bare KEY arguments (default: the profile's storage)")
        add_output_flags(p, json_help=json_help)
        p.set_defaults(func=func)
        return p

    p = command("ls", "list objects: ls s3://bucket, ls s3://bucket/prefix/, ls ./dir, ls PREFIX", _cmd_ls,
                "JSON Lines: one object per entry")
    p.add_argument("url", nargs="?", default="", metavar="URL", help="URL, path or prefix (default: the bucket's top)")
    p.add_argument("-r", "--recursive", action="store_true", help="list every key, not one level")
    p.add_argument("--human", "-H", action="store_true", help="sizes as KiB, MiB, ...")
    p = command("cat", "write an object to stdout", _cmd_cat, "(no JSON: cat writes the object's bytes)")
    p.add_argument("url", metavar="URL", help="the object: s3://bucket/key, ./file, or KEY")
    p = command("put", "store a file (or stdin, with '-') as an object", _cmd_put, "JSON Lines: one record")
    p.add_argument("url", metavar="URL", help="the object: s3://bucket/key, ./file, KEY; a folder URL/ keeps FILE's name")
    p.add_argument("file", nargs="?", help="the file to upload; '-' reads stdin (refused from a terminal)")
    p.add_argument("--content-type")
    p.add_argument("--if-none-match", action="store_true", help="fail (AlreadyExists) if the object exists")
    p = command("rm", "delete objects (with -r: everything under a prefix)", _cmd_rm,
                "JSON Lines: one per key, then a summary")
    p.add_argument("urls", nargs="+", metavar="URL")
    p.add_argument("-r", "--recursive", action="store_true", help="delete every key under each URL")
    p.add_argument("--dry-run", action="store_true", help="print what would be deleted; delete nothing")
    add_filters(p)
    p = command("stat", "print an object's size, etag, time, headers and metadata", _cmd_stat,
                "one JSON document (one line)")
    p.add_argument("url", metavar="URL")
    p = command("du", "count the objects and bytes under a prefix", _cmd_du, "one JSON document (one line)")
    p.add_argument("url", nargs="?", default="", metavar="URL")
    add_filters(p)

