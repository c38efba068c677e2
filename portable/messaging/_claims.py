"""The idempotency claims of one consumer loop run (both faces): :class:`RunClaims`.

Private: ``Subscription.run`` and ``AsyncSubscription.run`` make one per call with a
store; :func:`default_idempotency_key` is re-exported from :mod:`portable.messaging`.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..cloudevents import dedup_key_of
from ..driver.idempotency import Claim, IdempotencyStore, fingerprint
from ..driver.messaging import IDEMPOTENCY_ATTRIBUTE
from ..errors import IdempotencyConflict
from ..idempotency._batch import claim_many, complete_many, unclaim
from ..idempotency._run_once import observed_claim
from ._handling import RunOptions
from ._message import Message

__all__ = ["RunClaims", "SharedClaim", "default_idempotency_key"]

_sha256 = hashlib.sha256  # fingerprint() of a bytes body, without the call (the same digest)

# the loop logs as the public module does, so existing logging configuration keeps working
log = logging.getLogger("portable.messaging")


def default_idempotency_key(message: Message) -> str | None:
    """The key ``run()`` deduplicates on: ``portable.idempotency_key``, else a CloudEvent's source and id."""
    key = message.idempotency_key
    if key is not None:
        return key
    return dedup_key_of(message.body, message.attributes)


@dataclass(frozen=True)
class SharedClaim:
    """A window's one new claim, which each of its messages holds under its own key (``keys``, in order)."""

    claim: Claim
    keys: list[str]

    def within(self, limit: int | None) -> bool:
        """Whether the window may run on it: a counted claim within ``max_deliveries`` (``limit``)."""
        starts = self.claim.starts
        return starts is not None and (limit is None or starts <= limit)

    def table(self, messages: Sequence[Message]) -> dict[int, tuple[str, Claim | IdempotencyConflict]]:
        """The window's claims message by message, as :meth:`RunClaims.claim_window` answers an
        uncommon window: (key, claim) by ``id(message)``."""
        claim = self.claim
        return {id(m): (key, claim) for m, key in zip(messages, self.keys, strict=True)}


