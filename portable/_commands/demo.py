"""``portable demo``: a small pipeline on the embedded providers, with no configuration.

1. storage: write ten order objects to a file:// bucket;
2. messaging: publish an event per order to a sqlite:// queue (one of them twice,
   as a retrying producer would), each with an idempotency key;
3. compute: launch a local:// job that consumes the events with
   ``Subscription.run(..., idempotency=store)``, so the duplicate has no effect,
   and writes a summary back to the bucket;
4. print what happened.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..storage import open_bucket

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run a small pipeline on the embedded providers")
    p.add_argument("--dir", help="folder for the demo's data (default: a fresh temporary folder)")
    p.set_defaults(func=run)


def _urls(root: Path) -> dict[str, str]:
    return {
        "bucket": f"file://{root / 'objects'}",
        "queue": f"sqlite://{root / 'queue.db'}?name=orders",
        "dead_letter": f"sqlite://{root / 'queue.db'}?name=orders-dlq",
        "jobs": f"local://{root / 'jobs'}?workers=2&idle=2",
        "idempotency": f"sqlite://{root / 'idempotency.db'}",
    }


def run(args: argparse.Namespace) -> int:
    from ..compute import JobSpec, open_launcher
    from ..messaging import open_topic

    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="portable-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    urls = _urls(root)
    bucket = open_bucket(urls["bucket"])
    orders = [{"id": i, "amount": (i * 37) % 100 + 1} for i in range(1, 11)]
    for order in orders:
        bucket.put(f"input/order-{order['id']:03d}.json", json.dumps(order).encode(), if_none_match="*")
    print(f"storage:   wrote {len(orders)} orders to {urls['bucket']}/input/")

    topic = open_topic(urls["queue"])
    ids = []
    for order in [*orders, orders[3]]:  # order 4 is published twice, as a retrying producer would
        key = f"order-{order['id']:03d}"
        ids.append(topic.publish(json.dumps({"key": f"input/{key}.json"}).encode(), idempotency_key=key))
    dedup = "the queue dropped the duplicate by its key" if len(set(ids)) == len(orders) else "a duplicate is queued"
    print(f"messaging: published {len(ids)} events to {urls['queue']} ({dedup})")

    launcher = open_launcher(urls["jobs"])
    spec = JobSpec(
        name="summarise-orders",
        command=[sys.executable, "-m", "portable._commands.demo_worker", json.dumps(urls)],
        env={"PYTHONPATH": _PACKAGE_ROOT},
        labels={"app": "demo"},
        timeout=120,
        idempotency_key="demo-summarise",
    )
    job = launcher.submit(spec)
    print(f"compute:   launched job {job.id} on {urls['jobs']}")
    status = job.wait(timeout=180)
    print(f"           job {status.state.value.lower()} (exit code {status.exit_code})")
    for line in job.logs():
        print(f"           | {line.rstrip()}")
    if status.state.value != "SUCCEEDED":
        print("result:    the job did not succeed", file=sys.stderr)
        return 1
    summary = json.loads(bucket.get("output/summary.json"))
    expected = sum(o["amount"] for o in orders)
    print(
        f"result:    {summary['orders']} orders, total amount {summary['total']} "
        f"(expected {expected}; duplicates skipped by the idempotency store: {summary['duplicates_skipped']})"
    )
    launcher.close()
    return 0 if summary["total"] == expected else 1
