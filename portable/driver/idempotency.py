"""What an idempotency store is made of: the public helpers for writing one.

Application code uses :mod:`portable.idempotency` (``run_once``,
``@idempotent``, ``open_store``), which re-exports the protocol, the claim
and the fingerprint from here. This module is for those who *implement* a
store: the stores of :mod:`portable.idempotency` (memory, sqlite, bucket),
``portable_gcp.firestore``, ``portable_aws.dynamodb`` and ``portable_redis``
build on it, and a third-party store should too, so that every store keeps
the same rules and says the same thing when a rule is broken.

What is here:

* the protocol: :class:`IdempotencyStore`, :class:`Claim`, :data:`ClaimStatus`,
  and the defaults :data:`DEFAULT_LEASE`, :data:`DEFAULT_TTL`,
  :data:`DEFAULT_MAX_RESULT_BYTES`;
* the checks every store makes before a request: :func:`check_claim_args`,
  :func:`check_result`; and the errors it raises when a rule is broken:
  :func:`conflict_error` (a key reused for another payload) and
  :func:`lost_error` (a claim whose lease was lost);
* :func:`fingerprint` and :func:`new_token`;
* the record: :class:`IdempotencyRecord` (its fields, as the bucket and
  Firestore stores keep them), :func:`new_record` and the changes
  :func:`completed_record`, :func:`released_record`, :func:`extended_record`;
  and the two rules every store applies to a record it finds:
  :func:`claim_outcome` (what a claim meets) and :func:`change_needed`
  (whether a complete, release or extend still applies);
* :class:`CompareAndSwapStore`: the whole protocol over a store of one
  document per key that can create a document only if it is absent and
  replace one only if it did not change (a bucket, Firestore). A subclass
  says where a key's document is and how to read and write it.

A store with its own atomic primitive applies the same rules in it: SQLite in
one transaction, DynamoDB in condition expressions, Redis in Lua scripts.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import hashlib
import json
import os
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    Generic,
    Literal,
    Protocol,
    TypedDict,
    TypeGuard,
    TypeVar,
    runtime_checkable,
)
from urllib.parse import unquote

from ..errors import IdempotencyConflict, Internal, InvalidArgument, PreconditionFailed, TooLarge

if TYPE_CHECKING:
    from ..urls import ParsedURL

_sha256 = hashlib.sha256

__all__ = [
    "COMPLETED",
    "Claim",
    "ClaimStatus",
    "CompareAndSwapStore",
    "DEFAULT_LEASE",
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_TTL",
    "IN_PROGRESS",
    "IdempotencyRecord",
    "IdempotencyStore",
    "MAX_CAS_ROUNDS",
    "RELEASED",
    "RecordState",
    "TransactionalHandler",
    "TransactionalStore",
    "acquired_claim",
    "change_needed",
    "check_claim_args",
    "check_result",
    "claim_outcome",
    "claimed_record",
    "completed_record",
    "conflict_error",
    "contended_error",
    "extended_record",
    "fingerprint",
    "forgotten_record",
    "lost_error",
    "new_record",
    "new_token",
    "new_tokens",
    "next_counts",
    "read_record",
    "released_record",
    "unclaimed_record",
    "without_options",
]

#: Seconds a claim stays exclusive before another caller may take it over.
DEFAULT_LEASE = 60.0
#: Seconds a record lives (from its claim, renewed by its completion).
DEFAULT_TTL = 24 * 3600.0
#: The largest result a store keeps, in bytes.
DEFAULT_MAX_RESULT_BYTES = 64 * 1024
#: Compare-and-swap rounds before a store gives up; each lost round means another writer made progress.
MAX_CAS_ROUNDS = 64

ClaimStatus = Literal["acquired", "completed", "in_progress"]


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to :meth:`IdempotencyStore.claim`.

    Attributes:
        status: ``"acquired"``: run the effect, then ``complete`` or
            ``release`` with ``token``. ``"completed"``: it ran; ``result``
            is what it returned. ``"in_progress"``: another caller holds the lease.
        token: the lease's token when acquired, else None. It tells this claim
            from every other claim of the same key; claims of different keys
            may share it (SqliteStore.claim_many gives one call's new claims one).
        result: the stored result when completed (None if none was stored).
        lease_remaining: seconds until the claim's lease ends, as the store
            measured it when it answered: for ``"in_progress"``, when the
            holder's lease ends (if it does not extend it, another claim may
            then take the key over); for ``"acquired"``, this claim's own
            lease. None where the store does not say.
        starts: for ``"acquired"``: how many times the key was claimed to run
            the effect since its record was created, this claim included (1
            the first time; each claim after a ``release`` and each take-over
            of a lease that ran out counts one more; :meth:`forget
            <CompareAndSwapStore.forget>` starts the count again). A start that
            neither completed nor released is a claimer that crashed or
            lost its lease. None where the store does not count.
        failures: for ``"acquired"``: how many of the earlier starts ended in
            ``release`` (the effect failed), so ``starts - 1 - failures``
            claimers crashed or timed out. None where the store does not count.

    The last three do not take part in ``==``: two claims are equal when they
    say the same thing about the key.
    """

    status: ClaimStatus
    token: str | None = None
    result: bytes | None = None
    lease_remaining: float | None = field(default=None, compare=False)
    starts: int | None = field(default=None, compare=False)
    failures: int | None = field(default=None, compare=False)


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

        Completing twice with the same token is a no-op (a retried call).

        Raises:
            PreconditionFailed: ``token`` is not the current claim's (the lease was lost).
            TooLarge: ``result`` is over the store's ``max_result_bytes``; the
                claim is kept, so the caller may release it.
        """
        ...

    def release(self, key: str, token: str) -> None:
        """Give the claim up (the effect failed): the next caller may run it.

        A store that counts starts (:attr:`Claim.starts`) keeps the count and
        adds one to :attr:`Claim.failures`. Releasing twice may raise
        PreconditionFailed (the claim is gone).

        Raises:
            PreconditionFailed: ``token`` is not the current claim's (the lease was lost).
        """
        ...

    # Optional methods, which the stores of portable have and callers look up with getattr:
    #   extend(key, token, lease): push a held claim's lease (long effects);
    #   forget(key, token): give a held claim up and start its counts again (the
    #     consumer loop calls it when it dead-letters the message, so a copy
    #     redriven later is counted from its first start);
    #   unclaim(key, token): give back a claim whose effect never started (a
    #     consumer stopping with claims taken ahead): one start fewer, no failure;
    #   claim_many(items, *, lease, ttl) -> list[Claim | IdempotencyConflict]: claim
    #     (key, fingerprint) pairs at once (one transaction, pipeline or batch), each
    #     answer as claim() would give it, a conflict returned in its place, not raised;
    #   complete_many(items) -> list[BaseException | None]: complete (key, token,
    #     result) triples at once, each item's error (lost, too large) in its place.
    # portable.idempotency.claim_many / complete_many call these, or loop where a
    # store lacks them; the consumer loop claims and completes a received batch so.


@runtime_checkable
class TransactionalStore(Protocol):
    """A store that can commit an effect together with a claim's completion
    (``SqliteStore``: one SQLite transaction; ``BucketStore``: create-only puts).
    """

    def run_and_complete(self, key: str | None, token: str | None, effect: Callable[[Any], Any]) -> Any:
        """Run ``effect(tx)`` so that what it writes through ``tx`` and ``complete(key,
        token, result)`` (``result``: its return value if bytes) hold together after a crash.

        Raises:
            PreconditionFailed: the claim was lost; nothing of the effect is committed.
            Exception: what ``effect`` raised; the claim is still held.
        """
        ...


class TransactionalHandler:
    """A consumer handler whose effect shares its idempotency store's commit.

    Made by a store's ``transactional(handler)`` (``SqliteStore.transactional``,
    ``BucketStore.transactional``); ``Subscription.run(h, idempotency=store)``
    runs ``handler(message, tx)`` inside ``store.run_and_complete`` under the
    message's claim. Called as a plain handler (a message without an
    idempotency key) it runs the effect with no claim.
    """

    __slots__ = ("handler", "store")

    def __init__(self, store: TransactionalStore, handler: Callable[[Any, Any], Any]) -> None:
        if not callable(handler):
            raise InvalidArgument("a transactional handler must be a callable taking (message, tx)")
        self.store = store
        self.handler = handler

    def __repr__(self) -> str:
        return f"TransactionalHandler({self.store!r}, {getattr(self.handler, '__qualname__', self.handler)!r})"

    def __call__(self, message: Any) -> Any:
        """Run the effect for ``message`` with no claim (in a transaction of its own where the store has one)."""
        return self.store.run_and_complete(None, None, lambda tx: self.handler(message, tx))

    def run_claimed(self, message: Any, key: str, token: str) -> Any:
        """Run the effect for ``message`` under the claim ``token`` of ``key``, completing it with the commit."""
        return self.store.run_and_complete(key, token, lambda tx: self.handler(message, tx))


# ---------------------------------------------------------------- tokens and fingerprints
def new_token() -> str:
    """A fresh claim token: 32 hex digits, random (a claim's token is never another claim's of its key)."""
    return uuid.uuid4().hex


def new_tokens(n: int) -> list[str]:
    """``n`` fresh claim tokens (as :func:`new_token`'s, from one read of the OS's random source)."""
    digits = os.urandom(16 * n).hex()
    return [digits[i : i + 32] for i in range(0, 32 * n, 32)]


def fingerprint(payload: bytes | bytearray | memoryview | str | Mapping[str, Any], *, fields: tuple[str, ...] | None = None) -> str:
    """A short, stable hash of a payload, to tell a reused key from a retry.

    Bytes are hashed as they are; a str as its UTF-8 bytes; a mapping as
    canonical JSON (sorted keys, values that JSON cannot hold by ``repr``),
    restricted to ``fields`` when given (so a retry that differs only in,
    say, a timestamp is still recognised). Inside a mapping, bytes, sets,
    enums, dates, UUIDs, decimals, paths and dataclasses have a canonical
    form; any other object raises InvalidArgument rather than being hashed
    by its ``repr`` (which may differ between two identical requests).

    Returns:
        32 hex digits: the first 128 bits of SHA-256 (hardware-accelerated on
        current x86 and ARM CPUs: about 1 us for 1 KiB).
    """
    if type(payload) is bytes:
        return _sha256(payload).hexdigest()[:32]
    if isinstance(payload, bytes | bytearray | memoryview):
        data = bytes(payload)
    elif isinstance(payload, str):
        data = payload.encode("utf-8", "surrogatepass")
    elif isinstance(payload, Mapping):
        if fields is not None:
            payload = {name: payload.get(name) for name in fields}
        try:
            data = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=_canonical).encode()
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(
                f"cannot fingerprint this payload: {exc}; pass bytes, choose fields=, "
                "or convert the value to str, int, float, bool, None, list or dict"
            ) from None
    else:
        raise InvalidArgument(
            f"a payload to fingerprint must be bytes, str or a mapping, got {type(payload).__name__}"
        )
    return _sha256(data).hexdigest()[:32]


def _canonical(value: Any) -> Any:
    """JSON stand-ins for common non-JSON values; anything else is refused, never ``repr``-ed
    (a repr may hold a memory address, which would make every retry look like a new payload)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": bytes(value).hex()}
    if isinstance(value, set | frozenset):
        return sorted(value, key=lambda v: json.dumps(v, sort_keys=True, default=_canonical))
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dt.date | dt.time | uuid.UUID | decimal.Decimal | PurePath):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"a {type(value).__name__} has no canonical form")


