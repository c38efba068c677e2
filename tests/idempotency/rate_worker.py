"""A consumer process for tests/messaging/test_consumer_rate.py (the consumer loop at rate).

    python -m tests.idempotency.rate_worker consume QUEUE_URL STORE_DB OUT_FILE [--kill-after N]
    python -m tests.idempotency.rate_worker claim STORE_DB FIRST LAST OUT_FILE

``consume`` runs ``Subscription.run`` (concurrency 1: the batched loop) with a
``SqliteStore`` at STORE_DB, each message's key its body (so copies published
without a publisher's key, which the queue does not deduplicate, share one); its
handler appends the body to OUT_FILE (flushed before it returns, so before the completion and the ack). With
``--kill-after N`` the process SIGKILLs itself inside the handler of message N+1,
after that message's line is written: mid-window, with earlier windows completed
and acked and this one's completions not yet written. SIGTERM stops it gracefully.

``claim`` claims keys FIRST..LAST of one store with ``claim_many`` in batches of 50,
completes what it acquired, and writes the keys it acquired to OUT_FILE.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from portable.idempotency import SqliteStore
from portable.idempotency._batch import claim_many, complete_many
from portable.messaging import Message, open_subscription


def consume(url: str, store_db: str, out_file: str, kill_after: int | None) -> int:
    sub = open_subscription(url, lease=5.0)
    store = SqliteStore(store_db)
    handled = 0
    out = open(out_file, "a", buffering=1)  # noqa: SIM115 - line-buffered for the life of the process

    def handler(message: Message) -> None:
        nonlocal handled
        handled += 1
        out.write(message.body.decode() + "\n")
        out.flush()
        if kill_after is not None and handled > kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    stats = sub.run(handler, idempotency=store, idempotency_key=lambda m: m.body.decode(), idempotency_lease=1.0, max_deliveries=None, poll=0.2, drain_timeout=10)
    out.close()
    print(json.dumps(stats.__dict__), flush=True)
    return 0


def claim(store_db: str, first: int, last: int, out_file: str) -> int:
    store = SqliteStore(store_db)
    won: list[str] = []
    keys = [f"key-{i}" for i in range(first, last)]
    for start in range(0, len(keys), 50):
        chunk = keys[start : start + 50]
        answers = claim_many(store, [(k, "fp") for k in chunk], lease=60, ttl=600)
        mine = [(k, a.token, None) for k, a in zip(chunk, answers, strict=True)
                if not isinstance(a, Exception) and a.status == "acquired" and a.token is not None]  # fmt: skip
        assert all(e is None for e in complete_many(store, mine))
        won += [k for k, _, _ in mine]
    with open(out_file, "w") as out:
        out.write("\n".join(won))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="role", required=True)
    c = sub.add_parser("consume")
    c.add_argument("url")
    c.add_argument("store")
    c.add_argument("out")
    c.add_argument("--kill-after", type=int)
    k = sub.add_parser("claim")
    k.add_argument("store")
    k.add_argument("first", type=int)
    k.add_argument("last", type=int)
    k.add_argument("out")
    args = parser.parse_args(argv)
    if args.role == "claim":
        return claim(args.store, args.first, args.last, args.out)
    return consume(args.url, args.store, args.out, args.kill_after)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
