"""``portable abort-incomplete``: remove what killed writers left behind in a bucket.

    portable abort-incomplete [URL] --older-than AGE [--prefix P] [--dry-run]

Removes the leftovers of streamed writes that never committed and were
started (or last written) more than AGE ago: temporary files on ``file://``,
incomplete multipart uploads on S3, and what each provider's page names
(:meth:`portable.storage.Bucket.abort_incomplete`). A committed object is
never removed. URL defaults to the active profile's ``storage`` (``--profile P``
picks the profile). AGE is a number of seconds or a duration such as ``90s``,
``15m``, ``1h``, ``2d`` or ``1h30m``; choose it longer than any live write
takes, since a live writer's leftovers older than AGE go too.

Prints each leftover removed (with ``--dry-run``: each that would be) on its
own line on stdout, and a count on stderr.

Exit codes: 0 done (also when there was nothing to remove); 1 a portable error,
on stderr (among them Unsupported: the provider cannot list its incomplete
writes, or cannot for a dry run); 2 bad usage (a malformed AGE, say).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import re
import sys
from typing import Any

from ..storage import open_bucket

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)([smhdw]))")


def parse_age(text: str) -> dt.timedelta:
    """``"90"``, ``"90s"``, ``"15m"``, ``"1h30m"``, ``"2d"``, ``"1w"`` as a timedelta.

    Raises:
        argparse.ArgumentTypeError: anything else (argparse exits 2 with it).
    """
    value = text.strip().lower()
    try:
        seconds = float(value)
    except ValueError:
        parts = _DURATION.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not an age; write seconds (3600) or a duration such as 90s, 15m, 1h, 1h30m, 2d"
            ) from None
        seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the age must be a finite number of seconds >= 0")
    return dt.timedelta(seconds=seconds)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "abort-incomplete",
        help="remove leftovers of writes that never committed (temp files, incomplete multipart uploads)",
        description=(
            "Remove the leftovers of streamed writes that never committed and were started (or last "
            "written) more than AGE ago: temporary files on file://, incomplete multipart uploads on S3, "
            "and what each provider's page names. A committed object is never removed. Choose AGE longer "
            "than any live write takes: a live writer's leftovers older than AGE go too. Prints each "
            "leftover removed (with --dry-run: each that would be) on stdout, and a count on stderr."
        ),
        epilog=(
            "exit codes: 0 done (also when nothing was found), 1 a portable error (Unsupported among them), "
            "2 bad usage"
        ),
    )
    p.add_argument("url", nargs="?", help="bucket URL (default: the profile's storage)")
    p.add_argument(
        "--older-than", required=True, type=parse_age, metavar="AGE",
        help="only leftovers older than this: seconds, or 90s, 15m, 1h, 1h30m, 2d",
    )
    p.add_argument("--prefix", default="", help="only leftovers of keys under this prefix")
    p.add_argument("--dry-run", action="store_true", help="print what would be removed; remove nothing")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    bucket = open_bucket(args.url, profile=args.profile)
    try:
        if args.dry_run:
            found = bucket.list_incomplete(args.older_than, prefix=args.prefix)
        else:
            found = bucket.abort_incomplete(args.older_than, prefix=args.prefix)
    finally:
        bucket.close()
    for entry in found:
        print(entry)
    verb = "would remove" if args.dry_run else "removed"
    where = f" under {args.prefix!r}" if args.prefix else ""
    print(f"{verb} {len(found)} leftover(s) older than {args.older_than}{where}", file=sys.stderr)
    return 0
