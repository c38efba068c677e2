"""The consumer loop behind :meth:`portable.messaging.Subscription.run`.

Private: use ``Subscription.run``; :class:`RunStats` and
:func:`default_idempotency_key` are re-exported from :mod:`portable.messaging`.
One :class:`ConsumerLoop` per ``run()`` call: the caller's thread receives, a
pool of ``concurrency`` workers runs the handler, and one lease keeper extends
message leases and idempotency claims. The loop settles each message exactly
once (ack, nack with backoff, or dead letter) and never acks a message whose
handler did not finish.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..cloudevents import dedup_key_of
from ..driver.idempotency import Claim, IdempotencyStore, TransactionalHandler, fingerprint
from ..driver.messaging import ACKED, DEAD_LETTERED, MAX_RECEIVE
from ..driver.redaction import redact
from ..errors import IdempotencyConflict, PortableError, PreconditionFailed
from ._message import Message, MessageSettler

if TYPE_CHECKING:
    from ._subscription import Subscription
    from ._topic import Topic

# the loop logs as the public module does, so existing logging configuration keeps working
log = logging.getLogger("portable.messaging")


def default_idempotency_key(message: Message) -> str | None:
    """The key ``run()`` deduplicates on: ``portable.idempotency_key``, else a CloudEvent's source and id."""
    key = message.idempotency_key
    if key is not None:
        return key
    return dedup_key_of(message.body, message.attributes)


@dataclass
class RunStats:
    """What :meth:`Subscription.run` did.

    Attributes:
        received: deliveries taken from the provider.
        acked: handled successfully and acked.
        failed: handler failures (each nacked or dead-lettered).
        nacked: given back with a delay (failures and in-progress duplicates).
        deferred: of those, given back because the key's claim was in progress
            elsewhere: the handler did not run, and with a store that counts
            starts this is not counted towards ``max_deliveries``.
        dead_lettered: moved to the dead-letter destination.
        skipped: acked without running the handler (idempotency key already completed).
        released: given back unhandled at shutdown.
        lost: acks/nacks refused because the lease had been lost.
        unfinished: handlers still running when the drain timeout passed.
    """

    received: int = 0
    acked: int = 0
    failed: int = 0
    nacked: int = 0
    deferred: int = 0
    dead_lettered: int = 0
    skipped: int = 0
    released: int = 0
    lost: int = 0
    unfinished: int = 0


@contextlib.contextmanager
def stop_on_signals(consumer: ConsumerLoop) -> Iterator[None]:
    """Make SIGTERM and SIGINT stop ``consumer`` gracefully (a second one stops the drain), from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.getsignal(sig) for sig in signals}

    def on_signal(signum: int, frame: object) -> None:
        if consumer.stop.is_set():
            consumer.abandon.set()
        log.info("signal %s: stopping the consumer loop gracefully", signum)
        consumer.stop.set()

    for sig in signals:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


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
        claim = self.store.claim(key, fingerprint(message.body), lease=self.lease, ttl=self.ttl)
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
        held = self.forget_held(message)
        if held is not None:
            try:
                self.store.complete(held[0], held[1], result)
            except Exception as exc:
                log.warning("could not complete idempotency key of message %s: %s", message.id, exc)

    def release(self, message: Message) -> None:
        """Give ``message``'s key back after its handler failed, if it was claimed here."""
        held = self.forget_held(message)
        if held is not None:
            try:
                self.store.release(held[0], held[1])
            except Exception as exc:
                log.warning("could not release idempotency key of message %s: %s", message.id, exc)

    def forget(self, message: Message) -> None:
        """Give ``message``'s key up with its counts (it was dead-lettered), if it was claimed here.

        A redriven copy is then counted from its first start. A store without
        ``forget`` gets ``release``.
        """
        held = self.forget_held(message)
        if held is not None:
            forget = getattr(self.store, "forget", None) or self.store.release
            try:
                forget(held[0], held[1])
            except Exception as exc:
                log.warning("could not give up idempotency key of message %s: %s", message.id, exc)

    def forget_held(self, message: Message) -> list[Any] | None:
        """Stop holding ``message``'s claim; return it ([key, token, lease ends, extend]) if there was one."""
        if not self._held:
            return None
        with self._lock:
            return self._held.pop(id(message), None)

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


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def never_finished_reason(starts: int, failures: int, limit: int) -> str:
    """Why a message whose handler started ``starts`` times without success is dead-lettered
    before it runs again (``failures`` of those starts raised; the rest never finished)."""
    crashed = starts - failures
    if failures == 0:
        return (
            f"the handler started {_times(starts)} and never finished (the consumer crashed or timed "
            f"out each time; max_deliveries={limit})"
        )
    if crashed <= 0:
        return f"the handler failed {_times(failures)} (max_deliveries={limit})"
    return (
        f"the handler started {_times(starts)} without success: it failed {_times(failures)} and never "
        f"finished {_times(crashed)} (the consumer crashed or timed out; max_deliveries={limit})"
    )


