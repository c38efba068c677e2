"""What a consumer loop does with one message, written once for both faces.

``Subscription.run`` (threads) and ``portable.aio``'s ``AsyncSubscription.run``
(tasks) make the same decisions: when to run the handler, when to skip, defer,
retry with backoff or dead-letter, how to count attempts and what to do with
the idempotency claim. Those decisions live here, as a script of effects:
:func:`handle_message` is a generator that yields each call it needs made
(``(CLAIM, message, key)``, ``(ACK, message)``, ...) and receives the call's
result, or has the call's exception thrown in. Each face drives the script with
its own executor: the sync loop calls, the async loop awaits. Neither face has
a copy of the rules.

:class:`RunOptions` is ``run()``'s arguments checked and normalised (by
``Subscription._run_options``, which both faces call), and :class:`Holding` the
bookkeeping of messages held and keys busy that both loops keep under their
own lock (a threading.Condition, or the event loop itself).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..driver.idempotency import Claim, IdempotencyStore, TransactionalHandler
from ..driver.messaging import ACKED, DEAD_LETTERED, Delivery
from ..driver.redaction import redact
from ..errors import IdempotencyConflict, PortableError, PreconditionFailed

if TYPE_CHECKING:
    from ._topic import Topic

log = logging.getLogger("portable.messaging")

# The effects of the script; each is a tuple whose first item is one of these. An executor
# serves effect ``(name, *args)`` with its method ``_do_<name>(*args)``.
CLAIM = "claim"  # (CLAIM, message, key) -> Claim; raises what the store raises
HANDLE = "handle"  # (HANDLE, message) -> the handler's result; raises what it raises
TRANSACT = "transact"  # (TRANSACT, message, key, token) -> the transactional handler's result
COMPLETE = "complete"  # (COMPLETE, message, result bytes | None): record the claim as done
RELEASE = "release"  # (RELEASE, message): give the claim back (the handler failed)
FORGET = "forget"  # (FORGET, message): give the claim up with its counts (dead-lettered)
ACK = "ack"  # (ACK, message): message.ack()
NACK = "nack"  # (NACK, message, delay): message.nack(delay)
MOVE = "move"  # (MOVE, message, reason, target topic | None): settler.move_to_dead_letter
GIVE_BACK = "give_back"  # (GIVE_BACK, message): release it unhandled (nack 0) at shutdown

Effect = tuple[Any, ...]
Script = Generator[Effect, Any, None]


@dataclass(frozen=True)
class RunOptions:
    """``run()``'s arguments, checked and normalised (see :meth:`Subscription.run`)."""

    handler: Callable[[Any], Any]
    concurrency: int
    max_deliveries: int | None
    idempotency: IdempotencyStore | None
    target: Topic | None  # the portable dead-letter topic, None for the native one (or none needed)
    lease: float
    backoff: float
    max_backoff: float
    poll: float
    drain_timeout: float
    idempotency_key: Callable[[Any], str | None]
    idempotency_lease: float
    idempotency_ttl: float
    count_by_message_id: bool
    max_lease_seconds: float  # the provider's cap on a nack delay

    @property
    def transactional(self) -> TransactionalHandler | None:
        """The handler, if ``store.transactional(fn)`` made it (its effect commits with the claim)."""
        return self.handler if isinstance(self.handler, TransactionalHandler) else None

    @property
    def store_locks(self) -> bool:
        """Whether the store holds a lock while a transactional effect runs (so its claim is not extended)."""
        return bool(getattr(self.idempotency, "locks_while_running", False))

    def delay(self, attempt: int) -> float:
        """The nack delay after the ``attempt``-th start failed: ``backoff * 2**(attempt-1)``, capped."""
        delay = min(self.max_backoff, self.backoff * 2.0 ** max(0, min(attempt - 1, 60)))
        return min(delay, self.max_lease_seconds)

    def in_progress_delay(self, claim: Claim, message: Delivery) -> float:
        """How long to hold back a message whose key another claimer holds: until that claim's lease ends."""
        cap = self.max_lease_seconds
        if claim.lease_remaining is None:
            return min(self.idempotency_lease, max(self.delay(message.delivery_attempt), 1.0), cap)
        return min(max(0.0, claim.lease_remaining) + 0.25, cap)


