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

Effects in the same transaction: :meth:`SqliteStore.run_and_complete` runs an
effect that writes to this database in the transaction that also completes
the claim, so after a crash either both are committed or neither is; and
:meth:`SqliteStore.transactional` makes a ``Subscription.run`` handler of
such an effect. The records live in the table ``portable_idempotency``; keep
your own tables beside it.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .._sqlite_tools import enable_wal, immediate
from ..driver.idempotency import (
    COMPLETED,
    DEFAULT_MAX_RESULT_BYTES,
    IN_PROGRESS,
    RELEASED,
    Claim,
    IdempotencyRecord,
    TransactionalHandler,
    check_claim_args,
    check_result,
    claim_outcome,
    lost_error,
    new_token,
    next_counts,
)
from ..errors import IdempotencyConflict, Internal, InvalidURL
from ..urls import ParsedURL

__all__ = ["SqliteStore", "SqliteTransaction"]

R = TypeVar("R")

#: A rowid table with the key in its primary-key index, not a WITHOUT ROWID table (which stores each
#: whole record in the key's b-tree): records are appended in claim order, and only the narrow key
#: index takes each new key where it sorts. Random keys (UUIDs, a common idempotency key) put each
#: new key of a batch on another page; with whole records there that rewrote about 3x the pages
#: (20,000 UUID keys claimed and completed in windows of 256: 20.5 us a key, 8.0 here;
#: bench/consumer_bench.py). A table made WITHOUT ROWID by an earlier version keeps its layout:
#: every statement reads both alike, so processes of both versions can share one file.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS portable_idempotency (
    key TEXT NOT NULL PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    token TEXT NOT NULL,
    completed INTEGER NOT NULL,
    lease_until REAL NOT NULL,
    expires_at REAL NOT NULL,
    ttl REAL NOT NULL,
    result BLOB,
    starts INTEGER NOT NULL DEFAULT 1,
    failures INTEGER NOT NULL DEFAULT 0,
    released INTEGER NOT NULL DEFAULT 0
)
"""
#: the table's layout before the rowid table (tests open a file made so)
_SCHEMA_WITHOUT_ROWID = _SCHEMA.rstrip() + " WITHOUT ROWID\n"
#: columns added after the first release; a database made before gets them on open
_ADDED_COLUMNS = {
    "starts": "INTEGER NOT NULL DEFAULT 1",
    "failures": "INTEGER NOT NULL DEFAULT 0",
    "released": "INTEGER NOT NULL DEFAULT 0",
}
_INSERT = (
    "INTO portable_idempotency (key, fingerprint, token, completed, lease_until, expires_at, ttl, result, "
    "starts, failures, released) VALUES (?, ?, ?, 0, ?, ?, ?, NULL, ?, ?, 0)"
)
#: a multi-row INSERT of new claims that share their token, lease end, expiry and ttl (parameters
#: ?1-?4), then a (key, fingerprint) pair a row: see :func:`_insert_claims`
_INSERT_MANY = (
    "INSERT OR IGNORE INTO portable_idempotency (key, fingerprint, token, lease_until, expires_at, ttl, "
    "completed, result, starts, failures, released) VALUES "
)
#: rows per multi-row statement: 4 + 2 a row, within SQLite's 999 parameters before 3.32
_ROWS_PER_INSERT = 480
_ROWS_PER_UPDATE = 480


def check_claim_pairs(pairs: Sequence[tuple[str, str]], lease: float, ttl: float) -> None:
    """``check_claim_args`` for each (key, fingerprint) pair of a batch, in one pass.

    Raises:
        InvalidArgument: the first bad pair's error, as check_claim_args words it.
    """
    check_claim_args("k", "f", lease, ttl)
    if not all(type(k) is str and 0 < len(k) <= 1024 and type(f) is str and f for k, f in pairs):
        for key, fp in pairs:
            check_claim_args(key, fp, lease, ttl)


@functools.lru_cache(maxsize=8)
def _insert_claims(rows: int) -> str:
    """The INSERT of ``rows`` new claims: parameters token, lease end, expiry, ttl, then each row's
    key and fingerprint (the shared values bound once, the pairs flattened at C speed)."""
    values = ",".join(f"(?{5 + 2 * i}, ?{6 + 2 * i}, ?1, ?2, ?3, ?4, 0, NULL, 1, 0, 0)" for i in range(rows))
    return _INSERT_MANY + values


_new_claim = Claim.__new__
_set_status, _set_token, _set_result, _set_lease, _set_starts, _set_failures = (
    Claim.__dict__[name].__set__ for name in ("status", "token", "result", "lease_remaining", "starts", "failures")
)


def _acquired(token: str, lease: float) -> Claim:
    """``Claim("acquired", token, None, lease, 1, 0)`` in half the time: a new key's claim, made
    once per message at full rate (the frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``; this sets its slots)."""
    claim = _new_claim(Claim)
    _set_status(claim, "acquired")
    _set_token(claim, token)
    _set_result(claim, None)
    _set_lease(claim, lease)
    _set_starts(claim, 1)
    _set_failures(claim, 0)
    return claim


#: the claim ``token`` is still the key's current one, neither completed nor given up
_HELD = "key = ? AND token = ? AND completed = 0 AND released = 0 AND expires_at > ?"


class SqliteTransaction:
    """The open transaction an effect of :meth:`SqliteStore.run_and_complete` writes in.

    It runs statements on the store's connection of this thread; the store
    commits (or rolls back) when the effect returns (or raises). An effect
    must not end the transaction itself: ``COMMIT``, ``ROLLBACK``, ``BEGIN``
    and ``executescript`` (which commits first) are refused.
    """

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __repr__(self) -> str:
        return "SqliteTransaction()"

    @staticmethod
    def _check(sql: str) -> None:
        word = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
        if word in ("COMMIT", "END", "ROLLBACK", "BEGIN", "SAVEPOINT", "RELEASE"):
            raise Internal(
                f"{word} inside SqliteStore.run_and_complete: the store commits the effect together "
                "with the claim's completion; return from the effect instead (raise to roll it back)"
            )

    def execute(self, sql: str, parameters: Any = ()) -> sqlite3.Cursor:
        """Run one statement in the transaction (``sqlite3.Connection.execute``)."""
        self._check(sql)
        return self._conn.execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any]) -> sqlite3.Cursor:
        """Run one statement for each parameter set (``sqlite3.Connection.executemany``)."""
        self._check(sql)
        return self._conn.executemany(sql, parameters)


class SqliteStore:
    """Idempotency records in one SQLite table, shared by the processes of a machine.

    Args:
        path: the database file.
        max_result_bytes: the largest result kept. Defaults to 64 KiB.
        clock: wall-clock seconds; tests pass a fake one.
    """

    #: :meth:`run_and_complete` holds the database's write lock while the
    #: effect runs, so no other claimer can take the key over meanwhile (the
    #: consumer loop need not extend such a claim, and must not: it would wait for the lock)
    locks_while_running = True

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
        conn = self._conn()
        conn.execute(_SCHEMA)
        self._add_columns(conn)

    @staticmethod
    def _add_columns(conn: sqlite3.Connection) -> None:
        """Give a table made by an older version the columns it lacks (processes may race: both fine)."""
        have = {row[1] for row in conn.execute("PRAGMA table_info(portable_idempotency)")}
        for name, decl in _ADDED_COLUMNS.items():
            if name not in have:
                try:
                    conn.execute(f"ALTER TABLE portable_idempotency ADD COLUMN {name} {decl}")
                except sqlite3.OperationalError as exc:
                    if "duplicate column" not in str(exc):
                        raise

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
            enable_wal(conn, 30.0)
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

    @contextlib.contextmanager
    def _immediate(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed on return, rolled back on any exception."""
        with immediate(self._conn()) as conn:
            yield conn

    def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        check_claim_args(key, fingerprint, lease, ttl)
        conn = self._conn()
        now = self._clock()
        token = new_token()
        inserted = conn.execute(
            "INSERT OR IGNORE " + _INSERT, (key, fingerprint, token, now + lease, now + ttl, ttl, 1, 0)
        ).rowcount
        if inserted == 1:
            return Claim("acquired", token, None, lease, 1, 0)
        with self._immediate() as conn:
            return self._claim_locked(conn, key, fingerprint, token, lease, ttl)

    def _claim_locked(
        self, conn: sqlite3.Connection, key: str, fingerprint: str, token: str, lease: float, ttl: float
    ) -> Claim:
        now = self._clock()
        row = conn.execute(
            "SELECT fingerprint, token, completed, lease_until, expires_at, ttl, result, starts, failures, released "
            "FROM portable_idempotency WHERE key = ?",
            (key,),
        ).fetchone()
        previous = None if row is None else _record(key, row)
        outcome = claim_outcome(previous, key, fingerprint, token, now)
        if outcome is not None:
            return outcome
        starts, failures = next_counts(previous, now)
        conn.execute("INSERT OR REPLACE " + _INSERT, (key, fingerprint, token, now + lease, now + ttl, ttl, starts, failures))
        return Claim("acquired", token, None, lease, starts, failures)

    def claim_many(
        self, items: Sequence[tuple[str, str]], *, lease: float, ttl: float
    ) -> list[Claim | IdempotencyConflict]:
        """Claim many (key, fingerprint) pairs in one ``BEGIN IMMEDIATE`` transaction.

        Returns, in input order, each key's Claim as :meth:`claim` would answer
        it, or the IdempotencyConflict it met (returned, so one reused key does
        not hide the others' claims). One commit for the whole batch: at
        ``synchronous=NORMAL`` in WAL mode, as every write of this store.
        The new claims of one call share one token (and, where all keys are new,
        one Claim object): a token is unique among the claims of its key, which
        is what completing, releasing and extending check.

        Raises:
            InvalidArgument: a bad pair (nothing is claimed).
        """
        pairs = items if type(items) is list else list(items)
        check_claim_pairs(pairs, lease, ttl)
        out: list[Claim | IdempotencyConflict] = []
        with self._immediate() as conn:
            now = self._clock()
            # one token for the new claims of this call: a token tells one claim of a key from its
            # other claims (never shared by two claims of one key), so the keys of one call can
            # share it; complete_many then marks them done with one "token = ?" statement. 16 hex
            # digits (64 random bits) tell a key's claims apart as well, in half the row space
            token = os.urandom(8).hex()
            # the common case, all keys new and none twice: a few multi-row statements, the
            # rowcount says whether it was so
            first: dict[str, int] | None = None  # each key's first pair in the batch, where a key is twice
            if len({key for key, _ in pairs}) != len(pairs):
                first = {}
                for i, (key, _) in enumerate(pairs):
                    first.setdefault(key, i)
            new = pairs if first is None else [pairs[i] for i in first.values()]
            flat = list(itertools.chain.from_iterable(new))
            shared = [token, now + lease, now + ttl, ttl]
            inserted = 0
            for start in range(0, len(new), _ROWS_PER_INSERT):
                rows = min(_ROWS_PER_INSERT, len(new) - start)
                inserted += conn.execute(_insert_claims(rows), shared + flat[2 * start : 2 * (start + rows)]).rowcount
            if first is None:
                if inserted == len(pairs):  # every pair a new key: all acquired, alike
                    return [_acquired(token, lease)] * len(pairs)
                first = {key: i for i, (key, _) in enumerate(pairs)}
            mine: set[int] = set(first.values())
            if inserted != len(first):  # some keys had records: which rows hold this batch's token?
                mine = set()
                keys = list(first)
                for start in range(0, len(keys), 500):
                    chunk = keys[start : start + 500]
                    marks = ",".join("?" * len(chunk))
                    for key, held in conn.execute(
                        f"SELECT key, token FROM portable_idempotency WHERE key IN ({marks})", chunk
                    ):
                        if held == token:
                            mine.add(first[key])
            acquired = _acquired(token, lease)
            for i, (key, fp) in enumerate(pairs):
                if i in mine:
                    out.append(acquired)
                    continue
                # a key seen before takes the batch's token too; a key's second pair in the batch
                # needs a token of its own (the first pair's row holds the batch's)
                mine_token = token if first[key] == i else new_token()
                try:
                    out.append(self._claim_locked(conn, key, fp, mine_token, lease, ttl))
                except IdempotencyConflict as exc:
                    out.append(exc)
        return out

    def complete(self, key: str, token: str, result: bytes | None) -> None:
        check_result(result, self.max_result_bytes)
        self._complete(self._conn(), key, token, result)

    def complete_many(self, items: Sequence[tuple[str, str, bytes | None]]) -> list[BaseException | None]:
        """Complete many (key, token, result) claims in one transaction; each one's error (or None).

        The batch commits at once: after a crash either every completion of it
        holds or none does. A result over ``max_result_bytes`` is that item's
        TooLarge (its claim is kept); a lost claim its PreconditionFailed.
        """
        out: list[BaseException | None] = [None] * len(items)
        if len(items) > 1 and [item[2] for item in items].count(None) == len(items):
            tokens = {item[1] for item in items}
            if len(tokens) == 1:  # the common case: one claim_many call's keys, no results
                self._complete_keys([item[0] for item in items], tokens.pop(), out)
                return out
        rows: list[tuple[bytes | None, float, str, str, float]] = []
        where: list[int] = []
        for i, (key, token, result) in enumerate(items):
            try:
                check_result(result, self.max_result_bytes)
            except Exception as exc:
                out[i] = exc
                continue
            rows.append((result, 0.0, key, token, 0.0))
            where.append(i)
        if not rows:
            return out
        with self._immediate() as conn:
            now = self._clock()
            changed = 0
            plain = [row for row in rows if row[0] is None]  # no result (the common case): one statement per chunk
            if len(plain) < len(rows):
                changed += conn.executemany(
                    "UPDATE portable_idempotency SET completed = 1, result = ?, expires_at = MAX(expires_at, ? + ttl) "
                    "WHERE " + _HELD,
                    [(result, now, key, token, now) for result, _, key, token, _ in rows if result is not None],
                ).rowcount
            # by token: the keys one claim_many call claimed share its token, and "key IN (...) AND
            # token = ?" marks exactly those pairs; a token of one key alone is one pair a statement
            by_token: dict[str, list[str]] = {}
            for row in plain:
                by_token.setdefault(row[3], []).append(row[2])
            alone: list[tuple[float, str, str, float]] = []
            for token, keys in by_token.items():
                if len(keys) == 1:
                    alone.append((now, keys[0], token, now))
                    continue
                changed += _complete_under(conn, keys, token, now)
            if alone:
                changed += conn.executemany(
                    "UPDATE portable_idempotency SET completed = 1, expires_at = MAX(expires_at, ? + ttl) WHERE " + _HELD,
                    alone,
                ).rowcount
            if changed != len(rows):  # some claim was lost, or completed before: find out which
                for i, (_, _, key, token, _) in zip(where, rows, strict=True):
                    if not self._in_state(conn, key, token, "completed = 1"):
                        out[i] = lost_error(key)
        return out

    def _complete_keys(self, keys: list[str], token: str, out: list[BaseException | None]) -> None:
        """complete_many of the claims of ``keys`` (in ``out``'s order), all under ``token``, none with a result."""
        with self._immediate() as conn:
            now = self._clock()
            if _complete_under(conn, keys, token, now) != len(keys):  # some claim was lost, or completed before
                for i, key in enumerate(keys):
                    if not self._in_state(conn, key, token, "completed = 1"):
                        out[i] = lost_error(key)

    def _complete(self, conn: sqlite3.Connection, key: str, token: str, result: bytes | None) -> None:
        now = self._clock()
        changed = conn.execute(
            "UPDATE portable_idempotency SET completed = 1, result = ?, expires_at = MAX(expires_at, ? + ttl) "
            "WHERE " + _HELD,
            (result, now, key, token, now),
        ).rowcount
        if changed != 1 and not self._in_state(conn, key, token, "completed = 1"):
            raise lost_error(key)

    def _in_state(self, conn: sqlite3.Connection, key: str, token: str, state: str) -> bool:
        row = conn.execute(
            f"SELECT 1 FROM portable_idempotency WHERE key = ? AND token = ? AND {state}", (key, token)
        ).fetchone()
        return row is not None

    def release(self, key: str, token: str) -> None:
        """Give the claim up, one failure more; see :meth:`IdempotencyStore.release`."""
        self._give_up(key, token, "failures = failures + 1")

    def forget(self, key: str, token: str) -> None:
        """Give the claim up and clear its counts: the next claim is a first start.

        Raises:
            PreconditionFailed: the claim was lost.
        """
        self._give_up(key, token, "starts = 0, failures = 0")

    def unclaim(self, key: str, token: str) -> None:
        """Give back a claim whose effect never started: one start fewer, no failure counted.

        Raises:
            PreconditionFailed: the claim was lost.
        """
        self._give_up(key, token, "starts = MAX(starts - 1, 0)")

    def _give_up(self, key: str, token: str, counts: str) -> None:
        conn = self._conn()
        changed = conn.execute(
            f"UPDATE portable_idempotency SET released = 1, {counts} WHERE " + _HELD, (key, token, self._clock())
        ).rowcount
        if changed != 1 and not self._in_state(conn, key, token, "released = 1"):
            raise lost_error(key)

    def extend(self, key: str, token: str, lease: float) -> None:
        """Push the lease of a held claim ``lease`` seconds from now (long effects)."""
        now = self._clock()
        changed = self._conn().execute(
            "UPDATE portable_idempotency SET lease_until = ? WHERE " + _HELD, (now + lease, key, token, now)
        ).rowcount
        if changed != 1:
            raise lost_error(key)

    def purge_expired(self) -> int:
        """Delete expired records; return how many."""
        return self._conn().execute(
            "DELETE FROM portable_idempotency WHERE expires_at <= ?", (self._clock(),)
        ).rowcount

    # -- effects in the store's transaction ----------------------------------
    def run_and_complete(self, key: str | None, token: str | None, effect: Callable[[SqliteTransaction], R]) -> R:
        """Run ``effect`` in one transaction of this database that also completes the claim.

        The transaction is ``BEGIN IMMEDIATE``: it first checks that ``token``
        still holds ``key``, then runs ``effect(tx)`` (its statements go through
        ``tx``, on this database), then completes the claim with the effect's
        return value when it is bytes (else no result), and commits. So the
        effect's writes and the completion are committed together or not at
        all: a process killed at any point leaves either both (a redelivery
        finds the key completed and skips it) or neither (the key is taken
        over when its lease ends, and the effect runs again from scratch).
        With ``key`` None, the effect runs in its own transaction and no claim
        is completed.

        The transaction holds the database's write lock until it ends: other
        writers of the file (claims included) wait, up to 30 seconds. Keep
        such effects short, and keep everything else (HTTP calls, other
        databases) out of them: only what is written through ``tx`` shares the
        commit.

        Returns:
            What ``effect`` returned.

        Raises:
            PreconditionFailed: the claim was lost before the transaction began
                (its lease expired and another caller took the key over); the
                effect did not run.
            TooLarge: the effect returned a result over ``max_result_bytes``;
                nothing was committed.
            Exception: whatever ``effect`` raised; nothing was committed and the
                claim is still held (release it).
        """
        with self._immediate() as conn:
            if key is not None:
                held = conn.execute(
                    "SELECT 1 FROM portable_idempotency WHERE " + _HELD, (key, token, self._clock())
                ).fetchone()
                if held is None:
                    raise lost_error(key)
            out = effect(SqliteTransaction(conn))
            if not conn.in_transaction:
                raise Internal("the effect ended SqliteStore.run_and_complete's transaction itself")
            if key is not None and token is not None:
                result = out if isinstance(out, bytes) else None
                check_result(result, self.max_result_bytes)
                self._complete(conn, key, token, result)
        return out

    def transactional(self, handler: Callable[[Any, SqliteTransaction], Any]) -> TransactionalHandler:
        """A ``Subscription.run`` handler whose effect commits with its message's claim.

        ``handler(message, tx)`` writes through ``tx`` (a :class:`SqliteTransaction`
        on this database); run it with ``sub.run(store.transactional(handler),
        idempotency=store)``. Each message's key is claimed, then the handler
        runs inside :meth:`run_and_complete`, so its writes and the key's
        completion commit together: exactly once, however the consumer is
        killed. A message without an idempotency key runs in a transaction of
        its own (its writes are atomic, but it may run again after a crash).
        """
        return TransactionalHandler(self, handler)


