"""A consumer-group member in its own process, for the kill -9 test.

``python kafka_worker.py URL STORE_URL EFFECTS MARKER`` runs ``Subscription.run``
(four handler threads) with an idempotency store; each handled message appends
its body to EFFECTS. The messages ``block`` and ``m20`` and later hang before
their effect (``block`` writes MARKER first), so the test can kill the process
while it holds a batch: ``m00``-``m19`` handled and acked but not committed (the
commit cannot pass ``block``, the first offset), four handlers stuck, the rest
fetched or not yet, and no handler between its effect and its completion.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import portable.messaging as pm
from portable.idempotency import open_store


def record_effect(path: str, body: bytes) -> None:
    with open(path, "a") as f:
        f.write(body.decode() + "\n")
        f.flush()
        os.fsync(f.fileno())


def main() -> None:
    url, store_url, effects, marker = sys.argv[1:5]
    store = open_store(store_url)
    sub = pm.open_subscription(url)

    def handler(message: pm.Message) -> None:
        if message.body == b"block":
            Path(marker).write_text(str(os.getpid()))
            time.sleep(3600)
        if message.body >= b"m20":
            time.sleep(3600)
        time.sleep(0.01)
        record_effect(effects, message.body)

    sub.run(handler, concurrency=4, idempotency=store, idempotency_lease=2.0, poll=0.5, handle_signals=False)


if __name__ == "__main__":
    main()
