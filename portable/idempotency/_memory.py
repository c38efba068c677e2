"""``mem://`` — idempotency records in a dict: one process, for tests and single-process services.

URLs:
    ``mem://`` is a private store; ``mem://NAME`` the store shared by that
    name in this process.

Options:
    ``max_result_bytes`` (int): the largest stored result. Defaults to 64 KiB
    (for a shared store, the first opener's value holds).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import ClassVar

from ..driver.idempotency import (
    COMPLETED,
    DEFAULT_MAX_RESULT_BYTES,
    RELEASED,
    Claim,
    IdempotencyRecord,
    acquired_claim,
    change_needed,
    check_claim_args,
    check_result,
    claim_outcome,
    claimed_record,
    completed_record,
    extended_record,
    forgotten_record,
    new_token,
    new_tokens,
    released_record,
    unclaimed_record,
)
from ..errors import IdempotencyConflict
from ..urls import ParsedURL

__all__ = ["MemoryStore"]


class MemoryStore:
    """Records in a dict: one process, for tests and single-process services.

    Args:
        max_result_bytes: the largest result kept. Defaults to 64 KiB.
        clock: wall-clock seconds; tests pass a fake one.
    """

    #: a dict under a lock: the async face calls it on the event loop, with no thread hop
    never_blocks: ClassVar[bool] = True
    _shared: ClassVar[dict[str, MemoryStore]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self, *, max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES, clock: Callable[[], float] = time.time
    ) -> None:
        self.max_result_bytes = max_result_bytes
        self._clock = clock
        self._records: dict[str, IdempotencyRecord] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: ParsedURL) -> MemoryStore:
        """Open ``mem://`` (a private store) or ``mem://NAME`` (shared by name in this process)."""
        limit = url.take("max_result_bytes", int, DEFAULT_MAX_RESULT_BYTES)
        url.done()
        name = (url.netloc + url.path).strip("/")
        if not name:
            return cls(max_result_bytes=limit)
        with cls._shared_lock:
            return cls._shared.setdefault(name, cls(max_result_bytes=limit))

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._records)} records)"

    def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        """Claim ``key``; see :meth:`IdempotencyStore.claim`."""
        check_claim_args(key, fingerprint, lease, ttl)
        token = new_token()
        with self._lock:
            now = self._clock()
            previous = self._records.get(key)
            outcome = claim_outcome(previous, key, fingerprint, token, now)
            if outcome is not None:
                return outcome
            record = claimed_record(previous, key, fingerprint, token, lease=lease, ttl=ttl, now=now)
            self._records[key] = record
            return acquired_claim(record, now)

    def claim_many(
        self, items: Sequence[tuple[str, str]], *, lease: float, ttl: float
    ) -> list[Claim | IdempotencyConflict]:
        """Claim many (key, fingerprint) pairs under one lock; each answer, or its conflict, in order."""
        pairs = list(items)
        for key, fp in pairs:
            check_claim_args(key, fp, lease, ttl)
        out: list[Claim | IdempotencyConflict] = []
        with self._lock:
            now = self._clock()
            records = self._records
            for (key, fp), token in zip(pairs, new_tokens(len(pairs)), strict=True):
                previous = records.get(key)
                try:
                    outcome = claim_outcome(previous, key, fp, token, now)
                except IdempotencyConflict as exc:
                    out.append(exc)
                    continue
                if outcome is None:
                    record = claimed_record(previous, key, fp, token, lease=lease, ttl=ttl, now=now)
                    records[key] = record
                    outcome = acquired_claim(record, now)
                out.append(outcome)
        return out

    def complete_many(self, items: Sequence[tuple[str, str, bytes | None]]) -> list[BaseException | None]:
        """Complete many (key, token, result) claims under one lock; each one's error (or None)."""
        out: list[BaseException | None] = []
        with self._lock:
            now = self._clock()
            for key, token, result in items:
                try:
                    check_result(result, self.max_result_bytes)
                    record = self._records.get(key)
                    if change_needed(record, key, token, COMPLETED, now):
                        self._records[key] = completed_record(record, result, now)
                    out.append(None)
                except Exception as exc:
                    out.append(exc)
        return out

    def unclaim(self, key: str, token: str) -> None:
        """Give back a claim whose effect never started: one start fewer, no failure counted.

        Raises:
            PreconditionFailed: the claim was lost.
        """
        with self._lock:
            record = self._records.get(key)
            if change_needed(record, key, token, RELEASED, self._clock()):
                self._records[key] = unclaimed_record(record)

    def complete(self, key: str, token: str, result: bytes | None) -> None:
        """Mark the claim done with ``result``; see :meth:`IdempotencyStore.complete`."""
        check_result(result, self.max_result_bytes)
        with self._lock:
            record = self._records.get(key)
            now = self._clock()
            if change_needed(record, key, token, COMPLETED, now):
                self._records[key] = completed_record(record, result, now)

    def release(self, key: str, token: str) -> None:
        """Give the claim up, one failure more; see :meth:`IdempotencyStore.release`."""
        with self._lock:
            record = self._records.get(key)
            if change_needed(record, key, token, RELEASED, self._clock()):
                self._records[key] = released_record(record)

    def forget(self, key: str, token: str) -> None:
        """Give the claim up and clear its counts: the next claim is a first start.

        Raises:
            PreconditionFailed: the claim was lost.
        """
        with self._lock:
            record = self._records.get(key)
            if change_needed(record, key, token, RELEASED, self._clock()):
                self._records[key] = forgotten_record(record)

    def extend(self, key: str, token: str, lease: float) -> None:
        """Push the lease of a held claim ``lease`` seconds from now (long effects).

        Raises:
            PreconditionFailed: the claim was lost.
        """
        with self._lock:
            record = self._records.get(key)
            now = self._clock()
            if change_needed(record, key, token, None, now):
                self._records[key] = extended_record(record, lease, now)

    def purge_expired(self) -> int:
        """Drop expired records; return how many."""
        with self._lock:
            now = self._clock()
            gone = [k for k, r in self._records.items() if r["expires_at"] <= now]
            for k in gone:
                del self._records[k]
            return len(gone)
