"""Options shared by the storage commands: output flags, ``--bucket``, and ``--include``/``--exclude`` filters.

Filters follow ``aws s3``: every key is included unless a filter says otherwise;
filters apply in command-line order and the last one that matches decides;
patterns are :func:`fnmatch.fnmatchcase` patterns (``*`` also matches ``/``)
matched against the key relative to the source prefix.
"""

from __future__ import annotations

import argparse
import fnmatch
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["add_filters", "add_output_flags", "default_bucket", "key_filter", "open_place_bucket"]


def add_output_flags(parser: argparse.ArgumentParser, *, json_help: str) -> None:
    """``--json``, ``--quiet`` and ``--debug`` on a subcommand (``--debug``/``--quiet`` also work before it)."""
    parser.add_argument("--json", action="store_true", help=json_help)
    parser.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="print no summary and no progress bar (errors and warnings still)")
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="on an error, print the provider's detail and the traceback")


class _FilterAction(argparse.Action):
    """Appends ``(include?, pattern)`` to one list shared by --include and --exclude, keeping their order."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        filters = list(getattr(namespace, self.dest, None) or [])
        filters.append((option_string == "--include", str(values)))
        setattr(namespace, self.dest, filters)


def add_filters(parser: argparse.ArgumentParser) -> None:
    """``--include PATTERN`` / ``--exclude PATTERN``, repeatable, in order (module docstring)."""
    parser.add_argument("--include", dest="filters", action=_FilterAction, metavar="PATTERN", default=[],
                        help="take keys matching PATTERN again (fnmatch, relative to the source prefix)")
    parser.add_argument("--exclude", dest="filters", action=_FilterAction, metavar="PATTERN", default=[],
                        help="leave keys matching PATTERN alone; the last matching --include/--exclude wins")


def key_filter(filters: Sequence[tuple[bool, str]]) -> Callable[[str], bool] | None:
    """The predicate of ``filters`` on a relative key, or None when there are none (everything is taken)."""
    if not filters:
        return None
    rules = list(filters)

    def keep(key: str) -> bool:
        kept = True
        for include, pattern in rules:
            if fnmatch.fnmatchcase(key, pattern):
                kept = include
        return kept

    return keep


def default_bucket(args: argparse.Namespace) -> str:
    """The bucket of bare KEY arguments: ``--bucket``, else the active profile's ``storage`` URL."""
    if getattr(args, "bucket", None) is not None:
        return str(args.bucket)
    from ..config import load_profile

    return load_profile(args.profile).storage


def open_place_bucket(url: str | None, args: argparse.Namespace) -> Any:
    """Open ``url`` (None: ``--bucket``, else the profile's storage) with the command's profile."""
    from ..storage import open_bucket

    return open_bucket(url if url is not None else getattr(args, "bucket", None), profile=args.profile)
