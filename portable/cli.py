"""The ``portable`` command.

Storage commands take URLs: ``s3://bucket/key``, ``gs://bucket/key``,
``az://container/key``, ``mem://store/key``, a local path (``./x``, ``/abs/x``,
``file://x``), ``BUCKET-URL::KEY``, or a bare KEY on ``--bucket`` (default: the
active profile's bucket). See docs/cli.md.

    portable ls [URL] [-r]                       portable stat URL [--json]
    portable cat URL                             portable du [URL]
    portable put URL [FILE|-] [--if-none-match]  portable rm [-r] URL...
    portable cp [-r] SRC DST                     portable mv [-r] SRC DST
    portable sync SRC DST [--delete]
        (--include/--exclude PATTERN, --dry-run, --checksum, --json, --quiet, --debug)
    portable abort-incomplete [URL] --older-than AGE [--prefix P] [--dry-run]
    portable config show [--profile P]
    portable doctor [--profile P]
    portable queue publish|receive|stats|dlq [--queue URL]
    portable jobs submit|status|logs|cancel|list [--jobs URL]
    portable contract [[DOMAIN=]URL ...] [--json PATH] [--junit-xml PATH]
    portable demo

Exit codes: 0 success, 1 a portable error or any object failed (one line on
stderr; ``--debug`` adds the provider's detail and the traceback), 2 bad usage
(``abort-incomplete``: 0 also when there was nothing to remove).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from . import errors
from ._commands._errors import error_line
from ._commands._targets import UsageError
from .config import load_profile
from .storage import open_bucket

__all__ = ["COMMAND_MODULES", "EXIT_CODES", "main"]

#: What ``portable --help`` says of exit codes (docs/cli.md says the same).
EXIT_CODES = """exit codes:
  0  success
  1  a portable error (one line on stderr; --debug adds the provider's detail), or any object failed
  2  bad usage (an unknown option, a missing argument, an argument that names nothing)
"""

#: Modules that add subcommands through ``register(subparsers)``.
COMMAND_MODULES = (
    "portable._commands.objects",
    "portable._commands.transfers",
    "portable._commands.abort_incomplete",
    "portable._commands.queue",
    "portable._commands.jobs",
    "portable._commands.contract",
    "portable._commands.demo",
    "portable._commands.cost",
)

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
    parser = argparse.ArgumentParser(
        prog="portable",
        description="Portable storage, queues and jobs. Storage commands take URLs (s3://bucket/key, gs://, "
        "az://, ./path, file://, mem://) or keys on the profile's bucket.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--profile", help="profile name (default: $PORTABLE_PROFILE or 'default')")
    parser.add_argument("--debug", action="store_true", help="on an error, print the provider's detail and the traceback")
    parser.add_argument("-q", "--quiet", action="store_true", help="no summaries and no progress bars")
    sub = parser.add_subparsers(dest="command", required=True)

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


def _scheme_of_args(args: argparse.Namespace) -> str:
    """The scheme of the first URL the command was given, for errors that do not name their provider."""
    for name in ("url", "src", "dst", "urls", "bucket"):
        value = getattr(args, name, None)
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and "://" in text:
                return text.partition("://")[0].lower()
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; return its exit code (0 success, 1 a portable error or a failed object, 2 bad usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    debug = bool(getattr(args, "debug", False))
    try:
        code: int = args.func(args)
    except UsageError as exc:
        print(f"portable {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except errors.PortableError as exc:
        print(error_line(exc, scheme=_scheme_of_args(args), debug=debug), file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        print(error_line(exc, debug=debug), file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
