"""The demo's job: consume order events once each, then write a summary.

Run by ``portable demo`` as a local:// job: ``python -m portable._commands.demo_worker URLS_JSON``.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from ..errors import AlreadyExists
from ..idempotency import open_store
from ..messaging import Message, open_subscription
from ..storage import open_bucket


def main(urls: dict[str, str]) -> int:
    bucket = open_bucket(urls["bucket"])
    subscription = open_subscription(urls["queue"], dead_letter=urls["dead_letter"])
    store = open_store(urls["idempotency"])
    handled: list[str] = []

    def handle(message: Message) -> None:
        event = json.loads(message.body)
        order = json.loads(bucket.get(event["key"]))
        # the effect: create-only, so a second application would fail loudly
        bucket.put(f"processed/order-{order['id']:03d}.json", json.dumps(order).encode(), if_none_match="*")
        handled.append(event["key"])
        print(f"handled {event['key']} (delivery {message.delivery_attempt})", flush=True)

    stop = threading.Event()

    def stop_when_idle() -> None:
        idle_since = None
        while not stop.is_set():
            stats = subscription.stats()
            if stats.available == 0 and stats.in_flight == 0 and stats.delayed == 0:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > 0.5:
                    stop.set()
            else:
                idle_since = None
            time.sleep(0.1)

    watcher = threading.Thread(target=stop_when_idle, daemon=True)
    watcher.start()
    result = subscription.run(handle, concurrency=2, idempotency=store, stop_event=stop, poll=0.2)
    total = 0
    orders = 0
    for entry in bucket.list("processed/"):
        total += json.loads(bucket.get(entry.key))["amount"]
        orders += 1
    summary = {"orders": orders, "total": total, "duplicates_skipped": result.skipped}
    try:
        bucket.put("output/summary.json", json.dumps(summary).encode(), if_none_match="*")
    except AlreadyExists:
        pass  # a retried job finds its summary already written
    print(f"consumed {len(handled)} events, skipped {result.skipped} duplicates", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