# ---------------------------------------------------------------- checks and errors
def check_claim_args(key: object, fp: object, lease: float, ttl: float) -> None:
    """Refuse a claim's bad arguments before any request.

    Raises:
        InvalidArgument: ``key`` is not a str of 1 to 1,024 characters, ``fp``
            not a non-empty str, ``lease`` not > 0, or ``ttl`` below ``lease``.
    """
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


def check_result(result: bytes | None, limit: int) -> None:
    """Refuse a result a store will not keep, before any request.

    Raises:
        InvalidArgument: ``result`` is neither bytes nor None.
        TooLarge: ``result`` is over ``limit`` bytes.
    """
    if result is None:
        return
    if not isinstance(result, bytes):
        raise InvalidArgument(f"a stored result must be bytes or None, got {type(result).__name__}")
    if len(result) > limit:
        raise TooLarge(
            f"the result is {len(result)} bytes; this idempotency store keeps at most {limit} "
            "(store a reference, such as an object key, instead)"
        )


def conflict_error(key: str) -> IdempotencyConflict:
    """The error of a claim whose fingerprint differs from the record's (a key reused for another payload)."""
    return IdempotencyConflict(
        f"idempotency key {key[:200]!r} was used before with a different payload; "
        "use a new key for a new request"
    )


def lost_error(key: str) -> PreconditionFailed:
    """The error of a complete, release or extend whose claim is no longer the key's current one."""
    return PreconditionFailed(
        f"the claim on idempotency key {key[:200]!r} was lost (its lease expired and another "
        "caller took it over, or the record expired)"
    )


