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
import itertools
import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..driver.idempotency import Claim
from ..driver.messaging import MAX_RECEIVE, Delivery
from ..driver.redaction import redact
from ..errors import IdempotencyConflict, PortableError, PreconditionFailed
from ..telemetry._propagation import ConsumerTelemetry
from ._claims import RunClaims, SharedClaim
from ._handling import Effect, Holding, MessageScript, RunOptions, drive
from ._message import Message, MessageSettler
from ._window import hold_settlement, hold_window, report_failed_acks

if TYPE_CHECKING:
    from ._subscription import Subscription
    from ._topic import Topic


#: messages whose keys the batched loop claims at once, then completes and acks at once
CLAIM_WINDOW = 256

# the loop logs as the public module does, so existing logging configuration keeps working
log = logging.getLogger("portable.messaging")


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


class ConsumerLoop:
    """The machinery of one :meth:`Subscription.run` call.

    Threads: the caller's thread receives; a pool of ``concurrency`` workers runs
    the handler; one lease keeper extends the leases of everything held. The lock
    guards only bookkeeping, never a call to the provider. What happens to each
    message is :class:`~portable.messaging._handling.MessageScript`'s, run by
    :meth:`_effect` (the async loop runs the same script).
    """

    def __init__(
        self, sub: Subscription, settler: MessageSettler, options: RunOptions, stop: threading.Event
    ) -> None:
        self.sub = sub
        self.settler = settler
        self.options = options
        self.handler = options.handler
        self.concurrency = options.concurrency
        self.lease = options.lease
        self.poll = options.poll
        self.drain_timeout = options.drain_timeout
        self.claims = RunClaims.of(options)
        self.stop = stop
        self.abandon = threading.Event()
        self.finished = threading.Event()  # the drain is over: the lease keeper stops
        self.stats = RunStats()
        self.cond = threading.Condition(threading.Lock())
        self.holding = Holding()
        self.script = MessageScript(
            options, None if self.claims is None else self.claims.key, self._count, settler.may_settle
        )
        # concurrency 1: one worker thread receives, claims, handles and settles in batches, the
        # handler inline (no hop per message); more: the caller receives and a pool handles
        self.batched = options.concurrency == 1
        self.batch_cap = loop_batch(sub._driver_sub)  # the batch grows to this at most
        # None unless tracing or metrics are on (see portable.telemetry._propagation)
        self.telemetry = ConsumerTelemetry.of(sub.provider, sub._guard.target, redact(sub.url), sub.stats)
        # a batched run claims and completes per window and acks per batch; with telemetry on, each message's
        # claim, completion and ack are made inside its process span, one by one (the batch
        # receive and the one worker thread stay)
        self.per_window = self.batched and self.telemetry is None
        self.pool = ThreadPoolExecutor(max_workers=options.concurrency, thread_name_prefix="portable-consumer")
        self.queue: deque[Message] = deque()  # the batch worker's received messages not yet started
        self.ahead: dict[int, tuple[str, Claim | IdempotencyConflict]] = {}  # (key, claim) taken ahead, by id(message)
        self.completes: list[tuple[Message, list[Any], bytes | None]] = []  # to write at the batch's end
        self.acks: list[Message] = []  # to ack at the batch's end, after the completions
        self.worker_error: BaseException | None = None

    # -- bookkeeping ------------------------------------------------------
    def _count(self, field_name: str) -> None:
        with self.cond:
            setattr(self.stats, field_name, getattr(self.stats, field_name) + 1)
        if self.telemetry is not None:
            self.telemetry.event(field_name)  # on the message's process span, when one is current

    def run(self) -> RunStats:
        with self.telemetry if self.telemetry is not None else contextlib.nullcontext():
            return self._run()

    def _run(self) -> RunStats:
        keeper: threading.Thread | None = None
        if self.sub.capabilities.lease_extension or (self.claims is not None and self.claims.extendable):
            keeper = threading.Thread(target=self._keep_leases, name="portable-lease-keeper", daemon=True)
            keeper.start()
        try:
            if self.batched:
                self._run_batched()
            else:
                self._receive_loop()
        finally:
            self.stop.set()
            self._drain()
            self.finished.set()
            self.pool.shutdown(wait=False, cancel_futures=True)
            if keeper is not None:
                keeper.join(timeout=5)
        if self.worker_error is not None:
            raise self.worker_error
        return self.stats

    # -- concurrency 1: the batch worker -----------------------------------
    def _run_batched(self) -> None:
        """Run the batch worker until stopped; then give back what it received and did not start.

        The caller's thread only waits, so that it can return after ``drain_timeout``
        while a handler still runs (the worker then settles that message when it ends).
        """
        worker = threading.Thread(target=self._batch_worker, name="portable-consumer", daemon=True)
        worker.start()
        while not self.stop.wait(0.1):
            if not worker.is_alive():
                break
        unstarted = []
        while True:
            try:
                unstarted.append(self.queue.pop())
            except IndexError:
                break
        for message in reversed(unstarted):
            if self.claims is not None:
                self.claims.unclaim(message)
            self._release(message)

    def _batch_worker(self) -> None:
        """Receive a batch and run the handler on each message in turn, on this thread, claiming
        the keys of each window of :data:`CLAIM_WINDOW` messages at once before the window runs
        and writing its completions at once after it; the batch's acks go at once after its last
        window's completions (one queue commit a batch, not one a window).

        A message is acked only after its completion is written (a crash in between
        leaves a completed key: the redelivery is skipped). A crash mid-window leaves the
        window's claims in progress: their messages come back and are deferred until the
        claims' lease ends, then run again, each claim counted as a start (so a crash costs
        at most a window's worth of starts, not a batch's). The batch grows from 8 up to
        1,000 messages (4x a batch) while it is handled within a quarter of the lease (of
        the message and of the claim), so a provider that cannot extend leases keeps them.
        """
        size = 8  # and 4x a batch: a slow handler with a short lease keeps small batches from the start
        try:
            while not self.stop.is_set():
                try:
                    messages = self.sub.receive(size, self.poll, lease=self.lease)
                except PortableError as exc:
                    log.warning("receive from %s failed: %s", redact(self.sub.url), exc)
                    self.stop.wait(min(max(self.poll, 0.5), 5.0))
                    continue
                if not messages:
                    continue
                began = time.monotonic()
                with self.cond:
                    self.stats.received += len(messages)
                    if not self.stop.is_set():
                        self.holding.held.update(zip(map(id, messages), messages, strict=True))
                        self.queue.extend(messages)
                        messages = []
                if messages:  # stopped meanwhile: give them back
                    for message in messages:
                        self._release(message)
                    return
                handled = self._handle_queue()
                size = self._next_size(size, handled, time.monotonic() - began)
        except BaseException as exc:  # the run ends; run() raises it after the drain
            self.worker_error = exc
            self.stop.set()
        finally:
            self._flush([])

    def _handle_queue(self) -> int:
        """Handle the queued messages one by one, window by window, until the queue is empty or
        the loop stops; settle each window after it. How many were handled."""
        queue, stopped = self.queue, self.stop.is_set
        fast = self.telemetry is None and self.options.transactional is None
        # a transactional handler claims each key just before it runs (its commit completes it)
        claims = self.claims if self.options.transactional is None and self.per_window else None
        window: list[Message] = []
        limit = self.options.max_deliveries
        left = 0 if claims is not None else -1  # messages still to run of the window claimed ahead
        handled = 0
        try:
            while True:
                # no lock: the caller takes what is left at stop with queue.pop(), and a deque's
                # pops are atomic, so each message is started here or given back there, never both
                if stopped():
                    return handled
                try:
                    message = queue.popleft()
                except IndexError:
                    return handled
                if left == 0:
                    assert claims is not None
                    # the window's completions now (a crash from here on skips its messages); their
                    # acks with the batch's last window (one queue commit a batch, not one a window)
                    self._flush_completes()
                    try:
                        upcoming = [message, *itertools.islice(queue, CLAIM_WINDOW - 1)]
                    except RuntimeError:  # the caller is taking the queue back (stopping)
                        upcoming = [message]
                    ahead = claims.claim_window(upcoming)
                    left = len(upcoming)
                    if stopped():  # what the caller took back meanwhile gives its claims back too
                        for m in upcoming[1:]:
                            if id(m) not in self.holding.held:
                                claims.unclaim(m)
                    if isinstance(ahead, SharedClaim):
                        if ahead.within(limit):
                            self.ahead = {}
                            handled += self._run_window(upcoming, ahead.claim, window)
                            left = 0
                            continue
                        ahead = ahead.table(upcoming)  # over the limit: the script decides, message by message
                    self.ahead = ahead
                left -= 1
                window.append(message)
                handled += 1
                try:
                    if fast:
                        self._process_fast(message)
                    else:
                        self._process(message)
                except Exception:  # the loop must survive anything; the message's lease will expire
                    log.exception("the consumer loop failed on message %s", message.id)
        finally:
            self._flush(window)

    def _run_window(self, upcoming: list[Message], claim: Claim, window: list[Message]) -> int:
        """Run the window ``upcoming`` whose messages all hold ``claim`` (one new claim shared, see
        :meth:`RunClaims.claim_window`): its first message already taken off the queue, each next one
        taken when its turn comes (unless the loop stopped: the caller gives the rest back); the
        handled messages' completions and acks held back at once after the window
        (:func:`~portable.messaging._window.hold_window`). A failed or interrupted handler goes
        through the script. How many messages were taken (each also appended to ``window``)."""
        claims = self.claims
        assert claims is not None
        queue, stopped, handler = self.queue, self.stop.is_set, self.handler
        ok: list[Message] = []
        results: dict[int, bytes] = {}
        taken = 0
        try:
            for message in upcoming:
                if taken:
                    if stopped():
                        break
                    try:
                        message = queue.popleft()
                    except IndexError:
                        break
                taken += 1
                window.append(message)
                try:
                    result = handler(message)
                except Exception as exc:
                    try:
                        drive(self.script.handler_failed(message, claim.starts or 1, claim.failures or 0, True, exc), self._effect)
                    except Exception:  # the loop must survive anything; the message's lease will expire
                        log.exception("the consumer loop failed on message %s", message.id)
                    finally:
                        claims.forget_held(message)
                    continue
                except BaseException:
                    try:
                        drive(self.script.handler_interrupted(message, True), self._effect)
                    finally:
                        claims.forget_held(message)
                    raise
                ok.append(message)
                if result is not None and isinstance(result, bytes):  # as the script completes it
                    results[id(message)] = result
        finally:
            hold_window(self, claims, ok, results)
        return taken

    def _flush(self, done: list[Message]) -> None:
        """Write the completions held back, then ack the messages held back; stop holding ``done``."""
        self._flush_completes()
        acks, self.acks = self.acks, []
        if acks:
            errors = self.sub._ack_each(acks)
            if errors.count(None) != len(errors):
                failed = report_failed_acks(acks, errors, self._count)
                with self.cond:
                    self.stats.acked -= failed
        self.ahead = {}
        with self.cond:
            deque(map(self.holding.held.pop, map(id, done), itertools.repeat(None)), maxlen=0)  # Holding.drop each
            self.cond.notify_all()

    def _flush_completes(self) -> None:
        completes, self.completes = self.completes, []
        if completes and self.claims is not None:
            self.claims.complete_batch(completes)

    def _next_size(self, size: int, handled: int, spent: float) -> int:
        """The next batch's size: 4x, at most the driver's ``loop_batch`` (1,000 unless it says
        less: :func:`loop_batch`), and what fits in a quarter of the lease."""
        if handled == 0:
            return size
        lease = self.lease if self.claims is None else min(self.lease, self.claims.lease)
        per_message = spent / handled
        fits = self.batch_cap if per_message <= 0 else int(lease / 4 / per_message)
        return max(1, min(self.batch_cap, size * 4, fits))

    def _receive_loop(self) -> None:
        sub = self.sub
        stop = self.stop
        while not stop.is_set():
            with self.cond:
                while len(self.holding) >= self.concurrency and not stop.is_set():
                    self.cond.wait(0.25)
                room = self.concurrency - len(self.holding)
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
        with self.cond:
            start = self.holding.take(message)
        if start:
            self.pool.submit(self._work, message)

    def _work(self, message: Message) -> None:
        try:
            self._process(message)
        except Exception:  # the loop must survive anything; the message's lease will expire
            log.exception("the consumer loop failed on message %s", message.id)
        finally:
            self._done(message)

    def _done(self, message: Message) -> None:
        with self.cond:
            following, release = self.holding.done(message, self.stop.is_set())
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
                self.holding.drop(message)
                self.cond.notify_all()

    def _drain(self) -> None:
        deadline = time.monotonic() + self.drain_timeout
        with self.cond:
            while self.holding and not self.abandon.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(min(left, 0.1))
            self.stats.unfinished = len(self.holding)
        if self.stats.unfinished:
            log.warning(
                "%d handler(s) still running after the %gs drain timeout; their messages will be "
                "delivered again when their leases end", self.stats.unfinished, self.drain_timeout,
            )

    def _keep_leases(self) -> None:
        interval = keeper_interval(self.lease)
        while not self.finished.wait(interval):
            if self.claims is not None:
                self.claims.keep()
            if not self.sub.capabilities.lease_extension:
                continue
            with self.cond:
                expiring = self.holding.expiring(self.lease)
            for message in expiring:
                try:
                    message.extend_lease(self.lease)
                except PortableError as exc:
                    lease_not_kept(message, exc)

    # -- one message ------------------------------------------------------
    def _process(self, message: Message) -> None:
        try:
            if self.stop.is_set() and self.abandon.is_set():
                self._release(message)
                return
            if self.telemetry is None:
                drive(self.script.handle(message), self._effect)
            else:
                with self.telemetry.processing(message):
                    drive(self.script.handle(message), self._effect)
        finally:
            if self.claims is not None:
                self.claims.forget_held(message)

    def _process_fast(self, message: Message) -> None:
        """:meth:`_process` without the script for the common case, with the script's rules: a
        message whose claim was taken ahead (or that needs none) and may run, run and held back
        to be completed and acked at the batch's end. Anything else, and every failure, goes
        through the script (:class:`~portable.messaging._handling.MessageScript`)."""
        limit = self.options.max_deliveries
        claims = self.claims
        if claims is None:
            if limit is not None and message.delivery_attempt > limit:
                self._process(message)
                return
            attempt, failures, claimed = message.delivery_attempt, None, False
        else:
            ahead = self.ahead.get(id(message))
            claim = None if ahead is None else ahead[1]
            if (
                not isinstance(claim, Claim) or claim.status != "acquired" or claim.starts is None
                or (limit is not None and claim.starts > limit)
            ):  # fmt: skip
                self._process(message)  # no claim ahead, skipped, deferred, over the limit: the script decides
                return
            del self.ahead[id(message)]
            attempt, failures, claimed = claim.starts, claim.failures or 0, True
        try:
            result = self.handler(message)
        except Exception as exc:
            try:
                drive(self.script.handler_failed(message, attempt, failures, claimed, exc), self._effect)
            finally:
                if claims is not None:
                    claims.forget_held(message)
            return
        except BaseException:
            try:
                drive(self.script.handler_interrupted(message, claimed), self._effect)
            finally:
                if claims is not None:
                    claims.forget_held(message)
            raise
        hold_settlement(self, claims, message, claimed, result)

    def _effect(self, effect: Effect) -> Any:
        """Make one call the script asks for (see :mod:`portable.messaging._handling`)."""
        return getattr(self, f"_do_{effect[0]}")(*effect[1:])

    def _do_handle(self, message: Message) -> Any:
        if self.telemetry is None:
            return self.handler(message)
        try:
            return self.handler(message)
        except Exception as exc:
            self.telemetry.handler_failed(exc)
            raise

    def _do_ack(self, message: Message) -> None:
        if self.per_window:
            self.acks.append(message)  # at the batch's end (_flush), after its completions
        else:
            message.ack()

    def _do_nack(self, message: Message, delay: float) -> None:
        message.nack(delay)

    def _do_move(self, message: Message, reason: str, target: Topic | None) -> None:
        self.settler.move_to_dead_letter(message, reason, target)

    def _do_give_back(self, message: Message) -> None:
        self._release(message)

    def _do_claim(self, message: Message, key: str) -> Claim:
        assert self.claims is not None
        if self.per_window:
            ahead = self.ahead.pop(id(message), None)
            if ahead is not None:
                if isinstance(ahead[1], Claim):
                    return ahead[1]
                raise ahead[1]
            self._flush_completes()  # a key seen earlier in this batch: its completion first
        return self.claims.claim(message, key)

    def _do_complete(self, message: Message, result: bytes | None) -> None:
        assert self.claims is not None
        if self.per_window:
            held = self.claims.forget_held(message)
            if held is not None:
                self.completes.append((message, held, result))
        else:
            self.claims.complete(message, result)

    def _do_release(self, message: Message) -> None:
        assert self.claims is not None
        self.claims.release(message)

    def _do_forget(self, message: Message) -> None:
        assert self.claims is not None
        self.claims.forget(message)

    def _do_transact(self, message: Message, key: str, token: str) -> Any:
        transactional, claims = self.options.transactional, self.claims
        assert transactional is not None and claims is not None
        if self.options.store_locks:
            claims.hold_without_extending(message)
        result = transactional.run_claimed(message, key, token)
        claims.forget_held(message)  # completed with the commit
        return result


