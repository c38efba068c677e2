"""``sqlite://`` — a durable queue in one SQLite file, shared by the processes of one machine.

URLs:
    ``sqlite://./relative/queue.db?name=events`` or ``sqlite:///abs/queue.db?name=events``.
    Relative paths are relative to the working directory; missing parent folders
    are created. One file holds any number of queues (``name``); each is both a
    topic and its competing-consumer subscription.
    ``sqlite://...?name=events&dead_letter=true`` opens the dead-letter table of
    ``events`` (receive, ack, redrive).

Options:
    name: the queue, 1-128 of ``[A-Za-z0-9_.-]``. Defaults to ``default``.
    dead_letter: open the queue's dead letters instead of the queue. Defaults to false.
    dedup_window: seconds a publish's ``idempotency_key`` is remembered (0 turns
        dedup off). Defaults to 300.
    busy_timeout: seconds a writer waits for another process's lock. Defaults to 30.
    synchronous: ``normal`` (committed messages survive a crashed or killed process;
        a power cut may lose the last few) or ``full`` (fsync every commit).
        Defaults to ``normal``.

How it works: WAL journal, one connection per thread, every state change is
one short ``BEGIN IMMEDIATE`` transaction. A receive leases rows by writing a
random token and ``visible_at = now + lease`` (wall clock, shared by all
processes); a row whose lease ran out is simply visible again, so a consumer
killed mid-handler (even by ``kill -9``) loses nothing: its messages come back
after their lease. Ack deletes the row only if the token still matches, so a
consumer whose lease was lost cannot ack another consumer's delivery. A
message whose key has an earlier row in the queue (leased, delayed or ready)
is not delivered: per-key order, one at a time. Idle consumers poll with a
read-only query (5-50 ms apart; at once within one process), never holding
the write lock.

Limits: bodies plus attributes up to 16 MiB, 32 attributes, batches of 1,000.

Received messages: ``Message.headers`` are the attributes as ``(name, UTF-8
bytes)`` pairs in the order they were published (the row keeps them as a JSON
object, which keeps order), ``key_bytes`` is the UTF-8 of the key, and nothing
is a tombstone.

As: ``sqlite3.Connection`` (the calling thread's connection).

Capabilities: ordering, native dead letters (a ``dead_letters`` table),
lease extension, exactly-once acks, publish dedup, nack delay, exact delivery
counts.

Known differences: many messages of one key behind a leased head are scanned
on every receive (fine up to thousands per key). Clocks: leases use the wall
clock, so a large clock step delays or hastens redelivery. The file must be on
a local disk (SQLite's locks are unreliable on network file systems).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._sqlite_tools import enable_wal, immediate
from ..driver import ErrorCode
from ..driver.messaging import (
    DEAD_LETTER_ATTRIBUTES,
    Delivery,
    MessagingDriver,
    OutgoingMessage,
    QueueStats,
    ReceivedMessage,
    SubscriptionDriver,
    TopicDriver,
)
from ..errors import InvalidURL, PreconditionFailed
from ..urls import ParsedURL
from .memqueue import embedded_queue_capabilities

if TYPE_CHECKING:
    from ..driver.aio_messaging import AsyncQueueDriver

__all__ = ["SqliteMessaging"]

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS {t} (
    id INTEGER PRIMARY KEY,
    queue TEXT NOT NULL,
    mid TEXT NOT NULL,
    body BLOB NOT NULL,
    attrs TEXT,
    key TEXT,
    published REAL NOT NULL,
    visible_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    lease TEXT{extra}
);
CREATE INDEX IF NOT EXISTS {t}_ready ON {t} (queue, visible_at);
CREATE INDEX IF NOT EXISTS {t}_key ON {t} (queue, key, id) WHERE key IS NOT NULL;
"""
_DEDUP_SCHEMA = """
CREATE TABLE IF NOT EXISTS dedup (
    queue TEXT NOT NULL,
    idem TEXT NOT NULL,
    mid TEXT NOT NULL,
    expires REAL NOT NULL,
    PRIMARY KEY (queue, idem)
) WITHOUT ROWID;
"""