def contended_error(key: str, rounds: int = MAX_CAS_ROUNDS) -> Internal:
    """The error of a change that lost ``rounds`` compare-and-swap rounds in a row to other writers."""
    return Internal(
        f"idempotency key {key[:200]!r}: gave up after {rounds} compare-and-swap rounds "
        "lost to other writers"
    )


# ---------------------------------------------------------------- records
RecordState = Literal["in_progress", "completed", "released"]
#: The claimer holds the lease and runs the effect.
IN_PROGRESS: Final = "in_progress"
#: The effect ran; ``result`` is what it returned.
COMPLETED: Final = "completed"
#: The claimer gave the key up; the record counts as absent.
RELEASED: Final = "released"


class IdempotencyRecord(TypedDict):
    """One key's record. The bucket and Firestore stores keep it as it is
    (a bucket as JSON, with ``result`` in base64); the other stores keep the
    same fields in their own form and build this to apply the rules.

    Attributes:
        v: the format, 1.
        key: the key's first 200 characters, for people reading the store
            (the store finds a record by its own id, not by this field).
        state: :data:`IN_PROGRESS`, :data:`COMPLETED` or :data:`RELEASED`.
        fp: the claimed payload's :func:`fingerprint`.
        token: the claim's token.
        lease_until: wall-clock seconds until which the claim is exclusive.
        expires_at: wall-clock seconds after which the record is gone.
        ttl: the record's lifetime in seconds, renewed by its completion.
        result: the stored result, or None.
        starts: claims taken to run the effect since the record was created
            (see :attr:`Claim.starts`); 1 for a fresh claim. Records written
            before this field existed read as 1.
        failures: claims given up with ``release`` (see :attr:`Claim.failures`);
            0 for a fresh claim, likewise for older records.
    """

    v: int
    key: str
    state: RecordState
    fp: str
    token: str
    lease_until: float
    expires_at: float
    ttl: float
    result: bytes | None
    starts: int
    failures: int