class RunClaims:
    """The idempotency claims of one :meth:`Subscription.run` call.

    A message's key is claimed before its handler runs, then completed (with the
    handler's result), released (it failed) or forgotten (it was dead-lettered);
    the lease keeper extends the claims of long handlers where the store can
    (``extend``). The lock guards only the table of claims held, never a call to the store.

    Args:
        by_message_id: a message without an idempotency key is claimed under
            ``portable.message-id:<id>`` (where the provider does not count
            deliveries, the store counts the handler's starts instead).
    """

    def __init__(
        self,
        store: IdempotencyStore,
        key_of: Callable[[Message], str | None],
        *,
        lease: float,
        ttl: float,
        by_message_id: bool = False,
    ) -> None:
        self.store = store
        self.key_of = key_of
        self.lease = lease
        self.ttl = ttl
        self.by_message_id = by_message_id
        self.extendable = getattr(store, "extend", None) is not None
        self._lock = threading.Lock()
        self._held: dict[int, list[Any]] = {}  # id(message) -> [key, token, lease ends, extend it]

    @classmethod
    def of(cls, options: RunOptions) -> RunClaims | None:
        """The claims of a run with ``options``, or None without an idempotency store."""
        if options.idempotency is None:
            return None
        return cls(
            options.idempotency, options.idempotency_key, lease=options.idempotency_lease,
            ttl=options.idempotency_ttl, by_message_id=options.count_by_message_id,
        )  # fmt: skip

    def key(self, message: Message) -> str | None:
        """The key ``message`` is claimed under, or None for none."""
        key = self.key_of(message)
        if key is None and self.by_message_id:
            return f"portable.message-id:{message.id}"
        return key

    def claim(self, message: Message, key: str) -> Claim:
        """Claim ``key`` for ``message``.

        Raises:
            IdempotencyConflict: the key was used with another body.
            Exception: whatever else the store raises.
        """
        claim = observed_claim(self.store, key, fingerprint(message.body), self.lease, self.ttl)
        if claim.status == "acquired" and claim.token is not None:
            with self._lock:
                self._held[id(message)] = [key, claim.token, time.monotonic() + self.lease, True]
        return claim

    def held(self, message: Message) -> tuple[str, str] | None:
        """(key, token) of ``message``'s claim, if this run holds one."""
        with self._lock:
            held = self._held.get(id(message))
        return None if held is None else (held[0], held[1])

    def hold_without_extending(self, message: Message) -> None:
        """Stop extending ``message``'s claim: the store's lock keeps it while the effect runs."""
        with self._lock:
            held = self._held.get(id(message))
            if held is not None:
                held[3] = False

    def complete(self, message: Message, result: bytes | None) -> None:
        """Record that ``message``'s handler ran, with ``result``, if its key was claimed here."""
        self.complete_held(message, self.forget_held(message), result)

    def release(self, message: Message) -> None:
        """Give ``message``'s key back after its handler failed, if it was claimed here."""
        self.release_held(message, self.forget_held(message))

    def forget(self, message: Message) -> None:
        """Give ``message``'s key up with its counts (it was dead-lettered), if it was claimed here.

        A redriven copy is then counted from its first start. A store without
        ``forget`` gets ``release``.
        """
        self.forget_claim(message, self.forget_held(message))

    # The *_held forms take the claim already taken off the table (``forget_held``), so that
    # a caller that must not race another's bookkeeping (the async loop, whose store calls run
    # in the pool after the task may have moved on) takes it first, then calls the store.
    def complete_held(self, message: Message, held: list[Any] | None, result: bytes | None) -> None:
        """:meth:`complete` for a claim ``held`` already taken off the table (None: nothing to do)."""
        if held is not None:
            try:
                self.store.complete(held[0], held[1], result)
            except Exception as exc:
                log.warning("could not complete idempotency key of message %s: %s", message.id, exc)

    def release_held(self, message: Message, held: list[Any] | None) -> None:
        """:meth:`release` for a claim ``held`` already taken off the table (None: nothing to do)."""
        if held is not None:
            try:
                self.store.release(held[0], held[1])
            except Exception as exc:
                log.warning("could not release idempotency key of message %s: %s", message.id, exc)

    def forget_claim(self, message: Message, held: list[Any] | None) -> None:
        """:meth:`forget` for a claim ``held`` already taken off the table (None: nothing to do)."""
        if held is not None:
            forget = getattr(self.store, "forget", None) or self.store.release
            try:
                forget(held[0], held[1])
            except Exception as exc:
                log.warning("could not give up idempotency key of message %s: %s", message.id, exc)

    def take_held(self, messages: list[Message]) -> list[list[Any] | None]:
        """:meth:`forget_held` for each of ``messages``, under one lock."""
        with self._lock:
            return list(map(self._held.pop, map(id, messages), itertools.repeat(None)))

    def forget_held(self, message: Message) -> list[Any] | None:
        """Stop holding ``message``'s claim; return it ([key, token, lease ends, extend]) if there was one."""
        if not self._held:
            return None
        with self._lock:
            return self._held.pop(id(message), None)

    # -- in batches (the loop of concurrency 1: see ConsumerLoop._batch_worker) --------------
    def claim_window(
        self, messages: Sequence[Message]
    ) -> dict[int, tuple[str, Claim | IdempotencyConflict]] | SharedClaim:
        """Claim the keys of ``messages`` in one store call (``claim_many``), before their handlers run.

        Only a key's first message in the window is claimed ahead (a later one claims when
        its turn comes, after the first's completion is written, so it meets ``"completed"``).
        Returns (key, answer) by ``id(message)``, an empty table if the window could not be
        claimed (then each message claims on its own, and meets the store's error there); or,
        for the common window (each message has a key of its own and the store answered each
        with one and the same new claim), that claim as a :class:`SharedClaim`: every message
        of ``messages`` then holds it (the table of claims has each)."""
        owners, items = self._window_items(messages)
        if not items:
            return {}
        try:
            answers = claim_many(self.store, items, lease=self.lease, ttl=self.ttl)
        except Exception as exc:
            log.warning("claiming %d idempotency keys at once failed (each is claimed on its own): %s", len(items), exc)
            return {}
        ends = time.monotonic() + self.lease
        ids = [id(message) for message in owners]
        keys = [key for key, _ in items]
        first = answers[0]
        if (
            type(first) is Claim and first.status == "acquired" and first.token is not None
            and answers.count(first) == len(answers)  # (at C speed: the same object, or an equal Claim)
        ):  # fmt: skip
            # the common answer: every key new, one Claim for all (SqliteStore); built at C speed
            token = first.token
            claimed = [[key, token, ends, True] for key in keys]
            with self._lock:
                self._held.update(zip(ids, claimed, strict=True))
            if owners is messages:
                return SharedClaim(first, keys)
            return dict(zip(ids, zip(keys, itertools.repeat(first), strict=False), strict=True))
        out: dict[int, tuple[str, Claim | IdempotencyConflict]] = {}
        with self._lock:
            held = self._held
            for mid, key, claim in zip(ids, keys, answers, strict=True):
                out[mid] = (key, claim)
                if type(claim) is Claim and claim.status == "acquired" and claim.token is not None:
                    held[mid] = [key, claim.token, ends, True]
        return out

    def _window_items(self, messages: Sequence[Message]) -> tuple[Sequence[Message], list[tuple[str, str]]]:
        """The messages whose keys a window claims ahead, and their (key, fingerprint) pairs: each
        key's first message (a message whose key function fails, or that has no key, is left out)."""
        if self.key_of is default_idempotency_key:
            # the common window: every message has the publisher's key, none twice, bytes bodies
            try:
                keys = [message._attributes[IDEMPOTENCY_ATTRIBUTE] for message in messages]
                if None not in keys and len(set(keys)) == len(keys):
                    # _sha256 takes any contiguous buffer (fingerprint() hashes bytes(body) alike)
                    fps = [_sha256(message._body).hexdigest()[:32] for message in messages]
                    return messages, list(zip(keys, fps, strict=True))
            except Exception:  # no key, or a body not a buffer: the general path
                pass
        items: list[tuple[str, str]] = []
        owners: list[Message] = []
        seen: set[str] = set()
        key_of, add = self.key, seen.add
        for message in messages:
            try:
                key = key_of(message)
                if key is None or key in seen:
                    continue
                body = message._body
                items.append((key, _sha256(body).hexdigest()[:32] if type(body) is bytes else fingerprint(body)))
            except Exception:  # the caller's key function failed: the message meets it again on its own
                continue
            add(key)
            owners.append(message)
        return (messages if len(owners) == len(messages) else owners), items

    def complete_batch(self, done: list[tuple[Message, list[Any], bytes | None]]) -> None:
        """Complete the claims ``done`` ((message, held claim, result)) in one store call (``complete_many``)."""
        errors = complete_many(self.store, [(held[0], held[1], result) for _, held, result in done])
        if errors.count(None) == len(errors):
            return
        for (message, _, _), error in zip(done, errors, strict=True):
            if error is not None:
                log.warning("could not complete idempotency key of message %s: %s", message.id, error)

    def unclaim(self, message: Message) -> None:
        """Give back ``message``'s claim taken ahead, its handler never started (see :func:`unclaim`)."""
        held = self.forget_held(message)
        if held is not None:
            try:
                unclaim(self.store, held[0], held[1])
            except Exception as exc:
                log.warning("could not give back idempotency key of message %s: %s", message.id, exc)

    def keep(self) -> None:
        """Extend the claims of long handlers that are past half their lease, where the store can."""
        extend = getattr(self.store, "extend", None)
        if extend is None:
            return
        with self._lock:
            held = [claim for claim in self._held.values() if claim[3]]
        now = time.monotonic()
        for claim in held:
            key, token, ends, _ = claim
            if ends - now > self.lease / 2:
                continue
            try:
                extend(key, token, self.lease)
                claim[2] = now + self.lease
            except Exception as exc:
                log.warning("could not extend the idempotency claim %s: %s", key, exc)
