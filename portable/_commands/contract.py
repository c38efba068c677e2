"""``portable contract``: prove that providers behave as the API promises."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "contract",
        help="run the contract suites against providers (a profile's, or URLs)",
        description=(
            "Run the shipped contract suites against each provider, in a namespace of their own "
            "that is removed afterwards. Targets: DOMAIN=URL (storage=, messaging=, compute=) or a "
            "bare URL whose scheme names one domain; with none, the profile's providers."
        ),
    )
    p.add_argument("targets", nargs="*", metavar="[DOMAIN=]URL")
    p.add_argument("--junit-xml", metavar="PATH", help="also write JUnit XML")
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    p.add_argument(
        "--face", choices=("both", "sync", "async"), default="both",
        help="which face of a two-faced suite to run: the sync types, their portable.aio twins, or both (default)",
    )
    p.add_argument("-k", dest="select", metavar="EXPR", help="only tests matching this pytest -k expression")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..testing.contract import parse_targets, run_contract

    targets = parse_targets(args.targets, args.profile)
    code, _reports = run_contract(targets, junit_xml=args.junit_xml, json_path=args.json, select=args.select, face=args.face)
    return code