def new_record(
    key: str, fp: str, token: str, *, lease: float, ttl: float, now: float, starts: int = 1, failures: int = 0
) -> IdempotencyRecord:
    """The record of a fresh claim of ``key``: in progress, leased for ``lease`` seconds from ``now``.

    ``starts`` and ``failures`` are the counts it carries (see :func:`claimed_record`).
    """
    return {
        "v": 1,
        "key": key[:200],
        "state": IN_PROGRESS,
        "fp": fp,
        "token": token,
        "lease_until": now + lease,
        "expires_at": now + ttl,
        "ttl": ttl,
        "result": None,
        "starts": starts,
        "failures": failures,
    }


def next_counts(previous: IdempotencyRecord | None, now: float) -> tuple[int, int]:
    """``(starts, failures)`` of a claim that takes ``key`` over from the ``previous`` record.

    A live record (released, or in progress with a lease that ran out) passes
    its counts on, plus one start; no record, or an expired one, starts at ``(1, 0)``.
    """
    if previous is None or previous["expires_at"] <= now:
        return 1, 0
    return previous.get("starts", 1) + 1, previous.get("failures", 0)


def claimed_record(
    previous: IdempotencyRecord | None, key: str, fp: str, token: str, *, lease: float, ttl: float, now: float
) -> IdempotencyRecord:
    """The record of a claim that takes ``key`` over from ``previous`` (None: there was none),
    after :func:`claim_outcome` said it may: :func:`new_record` with :func:`next_counts`."""
    starts, failures = next_counts(previous, now)
    return new_record(key, fp, token, lease=lease, ttl=ttl, now=now, starts=starts, failures=failures)


