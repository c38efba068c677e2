"""``mem://`` — an in-process queue: the executable specification of messaging.

URLs:
    ``mem://NAME`` names a queue that is both a topic and its (competing-consumer)
    subscription. Every ``mem://NAME`` opened in one process shares the queue,
    like a server would; ``mem://`` alone is private to the object that opened it
    (its dead letters too: nothing can open them).
    ``mem://NAME?dead_letter=true`` opens NAME's dead-letter queue.

Options:
    dead_letter: open the dead-letter queue of NAME instead of NAME. Defaults to false.
    dedup_window: seconds a publish's ``idempotency_key`` is remembered. Defaults to 300.

Limits: bodies plus attributes up to 1 MiB, 32 attributes, batches of 1,000.

Received messages: ``Message.headers`` are the attributes as ``(name, UTF-8
bytes)`` pairs in the order they were published (so code that reads headers
runs here as on Kafka), ``key_bytes`` is the UTF-8 of the key, and nothing is
a tombstone.

As: nothing.

Capabilities: everything — ordering per key, native dead letters, lease
extension, exactly-once acks, publish dedup, nack delay, exact delivery counts.
Messages live in memory and vanish with the process.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..driver.messaging import (
    DEAD_LETTER_ATTRIBUTES,
    MessagingCapabilities,
    MessagingDriver,
    OutgoingMessage,
    QueueStats,
    ReceivedMessage,
    SubscriptionDriver,
    TopicDriver,
)
from ..errors import InvalidURL, PreconditionFailed
from ..urls import ParsedURL

__all__ = ["MemoryMessaging"]

if TYPE_CHECKING:
    from ..driver.aio_messaging import AsyncQueueDriver


@dataclass(slots=True)
class _Record:
    id: str
    body: bytes
    attributes: dict[str, str]
    key: str | None
    published: dt.datetime
    attempts: int = 0
    visible_at: float = 0.0
    token: int = 0  # 0: not leased


class _Queue:
    def __init__(self, name: str) -> None:
        self.name = name
        self.records: dict[str, _Record] = {}  # publish order
        self.dedup: dict[str, tuple[str, float]] = {}
        self.cond = threading.Condition(threading.Lock())
        self.ids = itertools.count(1)
        self.tokens = itertools.count(1)
        self.prefix = os.urandom(4).hex()
        self._dead: _Queue | None = None

    @property
    def dead(self) -> _Queue:
        """This queue's dead-letter queue, made on first use: one object whichever thread asks first.

        The consumer loop dead-letters on its own thread while another may be
        opening ``mem://NAME?dead_letter=true``; unlocked, both could make a
        dead-letter queue and the reader would wait on one nobody writes to.
        """
        dead = self._dead
        if dead is None:
            with _DEAD_LOCK:
                dead = self._dead
                if dead is None:
                    dead = self._dead = _Queue(self.name + "#dead_letter")
        return dead


_DEAD_LOCK = threading.Lock()  # makes each queue's dead-letter queue once


def embedded_queue_capabilities(
    max_message_bytes: int, *, dead_letter: bool = False, dedup_window: float = 300.0
) -> MessagingCapabilities:
    """What an embedded queue (mem, sqlite) can do: everything, within ``max_message_bytes``.

    A dead-letter queue has no dead-letter queue of its own, and a ``dedup_window``
    of 0 turns publish dedup off.
    """
    return MessagingCapabilities(
        ordering=True,
        native_dead_letter=not dead_letter,
        lease_extension=True,
        exactly_once=True,
        publish_dedup=dedup_window > 0,
        nack_delay=True,
        delivery_count=True,
        max_lease_seconds=7 * 86400.0,
        min_lease_seconds=0.0,
        max_message_bytes=max_message_bytes,
        max_attributes=32,
        dedup_window_seconds=dedup_window or None,
        max_batch=1000,
    )


_SHARED: dict[str, _Queue] = {}
_SHARED_LOCK = threading.Lock()


class MemoryMessaging(MessagingDriver, TopicDriver, SubscriptionDriver):
    """A queue in a dict under one condition variable; both sides are this object."""

    scheme = "mem"
    capabilities = embedded_queue_capabilities(1024 * 1024)

    def async_driver(self) -> AsyncQueueDriver:
        """Both async sides, adapted through the bounded thread pool (one object, as the sync one)."""
        from ..driver.aio_messaging import AsyncQueueDriver

        return AsyncQueueDriver(self)

    def __init__(self, name: str = "", *, dead_letter: bool = False, dedup_window: float = 300.0) -> None:
        self.name = name
        self._is_dead_letter = dead_letter
        if name:
            with _SHARED_LOCK:
                base = _SHARED.setdefault(name, _Queue(name))
        else:
            base = _Queue("")
        self._base = base
        self._queue = base.dead if dead_letter else base
        self._dedup_window = dedup_window
        self.endpoint = f"mem://{name}"
        if dead_letter or dedup_window != 300.0:
            self.capabilities = embedded_queue_capabilities(
                self.capabilities.max_message_bytes, dead_letter=dead_letter, dedup_window=dedup_window
            )

    @contextlib.contextmanager
    def temporary(self, name: str) -> Iterator[str]:
        """A fresh in-process queue called ``name``; forgotten on exit."""
        with _SHARED_LOCK:
            if name in _SHARED:
                raise InvalidURL(f"mem://{name} already exists; choose another temporary name")
        try:
            yield f"mem://{name}"
        finally:
            with _SHARED_LOCK:
                _SHARED.pop(name, None)

    @classmethod
    def from_url(cls, url: ParsedURL) -> MemoryMessaging:
        dead_letter = url.take("dead_letter", bool, False)
        window = url.take("dedup_window", float, 300.0)
        url.done()
        if window < 0:
            raise InvalidURL(f"dedup_window must be >= 0 seconds in {url}")
        name = (url.netloc + url.path).strip("/")
        if dead_letter and not name:
            raise InvalidURL("mem://?dead_letter=true needs a queue NAME: mem://NAME?dead_letter=true")
        return cls(name, dead_letter=dead_letter, dedup_window=window)

    def topic(self) -> TopicDriver:
        return self

    def subscription(self) -> SubscriptionDriver:
        return self

    # -- publishing ----------------------------------------------------
    def publish(self, message: OutgoingMessage) -> str:
        q = self._queue
        with q.cond:
            mid = self._insert(q, message, time.monotonic())
            q.cond.notify_all()
        return mid

    def publish_batch(self, messages: Iterable[OutgoingMessage]) -> list[str | BaseException]:
        q = self._queue
        now = time.monotonic()
        with q.cond:
            out: list[str | BaseException] = [self._insert(q, m, now) for m in messages]
            q.cond.notify_all()
        return out

    def _insert(self, q: _Queue, message: OutgoingMessage, now: float) -> str:
        idem = message.idempotency_key
        if idem is not None and self._dedup_window > 0:
            seen = q.dedup.get(idem)
            if seen is not None and seen[1] > now:
                return seen[0]
        mid = f"{q.prefix}-{next(q.ids)}"
        q.records[mid] = _Record(
            mid, message.body, dict(message.attributes), message.key, dt.datetime.now(dt.UTC), visible_at=now
        )
        if idem is not None and self._dedup_window > 0:
            q.dedup[idem] = (mid, now + self._dedup_window)
            if len(q.dedup) > 10000:
                q.dedup = {k: v for k, v in q.dedup.items() if v[1] > now}
        return mid

    # -- receiving -----------------------------------------------------
    def receive(self, max_messages: int, wait: float, lease: float) -> list[ReceivedMessage]:
        q = self._queue
        until = time.monotonic() + wait
        with q.cond:
            while True:
                now = time.monotonic()
                found = self._take(q, max_messages, lease, now)
                if found or now >= until:
                    return found
                q.cond.wait(min(until - now, 0.05))

    def _take(self, q: _Queue, max_messages: int, lease: float, now: float) -> list[ReceivedMessage]:
        out: list[ReceivedMessage] = []
        seen_keys: set[str] = set()
        for rec in q.records.values():
            key = rec.key
            if key is not None:
                if key in seen_keys:
                    continue  # an earlier message with this key is still in the queue
                seen_keys.add(key)
            if rec.visible_at > now:
                continue
            rec.attempts += 1
            rec.token = next(q.tokens)
            rec.visible_at = now + lease
            attributes = rec.attributes
            out.append(
                ReceivedMessage(
                    rec.id, rec.body, dict(attributes), key, rec.published, rec.attempts, (rec.id, rec.token),
                    tuple([(name, value.encode("utf-8")) for name, value in attributes.items()]),
                )
            )  # fmt: skip
            if len(out) >= max_messages:
                break
        return out

    def _leased(self, q: _Queue, handle: Any) -> _Record:
        mid, token = handle
        rec = q.records.get(mid)
        if rec is None or rec.token != token:
            raise PreconditionFailed(
                f"the lease on message {mid} was lost: it expired and the message was delivered again, "
                "or it was already settled",
                provider=self.scheme,
            )
        return rec

    def ack(self, handle: Any) -> None:
        q = self._queue
        with q.cond:
            rec = self._leased(q, handle)
            del q.records[rec.id]
            q.cond.notify_all()  # the next message of its key may go

    def nack(self, handle: Any, delay: float) -> None:
        q = self._queue
        with q.cond:
            rec = self._leased(q, handle)
            rec.token = 0
            rec.visible_at = time.monotonic() + delay
            q.cond.notify_all()

    def extend_lease(self, handle: Any, seconds: float) -> Any:
        q = self._queue
        with q.cond:
            rec = self._leased(q, handle)
            rec.visible_at = time.monotonic() + seconds
        return handle

    def dead_letter(self, message: ReceivedMessage, reason: str) -> None:
        q = self._queue
        dead = q.dead
        with q.cond:
            rec = self._leased(q, message.handle)
            del q.records[rec.id]
            q.cond.notify_all()
        attributes = dict(rec.attributes)
        attributes.update(
            zip(DEAD_LETTER_ATTRIBUTES, (reason, self.endpoint, str(rec.attempts), rec.id), strict=True)
        )
        with dead.cond:
            dead.records[rec.id] = _Record(rec.id, rec.body, attributes, rec.key, rec.published)
            dead.cond.notify_all()

    def dead_letter_url(self) -> str | None:
        if self._is_dead_letter or not self.name:
            return None
        return f"mem://{self.name}?dead_letter=true"

    def stats(self) -> QueueStats:
        q = self._queue
        now = time.monotonic()
        available = in_flight = delayed = 0
        with q.cond:
            for rec in q.records.values():
                if rec.visible_at <= now:
                    available += 1
                elif rec.token:
                    in_flight += 1
                else:
                    delayed += 1
            dead = None if self._is_dead_letter else len(q.dead.records)
        return QueueStats(available, in_flight, delayed, dead)