class Holding:
    """The messages a loop holds (received, not yet settled or given up) and the keys busy.

    Messages with the same key are handled one at a time, in order: a message
    whose key is busy waits in that key's queue. Not thread-safe: the caller
    holds its own lock.
    """

    def __init__(self) -> None:
        self.held: dict[int, Delivery] = {}
        self.busy_keys: dict[str, deque[Delivery]] = {}

    def __len__(self) -> int:
        return len(self.held)

    def take(self, message: Delivery) -> bool:
        """Hold ``message``; whether it may be handled now (else it waits for its key)."""
        self.held[id(message)] = message
        key = message.key
        if key is not None:
            waiting = self.busy_keys.get(key)
            if waiting is not None:
                waiting.append(message)
                return False
            self.busy_keys[key] = deque()
        return True

    def done(self, message: Delivery, stopping: bool) -> tuple[Delivery | None, list[Delivery]]:
        """``message`` is finished: the next message of its key to handle, and the ones to give
        back (the rest of its key's queue, when ``stopping``)."""
        self.held.pop(id(message), None)
        key = message.key
        if key is None:
            return None, []
        waiting = self.busy_keys.get(key)
        if not waiting:
            self.busy_keys.pop(key, None)
            return None, []
        if stopping:
            del self.busy_keys[key]
            return None, list(waiting)
        return waiting.popleft(), []

    def drop(self, message: Delivery) -> None:
        """Stop holding ``message`` (it was given back)."""
        self.held.pop(id(message), None)

    def expiring(self, lease: float) -> list[Delivery]:
        """The unsettled messages held whose lease ends within half of ``lease``."""
        return [m for m in self.held.values() if not m.settled and m.lease_remaining <= lease / 2]


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


def delivered_reason(message: Delivery, limit: int) -> str:
    """Why a message delivered more than ``limit`` times is dead-lettered without running the handler."""
    return (
        f"delivered {message.delivery_attempt} times without success (max_deliveries={limit}); "
        "the handler did not run on this delivery"
    )