def acquired_claim(record: IdempotencyRecord, now: float) -> Claim:
    """The ``"acquired"`` answer for the claim that wrote ``record``."""
    return Claim(
        "acquired", record["token"], None, max(0.0, record["lease_until"] - now),
        record.get("starts", 1), record.get("failures", 0),
    )  # fmt: skip


def completed_record(record: IdempotencyRecord, result: bytes | None, now: float) -> IdempotencyRecord:
    """``record`` completed with ``result``; it lives at least ``ttl`` seconds from ``now``."""
    done = record.copy()
    done["state"] = COMPLETED
    done["result"] = result
    done["expires_at"] = max(record["expires_at"], now + record["ttl"])
    return done


def released_record(record: IdempotencyRecord) -> IdempotencyRecord:
    """``record`` given up after a failed effect: a later claim takes the key, one failure more."""
    released = record.copy()
    released["state"] = RELEASED
    released["failures"] = record.get("failures", 0) + 1
    return released


def forgotten_record(record: IdempotencyRecord) -> IdempotencyRecord:
    """``record`` given up with its counts cleared: a later claim is a first start again."""
    forgotten = record.copy()
    forgotten["state"] = RELEASED
    forgotten["starts"] = 0
    forgotten["failures"] = 0
    return forgotten


def unclaimed_record(record: IdempotencyRecord) -> IdempotencyRecord:
    """``record`` given back before its effect started: released, its claim's start taken back."""
    unclaimed = record.copy()
    unclaimed["state"] = RELEASED
    unclaimed["starts"] = max(0, record.get("starts", 1) - 1)
    return unclaimed


def extended_record(record: IdempotencyRecord, lease: float, now: float) -> IdempotencyRecord:
    """``record`` with its lease pushed to ``lease`` seconds from ``now``."""
    extended = record.copy()
    extended["lease_until"] = now + lease
    return extended


def read_record(data: object, name: str) -> IdempotencyRecord:
    """``data`` (a decoded document) as a record, after checking its format.

    Raises:
        Internal: ``data`` is not a record of format 1 (something else wrote ``name``).
    """
    if not isinstance(data, dict) or data.get("v") != 1:
        raise Internal(f"idempotency record {name} has an unknown format; was it written by something else?")
    data.setdefault("starts", 1)  # written before the counts existed
    data.setdefault("failures", 0)
    return data  # type: ignore[return-value]


def claim_outcome(
    record: IdempotencyRecord | None, key: str, fp: str, token: str, now: float
) -> Claim | None:
    """What a claim of ``key`` (payload ``fp``, fresh ``token``) meets in the stored ``record``.

    Returns:
        The Claim to answer, or None when the claimer may take the key: there
        is no record, it expired, it was released, or its lease ran out (its
        claimer crashed). Then the store writes :func:`new_record` in its place,
        on the condition that the record did not change meanwhile. A record
        holding ``token`` itself is the claimer's own write, which landed though
        its reply was lost: ``acquired``. An ``in_progress`` answer says when the
        holder's lease ends (:attr:`Claim.lease_remaining`).

    Raises:
        IdempotencyConflict: a live record holds another fingerprint.
    """
    if record is None:
        return None
    state = record["state"]
    if record["token"] == token and state == IN_PROGRESS:
        return acquired_claim(record, now)
    if record["expires_at"] <= now or state == RELEASED:
        return None
    if record["fp"] != fp:
        raise conflict_error(key)
    if state == COMPLETED:
        return Claim("completed", None, record["result"])
    if record["lease_until"] > now:
        return Claim("in_progress", lease_remaining=record["lease_until"] - now)
    return None