def failed_reason(starts: int, failures: int, error: str) -> str:
    """Why a message whose handler just failed on its ``starts``-th start is dead-lettered
    (``failures`` of the starts raised, this one included; ``error`` is the last)."""
    crashed = starts - failures
    if crashed <= 0:
        return f"the handler failed {_times(failures)} (last: {error})"
    return (
        f"the handler started {_times(starts)} without success: it failed {_times(failures)} (last: "
        f"{error}) and never finished {_times(crashed)} (the consumer crashed or timed out)"
    )


class ConsumerLoop:
    """The machinery of one :meth:`Subscription.run` call.

    Threads: the caller's thread receives; a pool of ``concurrency`` workers runs
    the handler; one lease keeper extends the leases of everything held. The lock
    guards only bookkeeping, never a call to the provider.
    """

    def __init__(
        self,
        sub: Subscription,
        settler: MessageSettler,
        handler: Callable[[Message], Any],
        *,
        concurrency: int,
        max_deliveries: int | None,
        idempotency: IdempotencyStore | None,
        target: Topic | None,
        lease: float,
        backoff: float,
        max_backoff: float,
        poll: float,
        drain_timeout: float,
        stop: threading.Event,
        idempotency_key: Callable[[Message], str | None],
        idempotency_lease: float,
        idempotency_ttl: float,
        count_by_message_id: bool = False,
    ) -> None:
        self.sub = sub
        self.settler = settler
        self.handler = handler
        self.concurrency = concurrency
        self.max_deliveries = max_deliveries
        self.claims = (
            None if idempotency is None
            else RunClaims(
                idempotency, idempotency_key, lease=idempotency_lease, ttl=idempotency_ttl,
                by_message_id=count_by_message_id,
            )
        )  # fmt: skip
        self.transactional = handler if isinstance(handler, TransactionalHandler) else None
        self.store_locks = bool(getattr(idempotency, "locks_while_running", False))
        self.target = target
        self.lease = lease
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.poll = poll
        self.drain_timeout = drain_timeout
        self.stop = stop
        self.abandon = threading.Event()
        self.finished = threading.Event()  # the drain is over: the lease keeper stops
        self.stats = RunStats()
        self.cond = threading.Condition(threading.Lock())
        self.held: dict[int, Message] = {}  # received, not yet settled or given up
        self.busy_keys: dict[str, deque[Message]] = {}
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="portable-consumer")

    # -- bookkeeping ------------------------------------------------------
    def _count(self, field_name: str) -> None:
        with self.cond:
            setattr(self.stats, field_name, getattr(self.stats, field_name) + 1)

    def run(self) -> RunStats:
        keeper: threading.Thread | None = None
        if self.sub.capabilities.lease_extension or (self.claims is not None and self.claims.extendable):
            keeper = threading.Thread(target=self._keep_leases, name="portable-lease-keeper", daemon=True)
            keeper.start()
        try:
            self._receive_loop()
        finally:
            self.stop.set()
            self._drain()
            self.finished.set()
            self.pool.shutdown(wait=False, cancel_futures=True)
            if keeper is not None:
                keeper.join(timeout=5)
        return self.stats

    def _receive_loop(self) -> None:
        sub = self.sub
        stop = self.stop
        while not stop.is_set():
            with self.cond:
                while len(self.held) >= self.concurrency and not stop.is_set():
                    self.cond.wait(0.25)
                room = self.concurrency - len(self.held)
            if stop.is_set():
                return
            try:
                messages = sub.receive(min(room, MAX_RECEIVE), self.poll, lease=self.lease)
            except PortableError as exc:
                log.warning("receive from %s failed: %s", redact(sub.url), exc)
                stop.wait(min(max(self.poll, 0.5), 5.0))
                continue
            for message in messages:
                self._count("received")
                if stop.is_set():
                    self._release(message)
                else:
                    self._dispatch(message)

    def _dispatch(self, message: Message) -> None:
        key = message.key
        with self.cond:
            self.held[id(message)] = message
            if key is not None:
                waiting = self.busy_keys.get(key)
                if waiting is not None:
                    waiting.append(message)
                    return
                self.busy_keys[key] = deque()
        self.pool.submit(self._work, message)

    def _work(self, message: Message) -> None:
        try:
            self._process(message)
        except Exception:  # the loop must survive anything; the message's lease will expire
            log.exception("the consumer loop failed on message %s", message.id)
        finally:
            self._done(message)

    def _done(self, message: Message) -> None:
        following: Message | None = None
        release: list[Message] = []
        with self.cond:
            self.held.pop(id(message), None)
            key = message.key
            if key is not None:
                waiting = self.busy_keys.get(key)
                if waiting:
                    if self.stop.is_set():
                        release = list(waiting)
                        del self.busy_keys[key]
                    else:
                        following = waiting.popleft()
                else:
                    self.busy_keys.pop(key, None)
            self.cond.notify_all()
        for m in release:
            self._release(m)
        if following is not None:
            try:
                self.pool.submit(self._work, following)
            except RuntimeError:  # the pool is shut down: give it back
                self._release(following)

    def _release(self, message: Message) -> None:
        try:
            message.nack(0.0)
            self._count("released")
        except PortableError as exc:
            log.warning("could not release message %s at shutdown: %s", message.id, exc)
        finally:
            with self.cond:
                self.held.pop(id(message), None)
                self.cond.notify_all()

    def _drain(self) -> None:
        deadline = time.monotonic() + self.drain_timeout
        with self.cond:
            while self.held and not self.abandon.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(min(left, 0.1))
            self.stats.unfinished = len(self.held)
        if self.stats.unfinished:
            log.warning(
                "%d handler(s) still running after the %gs drain timeout; their messages will be "
                "delivered again when their leases end", self.stats.unfinished, self.drain_timeout,
            )

    def _keep_leases(self) -> None:
        interval = max(0.05, min(self.lease / 4, 5.0))
        while not self.finished.wait(interval):
            if self.claims is not None:
                self.claims.keep()
            if not self.sub.capabilities.lease_extension:
                continue
            with self.cond:
                held = list(self.held.values())
            for message in held:
                if message.settled or message.lease_remaining > self.lease / 2:
                    continue
                try:
                    message.extend_lease(self.lease)
                except PreconditionFailed:
                    if not message.settled:  # else the handler settled it meanwhile: no loss
                        log.warning("lost the lease on message %s; it may be handled twice", message.id)
                except PortableError as exc:
                    if not message.settled:
                        log.warning("could not extend the lease on message %s: %s", message.id, exc)

    # -- one message ------------------------------------------------------
    def _process(self, message: Message) -> None:
        try:
            self._process_once(message)
        finally:
            if self.claims is not None:
                self.claims.forget_held(message)

    def _process_once(self, message: Message) -> None:
        if self.stop.is_set() and self.abandon.is_set():
            self._release(message)
            return
        limit = self.max_deliveries
        claims = self.claims
        key = None if claims is None else claims.key(message)
        if claims is None or key is None:
            # no claim: the provider's delivery count decides
            if limit is not None and message.delivery_attempt > limit:
                self._to_dead_letter(message, self._delivered_reason(message, limit))
                return
            self._run_handler(message, message.delivery_attempt, None)
            return
        try:
            claim = claims.claim(message, key)
        except IdempotencyConflict as exc:
            self._to_dead_letter(message, f"IdempotencyConflict: {exc}")
            return
        except Exception as exc:
            log.warning("idempotency claim for message %s failed: %s", message.id, exc)
            self._retry_later(message)
            return
        if claim.status == "completed":
            if self._settle_ack(message):
                self._count("skipped")
            return
        if claim.status == "in_progress":
            if claim.lease_remaining is None and limit is not None and message.delivery_attempt > limit:
                # a store that does not say when its claims end: the provider's count decides
                self._to_dead_letter(message, self._delivered_reason(message, limit))
                return
            if self._settle_nack(message, self._in_progress_delay(claim, message)):
                self._count("deferred")
            return
        if claim.starts is None:  # a store that does not count starts: the provider's count decides
            if limit is not None and message.delivery_attempt > limit:
                claims.release(message)
                self._to_dead_letter(message, self._delivered_reason(message, limit))
                return
            self._run_handler(message, message.delivery_attempt, None)
            return
        if limit is not None and claim.starts > limit:
            # the handler started `limit` times and never succeeded: do not start it again
            if self._to_dead_letter(message, never_finished_reason(claim.starts - 1, claim.failures or 0, limit)):
                claims.forget(message)
            return
        self._run_handler(message, claim.starts, claim.failures or 0)

    def _delivered_reason(self, message: Message, limit: int) -> str:
        return (
            f"delivered {message.delivery_attempt} times without success (max_deliveries={limit}); "
            "the handler did not run on this delivery"
        )

    def _in_progress_delay(self, claim: Claim, message: Message) -> float:
        """How long to hold back a message whose key another claimer holds: until that claim's lease ends."""
        cap = self.sub.capabilities.max_lease_seconds
        if claim.lease_remaining is None:
            assert self.claims is not None
            return min(self.claims.lease, max(self._delay(message.delivery_attempt), 1.0), cap)
        return min(max(0.0, claim.lease_remaining) + 0.25, cap)

    def _run_handler(self, message: Message, attempt: int, failures: int | None) -> None:
        """Run the handler on ``message``, its ``attempt``-th start (``failures`` of the earlier
        starts raised: None where nothing counts them), and settle it."""
        claims = self.claims
        limit = self.max_deliveries
        held = None if claims is None else claims.held(message)
        try:
            if self.transactional is not None and held is not None:
                assert claims is not None
                if self.store_locks:
                    claims.hold_without_extending(message)
                result = self.transactional.run_claimed(message, held[0], held[1])
                claims.forget_held(message)  # completed with the commit
            else:
                result = self.handler(message)
        except Exception as exc:
            self._count("failed")
            log.warning("handler failed on message %s (attempt %d): %r", message.id, attempt, exc)
            error = f"{type(exc).__name__}: {redact(str(exc))}"
            if message.settled:
                if claims is not None:
                    claims.release(message)
                return
            if limit is not None and attempt >= limit:
                if failures is None:
                    reason = f"the handler failed on delivery {attempt} (max_deliveries={limit}): {error}"
                else:
                    reason = failed_reason(attempt, failures + 1, error)
                if self._to_dead_letter(message, reason):
                    if claims is not None:
                        claims.forget(message)
                elif claims is not None:
                    claims.release(message)
            else:
                if claims is not None:
                    claims.release(message)
                self._retry_later(message, attempt)
            return
        if claims is not None:
            claims.complete(message, result if isinstance(result, bytes) else None)
        if not message.settled:
            self._settle_ack(message)
        elif message._state is ACKED:
            self._count("acked")

    def _delay(self, attempt: int) -> float:
        delay = min(self.max_backoff, self.backoff * 2.0 ** max(0, min(attempt - 1, 60)))
        return min(delay, self.sub.capabilities.max_lease_seconds)

    def _settle_ack(self, message: Message) -> bool:
        try:
            message.ack()
        except PreconditionFailed:
            self._count("lost")
            log.warning("ack of message %s refused: its lease was lost, it will be delivered again", message.id)
            return False
        except PortableError as exc:
            log.warning("ack of message %s failed: %s; it will be delivered again", message.id, exc)
            return False
        self._count("acked")
        return True

    def _retry_later(self, message: Message, attempt: int | None = None) -> None:
        """Nack ``message`` with the backoff of ``attempt`` (default: its delivery attempt)."""
        self._settle_nack(message, self._delay(message.delivery_attempt if attempt is None else attempt))

    def _settle_nack(self, message: Message, delay: float) -> bool:
        try:
            message.nack(delay)
        except PreconditionFailed:
            self._count("lost")
            return False
        except PortableError as exc:
            log.warning("nack of message %s failed: %s", message.id, exc)
            return False
        self._count("nacked")
        return True

    def _to_dead_letter(self, message: Message, reason: str) -> bool:
        """Move ``message`` to the dead-letter destination; whether it went there."""
        try:
            if self.settler.may_settle(message, DEAD_LETTERED):
                self.settler.move_to_dead_letter(message, reason, self.target)
        except PreconditionFailed:
            self._count("lost")
            return False
        except PortableError as exc:
            log.warning("dead-lettering message %s failed: %s; retrying later", message.id, exc)
            self._retry_later(message)
            return False
        self._count("dead_lettered")
        log.warning("message %s dead-lettered: %s", message.id, reason)
        return True
