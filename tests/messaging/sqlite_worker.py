"""A producer or consumer process for the multi-process sqlite test.

    python -m tests.messaging.sqlite_worker produce URL START STOP
    python -m tests.messaging.sqlite_worker consume URL OUT_FILE [--hang-after N --marker FILE]

A consumer appends the body of every message it handled to OUT_FILE (flushed
before the handler returns, so before the ack). With ``--hang-after N`` it
hangs inside the handler of message N+1 after touching MARKER, so the test
can kill it with SIGKILL mid-handler. SIGTERM stops it gracefully.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

from portable.messaging import Message, open_subscription, open_topic


def produce(url: str, start: int, stop: int) -> int:
    topic = open_topic(url)
    for first in range(start, stop, 100):
        topic.publish_batch([str(i).encode() for i in range(first, min(first + 100, stop))])
    return 0


def consume(url: str, out_file: str, hang_after: int | None, marker: str | None) -> int:
    sub = open_subscription(url, lease=2.0)
    lock = threading.Lock()
    handled = 0
    out = open(out_file, "a", buffering=1)  # noqa: SIM115 - line-buffered for the life of the process

    def handler(message: Message) -> None:
        nonlocal handled
        with lock:
            handled += 1
            hang = hang_after is not None and handled > hang_after
        if hang:
            assert marker is not None
            Path(marker + ".tmp").write_text(message.body.decode())
            os.replace(marker + ".tmp", marker)  # atomic: the test never reads it half-written
            time.sleep(3600)  # killed here, mid-handler
        with lock:
            out.write(message.body.decode() + "\n")
            out.flush()

    stats = sub.run(handler, concurrency=4, max_deliveries=None, poll=0.2, drain_timeout=10)
    out.close()
    print(json.dumps(stats.__dict__), flush=True)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="role", required=True)
    p = sub.add_parser("produce")
    p.add_argument("url")
    p.add_argument("start", type=int)
    p.add_argument("stop", type=int)
    c = sub.add_parser("consume")
    c.add_argument("url")
    c.add_argument("out")
    c.add_argument("--hang-after", type=int)
    c.add_argument("--marker")
    args = parser.parse_args(argv)
    if args.role == "produce":
        return produce(args.url, args.start, args.stop)
    return consume(args.url, args.out, args.hang_after, args.marker)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
