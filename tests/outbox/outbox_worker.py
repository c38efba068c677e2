"""Subprocesses of the outbox crash test.

``python -m tests.outbox.outbox_worker write BUCKET START N`` writes pairs START..N-1 through the outbox,
printing ``{"done": i, "resumed": bool}`` after each; ``... relay BUCKET QUEUE`` relays until killed
(or, with ``--until-empty``, until no record is left), printing each pass's counts.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time

from portable.messaging import open_topic
from portable.outbox import Outbox


def object_body(i: int) -> bytes:
    return hashlib.sha256(str(i).encode()).digest() * (1 + i % 7)


def write(bucket_url: str, start: int, n: int) -> None:
    outbox = Outbox(bucket_url)
    print(json.dumps({"start": True}), flush=True)
    for i in range(start, n):
        done = outbox.put(f"objects/{i:04d}", object_body(i), event=json.dumps({"i": i}).encode(),
                          attributes={"kind": "made"}, content_type="application/octet-stream")
        print(json.dumps({"done": i, "resumed": done.resumed}), flush=True)


def relay(bucket_url: str, queue_url: str, until_empty: bool) -> None:
    outbox = Outbox(bucket_url)
    topic = open_topic(queue_url)
    print(json.dumps({"start": True}), flush=True)
    while True:
        stats = outbox.relay_once(topic)
        print(json.dumps({"published": stats.published, "waiting": stats.waiting, "failed": stats.failed}),
              flush=True)
        if stats.published == stats.waiting == stats.failed == 0:
            if until_empty:
                return
            time.sleep(0.01)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        relay(sys.argv[2], sys.argv[3], "--until-empty" in sys.argv)