class MessageScript:
    """The script of one ``run()`` call: :meth:`handle` yields the effects for one message.

    Args:
        options: the run's options.
        key_of: the claim key of a message (``RunClaims.key``), or None without a store.
        count: adds one to a :class:`~portable.messaging.RunStats` field (the caller's lock).
        may_settle: the settler's ``may_settle``.
    """

    def __init__(
        self,
        options: RunOptions,
        key_of: Callable[[Delivery], str | None] | None,
        count: Callable[[str], None],
        may_settle: Callable[[Delivery, str], bool],
    ) -> None:
        self.options = options
        self.key_of = key_of
        self.count = count
        self.may_settle = may_settle

    def handle(self, message: Delivery, *, holds_claims: bool = False) -> Script:
        """Decide and settle ``message``: claim its key, run the handler or not, ack, nack or dead-letter.

        ``holds_claims``: the store's claims are extended by the caller while the handler runs
        (only a transactional handler on a locking store stops that, through ``(TRANSACT, ...)``).
        """
        limit = self.options.max_deliveries
        key = None if self.key_of is None else self.key_of(message)
        if key is None:
            # no claim: the provider's delivery count decides
            if limit is not None and message.delivery_attempt > limit:
                yield from self.dead_letter(message, delivered_reason(message, limit))
                return
            yield from self.run_handler(message, message.delivery_attempt, None, None)
            return
        try:
            claim: Claim = yield (CLAIM, message, key)
        except IdempotencyConflict as exc:
            yield from self.dead_letter(message, f"IdempotencyConflict: {exc}")
            return
        except Exception as exc:
            log.warning("idempotency claim for message %s failed: %s", message.id, exc)
            yield from self.retry_later(message)
            return
        except BaseException:  # cancelled while claiming: the message goes back (the executor releases a late claim)
            yield (GIVE_BACK, message)
            raise
        if claim.status == "completed":
            if (yield from self.ack(message)):
                self.count("skipped")
            return
        if claim.status == "in_progress":
            if claim.lease_remaining is None and limit is not None and message.delivery_attempt > limit:
                # a store that does not say when its claims end: the provider's count decides
                yield from self.dead_letter(message, delivered_reason(message, limit))
                return
            if (yield from self.nack(message, self.options.in_progress_delay(claim, message))):
                self.count("deferred")
            return
        token = claim.token
        if claim.starts is None:  # a store that does not count starts: the provider's count decides
            if limit is not None and message.delivery_attempt > limit:
                yield (RELEASE, message)
                yield from self.dead_letter(message, delivered_reason(message, limit))
                return
            yield from self.run_handler(message, message.delivery_attempt, None, (key, token))
            return
        if limit is not None and claim.starts > limit:
            # the handler started `limit` times and never succeeded: do not start it again
            if (yield from self.dead_letter(message, never_finished_reason(claim.starts - 1, claim.failures or 0, limit))):
                yield (FORGET, message)
            return
        yield from self.run_handler(message, claim.starts, claim.failures or 0, (key, token))

    def run_handler(
        self, message: Delivery, attempt: int, failures: int | None, held: tuple[str, str | None] | None
    ) -> Script:
        """Run the handler on ``message``, its ``attempt``-th start (``failures`` of the earlier
        starts raised: None where nothing counts them), under the claim ``held``, and settle it."""
        options = self.options
        claimed = held is not None and held[1] is not None
        try:
            if options.transactional is not None and claimed:
                assert held is not None
                result = yield (TRANSACT, message, held[0], held[1])
                claimed = False  # completed with the commit
            else:
                result = yield (HANDLE, message)
        except Exception as exc:
            yield from self.handler_failed(message, attempt, failures, claimed, exc)
            return
        except BaseException:
            yield from self.handler_interrupted(message, claimed)
            raise
        if claimed:
            yield (COMPLETE, message, result if isinstance(result, bytes) else None)
        if not message.settled:
            yield from self.ack(message)
        elif message._state is ACKED:
            self.count("acked")

    def handler_failed(
        self, message: Delivery, attempt: int, failures: int | None, claimed: bool, exc: Exception
    ) -> Script:
        """The handler raised ``exc`` on ``message``'s ``attempt``-th start: release the claim,
        nack with backoff, or dead-letter at ``max_deliveries``."""
        limit = self.options.max_deliveries
        self.count("failed")
        log.warning("handler failed on message %s (attempt %d): %r", message.id, attempt, exc)
        error = f"{type(exc).__name__}: {redact(str(exc))}"
        if message.settled:
            if claimed:
                yield (RELEASE, message)
            return
        if limit is not None and attempt >= limit:
            if failures is None:
                reason = f"the handler failed on delivery {attempt} (max_deliveries={limit}): {error}"
            else:
                reason = failed_reason(attempt, failures + 1, error)
            moved = yield from self.dead_letter(message, reason)
            if claimed:
                yield (FORGET, message) if moved else (RELEASE, message)
        else:
            if claimed:
                yield (RELEASE, message)
            yield from self.retry_later(message, attempt)

    def handler_interrupted(self, message: Delivery, claimed: bool) -> Script:
        """Cancelled mid-handler (a task, or the process stopping): the message was not
        handled, so it goes back at once and its claim with it; never dead-lettered."""
        if claimed:
            yield (RELEASE, message)
        if not message.settled:
            yield (GIVE_BACK, message)

    def ack(self, message: Delivery) -> Generator[Effect, Any, bool]:
        """Ack ``message``; whether it was acked (a lost lease or a failed ack is logged)."""
        return (yield from self.settle(
            (ACK, message), "acked", "ack of message %s failed: %s; it will be delivered again",
            lost="ack of message %s refused: its lease was lost, it will be delivered again",
        ))  # fmt: skip

    def retry_later(self, message: Delivery, attempt: int | None = None) -> Generator[Effect, Any, bool]:
        """Nack ``message`` with the backoff of ``attempt`` (default: its delivery attempt)."""
        return (yield from self.nack(message, self.options.delay(message.delivery_attempt if attempt is None else attempt)))

    def nack(self, message: Delivery, delay: float) -> Generator[Effect, Any, bool]:
        """Nack ``message`` for ``delay`` seconds; whether it was nacked."""
        return (yield from self.settle((NACK, message, delay), "nacked", "nack of message %s failed: %s"))

    def settle(self, effect: Effect, done: str, failed: str, *, lost: str | None = None) -> Generator[Effect, Any, bool]:
        """Make the settling ``effect``; count ``done`` and say True, or log (``failed``, ``lost``) and say False.

        A lost lease (PreconditionFailed) counts as ``lost``: the message comes again.
        """
        message: Delivery = effect[1]
        try:
            yield effect
        except PreconditionFailed:
            self.count("lost")
            if lost is not None:
                log.warning(lost, message.id)
            return False
        except PortableError as exc:
            log.warning(failed, message.id, exc)
            return False
        self.count(done)
        return True

    def dead_letter(self, message: Delivery, reason: str) -> Generator[Effect, Any, bool]:
        """Move ``message`` to the dead-letter destination; whether it went there."""
        try:
            if self.may_settle(message, DEAD_LETTERED):
                yield (MOVE, message, reason, self.options.target)
        except PreconditionFailed:
            self.count("lost")
            return False
        except PortableError as exc:
            log.warning("dead-lettering message %s failed: %s; retrying later", message.id, exc)
            yield from self.retry_later(message)
            return False
        self.count("dead_lettered")
        log.warning("message %s dead-lettered: %s", message.id, reason)
        return True


def drive(script: Script, do: Callable[[Effect], Any]) -> None:
    """Run ``script`` to its end, calling ``do(effect)`` for each effect (the sync executor).

    An exception ``do`` raises is thrown into the script at that effect.
    """
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = script.send(value) if error is None else script.throw(error)
        except StopIteration:
            return
        try:
            value, error = do(effect), None
        except BaseException as exc:  # the script decides; what it does not catch it re-raises
            value, error = None, exc