def change_needed(
    record: IdempotencyRecord | None, key: str, token: str, done_state: RecordState | None, now: float
) -> TypeGuard[IdempotencyRecord]:
    """Whether a change by the claim ``token`` (complete, release, extend) still has to be written.

    Args:
        record: the stored record, None if there is none.
        done_state: the state the change leaves (COMPLETED, RELEASED), or None
            for a change that leaves the state as it is (extend).

    Returns:
        False when the record is already in ``done_state`` under ``token``:
        the change landed before (a retried call, or a write whose reply was
        lost). True when the claim is current and the change must be written
        (so ``record`` is a record).

    Raises:
        PreconditionFailed: the claim was lost: no record, another token, the
            record expired or is no longer in progress.
    """
    if record is None or record["token"] != token:
        raise lost_error(key)
    if done_state is not None and record["state"] == done_state:
        return False
    if record["state"] != IN_PROGRESS or record["expires_at"] <= now:
        raise lost_error(key)
    return True


# ---------------------------------------------------------------- compare-and-swap stores
Doc = TypeVar("Doc")
Version = TypeVar("Version")

#: claims remembered per store for a read-free complete/release
_MAX_HELD = 4096


class CompareAndSwapStore(ABC, Generic[Doc, Version]):
    """The :class:`IdempotencyStore` protocol over one document per key, changed
    only by create-if-absent and compare-and-swap.

    A claim creates the key's document; when one exists, it reads it, applies
    :func:`claim_outcome`, and takes an expired or released record over with a
    swap conditional on the version it read. Complete, release and extend swap
    the same way after :func:`change_needed`. Every step is safe to retry: a
    write that landed though it reported a failure is recognised by its token.
    A store remembers the version of each claim it wrote (up to 4,096), so a
    complete or release right after the claim swaps without reading first.

    A subclass implements :meth:`_doc`, :meth:`_read` and :meth:`_write`.

    Args:
        max_result_bytes: the largest result kept.
        clock: wall-clock seconds; tests pass a fake one.
    """

    def __init__(self, *, max_result_bytes: int, clock: Callable[[], float] = time.time) -> None:
        self.max_result_bytes = max_result_bytes
        self._clock = clock
        self._held: dict[str, tuple[str, IdempotencyRecord, Version]] = {}

    @abstractmethod
    def _doc(self, key: str) -> Doc:
        """Where ``key``'s document is (an object key, a document reference)."""

    @abstractmethod
    def _read(self, doc: Doc) -> tuple[IdempotencyRecord, Version] | None:
        """The record in ``doc`` and the version it was read at, or None if there is none.

        Raises:
            Internal: the document is not a record (see :func:`read_record`).
        """

    @abstractmethod
    def _write(self, doc: Doc, record: IdempotencyRecord, version: Version | None = None) -> Version | None:
        """Create ``doc`` (``version`` None) or replace it if it is still at ``version``.

        Returns:
            The version written, or None if another writer won (the document
            existed, or changed since ``version``). A falsy version means the
            write landed but the provider reported no version, so the next
            change of this claim reads first.
        """

    # -- the protocol ---------------------------------------------------
    def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        """Claim ``key``; see :meth:`IdempotencyStore.claim`."""
        check_claim_args(key, fingerprint, lease, ttl)
        doc = self._doc(key)
        token = new_token()
        taken = self._take(doc, key, fingerprint, token, lease, ttl, None, None)
        if taken is not None:
            return taken
        for _ in range(MAX_CAS_ROUNDS):
            found = self._read(doc)
            record, version = (None, None) if found is None else found
            outcome = claim_outcome(record, key, fingerprint, token, self._clock())
            if outcome is not None:
                return outcome
            taken = self._take(doc, key, fingerprint, token, lease, ttl, version, record)
            if taken is not None:
                return taken
        raise contended_error(key)

    def complete(self, key: str, token: str, result: bytes | None) -> None:
        """Mark the claim done with ``result``; see :meth:`IdempotencyStore.complete`."""
        check_result(result, self.max_result_bytes)
        self._change(key, token, lambda r: completed_record(r, result, self._clock()), COMPLETED)

    def release(self, key: str, token: str) -> None:
        """Give the claim up, one failure more; see :meth:`IdempotencyStore.release`."""
        self._change(key, token, released_record, RELEASED)

    def forget(self, key: str, token: str) -> None:
        """Give the claim up and clear its counts: the next claim is a first start.

        Raises:
            PreconditionFailed: the claim was lost.
        """
        self._change(key, token, forgotten_record, RELEASED)

    def unclaim(self, key: str, token: str) -> None:
        """Give back a claim whose effect never started: one start fewer, no failure counted.

        Raises:
            PreconditionFailed: the claim was lost.
        """
        self._change(key, token, unclaimed_record, RELEASED)

    def extend(self, key: str, token: str, lease: float) -> None:
        """Push the lease of a held claim ``lease`` seconds from now (long effects).

        Raises:
            PreconditionFailed: the claim was lost.
        """
        self._change(key, token, lambda r: extended_record(r, lease, self._clock()), None)

    # -- the steps ------------------------------------------------------
    def _take(
        self,
        doc: Doc,
        key: str,
        fp: str,
        token: str,
        lease: float,
        ttl: float,
        version: Version | None,
        previous: IdempotencyRecord | None,
    ) -> Claim | None:
        """Write a claim over ``previous``, read at ``version`` (None: create); the Claim, or None
        if another writer won."""
        now = self._clock()
        record = claimed_record(previous, key, fp, token, lease=lease, ttl=ttl, now=now)
        written = self._write(doc, record, version)
        if written is None:
            return None
        self._hold(token, key, record, written)
        return acquired_claim(record, now)

    def _hold(self, token: str, key: str, record: IdempotencyRecord, version: Version) -> None:
        """Remember the claim this store wrote, so complete/release can swap without reading first."""
        if not version:
            return
        held = self._held
        if len(held) >= _MAX_HELD:
            held.clear()  # abandoned claims: forget them; they fall back to reading
        held[token] = (key, record, version)

    def _change(
        self,
        key: str,
        token: str,
        update: Callable[[IdempotencyRecord], IdempotencyRecord],
        done_state: RecordState | None,
    ) -> None:
        doc = self._doc(key)
        held = self._held.pop(token, None)
        if held is not None and held[0] == key and held[1]["expires_at"] > self._clock():
            # The claim as this store wrote it: swap at once; if anything changed since, read below.
            changed = update(held[1])
            written = self._write(doc, changed, held[2])
            if written is not None:
                if done_state is None:
                    self._hold(token, key, changed, written)
                return
        for _ in range(MAX_CAS_ROUNDS):
            found = self._read(doc)
            if found is None:
                raise lost_error(key)
            record, version = found
            if not change_needed(record, key, token, done_state, self._clock()):
                return
            changed = update(record)
            written = self._write(doc, changed, version)
            if written is not None:
                if done_state is None:
                    self._hold(token, key, changed, written)
                return
        raise contended_error(key)


def without_options(url: ParsedURL, *names: str, scheme: str | None = None) -> str:
    """``url`` as written, minus the query options ``names`` (and with another scheme).

    The other options keep their original percent-encoding, so a value that
    holds ``&`` or ``=`` (an Azure SAS token) survives. Stores that hand a URL
    on to a client library (a bucket, redis-py) take their own options off first.
    """
    rest = url.raw.split("://", 1)[1]
    base, _, query = rest.partition("?")
    kept = [pair for pair in query.split("&") if pair and unquote(pair.partition("=")[0]) not in names]
    head = scheme if scheme is not None else url.raw.split("://", 1)[0]
    return f"{head}://{base}" + (f"?{'&'.join(kept)}" if kept else "")