def loop_batch(driver: object) -> int:
    """The most messages a batched loop receives at once from ``driver`` (both faces): its
    ``loop_batch`` (:class:`~portable.driver.messaging.SubscriptionDriver`), within 1 and
    :data:`~portable.driver.messaging.MAX_RECEIVE`.

    A batch's messages live until the batch is settled: the larger the batch, the more of
    them the cycle collector's middle generation finds alive and moves to the oldest, whose
    full collections then come more often (and cost more, the more objects the process
    holds). A driver whose receive serves a local buffer has no round trip to spread over a
    large batch and sets it lower (Kafka: 256, measured in docs/performance.md); one that pays
    a round trip per receive keeps 1,000.
    """
    size = getattr(driver, "loop_batch", MAX_RECEIVE)
    if type(size) is not int:
        raise TypeError(f"{type(driver).__name__}.loop_batch must be an int, got {size!r}")
    return max(1, min(MAX_RECEIVE, size))


def keeper_interval(lease: float) -> float:
    """How often a lease keeper looks at what it holds: a quarter of the lease, 0.05 to 5 seconds."""
    return max(0.05, min(lease / 4, 5.0))


def lease_not_kept(message: Delivery, exc: PortableError) -> None:
    """Log a failed lease extension, unless the message was settled meanwhile (then nothing is lost)."""
    if message.settled:
        return
    if isinstance(exc, PreconditionFailed):
        log.warning("lost the lease on message %s; it may be handled twice", message.id)
    else:
        log.warning("could not extend the lease on message %s: %s", message.id, exc)
