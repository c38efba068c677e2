"""What both sqlite stores (the idempotency store and the queue) do alike: switch a database to
WAL safely when several processes open it at once, and run one ``BEGIN IMMEDIATE`` transaction."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator


@contextlib.contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One ``BEGIN IMMEDIATE`` transaction on ``conn``: committed on return, rolled back on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def enable_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Put the database in WAL mode, waiting up to ``timeout`` seconds for other openers.

    Changing the journal mode needs an exclusive lock, and SQLite answers
    ``database is locked`` at once, without calling the busy handler, when
    another process holds a lock during the change (two processes creating one
    database together). The mode is persistent, so a database already in WAL
    is left alone; otherwise the change is retried with a short backoff.
    """
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() == "wal":
                return
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
