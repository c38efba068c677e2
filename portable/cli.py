"""The ``portable`` command.

Storage commands take object URLs: ``SCHEME://BUCKET-URL/KEY`` is split at
the bucket's root for each scheme (``s3://bucket/key``, ``file://./data/key``
needs ``--bucket``), or a bare KEY on the active profile's bucket.

    portable ls [PREFIX] [--bucket URL] [-r]
    portable cat KEY [--bucket URL]
    portable put KEY [FILE|-] [--bucket URL] [--if-none-match]
    portable rm KEY... [--bucket URL]
    portable cp SRC DST            # each a KEY on --bucket, or BUCKET-URL::KEY
    portable abort-incomplete [URL] --older-than AGE [--prefix P] [--dry-run]
    portable config show [--profile P]
    portable doctor [--profile P]
    portable queue publish|receive|stats|dlq [--queue URL]
    portable jobs submit|status|logs|cancel|list [--jobs URL]
    portable contract [[DOMAIN=]URL ...] [--json PATH] [--junit-xml PATH]
    portable demo

Exit codes: 0 success, 1 a portable error (message on stderr), 2 bad usage
(``abort-incomplete``: 0 also when there was nothing to remove).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

from . import errors
from .config import load_profile
from .storage import Bucket, open_bucket

__all__ = ["COMMAND_MODULES", "main"]

#: Modules that add subcommands through ``register(subparsers)``.
COMMAND_MODULES = (
    "portable._commands.abort_incomplete",
    "portable._commands.queue",
    "portable._commands.jobs",
    "portable._commands.contract",
    "portable._commands.demo",
    "portable._commands.cost",
)

_COPY_CHUNK = 8 * 1024 * 1024


def _bucket(args: argparse.Namespace) -> Bucket:
    return open_bucket(args.bucket, profile=args.profile)


def split_object_url(text: str, default_bucket: str | None) -> tuple[str | None, str]:
    """Split ``BUCKET-URL::KEY`` into (bucket URL, key); a bare KEY uses ``default_bucket``."""
    if "::" in text:
        bucket, _, key = text.rpartition("::")
        return bucket, key
    return default_bucket, text


def _cmd_ls(args: argparse.Namespace) -> int:
    bucket = _bucket(args)
    delimiter = None if args.recursive else "/"
    for entry in bucket.list(args.prefix, delimiter=delimiter):
        if entry.is_prefix:
            print(f"{'PRE':>12}  {entry.key}")
        else:
            when = entry.modified.strftime("%Y-%m-%d %H:%M:%S") if entry.modified else "-"
            print(f"{entry.size:>12}  {when}  {entry.key}")
    return 0


def _cmd_cat(args: argparse.Namespace) -> int:
    bucket = _bucket(args)
    with bucket.open(args.key, "rb") as stream:
        while chunk := stream.read(_COPY_CHUNK):
            sys.stdout.buffer.write(chunk)
    sys.stdout.buffer.flush()
    return 0


def _cmd_put(args: argparse.Namespace) -> int:
    bucket = _bucket(args)
    source: IO[bytes] = sys.stdin.buffer if args.file in (None, "-") else open(args.file, "rb")  # noqa: SIM115
    try:
        with bucket.open(
            args.key,
            "wb",
            content_type=args.content_type,
            if_none_match="*" if args.if_none_match else None,
            part_size=max(bucket.capabilities.min_part_bytes, _COPY_CHUNK),
        ) as out:
            while chunk := source.read(_COPY_CHUNK):
                out.write(chunk)
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    print(f"wrote {args.key}", file=sys.stderr)
    return 0


def _cmd_rm(args: argparse.Namespace) -> int:
    bucket = _bucket(args)
    bucket.delete_many(args.keys)
    return 0


class _Progress:
    """A one-line progress bar on stderr, shown only for large copies on a terminal."""

    def __init__(self, total: int, label: str, stream: IO[str] = sys.stderr) -> None:
        self.total = total
        self.label = label
        self.stream = stream
        self.done = 0
        self.started = time.monotonic()
        self.shown = stream.isatty() and total >= 16 * 1024 * 1024
        self._last = 0.0

    def advance(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.shown and (now - self._last > 0.2 or self.done >= self.total):
            self._last = now
            frac = self.done / self.total if self.total else 1.0
            rate = self.done / max(now - self.started, 1e-6) / 1e6
            bar = "#" * int(frac * 30)
            self.stream.write(f"\r{self.label} [{bar:<30}] {frac:6.1%} {rate:7.1f} MB/s")
            self.stream.flush()

    def finish(self) -> None:
        if self.shown:
            self.stream.write("\n")


def _cmd_cp(args: argparse.Namespace) -> int:
    src_url, src_key = split_object_url(args.src, args.bucket)
    dst_url, dst_key = split_object_url(args.dst, args.bucket)
    src = open_bucket(src_url, profile=args.profile)
    dst = src if dst_url == src_url else open_bucket(dst_url, profile=args.profile)
    if dst is src:
        src.copy(src_key, dst_key)
        return 0
    info = src.head(src_key)
    progress = _Progress(info.size, f"{src_key} -> {dst_key}")
    with src.open(src_key, "rb") as inp, dst.open(
        dst_key,
        "wb",
        content_type=info.content_type,
        part_size=max(dst.capabilities.min_part_bytes, _COPY_CHUNK),
    ) as out:
        while chunk := inp.read(_COPY_CHUNK):
            out.write(chunk)
            progress.advance(len(chunk))
    progress.finish()
    return 0


def _cmd_config_show(args: argparse.Namespace) -> int:
    print(json.dumps(load_profile(args.profile).shown(), indent=2))
    return 0


def _doctor_entries() -> list[tuple[str, Callable[[str, Any], Any]]]:
    entries: list[tuple[str, Callable[[str, Any], Any]]] = [
        ("storage", lambda url, prof: open_bucket(url, profile=prof).capabilities)
    ]
    try:
        messaging = importlib.import_module("portable.messaging")
        entries.append(("queue", lambda url, prof: messaging.open_topic(url, profile=prof).capabilities))
    except ModuleNotFoundError:
        pass
    try:
        compute = importlib.import_module("portable.compute")
        entries.append(("jobs", lambda url, prof: compute.open_launcher(url, profile=prof).capabilities))
    except ModuleNotFoundError:
        pass
    return entries


def _cmd_doctor(args: argparse.Namespace) -> int:
    from .driver.redaction import redact

    prof = load_profile(args.profile)
    print(f"profile {prof.name} (from {prof.source})")
    failed = 0
    for entry, opener in _doctor_entries():
        url = prof.url_for(entry)
        if url is None:
            continue
        try:
            caps = opener(url, prof)
        except errors.PortableError as exc:
            failed += 1
            print(f"  {entry:<8} {redact(url)}\n           FAILED: {exc}")
            continue
        flags = sorted(caps.supported()) if hasattr(caps, "supported") else []
        print(f"  {entry:<8} {redact(url)}\n           ok; capabilities: {', '.join(flags) or 'none'}")
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="portable", description="Portable storage, queues and jobs.")
    parser.add_argument("--profile", help="profile name (default: $PORTABLE_PROFILE or 'default')")
    sub = parser.add_subparsers(dest="command", required=True)

    def storage_cmd(name: str, help_text: str, func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--bucket", help="bucket URL (default: the profile's storage)")
        p.set_defaults(func=func)
        return p

    p = storage_cmd("ls", "list objects", _cmd_ls)
    p.add_argument("prefix", nargs="?", default="")
    p.add_argument("-r", "--recursive", action="store_true", help="list every key, not one level")
    p = storage_cmd("cat", "write an object to stdout", _cmd_cat)
    p.add_argument("key")
    p = storage_cmd("put", "store a file (or stdin) as an object", _cmd_put)
    p.add_argument("key")
    p.add_argument("file", nargs="?", help="file to upload; '-' or none reads stdin")
    p.add_argument("--content-type")
    p.add_argument("--if-none-match", action="store_true", help="fail if the key exists")
    p = storage_cmd("rm", "delete objects", _cmd_rm)
    p.add_argument("keys", nargs="+")
    p = storage_cmd("cp", "copy an object, streaming between any two buckets", _cmd_cp)
    p.add_argument("src", help="KEY on --bucket, or BUCKET-URL::KEY")
    p.add_argument("dst", help="KEY on --bucket, or BUCKET-URL::KEY")

    config = sub.add_parser("config", help="show the resolved configuration")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    show = config_sub.add_parser("show", help="print the active profile, secrets masked")
    show.set_defaults(func=_cmd_config_show)
    doctor = sub.add_parser("doctor", help="open each configured provider and print its capabilities")
    doctor.set_defaults(func=_cmd_doctor)

    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; return its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except errors.PortableError as exc:
        print(f"portable: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
