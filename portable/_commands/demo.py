"""``portable demo``: a small pipeline on the embedded defaults, with no configuration."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from ..storage import open_bucket


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run a small pipeline on the embedded providers")
    p.add_argument("--dir", help="folder for the demo's data (default: a fresh temporary folder)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="portable-demo-"))
    bucket = open_bucket(f"file://{root / 'objects'}")
    orders = [{"id": i, "amount": (i * 37) % 100 + 1} for i in range(1, 11)]
    for order in orders:
        bucket.put(f"input/order-{order['id']:03d}.json", json.dumps(order).encode(), if_none_match="*")
    print(f"storage: wrote {len(orders)} orders to {bucket.url}/input/")
    total = sum(json.loads(bucket.get(e.key))["amount"] for e in bucket.list("input/"))
    bucket.put("output/summary.json", json.dumps({"orders": len(orders), "total": total}).encode())
    print(f"result: {len(orders)} orders, total amount {total}")
    return 0