def _complete_under(conn: sqlite3.Connection, keys: list[str], token: str, now: float) -> int:
    """Mark the claims of ``keys`` that ``token`` still holds completed (no result); how many rows
    changed. "key IN (...) AND token = ?" is exactly those pairs: one statement per 480 keys."""
    changed = 0
    for start in range(0, len(keys), _ROWS_PER_UPDATE):
        chunk = keys[start : start + _ROWS_PER_UPDATE]
        changed += conn.execute(
            "UPDATE portable_idempotency SET completed = 1, expires_at = MAX(expires_at, ? + ttl) "
            f"WHERE key IN ({','.join('?' * len(chunk))}) AND token = ? AND completed = 0 "
            "AND released = 0 AND expires_at > ?",
            [now, *chunk, token, now],
        ).rowcount
    return changed


def _record(
    key: str, row: tuple[str, str, int, float, float, float, bytes | None, int, int, int]
) -> IdempotencyRecord:
    """A row of ``portable_idempotency`` as the shared record."""
    fp, token, completed, lease_until, expires_at, ttl, result, starts, failures, released = row
    return {
        "v": 1,
        "key": key[:200],
        "state": COMPLETED if completed else RELEASED if released else IN_PROGRESS,
        "fp": fp,
        "token": token,
        "lease_until": lease_until,
        "expires_at": expires_at,
        "ttl": ttl,
        "result": result,
        "starts": starts,
        "failures": failures,
    }