#: (database path, table, queue) -> condition notified when a message may have become available
_WAKE: dict[tuple[str, str, str], threading.Condition] = {}
_WAKE_LOCK = threading.Lock()
_SCHEMA_DONE: set[str] = set()

def _wake_for(key: tuple[str, str, str]) -> threading.Condition:
    cond = _WAKE.get(key)
    if cond is None:
        with _WAKE_LOCK:
            cond = _WAKE.setdefault(key, threading.Condition(threading.Lock()))
    return cond


class SqliteMessaging(MessagingDriver, TopicDriver, SubscriptionDriver):
    """A queue in a SQLite table; both sides are this object. Thread- and process-safe."""

    scheme = "sqlite"
    capabilities = embedded_queue_capabilities(16 * 1024 * 1024)

    def async_driver(self) -> AsyncQueueDriver:
        """Both async sides, adapted through the bounded thread pool (one object, as the sync one)."""
        from ..driver.aio_messaging import AsyncQueueDriver

        return AsyncQueueDriver(self)

    def __init__(
        self,
        path: str | os.PathLike[str],
        name: str = "default",
        *,
        dead_letter: bool = False,
        dedup_window: float = 300.0,
        busy_timeout: float = 30.0,
        synchronous: str = "normal",
        url: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.name = name
        self._file = str(self.path.resolve())
        self._table = "dead_letters" if dead_letter else "messages"
        self._is_dead_letter = dead_letter
        self._dedup_window = dedup_window
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous.upper()
        self._url = url or f"sqlite://{path}?name={name}"
        self.endpoint = f"sqlite://{self._file}"
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._pid = os.getpid()
        self._wake = _wake_for((self._file, self._table, name))
        self._prefix = os.urandom(5).hex()
        self._ids = itertools.count(1)
        self._dedup_writes = itertools.count(1)
        if dead_letter or dedup_window != 300.0:
            self.capabilities = embedded_queue_capabilities(
                self.capabilities.max_message_bytes, dead_letter=dead_letter, dedup_window=dedup_window
            )
        t = self._table
        self._sql_insert = (
            f"INSERT INTO {t} (queue, mid, body, attrs, key, published, visible_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
        )
        head = f"(key IS NULL OR id = (SELECT MIN(h.id) FROM {t} AS h WHERE h.queue = m.queue AND h.key = m.key))"
        self._sql_ready = f"SELECT 1 FROM {t} AS m WHERE queue = ? AND visible_at <= ? AND {head} LIMIT 1"
        self._sql_take = (
            f"UPDATE {t} SET lease = ?, visible_at = ?, attempts = attempts + 1 WHERE id IN "
            f"(SELECT id FROM {t} AS m WHERE queue = ? AND visible_at <= ? AND {head} ORDER BY visible_at LIMIT ?) "
            "RETURNING id, mid, body, attrs, key, published, attempts"
        )

    @classmethod
    def from_url(cls, url: ParsedURL) -> SqliteMessaging:
        name = url.take_str("name", "default") or ""
        dead_letter = url.take("dead_letter", bool, False)
        dedup_window = url.take("dedup_window", float, 300.0)
        busy_timeout = url.take("busy_timeout", float, 30.0)
        synchronous = (url.take_str("synchronous", "normal") or "").lower()
        url.done()
        path = url.netloc + url.path
        if not path or path == ":memory:":
            raise InvalidURL(
                f"{url} names no database file; write sqlite://./queue.db?name=q or sqlite:///abs/queue.db?name=q"
            )
        if not _NAME.fullmatch(name):
            raise InvalidURL(f"name={name!r} in {url} must be 1-128 of A-Z a-z 0-9 _ . -")
        if dedup_window < 0 or busy_timeout < 0:
            raise InvalidURL(f"dedup_window and busy_timeout must be >= 0 seconds in {url}")
        if synchronous not in ("normal", "full"):
            raise InvalidURL(f"synchronous must be 'normal' or 'full' in {url}, got {synchronous!r}")
        return cls(
            path, name, dead_letter=dead_letter, dedup_window=dedup_window, busy_timeout=busy_timeout,
            synchronous=synchronous, url=url.without("dead_letter").raw,
        )

    # -- connections -----------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and self._pid == os.getpid():
            return conn
        if self._pid != os.getpid():  # forked: never reuse the parent's connections
            self._pid = os.getpid()
            self._local = threading.local()
            self._connections = []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self._file, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
        )
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
        if self._file not in _SCHEMA_DONE:
            with _WAKE_LOCK:  # one thread of this process creates the schema
                if self._file not in _SCHEMA_DONE:
                    enable_wal(conn, self._busy_timeout)
                    conn.executescript(
                        _SCHEMA.format(t="messages", extra="")
                        + _SCHEMA.format(t="dead_letters", extra=",\n    reason TEXT,\n    dead_at REAL")
                        + _DEDUP_SCHEMA
                    )
                    _SCHEMA_DONE.add(self._file)
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        self._local.conn = conn
        with self._connections_lock:
            self._connections.append(conn)
        return conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with immediate(self._conn()) as conn:
            yield conn

    def _notify(self) -> None:
        with self._wake:
            self._wake.notify_all()

    # -- classification --------------------------------------------------
    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, sqlite3.OperationalError):
            text = str(exc).lower()
            if "locked" in text or "busy" in text or "disk i/o" in text or "unable to open" in text:
                return ErrorCode.UNAVAILABLE
            if "readonly" in text:
                return ErrorCode.PERMISSION_DENIED
        if isinstance(exc, sqlite3.DataError) or (isinstance(exc, sqlite3.Error) and "too big" in str(exc)):
            return ErrorCode.TOO_LARGE
        return super().code_of(exc)

    def as_(self, kind: type[Any]) -> Any:
        if kind is sqlite3.Connection:
            return self._conn()
        return None

    def topic(self) -> TopicDriver:
        return self

    def subscription(self) -> SubscriptionDriver:
        self._conn()  # create the schema now: a bad path fails at open
        return self

    # -- publishing ------------------------------------------------------
    def _row(self, message: OutgoingMessage, now: float) -> tuple[Any, ...]:
        attrs = json.dumps(message.attributes, separators=(",", ":")) if message.attributes else None
        mid = f"{self._prefix}-{next(self._ids)}"
        return (self.name, mid, message.body, attrs, message.key, now, now)

    def _dedup(self, conn: sqlite3.Connection, idem: str, mid: str, now: float) -> str | None:
        """The id of an earlier message with ``idem`` inside the window, else remember ``mid``."""
        found = conn.execute(
            "SELECT mid FROM dedup WHERE queue = ? AND idem = ? AND expires > ?", (self.name, idem, now)
        ).fetchone()
        if found is not None:
            return str(found[0])
        conn.execute(
            "INSERT OR REPLACE INTO dedup (queue, idem, mid, expires) VALUES (?, ?, ?, ?)",
            (self.name, idem, mid, now + self._dedup_window),
        )
        return None

    def publish(self, message: OutgoingMessage) -> str:
        now = time.time()
        row = self._row(message, now)
        if message.idempotency_key is not None and self._dedup_window > 0:
            with self._write() as conn:
                earlier = self._dedup(conn, message.idempotency_key, row[1], now)
                if earlier is not None:
                    return earlier
                conn.execute(self._sql_insert, row)
                if next(self._dedup_writes) % 1000 == 0:
                    conn.execute("DELETE FROM dedup WHERE expires <= ?", (now,))
        else:
            self._conn().execute(self._sql_insert, row)
        self._notify()
        return str(row[1])

    def publish_batch(self, messages: Iterable[OutgoingMessage]) -> list[str | BaseException]:
        now = time.time()
        items = list(messages)
        rows = [self._row(m, now) for m in items]
        out: list[str | BaseException] = [str(r[1]) for r in rows]
        with self._write() as conn:
            if any(m.idempotency_key is not None for m in items) and self._dedup_window > 0:
                keep = []
                for i, (message, row) in enumerate(zip(items, rows, strict=True)):
                    if message.idempotency_key is not None:
                        earlier = self._dedup(conn, message.idempotency_key, row[1], now)
                        if earlier is not None:
                            out[i] = earlier
                            continue
                    keep.append(row)
                rows = keep
            conn.executemany(self._sql_insert, rows)
        self._notify()
        return out

    # -- receiving -------------------------------------------------------
    def receive(self, max_messages: int, wait: float, lease: float) -> list[Delivery]:
        until = time.monotonic() + wait
        pause = 0.005
        while True:
            found = self._take(max_messages, lease)
            if found:
                return found
            left = until - time.monotonic()
            if left <= 0:
                return found
            with self._wake:
                self._wake.wait(min(left, pause))
            pause = min(pause * 2, 0.05)

    def _take(self, max_messages: int, lease: float) -> list[Delivery]:
        conn = self._conn()
        now = time.time()
        if conn.execute(self._sql_ready, (self.name, now)).fetchone() is None:
            return []  # a read: idle consumers never take the write lock
        token = os.urandom(8).hex()
        with self._write() as conn:
            rows = conn.execute(self._sql_take, (token, now + lease, self.name, now, max_messages)).fetchall()
        rows.sort()
        # Delivery objects, not ReceivedMessage records: the Subscription adopts them as they are
        out: list[Delivery] = []
        new, utc, fromtimestamp, loads = Delivery.__new__, dt.UTC, dt.datetime.fromtimestamp, json.loads
        for rowid, mid, body, attrs, key, published, attempts in rows:
            attributes: dict[str, str] = loads(attrs) if attrs else {}
            d = new(Delivery)
            d._id = mid
            d._body = body
            d._attributes = attributes
            d._key = key
            d._published = fromtimestamp(published, utc)
            d._attempt = attempts
            d._handle = (rowid, token)
            d._headers = tuple([(name, value.encode("utf-8")) for name, value in attributes.items()])
            d._key_bytes = None
            d._tombstone = False
            out.append(d)
        return out

    def _lost(self, handle: Any) -> PreconditionFailed:
        return PreconditionFailed(
            f"the lease on message row {handle[0]} was lost: it expired and the message was delivered "
            "again, or it was already settled",
            provider=self.scheme,
        )

    def ack(self, handle: Any) -> None:
        cur = self._conn().execute(f"DELETE FROM {self._table} WHERE id = ? AND lease = ?", handle)
        if cur.rowcount != 1:
            raise self._lost(handle)
        self._notify()

    def ack_many(self, handles: Iterable[Any]) -> list[BaseException | None]:
        items = list(handles)
        if not items:
            return []
        tokens = {token for _, token in items}
        out: list[BaseException | None] = [None] * len(items)
        with self._write() as conn:
            if len(tokens) == 1 and len(items) <= 1000:
                (token,) = tokens
                marks = ",".join("?" * len(items))
                cur = conn.execute(
                    f"DELETE FROM {self._table} WHERE lease = ? AND id IN ({marks})",
                    (token, *(rowid for rowid, _ in items)),
                )
                if cur.rowcount == len(items):
                    items = []
                else:  # someone lost a lease: find out which, one by one (nothing was deleted twice)
                    conn.execute("ROLLBACK")
                    conn.execute("BEGIN IMMEDIATE")
            for i, handle in enumerate(items):
                cur = conn.execute(f"DELETE FROM {self._table} WHERE id = ? AND lease = ?", handle)
                if cur.rowcount != 1:
                    out[i] = self._lost(handle)
        self._notify()
        return out

    def nack(self, handle: Any, delay: float) -> None:
        cur = self._conn().execute(
            f"UPDATE {self._table} SET lease = NULL, visible_at = ? WHERE id = ? AND lease = ?",
            (time.time() + delay, *handle),
        )
        if cur.rowcount != 1:
            raise self._lost(handle)
        if delay <= 0:
            self._notify()

    def extend_lease(self, handle: Any, seconds: float) -> Any:
        cur = self._conn().execute(
            f"UPDATE {self._table} SET visible_at = ? WHERE id = ? AND lease = ?", (time.time() + seconds, *handle)
        )
        if cur.rowcount != 1:
            raise self._lost(handle)
        return handle

    def dead_letter(self, message: ReceivedMessage, reason: str) -> None:
        rowid, token = message.handle
        now = time.time()
        with self._write() as conn:
            row = conn.execute(
                "SELECT mid, body, attrs, key, published, attempts FROM messages WHERE id = ? AND lease = ?",
                (rowid, token),
            ).fetchone()
            if row is None:
                raise self._lost(message.handle)
            mid, body, attrs, key, published, attempts = row
            attributes = json.loads(attrs) if attrs else {}
            attributes.update(zip(DEAD_LETTER_ATTRIBUTES, (reason, self._url, str(attempts), mid), strict=True))
            conn.execute(
                "INSERT INTO dead_letters (queue, mid, body, attrs, key, published, visible_at, reason, dead_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self.name, mid, body, json.dumps(attributes, separators=(",", ":")), key, published, now, reason, now),
            )
            conn.execute("DELETE FROM messages WHERE id = ?", (rowid,))
        self._notify()
        with _wake_for((self._file, "dead_letters", self.name)):
            _wake_for((self._file, "dead_letters", self.name)).notify_all()

    def dead_letter_url(self) -> str | None:
        if self._is_dead_letter:
            return None
        sep = "&" if "?" in self._url else "?"
        return f"{self._url}{sep}dead_letter=true"

    def stats(self) -> QueueStats:
        now = time.time()
        conn = self._conn()
        available, in_flight, delayed = conn.execute(
            f"SELECT COALESCE(SUM(visible_at <= ?), 0), COALESCE(SUM(visible_at > ? AND lease IS NOT NULL), 0), "
            f"COALESCE(SUM(visible_at > ? AND lease IS NULL), 0) FROM {self._table} WHERE queue = ?",
            (now, now, now, self.name),
        ).fetchone()
        dead = None
        if not self._is_dead_letter:
            dead = conn.execute("SELECT COUNT(*) FROM dead_letters WHERE queue = ?", (self.name,)).fetchone()[0]
        return QueueStats(int(available), int(in_flight), int(delayed), dead)

    @contextlib.contextmanager
    def temporary(self, name: str) -> Iterator[str]:
        if not _NAME.fullmatch(name):
            raise InvalidURL(f"a temporary queue name must be 1-128 of A-Z a-z 0-9 _ . -, got {name!r}")
        yield f"sqlite://{self.path}?name={name}"
        with self._write() as conn:
            for table in ("messages", "dead_letters", "dedup"):
                conn.execute(f"DELETE FROM {table} WHERE queue = ?", (name,))

    def close(self) -> None:
        """Drop every thread's connection.

        None is closed from here while another thread may be inside a call on it
        (a receive still running in a pool thread after its caller was cancelled):
        closing a sqlite3 connection under a running statement can crash the
        interpreter. Dropping the references closes each idle connection at once
        and a busy one as soon as its call returns (CPython frees it then); only
        the calling thread's own connection is closed explicitly.
        """
        with self._connections_lock:
            connections, self._connections = self._connections, []
        own: sqlite3.Connection | None = getattr(self._local, "conn", None)
        self._local = threading.local()
        del connections
        if own is not None:
            with contextlib.suppress(sqlite3.Error):
                own.close()
