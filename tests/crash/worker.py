"""A consumer process for the SIGKILL crash test (tests/crash/test_consumer_sigkill.py).

    python -m tests.crash.worker QUEUE_URL STORE_DB EXTERNAL_FILE [--plain]

It runs ``Subscription.run`` with the default settings but for the message
lease (2 s, see the test's docstring) and an idempotency store in the SQLite
file STORE_DB, with a handler of two effects per message:

* a row in the table ``effects`` of STORE_DB, written in the store's
  transaction (``SqliteStore.transactional``): exactly once;
* a line appended to EXTERNAL_FILE, outside any transaction (before the row):
  at least once.

With ``--plain`` the handler is an ordinary one (the row in its own
transaction, after the store's claim): what a commit before
``SqliteStore.transactional`` existed can run, to check the test against it.

Killed with SIGKILL at any point; SIGTERM stops it gracefully and it prints
its RunStats as JSON.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
import time
from typing import Any

from portable.idempotency import SqliteStore
from portable.messaging import Message, open_subscription

#: the crash test's message lease (seconds); everything else is run()'s default
LEASE = 2.0
#: seconds of "work" between the two effects, so that kills land inside handlers too
WORK = 0.01


def main(queue_url: str, store_db: str, external_file: str, plain: bool) -> int:
    store = SqliteStore(store_db)
    sub = open_subscription(queue_url, lease=LEASE)
    lock = threading.Lock()
    external = open(external_file, "a", buffering=1)  # noqa: SIM115 - one write(2) per line, for the process's life

    def handle(message: Message, tx: Any) -> None:
        body = message.body.decode()
        with lock:
            external.write(f"{body} {os.getpid()}\n")  # an effect outside the store: at least once
        time.sleep(WORK)
        tx.execute("INSERT INTO effects (msg, pid) VALUES (?, ?)", (body, os.getpid()))

    def handle_plain(message: Message) -> None:
        with sqlite3.connect(store_db, timeout=30) as conn:
            handle(message, conn)

    handler: Any = handle_plain if plain else store.transactional(handle)
    stats: Any = sub.run(handler, idempotency=store)
    external.close()
    print(json.dumps(stats.__dict__), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4], plain="--plain" in sys.argv[4:]))
