"""Claims and completions in batches: :func:`claim_many`, :func:`complete_many`, :func:`unclaim`.

A store that can claim many keys at once (``SqliteStore``: one transaction;
``RedisStore``: one pipeline; ``MemoryStore``: one lock) has ``claim_many`` /
``complete_many`` methods; these functions call them, or make one call per key
for a store that has none (the bucket, Firestore and DynamoDB stores, a
third-party store), so a caller writes one batch path for every store. Each
claim is told to the claim observers (tracing: one ``claim`` span per key) as
:func:`~portable.idempotency._run_once.observed_claim` tells a single one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..driver.idempotency import Claim, IdempotencyStore
from ..errors import IdempotencyConflict
from ..telemetry._observe import CLAIM_OBSERVERS, notify_claim

__all__ = ["claim_many", "complete_many", "unclaim"]


def claim_many(
    store: IdempotencyStore, items: Sequence[tuple[str, str]], *, lease: float, ttl: float
) -> list[Claim | IdempotencyConflict]:
    """Claim each ``(key, fingerprint)`` of ``items``; the answers in input order.

    A key reused with another payload answers its IdempotencyConflict in its
    place (the others' claims still stand). A key that appears twice is claimed
    twice: the second meets the first's claim (``"in_progress"``), so a caller
    claims only a key's first occurrence.

    Raises:
        InvalidArgument: a bad key, fingerprint, lease or ttl (nothing was claimed).
        Exception: what the store raises for the whole batch (then no claim of it
            may be assumed; the ones that landed end with their lease).
    """
    if not items:
        return []
    started = time.time_ns() if CLAIM_OBSERVERS else 0
    batch = getattr(store, "claim_many", None)
    out: list[Claim | IdempotencyConflict]
    if batch is not None:
        try:
            out = list(batch(items, lease=lease, ttl=ttl))
        except BaseException as exc:
            if CLAIM_OBSERVERS:
                for key, _ in items:
                    notify_claim(store, key, None, exc, started)
            raise
        if CLAIM_OBSERVERS:
            for (key, _), claim in zip(items, out, strict=True):
                if isinstance(claim, Claim):
                    notify_claim(store, key, claim, None, started)
                else:
                    notify_claim(store, key, None, claim, started)
        return out
    out = []
    for key, fp in items:
        if CLAIM_OBSERVERS:
            started = time.time_ns()
        try:
            claim = store.claim(key, fp, lease=lease, ttl=ttl)
        except IdempotencyConflict as exc:
            if CLAIM_OBSERVERS:
                notify_claim(store, key, None, exc, started)
            out.append(exc)
            continue
        except BaseException as exc:
            if CLAIM_OBSERVERS:
                notify_claim(store, key, None, exc, started)
            raise
        if CLAIM_OBSERVERS:
            notify_claim(store, key, claim, None, started)
        out.append(claim)
    return out


def complete_many(
    store: IdempotencyStore, items: Sequence[tuple[str, str, bytes | None]]
) -> list[BaseException | None]:
    """Complete each ``(key, token, result)`` of ``items``; each one's error (or None) in input order.

    A store with ``complete_many`` completes them at once (SQLite: one
    transaction, so a crash leaves all or none); otherwise one ``complete`` each.
    An error of the whole batch is every item's error.
    """
    if not items:
        return []
    batch = getattr(store, "complete_many", None)
    if batch is not None:
        try:
            return list(batch(items))
        except Exception as exc:
            return [exc] * len(items)
    out: list[BaseException | None] = []
    for key, token, result in items:
        try:
            store.complete(key, token, result)
            out.append(None)
        except Exception as exc:
            out.append(exc)
    return out


def unclaim(store: IdempotencyStore, key: str, token: str) -> None:
    """Give back a claim whose effect never started (claimed ahead, then the caller stopped).

    ``unclaim`` where the store has it (the start is taken back, no failure
    counted), else ``forget`` (the counts start again: never a premature dead
    letter), else ``release``.

    Raises:
        PreconditionFailed: the claim was lost.
    """
    give_back = getattr(store, "unclaim", None) or getattr(store, "forget", None) or store.release
    give_back(key, token)
