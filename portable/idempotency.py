"""Idempotency keys: run an effect once, however often it is asked for.

A caller names an effect with a key (an order id, a message's idempotency
key, a job's name) and *claims* it in a store before running it:

* the first claim is ``"acquired"``: the record is IN_PROGRESS with a lease
  (the claimer's exclusive right to run) and a fingerprint of the payload;
* the claimer runs the effect and calls :meth:`IdempotencyStore.complete`
  with the result (bounded in size); the record is COMPLETED until it expires;
* a later claim of a COMPLETED key is ``"completed"`` and carries the stored
  result, so the caller returns it instead of running the effect again;
* a claim while the lease runs is ``"in_progress"`` (the caller raises
  :class:`~portable.errors.InProgress` or waits, see :func:`run_once`);
* a claim after the lease expired (the claimer crashed) is ``"acquired"``
  again with a new token: the crashed claimer's work is retried;
* a claim whose fingerprint differs from the record's raises
  :class:`~portable.errors.IdempotencyConflict`: the key was reused for a
  different payload, which is a bug in the caller;
* if the effect fails, :meth:`IdempotencyStore.release` gives the claim up so
  the next caller may run it.

``complete`` and ``release`` take the claim's token; when the lease was lost
(it expired and another caller took the key over) they raise
:class:`~portable.errors.PreconditionFailed`.

Stores (:func:`open_store` picks one by URL):

======================  ===============================================
URL                     store
======================  ===============================================
``mem://`` ``mem://N``  :class:`MemoryStore` (one process; ``N`` shares)
``sqlite://PATH``       :class:`SqliteStore` (processes of one machine)
any bucket URL          :class:`BucketStore`: ``file://``, ``s3://``,
                        ``gs://``, ``az://``, ... with no extra database
``redis://``            ``portable_redis.RedisStore`` (``pip install
                        portable[redis]``)
======================  ===============================================

Third-party stores register a scheme in the entry-point group
``portable.idempotency``; the entry point names a class with a
``from_url(parsed: ParsedURL)`` class method that returns an
:class:`IdempotencyStore`. Entry points win over the built-in schemes.

Times: leases and expiry use the wall clock (``time.time``) because records
are shared between processes and machines; keep clocks in sync (NTP) and
leases well above the clock skew.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from .errors import (
    IdempotencyConflict,
    InvalidArgument,
    PreconditionFailed,
    TooLarge,
)

__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_TTL",
    "Claim",
    "ClaimStatus",
    "IdempotencyStore",
    "MemoryStore",
    "fingerprint",
    "new_token",
]

#: Seconds a claim stays exclusive before another caller may take it over.
DEFAULT_LEASE = 60.0
#: Seconds a record lives (from its claim, renewed by its completion).
DEFAULT_TTL = 24 * 3600.0
#: The largest result a store keeps, in bytes.
DEFAULT_MAX_RESULT_BYTES = 64 * 1024

ClaimStatus = Literal["acquired", "completed", "in_progress"]


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to :meth:`IdempotencyStore.claim`.

    Attributes:
        status: ``"acquired"``: run the effect, then ``complete`` or
            ``release`` with ``token``. ``"completed"``: it ran; ``result``
            is what it returned. ``"in_progress"``: another caller holds the lease.
        token: the lease's token when acquired, else None.
        result: the stored result when completed (None if none was stored).
    """

    status: ClaimStatus
    token: str | None = None
    result: bytes | None = None


@runtime_checkable
class IdempotencyStore(Protocol):
    """Where idempotency records live. Every method is atomic per key.

    Implementations must be safe to share between threads and, where the
    backing store is shared, between processes.
    """

    def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        """Claim ``key`` for a payload whose :func:`fingerprint` is ``fingerprint``.

        Args:
            lease: seconds the claim stays exclusive.
            ttl: seconds the record lives; a record older than that is gone.

        Raises:
            IdempotencyConflict: the record holds a different fingerprint.
        """
        ...

    def complete(self, key: str, token: str, result: bytes | None) -> None:
        """Mark the claim done and store ``result``.

        Raises:
            PreconditionFailed: ``token`` is not the current claim's (the lease was lost).
            TooLarge: ``result`` is over the store's ``max_result_bytes``; the
                claim is kept, so the caller may release it.
        """
        ...

    def release(self, key: str, token: str) -> None:
        """Give the claim up (the effect failed): the next caller may run it.

        Raises:
            PreconditionFailed: ``token`` is not the current claim's (the lease was lost).
        """
        ...


def new_token() -> str:
    """A fresh claim token."""
    return uuid.uuid4().hex


