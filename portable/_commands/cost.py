"""``portable cost``: what a run cost, what a traffic pattern would cost, and the price table.

    portable cost [--from FILE] [--per-month] [--json]
    portable cost project --gets-per-day 200M --object-size 1KiB --providers s3,gcs,azure,s3express
                          [--puts-per-day N] [--lists-per-day N] [--heads-per-day N] [--deletes-per-day N]
                          [--stored-gb GB] [--messages-per-day N --message-size SIZE [--batch N]]
                          [--egress in-region|internet] [--json]
    portable cost prices [--json]

``portable cost`` prints the report of a run a :class:`portable.cost.CostMeter`
saved (``meter.save(path)``): ``--from FILE``, default ``$PORTABLE_COST_FILE``;
``--per-month`` scales it to a month of the same traffic (``days_per_month`` of
the ``[cost]`` settings, 30 by default). ``project`` prices a pattern on each of
``--providers`` (s3, s3express, gcs, azure, sqs, pubsub, azqueue, or a price
table name) without running it. Counts take a k, M, G or T suffix; sizes a
unit B, KB, KiB, MB, MiB, GB, GiB. Prices come from the package's dated table
with the overrides of ``[cost]`` in portable.toml.

Exit codes: 0 success; 1 a portable error (an unknown provider, a bad count or
size, a file that is not a saved meter), on stderr; 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ..cost import (
    CostMeter,
    Traffic,
    load_cost_settings,
    parse_count,
    parse_size,
    project,
)
from ..errors import InvalidArgument

__all__ = ["register"]


def register(sub: Any) -> None:
    cost = sub.add_parser("cost", help="the cost of a run, a projected traffic pattern, the price table")
    cost.add_argument("--from", dest="source", help="a meter saved by CostMeter.save (default $PORTABLE_COST_FILE)")
    cost.add_argument("--per-month", action="store_true", help="scale the run to a month of the same traffic")
    cost.add_argument("--json", action="store_true", help="print JSON")
    cost.set_defaults(func=_report)
    commands = cost.add_subparsers(dest="cost_command")

    p = commands.add_parser("project", help="price a traffic pattern on several providers without running it")
    for name in ("gets", "puts", "lists", "heads", "deletes", "messages"):
        p.add_argument(f"--{name}-per-day", default="0", metavar="N", help=f"{name} a day (e.g. 200M)")
    p.add_argument("--object-size", default="0", metavar="SIZE", help="bytes per GET/PUT (e.g. 1KiB)")
    p.add_argument("--message-size", default="0", metavar="SIZE", help="bytes per message")
    p.add_argument("--batch", type=int, default=1, help="messages per publish/receive/ack request (1-10)")
    p.add_argument("--stored-gb", default="0", metavar="GB", help="GiB stored all month (default: not priced)")
    p.add_argument("--egress", default=None, choices=("in-region", "internet"),
                   help="where the bytes read go (default: the [cost] setting, else in-region)")  # fmt: skip
    p.add_argument("--providers", required=True, help="comma-separated: s3,s3express,gcs,azure,sqs,pubsub,azqueue")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_project)

    p = commands.add_parser("prices", help="print the price table with its dates and sources")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_prices)


def _report(args: argparse.Namespace) -> int:
    source = args.source or os.environ.get("PORTABLE_COST_FILE")
    if not source:
        raise InvalidArgument("name the saved meter: --from FILE (written by CostMeter.save) or PORTABLE_COST_FILE")
    report = CostMeter.load(source).priced(load_cost_settings())
    if args.per_month:
        report = report.per_month()
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.text())
    return 0


def _project(args: argparse.Namespace) -> int:
    settings = load_cost_settings()
    try:
        stored = float(args.stored_gb)
    except ValueError:
        raise InvalidArgument(f"--stored-gb {args.stored_gb!r} is not a number of GiB") from None
    traffic = Traffic(
        gets_per_day=parse_count(args.gets_per_day, "--gets-per-day"),
        puts_per_day=parse_count(args.puts_per_day, "--puts-per-day"),
        lists_per_day=parse_count(args.lists_per_day, "--lists-per-day"),
        heads_per_day=parse_count(args.heads_per_day, "--heads-per-day"),
        deletes_per_day=parse_count(args.deletes_per_day, "--deletes-per-day"),
        object_size=parse_size(args.object_size, "--object-size"),
        stored_gb=stored,
        messages_per_day=parse_count(args.messages_per_day, "--messages-per-day"),
        message_size=parse_size(args.message_size, "--message-size"),
        batch=args.batch,
        egress=args.egress or settings.egress,
    )
    rows = project(traffic, [p for p in args.providers.split(",") if p.strip()], settings)
    if args.json:
        print(json.dumps({
            "days_per_month": settings.days_per_month,
            "traffic": traffic.__dict__,
            "projections": [
                {"service": r.service, "tier": r.tier, "region": r.region, "prices_as_of": r.as_of,
                 "requests": r.requests, "items": r.items, "usd": r.usd, "sources": list(r.sources)}
                for r in rows
            ],
        }, indent=2))  # fmt: skip
        return 0
    print(f"portable cost project: a month of {settings.days_per_month:g} days, egress {traffic.egress}")
    head = f"{'service':<16} {'tier':<26} {'region':<12} {'requests/month':>16} {'USD/month':>12}  breakdown"
    print(head)
    print("-" * len(head))
    for r in rows:
        parts = ", ".join(f"{k} {v:,.2f}" for k, v in r.items.items()) or "-"
        print(f"{r.service:<16} {r.tier:<26} {r.region:<12} {r.requests:>16,.0f} {r.usd:>12,.2f}  {parts}")
    for r in rows:
        print(f"prices {r.service}: as of {r.as_of}; {'; '.join(r.sources)}")
    return 0


def _prices(args: argparse.Namespace) -> int:
    settings = load_cost_settings()
    if args.json:
        print(json.dumps({name: {**p.__dict__, "classes": dict(p.classes), "per_gb": dict(p.per_gb)}
                          for name, p in settings.prices.items()}, indent=2))  # fmt: skip
        return 0
    for name, p in settings.prices.items():
        per = {"request": "request", "64KiB-chunk": "64 KiB chunk", "byte": "byte"}[p.unit]
        figures = ", ".join(f"{c} ${v * (1e6 if p.unit != 'byte' else 1024**4):,.4f}" for c, v in p.classes.items())
        scale = "per million" if p.unit != "byte" else "per TiB"
        print(f"{name}: {p.tier}, {p.region}, as of {p.as_of}")
        print(f"  {scale} {per}s: {figures}")
        extra = [f"{k} ${v}/GiB" for k, v in p.per_gb.items()] + [f"egress ${p.egress_per_gb}/GiB"]
        if p.storage_per_gb_month:
            extra.append(f"storage ${p.storage_per_gb_month}/GiB-month")
        print(f"  {', '.join(extra)}")
        if p.unverified:
            print(f"  not verified: {', '.join(p.unverified)}")
        for s in p.sources:
            print(f"  source: {s}")
    return 0
