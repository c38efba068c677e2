"""The async consumer: ``AsyncSubscription.run`` (:class:`AsyncConsumerLoop`) and ``async for`` (:func:`iterate`).

Private: use :meth:`AsyncSubscription.run` and ``async for message in subscription``.

The loop is the sync :class:`~portable.messaging._consumer.ConsumerLoop` on
tasks instead of threads: what happens to each message (claim, run, skip,
defer, ack, nack with backoff, dead-letter, attempt counting) is the one
:class:`~portable.messaging._handling.MessageScript` both faces drive; this
module only awaits the effects it yields (:func:`adrive`). Settling effects
are shielded, so a cancel never cuts an ack, a nack or a claim's release in half.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..driver.aio_idempotency import settle
from ..driver.aio_messaging import AsyncQueueDriver, AsyncSubscriptionDriver
from ..driver.idempotency import Claim
from ..driver.messaging import LEASED, MAX_RECEIVE, Delivery
from ..driver.redaction import redact
from ..driver.threads import Pinned, run_blocking
from ..errors import IdempotencyConflict, InvalidArgument, PortableError
from ..messaging import RunStats
from ..messaging._claims import RunClaims, SharedClaim
from ..messaging._consumer import (
    CLAIM_WINDOW,
    keeper_interval,
    lease_not_kept,
    loop_batch,
)
from ..messaging._handling import (
    ACK,
    CLAIM,
    COMPLETE,
    HANDLE,
    Effect,
    Holding,
    MessageScript,
    RunOptions,
    Script,
)
from ..messaging._validation import check_lease, check_seconds
from ..messaging._window import acked_in_batch, hold_settlement, hold_window, report_failed_acks
from ..telemetry._propagation import ConsumerTelemetry
from ._msg_message import AsyncMessage

if TYPE_CHECKING:
    from ..messaging import Topic
    from ._messaging import AsyncSubscription

log = logging.getLogger("portable.messaging")

#: how often the loop looks at a stop_event it cannot await (a threading.Event)
_STOP_POLL = 0.05


async def adrive(script: Script, do: Callable[[Effect], Awaitable[Any]], *, shield: Callable[[Effect], bool]) -> None:
    """Run ``script`` to its end, awaiting ``do(effect)`` for each effect (the async executor).

    An exception ``do`` raises is thrown into the script at that effect. An
    effect for which ``shield(effect)`` is true, and every effect after a
    cancellation, is settled: awaited to its end however often the task is
    cancelled meanwhile, its real outcome handed to the script; a cancel that
    came during it is raised once the script has finished.
    """
    value: Any = None
    error: BaseException | None = None
    cancelled = False
    while True:
        try:
            effect = script.send(value) if error is None else script.throw(error)
        except StopIteration:
            if cancelled:
                raise asyncio.CancelledError from None  # the settling is done: now the cancel goes on
            return
        try:
            if cancelled or shield(effect):
                # settle, not shield: a second cancel must not leave the effect running in the
                # background while the script (and _work's clean-up) moves on without its outcome
                finished, interrupted = await settle(do(effect))
                cancelled = cancelled or interrupted
                value, error = finished.result(), None
            else:
                value, error = await do(effect), None
        except BaseException as exc:  # the script decides; what it does not catch it re-raises
            cancelled = cancelled or isinstance(exc, asyncio.CancelledError)
            value, error = None, exc


def _settling(effect: Effect) -> bool:
    """Every effect but the handler and the claim settles something that must not be cut in half."""
    return effect[0] not in (HANDLE, CLAIM)


def _always(effect: Effect) -> bool:
    """After a cancel every effect is settled."""
    return True


def _settling_batched(effect: Effect) -> bool:
    """In a batched run a completion and an ack are only noted (the window's flush, itself
    settled, makes them), so they need no shield either."""
    return effect[0] not in (HANDLE, CLAIM, COMPLETE, ACK)


async def _first(*aws: Awaitable[Any], timeout: float | None = None) -> None:
    """Wait until the first of ``aws`` is done (or ``timeout``); cancel the rest."""
    tasks = [asyncio.ensure_future(aw) for aw in aws]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


class AsyncConsumerLoop:
    """The machinery of one :meth:`AsyncSubscription.run` call (see the module docstring).

    Tasks: the caller's task receives; one task per message runs the script (at
    most ``concurrency`` at once, one per key); one lease keeper extends leases and
    claims; one watcher turns a ``threading.Event`` stop into the loop's own.
    """

    def __init__(self, sub: AsyncSubscription, options: RunOptions) -> None:
        self.sub = sub
        self.settler = sub._settler
        self.options = options
        self.lease = options.lease
        self.batch_cap = loop_batch(sub._sync._driver_sub)  # a batched run's batch grows to this at most
        self.claims = RunClaims.of(options)
        self.stats = RunStats()
        self.holding = Holding()
        self.script = MessageScript(
            options, None if self.claims is None else self.claims.key, self._count, self.settler.sync.may_settle
        )
        self.external = threading.Event()  # what Subscription.stop() sets (it is in the sync twin's stops)
        self.stop = asyncio.Event()
        self.abandon = asyncio.Event()
        self.changed = asyncio.Event()  # a message was finished: there may be room
        self.tasks: set[asyncio.Task[None]] = set()
        self.pending: set[asyncio.Future[Any]] = set()  # late releases, awaited before run() returns
        # None unless tracing or metrics are on; the lag gauge reads the sync twin's stats()
        self.telemetry = ConsumerTelemetry.of(sub.provider, sub._guard.target, redact(sub.url), sub.sync.stats)
        # concurrency 1: one task runs each received batch in turn, claiming each window of keys
        # in one store call and settling the window in one (the sync loop's batch worker, on a task)
        self.batched = options.concurrency == 1
        # a batched run claims and completes per window and acks per batch; with telemetry on, each message's
        # claim, completion and ack are made inside its process span, one by one
        self.per_window = self.batched and self.telemetry is None
        self.shield = _settling_batched if self.per_window else _settling
        self.ahead: dict[int, tuple[str, Claim | IdempotencyConflict]] = {}
        self.completes: list[tuple[Delivery, list[Any], bytes | None]] = []
        self.acks: list[Delivery] = []
        store = options.idempotency
        self.store_inline = store is not None and getattr(store, "never_blocks", False) is True
        # a sync driver run in the thread pool (not a native async one): a window's store and queue
        # calls then go to the pool in one hop (each hop there and back costs ~0.1 ms)
        self.one_hop = type(sub._aside) in (AsyncSubscriptionDriver, AsyncQueueDriver)
        # a batched run's store and settlement calls come one at a time: on one thread of their
        # own they keep one warm sqlite connection (the pool's next idle thread has a cold one)
        self.pinned = Pinned("portable-consumer") if self.per_window and not self.store_inline else None

    def _count(self, field_name: str) -> None:
        setattr(self.stats, field_name, getattr(self.stats, field_name) + 1)
        if self.telemetry is not None:
            self.telemetry.event(field_name)  # on the message's process span, when one is current

    def on_signal(self) -> None:
        """SIGTERM/SIGINT: stop gracefully; a second one stops waiting for the drain."""
        if self.stop.is_set():
            self.abandon.set()
        log.info("signal: stopping the consumer loop gracefully")
        self.stop.set()

    async def run(self, stop_event: threading.Event | asyncio.Event | None, *, handle_signals: bool) -> RunStats:
        with self.telemetry if self.telemetry is not None else contextlib.nullcontext():
            return await self._run(stop_event, handle_signals=handle_signals)

    async def _run(self, stop_event: threading.Event | asyncio.Event | None, *, handle_signals: bool) -> RunStats:
        helpers = [asyncio.ensure_future(self._watch(stop_event))]
        caps = self.sub.capabilities
        if caps.lease_extension or (self.claims is not None and self.claims.extendable):
            helpers.append(asyncio.ensure_future(self._keep_leases()))
        cancelled = False
        try:
            with self._signals() if handle_signals else contextlib.nullcontext():
                try:
                    await self._receive_loop()
                except asyncio.CancelledError:
                    cancelled = True
                finally:  # whatever ended the loop, what it holds is drained and settled
                    self.stop.set()
                    await self._drain_shielded()
        except asyncio.CancelledError:
            cancelled = True
        finally:
            self.stop.set()
            for helper in helpers:
                helper.cancel()
            if self.pinned is not None:
                self.pinned.close()
        if cancelled:
            raise asyncio.CancelledError
        return self.stats

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        """SIGTERM and SIGINT stop this loop while it runs (on the main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        loop = asyncio.get_running_loop()
        installed: dict[signal.Signals, Any] = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(sig)
            try:
                loop.add_signal_handler(sig, self.on_signal)
            except (NotImplementedError, RuntimeError, ValueError):  # no signals on this loop
                continue
            installed[sig] = previous
        try:
            yield
        finally:
            for sig, previous in installed.items():
                loop.remove_signal_handler(sig)
                signal.signal(sig, previous)

    async def _watch(self, stop_event: threading.Event | asyncio.Event | None) -> None:
        external = self.external
        if isinstance(stop_event, asyncio.Event):
            waiting = asyncio.ensure_future(stop_event.wait())
            waiting.add_done_callback(lambda _: self.stop.set())
        while not self.stop.is_set():
            if external.is_set() or (isinstance(stop_event, threading.Event) and stop_event.is_set()):
                self.stop.set()
                break
            await asyncio.sleep(_STOP_POLL)
        if isinstance(stop_event, asyncio.Event):
            waiting.cancel()

    async def _store(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call the store (through RunClaims): inline for a store that never blocks, else on the
        batched run's own thread, else in the pool."""
        if self.store_inline:
            return fn(*args)
        return await (run_blocking(fn, *args) if self.pinned is None else self.pinned.run(fn, *args))

    async def _receive_batches(self) -> None:
        """The receive loop of a batched run: receive, run the batch in one task, wait for it, again."""
        sub, stop = self.sub, self.stop
        size = 8  # and 4x a batch: a slow handler with a short lease keeps small batches from the start
        while not stop.is_set():
            receiving = asyncio.ensure_future(sub.receive(size, self.options.poll, lease=self.lease))
            await _first(asyncio.shield(receiving), stop.wait())
            if not receiving.done():  # stopped meanwhile: what it gets is given back
                receiving.cancel()
                return
            try:
                messages = [m.message for m in receiving.result()]
            except PortableError as exc:
                log.warning("receive from %s failed: %s", redact(sub.url), exc)
                await _first(stop.wait(), timeout=min(max(self.options.poll, 0.5), 5.0))
                continue
            if not messages:
                continue
            self.stats.received += len(messages)
            if stop.is_set():
                for message in messages:
                    await self._release(message)
                return
            for message in messages:
                self.holding.held[id(message)] = message
            began = time.monotonic()
            task = asyncio.ensure_future(self._batch(messages))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            await _first(asyncio.wait((task,)), stop.wait())
            if not task.done():
                return  # stopping: the drain lets it finish (or cancels it)
            size = self._next_size(size, len(messages), time.monotonic() - began)

    def _next_size(self, size: int, handled: int, spent: float) -> int:
        """The next batch's size, as the sync loop's (``ConsumerLoop._next_size``)."""
        lease = self.lease if self.claims is None else min(self.lease, self.claims.lease)
        per_message = spent / handled
        fits = self.batch_cap if per_message <= 0 else int(lease / 4 / per_message)
        return max(1, min(self.batch_cap, size * 4, fits))

    async def _batch(self, messages: list[Delivery]) -> None:
        """Run ``messages`` in turn, claiming each window's keys at once and settling it after;
        stops starting messages when the loop stops (the drain gives the rest back)."""
        claims = self.claims if self.options.transactional is None and self.per_window else None
        fast = self.telemetry is None and self.options.transactional is None
        window: list[Delivery] = []
        limit = self.options.max_deliveries
        left = 0 if claims is not None else -1
        try:
            i = 0
            while i < len(messages):
                message = messages[i]
                i += 1
                if self.stop.is_set():
                    return
                if left == 0:
                    assert claims is not None
                    # the window's completions now, their acks with the batch's last window (one
                    # queue commit a batch, as the sync loop), then the next window's claims
                    upcoming = messages[i - 1 : i - 1 + CLAIM_WINDOW]
                    ahead = await self._complete_and_claim(claims, upcoming)
                    left = len(upcoming)
                    if isinstance(ahead, SharedClaim):
                        if ahead.within(limit):
                            self.ahead = {}
                            await self._run_window(upcoming, ahead.claim, window)
                            i += left - 1
                            left = 0
                            continue
                        ahead = ahead.table(upcoming)  # over the limit: the script decides, message by message
                    self.ahead = ahead
                left -= 1
                window.append(message)
                if fast and self._may_run_fast(message):
                    await self._work_fast(message)
                else:
                    await self._work(message)
        finally:
            _, interrupted = await settle(self._flush(window))
            if interrupted:
                raise asyncio.CancelledError

    def _may_run_fast(self, message: Delivery) -> bool:
        """Whether ``message`` may skip the script: no store and within ``max_deliveries``, or its
        claim taken ahead acquired, counted and within the limit (else the script decides)."""
        limit = self.options.max_deliveries
        if self.claims is None:
            return limit is None or message.delivery_attempt <= limit
        ahead = self.ahead.get(id(message))
        claim = None if ahead is None else ahead[1]
        return (
            type(claim) is Claim and claim.status == "acquired" and claim.starts is not None
            and (limit is None or claim.starts <= limit)
        )  # fmt: skip

    async def _work_fast(self, message: Delivery) -> None:
        """:meth:`_work` without the script for a message :meth:`_may_run_fast` let through; a
        failure or a cancel goes through the script's rules (``handler_failed``, ``handler_interrupted``)."""
        claims = self.claims
        if claims is None:
            attempt, failures, claimed = message.delivery_attempt, None, False
        else:
            claim = self.ahead.pop(id(message))[1]
            assert isinstance(claim, Claim) and claim.starts is not None
            attempt, failures, claimed = claim.starts, claim.failures or 0, True
        settled = False
        try:
            if self.stop.is_set() and self.abandon.is_set():
                await self._release(message)
                return
            try:
                result = await self.options.handler(AsyncMessage(message, self.settler))
            except Exception as exc:
                await adrive(self.script.handler_failed(message, attempt, failures, claimed, exc), self._effect,
                             shield=self.shield)  # fmt: skip
                return
            except BaseException:
                await adrive(self.script.handler_interrupted(message, claimed), self._effect, shield=_always)
                raise
            hold_settlement(self, claims, message, claimed, result)  # takes the claim off the table
            settled = True
        except asyncio.CancelledError:
            pass  # given back (handler_interrupted); the drain counts it unfinished
        except Exception:  # the loop must survive anything; the message's lease will expire
            log.exception("the consumer loop failed on message %s", message.id)
        finally:
            if claims is not None and not settled:
                claims.forget_held(message)
            self.holding.held.pop(id(message), None)
            self.changed.set()

    async def _run_window(self, upcoming: list[Delivery], claim: Claim, window: list[Delivery]) -> None:
        """The sync loop's ``_run_window`` on the event loop: run the window ``upcoming``, whose
        messages all hold ``claim``, each handler awaited in this task (no task or coroutine of the
        loop's own a message); their completions and acks held back in bulk after the window
        (:func:`~portable.messaging._window.hold_window`). A failure or a cancel goes through the
        script's rules (``handler_failed``, ``handler_interrupted``); stops starting at a stop."""
        claims = self.claims
        assert claims is not None
        handler, settler, stop = self.options.handler, self.settler, self.stop
        ok: list[Delivery] = []
        results: dict[int, bytes] = {}
        try:
            for message in upcoming:
                if stop.is_set():
                    return  # the drain gives the rest back, and their claims
                window.append(message)
                try:
                    result = await handler(AsyncMessage(message, settler))
                except Exception as exc:
                    try:
                        await adrive(self.script.handler_failed(message, claim.starts or 1, claim.failures or 0, True, exc),
                                     self._effect, shield=self.shield)  # fmt: skip
                    except Exception:  # the loop must survive anything; the message's lease will expire
                        log.exception("the consumer loop failed on message %s", message.id)
                    finally:
                        claims.forget_held(message)
                        self.holding.held.pop(id(message), None)
                    continue
                except BaseException as exc:
                    try:
                        await adrive(self.script.handler_interrupted(message, True), self._effect, shield=_always)
                    finally:
                        claims.forget_held(message)
                        self.holding.held.pop(id(message), None)
                    if isinstance(exc, asyncio.CancelledError):
                        continue  # given back (handler_interrupted); the drain counts it unfinished
                    raise
                ok.append(message)
                if result is not None and isinstance(result, bytes):  # as the script completes it
                    results[id(message)] = result
        finally:
            hold_window(self, claims, ok, results)
            pop = self.holding.held.pop
            for message in ok:
                pop(id(message), None)
            self.changed.set()

    async def _complete_and_claim(self, claims: RunClaims, upcoming: list[Delivery]) -> dict[int, Any] | SharedClaim:
        """Write the completions held back, then claim ``upcoming``'s keys: one pool call for a
        blocking store, the completions first (a key of both windows then meets "completed")."""
        completes, self.completes = self.completes, []

        def complete_and_claim() -> dict[int, Any] | SharedClaim:
            if completes:
                claims.complete_batch(completes)
            return claims.claim_window(upcoming)

        ahead: dict[int, Any] | SharedClaim = await self._store(complete_and_claim)  # inline or in the pool, as every store call
        return ahead

    async def _flush(self, window: list[Delivery]) -> None:
        """Write the completions held back at once, then ack the messages held back at once (one
        pool call for both where the store blocks and the driver is a sync one run in the pool)."""
        completes, self.completes = self.completes, []
        acks, self.acks = self.acks, []
        claims = None if not completes else self.claims
        if self.one_hop and acks and not self.store_inline:
            sync = self.sub._sync

            def complete_and_ack() -> list[PortableError | None]:
                if claims is not None:
                    claims.complete_batch(completes)
                return sync._ack_each(acks)  # the sync twin's batched ack: the same driver and guard

            hop = run_blocking(complete_and_ack) if self.pinned is None else self.pinned.run(complete_and_ack)
            self.stats.acked -= report_failed_acks(acks, await hop, self._count)
        else:
            if claims is not None:
                await self._store(claims.complete_batch, completes)
            if acks:
                self.stats.acked -= report_failed_acks(acks, await self._ack_each(acks), self._count)
        self.ahead = {}

    async def _ack_each(self, messages: list[Delivery]) -> list[PortableError | None]:
        """Ack ``messages`` in native batches; each one's error (or None); never raises."""
        sub = self.sub
        out: list[PortableError | None] = [None] * len(messages)
        pending = [(i, m) for i, m in enumerate(messages) if m._state is LEASED]
        batch = sub.capabilities.max_batch
        for start in range(0, len(pending), batch):
            chunk = pending[start : start + batch]
            try:
                results = await sub._guard.acall(
                    "ack", f"ack {len(chunk)} messages", sub._aside.ack_many, [m._handle for _, m in chunk]
                )
            except PortableError:
                again = chunk
            else:
                again = acked_in_batch(chunk, results)
            for i, m in again:
                try:
                    await self.settler.ack(m)
                except PortableError as exc:
                    out[i] = exc
        return out

    async def _receive_loop(self) -> None:
        if self.batched:
            await self._receive_batches()
            return
        sub = self.sub
        stop = self.stop
        concurrency = self.options.concurrency
        while not stop.is_set():
            while len(self.holding) >= concurrency and not stop.is_set():
                self.changed.clear()
                await _first(self.changed.wait(), stop.wait())
            if stop.is_set():
                return
            room = concurrency - len(self.holding)
            receiving = asyncio.ensure_future(sub.receive(min(room, MAX_RECEIVE), self.options.poll, lease=self.lease))
            await _first(asyncio.shield(receiving), stop.wait())
            if not receiving.done():  # stopped meanwhile: what it gets is given back
                receiving.cancel()
                return
            try:
                messages = receiving.result()
            except PortableError as exc:
                log.warning("receive from %s failed: %s", redact(sub.url), exc)
                await _first(stop.wait(), timeout=min(max(self.options.poll, 0.5), 5.0))
                continue
            for message in messages:
                self._count("received")
                delivery = message.message
                if stop.is_set():
                    await self._release(delivery)
                elif self.holding.take(delivery):
                    self._start(delivery)

    def _start(self, message: Delivery) -> None:
        task = asyncio.ensure_future(self._work(message))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _work(self, message: Delivery) -> None:
        try:
            if self.stop.is_set() and self.abandon.is_set():
                await self._release(message)
                return
            if self.telemetry is None:
                await adrive(self.script.handle(message), self._effect, shield=self.shield)
            else:
                with self.telemetry.processing(message):
                    await adrive(self.script.handle(message), self._effect, shield=self.shield)
        except asyncio.CancelledError:
            pass  # given back by the script; the drain counts it unfinished
        except Exception:  # the loop must survive anything; the message's lease will expire
            log.exception("the consumer loop failed on message %s", message.id)
        finally:
            if self.claims is not None:
                self.claims.forget_held(message)
            await asyncio.shield(self._done(message))

    async def _done(self, message: Delivery) -> None:
        following, release = self.holding.done(message, self.stop.is_set())
        self.changed.set()
        if self.batched:
            return
        for m in release:
            await self._release(m)
        if following is not None:
            self._start(following)

    async def _release(self, message: Delivery) -> None:
        if self.claims is not None and self.claims.held(message) is not None:
            await self._store(self.claims.unclaim, message)  # claimed ahead, never started
        try:
            await asyncio.shield(self.settler.nack(message, 0.0))
            self._count("released")
        except PortableError as exc:
            log.warning("could not release message %s at shutdown: %s", message.id, exc)
        finally:
            self.holding.drop(message)
            self.changed.set()

    async def _drain_shielded(self) -> None:
        drain = asyncio.ensure_future(self._drain())
        try:
            await asyncio.shield(drain)
        except asyncio.CancelledError:  # a second cancel: stop waiting, give the rest back
            self.abandon.set()
            await asyncio.shield(drain)
            raise

    async def _drain(self) -> None:
        running = set(self.tasks)
        if running and not self.abandon.is_set():
            await _first(asyncio.wait(running), self.abandon.wait(), timeout=self.options.drain_timeout)
        rest = [task for task in self.tasks if not task.done()]
        self.stats.unfinished = len(rest)
        for task in rest:
            task.cancel()  # the script gives each message back and releases its claim
        if rest:
            await asyncio.wait(rest, timeout=30)
        for message in [m for m in self.holding.held.values() if not m.settled]:
            await self._release(message)  # a task cancelled before it began holds one still
        if self.pending:
            await asyncio.wait(set(self.pending), timeout=30)
        if rest:
            log.warning(
                "%d handler(s) still running after the %gs drain timeout were cancelled; their messages "
                "were given back", len(rest), self.options.drain_timeout,
            )  # fmt: skip

    async def _keep_leases(self) -> None:
        interval = keeper_interval(self.lease)
        extend = self.sub.capabilities.lease_extension
        while True:
            await asyncio.sleep(interval)
            if self.claims is not None and self.claims.extendable:
                await run_blocking(self.claims.keep)
            if extend:
                await asyncio.gather(*(self._extend(m) for m in self.holding.expiring(self.lease)))

    async def _extend(self, message: Delivery) -> None:
        try:
            await self.settler.extend_lease(message, self.lease)
        except PortableError as exc:
            lease_not_kept(message, exc)

    # -- the effects of the script ------------------------------------------------
    async def _effect(self, effect: Effect) -> Any:
        """Await one call the script asks for (see :mod:`portable.messaging._handling`)."""
        return await getattr(self, f"_do_{effect[0]}")(*effect[1:])

    async def _do_handle(self, message: Delivery) -> Any:
        try:
            if self.options.transactional is not None:  # sync by design: it commits in the store's transaction
                return await run_blocking(self.options.handler, message)
            return await self.options.handler(AsyncMessage(message, self.settler))
        except Exception as exc:
            if self.telemetry is not None:
                self.telemetry.handler_failed(exc)
            raise

    async def _do_ack(self, message: Delivery) -> None:
        if self.per_window:
            self.acks.append(message)  # at the window's end (_flush), after its completions
        else:
            await self.settler.ack(message)

    async def _do_nack(self, message: Delivery, delay: float) -> None:
        await self.settler.nack(message, delay)

    async def _do_move(self, message: Delivery, reason: str, target: Topic | None) -> None:
        await self.settler.move_to_dead_letter(message, reason, target)

    async def _do_give_back(self, message: Delivery) -> None:
        await self._release(message)

    async def _do_claim(self, message: Delivery, key: str) -> Claim:
        claims = self.claims
        assert claims is not None
        if self.per_window:
            ahead = self.ahead.pop(id(message), None)
            if ahead is not None:
                if isinstance(ahead[1], Claim):
                    return ahead[1]
                raise ahead[1]
            completes, self.completes = self.completes, []  # a key seen earlier in the window: its completion first
            if completes:
                await self._store(claims.complete_batch, completes)
        call = asyncio.ensure_future(run_blocking(claims.claim, message, key))
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:  # the claim may still land: give it back once it does
            call.add_done_callback(lambda done: self._unclaim(message, key, done))
            raise

    def _unclaim(self, message: Delivery, key: str, done: asyncio.Future[Claim]) -> None:
        """Release a claim that was made after its task was cancelled (nobody will run its handler)."""
        if done.cancelled() or done.exception() is not None or self.claims is None:
            return
        claim = done.result()
        self.claims.forget_held(message)
        if claim.status == "acquired" and claim.token is not None:
            self._background(run_blocking(self.claims.release_held, message, [key, claim.token]))

    def _background(self, aw: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(aw)
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    # the claim is taken off the table here, on the loop, before the store call is awaited:
    # the call may run after this task moved on (cancelled), and must still find it
    async def _do_complete(self, message: Delivery, result: bytes | None) -> None:
        assert self.claims is not None
        if self.per_window:
            held = self.claims.forget_held(message)
            if held is not None:
                self.completes.append((message, held, result))
            return
        await run_blocking(self.claims.complete_held, message, self.claims.forget_held(message), result)

    async def _do_release(self, message: Delivery) -> None:
        assert self.claims is not None
        await run_blocking(self.claims.release_held, message, self.claims.forget_held(message))

    async def _do_forget(self, message: Delivery) -> None:
        assert self.claims is not None
        await run_blocking(self.claims.forget_claim, message, self.claims.forget_held(message))

    async def _do_transact(self, message: Delivery, key: str, token: str) -> Any:
        transactional, claims = self.options.transactional, self.claims
        assert transactional is not None and claims is not None
        if self.options.store_locks:
            claims.hold_without_extending(message)
        result = await run_blocking(transactional.run_claimed, message, key, token)
        claims.forget_held(message)  # completed with the commit
        return result


def iteration_args(sub: AsyncSubscription, lease: object, poll: object, prefetch: object) -> tuple[float, float, int]:
    """``messages(lease=, poll=, prefetch=)`` checked: the lease, poll and prefetch to use.

    Raises:
        InvalidArgument: a bad argument.
    """
    caps = sub.capabilities
    if type(prefetch) is not int or not 1 <= prefetch <= caps.max_batch:
        raise InvalidArgument(
            f"prefetch must be an int from 1 to {caps.max_batch} (capabilities.max_batch), got {prefetch!r}"
        )
    poll_s = check_seconds("poll", poll)
    if poll_s > 20:
        raise InvalidArgument(f"poll must be at most 20 seconds (one long poll; the loop polls again), got {poll!r}")
    lease_s = sub.lease if lease is None else check_lease(lease, caps, sub.provider)
    return lease_s, poll_s, prefetch


async def iterate(sub: AsyncSubscription, lease_s: float, poll_s: float, prefetch: int) -> AsyncIterator[AsyncMessage]:
    """``AsyncSubscription.messages`` with checked arguments: see there."""
    caps = sub.capabilities
    held: dict[int, AsyncMessage] = {}  # received and not yet settled: yielded or about to be

    async def keep() -> None:
        interval = keeper_interval(lease_s)
        while True:
            await asyncio.sleep(interval)
            due = [m for m in held.values() if not m.settled and m.lease_remaining <= lease_s / 2]
            await asyncio.gather(*(extend(m) for m in due))

    async def extend(message: AsyncMessage) -> None:
        try:
            await message.extend_lease(lease_s)
        except PortableError as exc:
            lease_not_kept(message.message, exc)

    keeper = asyncio.ensure_future(keep()) if caps.lease_extension else None
    try:
        while True:
            batch = await sub.receive(prefetch, wait=poll_s, lease=lease_s)
            if not batch and poll_s < _STOP_POLL:
                await asyncio.sleep(_STOP_POLL)  # poll=0 must not spin
            for m in batch:
                held[id(m)] = m
            for m in batch:
                yield m
            for key in [key for key, m in held.items() if m.settled]:
                del held[key]
    finally:
        if keeper is not None:
            keeper.cancel()
        unsettled = [m for m in held.values() if not m.settled]
        if unsettled:
            await asyncio.shield(_give_back(unsettled))


async def _give_back(messages: list[AsyncMessage]) -> None:
    started = time.monotonic()
    for m in messages:
        try:
            await m.nack(0.0)
        except PortableError as exc:
            log.warning("could not give back message %s on leaving the loop: %s", m.id, exc)
    log.debug("gave back %d unsettled message(s) in %.3fs", len(messages), time.monotonic() - started)