def fingerprint(payload: bytes | bytearray | memoryview | str | Mapping[str, Any], *, fields: tuple[str, ...] | None = None) -> str:
    """A short, stable hash of a payload, to tell a reused key from a retry.

    Bytes are hashed as they are; a str as its UTF-8 bytes; a mapping as
    canonical JSON (sorted keys, values that JSON cannot hold by ``repr``),
    restricted to ``fields`` when given (so a retry that differs only in,
    say, a timestamp is still recognised).

    Returns:
        32 hex digits (BLAKE2b, 128 bits).
    """
    if isinstance(payload, bytes):
        data = payload
    elif isinstance(payload, bytearray | memoryview):
        data = bytes(payload)
    elif isinstance(payload, str):
        data = payload.encode("utf-8", "surrogatepass")
    elif isinstance(payload, Mapping):
        if fields is not None:
            payload = {name: payload.get(name) for name in fields}
        data = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=repr).encode()
    else:
        raise InvalidArgument(
            f"a payload to fingerprint must be bytes, str or a mapping, got {type(payload).__name__}"
        )
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _check_claim_args(key: object, fp: object, lease: float, ttl: float) -> None:
    if type(key) is not str or not key:
        raise InvalidArgument(f"an idempotency key must be a non-empty str, got {key!r}")
    if len(key) > 1024:
        raise InvalidArgument(f"an idempotency key is at most 1,024 characters, got {len(key)}")
    if type(fp) is not str or not fp:
        raise InvalidArgument("the fingerprint must be a non-empty str from fingerprint()")
    if not lease > 0:
        raise InvalidArgument(f"lease must be > 0 seconds, got {lease!r}")
    if not ttl >= lease:
        raise InvalidArgument(f"ttl ({ttl!r}) must be >= lease ({lease!r})")


def _check_result(result: bytes | None, limit: int) -> None:
    if result is None:
        return
    if not isinstance(result, bytes):
        raise InvalidArgument(f"a stored result must be bytes or None, got {type(result).__name__}")
    if len(result) > limit:
        raise TooLarge(
            f"the result is {len(result)} bytes; this idempotency store keeps at most {limit} "
            "(store a reference, such as an object key, instead)"
        )


def _conflict(key: str) -> IdempotencyConflict:
    return IdempotencyConflict(
        f"idempotency key {key[:200]!r} was used before with a different payload; "
        "use a new key for a new request"
    )


def _lost(key: str) -> PreconditionFailed:
    return PreconditionFailed(
        f"the claim on idempotency key {key[:200]!r} was lost (its lease expired and another "
        "caller took it over, or the record expired)"
    )


# ---------------------------------------------------------------- memory
@dataclass(slots=True)
class _Record:
    fingerprint: str
    token: str
    completed: bool
    lease_until: float
    expires_at: float
    ttl: float
    result: bytes | None = None


class MemoryStore:
    """Records in a dict: one process, for tests and single-process services.

    Args:
        max_result_bytes: the largest result kept. Defaults to 64 KiB.
        clock: wall-clock seconds; tests pass a fake one.
    """

    def __init__(
        self, *, max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES, clock: Callable[[], float] = time.time
    ) -> None:
        self.max_result_bytes = max_result_bytes
        self._clock = clock
        self._records: dict[str, _Record] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._records)} records)"

    def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        _check_claim_args(key, fingerprint, lease, ttl)
        with self._lock:
            now = self._clock()
            record = self._records.get(key)
            if record is not None and record.expires_at <= now:
                record = None
            if record is not None:
                if record.fingerprint != fingerprint:
                    raise _conflict(key)
                if record.completed:
                    return Claim("completed", None, record.result)
                if record.lease_until > now:
                    return Claim("in_progress")
            token = new_token()
            self._records[key] = _Record(fingerprint, token, False, now + lease, now + ttl, ttl)
            return Claim("acquired", token)

    def complete(self, key: str, token: str, result: bytes | None) -> None:
        _check_result(result, self.max_result_bytes)
        with self._lock:
            record = self._current(key, token)
            now = self._clock()
            record.completed = True
            record.result = result
            record.expires_at = max(record.expires_at, now + record.ttl)

    def release(self, key: str, token: str) -> None:
        with self._lock:
            self._current(key, token)
            del self._records[key]

    def extend(self, key: str, token: str, lease: float) -> None:
        """Push the lease of a held claim ``lease`` seconds from now (long effects)."""
        with self._lock:
            record = self._current(key, token)
            record.lease_until = self._clock() + lease

    def _current(self, key: str, token: str) -> _Record:
        record = self._records.get(key)
        if record is None or record.token != token or record.completed or record.expires_at <= self._clock():
            raise _lost(key)
        return record

    def purge_expired(self) -> int:
        """Drop expired records; return how many."""
        with self._lock:
            now = self._clock()
            gone = [k for k, r in self._records.items() if r.expires_at <= now]
            for k in gone:
                del self._records[k]
            return len(gone)
