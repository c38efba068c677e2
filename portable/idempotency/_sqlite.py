"""``sqlite://PATH`` — idempotency records in a SQLite file.

URLs:
    ``sqlite:///abs/path/idem.db`` or ``sqlite://./relative/idem.db``
    (relative to the working directory). The file and its folder are
    created on first use.

Options:
    ``max_result_bytes`` (int): the largest stored result. Defaults to 64 KiB.

Guarantees: every claim, completion and release is one SQLite transaction
(``BEGIN IMMEDIATE`` in WAL mode), so processes of one machine sharing the
file see one owner per key. A claim that meets a row reads it through
:func:`~portable.driver.idempotency.claim_outcome`; the other changes are
conditional statements with the same rules. Not for network file systems, where SQLite's
locks do not hold.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..driver.idempotency import (
    COMPLETED,
    DEFAULT_MAX_RESULT_BYTES,
    IN_PROGRESS,
    Claim,
    IdempotencyRecord,
    check_claim_args,
    check_result,
    claim_outcome,
    lost_error,
    new_token,
)
from ..errors import InvalidURL
from ..urls import ParsedURL

__all__ = ["SqliteStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS portable_idempotency (
    key TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    token TEXT NOT NULL,
    completed INTEGER NOT NULL,
    lease_until REAL NOT NULL,
    expires_at REAL NOT NULL,
    ttl REAL NOT NULL,
    result BLOB
) WITHOUT ROWID
"""


class SqliteStore:
    """Idempotency records in one SQLite table, shared by the processes of a machine.

    Args:
        path: the database file.
        max_result_bytes: the largest result kept. Defaults to 64 KiB.
        clock: wall-clock seconds; tests pass a fake one.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path).absolute()
        self.max_result_bytes = max_result_bytes
        self._clock = clock
        self._local = threading.local()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn().execute(_SCHEMA)

    @classmethod
    def from_url(cls, url: ParsedURL) -> SqliteStore:
        """Open ``sqlite://PATH?max_result_bytes=N``."""
        limit = url.take("max_result_bytes", int, DEFAULT_MAX_RESULT_BYTES)
        url.done()
        path = url.netloc + url.path
        if not path:
            raise InvalidURL(f"{url} names no file: write sqlite://./idempotency.db or sqlite:///abs/path.db")
        return cls(path, max_result_bytes=limit)

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    def _conn(self) -> sqlite3.Connection:
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is None or local.pid != os.getpid():
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            local.conn = conn
            local.pid = os.getpid()
        return conn

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        check_claim_args(key, fingerprint, lease, ttl)
        conn = self._conn()
        now = self._clock()
        token = new_token()
        inserted = conn.execute(
            "INSERT OR IGNORE INTO portable_idempotency VALUES (?, ?, ?, 0, ?, ?, ?, NULL)",
            (key, fingerprint, token, now + lease, now + ttl, ttl),
        ).rowcount
        if inserted == 1:
            return Claim("acquired", token)
        conn.execute("BEGIN IMMEDIATE")
        try:
            claim = self._claim_locked(conn, key, fingerprint, token, lease, ttl)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return claim

    def _claim_locked(
        self, conn: sqlite3.Connection, key: str, fingerprint: str, token: str, lease: float, ttl: float
    ) -> Claim:
        now = self._clock()
        row = conn.execute(
            "SELECT fingerprint, token, completed, lease_until, expires_at, ttl, result "
            "FROM portable_idempotency WHERE key = ?",
            (key,),
        ).fetchone()
        outcome = claim_outcome(None if row is None else _record(key, row), key, fingerprint, token, now)
        if outcome is not None:
            return outcome
        conn.execute(
            "INSERT OR REPLACE INTO portable_idempotency VALUES (?, ?, ?, 0, ?, ?, ?, NULL)",
            (key, fingerprint, token, now + lease, now + ttl, ttl),
        )
        return Claim("acquired", token)

    def complete(self, key: str, token: str, result: bytes | None) -> None:
        check_result(result, self.max_result_bytes)
        now = self._clock()
        changed = self._conn().execute(
            "UPDATE portable_idempotency SET completed = 1, result = ?, expires_at = MAX(expires_at, ? + ttl) "
            "WHERE key = ? AND token = ? AND completed = 0 AND expires_at > ?",
            (result, now, key, token, now),
        ).rowcount
        if changed != 1 and not self._completed_by(key, token):
            raise lost_error(key)

    def _completed_by(self, key: str, token: str) -> bool:
        row = self._conn().execute(
            "SELECT 1 FROM portable_idempotency WHERE key = ? AND token = ? AND completed = 1", (key, token)
        ).fetchone()
        return row is not None

    def release(self, key: str, token: str) -> None:
        changed = self._conn().execute(
            "DELETE FROM portable_idempotency WHERE key = ? AND token = ? AND completed = 0 AND expires_at > ?",
            (key, token, self._clock()),
        ).rowcount
        if changed != 1:
            raise lost_error(key)

    def extend(self, key: str, token: str, lease: float) -> None:
        """Push the lease of a held claim ``lease`` seconds from now (long effects)."""
        now = self._clock()
        changed = self._conn().execute(
            "UPDATE portable_idempotency SET lease_until = ? "
            "WHERE key = ? AND token = ? AND completed = 0 AND expires_at > ?",
            (now + lease, key, token, now),
        ).rowcount
        if changed != 1:
            raise lost_error(key)

    def purge_expired(self) -> int:
        """Delete expired records; return how many."""
        return self._conn().execute(
            "DELETE FROM portable_idempotency WHERE expires_at <= ?", (self._clock(),)
        ).rowcount


def _record(key: str, row: tuple[str, str, int, float, float, float, bytes | None]) -> IdempotencyRecord:
    """A row of ``portable_idempotency`` as the shared record (a released claim has no row)."""
    fp, token, completed, lease_until, expires_at, ttl, result = row
    return {
        "v": 1,
        "key": key[:200],
        "state": COMPLETED if completed else IN_PROGRESS,
        "fp": fp,
        "token": token,
        "lease_until": lease_until,
        "expires_at": expires_at,
        "ttl": ttl,
        "result": result,
    }
