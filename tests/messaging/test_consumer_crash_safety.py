"""Issue 25 item 1 and issue 15 item 7 (consumer half): what ``run()`` does after a crash.

* an idempotency claim in progress holds a message back until the claim's
  lease ends, without spending a delivery: ``max_deliveries`` counts the
  handler's starts for the key (a crash mid-handler is a start that never
  finished), and a dead-letter reason says what happened;
* where a subscription cannot count deliveries, ``max_deliveries`` needs a store.

Issue 25 item 5 (effects in the store's transaction): test_effects_in_transaction.py.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from portable.driver.messaging import ReceivedMessage
from portable.errors import MissingCapability
from portable.idempotency import MemoryStore, fingerprint
from portable.messaging import (
    DEAD_LETTER_REASON,
    Message,
    Subscription,
    open_topic,
)
from portable.testing.messaging_suite import poll, wait_for
from tests.messaging.consumer_support import open_quick, quick_profile, run_in_thread


def _dead_letters(sub: Subscription) -> Subscription:
    return open_quick(sub.dead_letter_url or "")


# ---------------------------------------------------------------- 25.1
def test_a_crashed_consumers_claim_delays_the_message_without_spending_deliveries() -> None:
    """The issue's repro: key k1 claimed by a consumer that died; its message is handled, not dead-lettered."""
    url = "mem://crash-claim-k1"
    store = MemoryStore()
    dead = store.claim(
        "k1", fingerprint(b"order"), lease=3.5, ttl=600
    )  # the crashed consumer's claim
    assert dead.status == "acquired"
    open_topic(url, profile=quick_profile(url)).publish(b"order", idempotency_key="k1")
    sub = open_quick(url)
    handled: list[int] = []
    # On the base, each redelivery during the claim was a nack "in progress" counted as a
    # delivery (every 1 s here): at attempt 3 the message went to the dead-letter queue.
    finish = run_in_thread(
        sub,
        lambda m: handled.append(m.delivery_attempt),
        idempotency=store,
        max_deliveries=2,
        backoff=0.1,
        poll=0.2,
    )
    wait_for(lambda: handled, 15, "the handler to run once the dead consumer's claim lapsed")
    wait_for(lambda: sub.stats().available == 0 and sub.stats().in_flight == 0, 5, "the ack")
    stats = finish()
    assert len(handled) == 1
    assert stats.dead_lettered == 0 and stats.acked == 1 and stats.deferred >= 1
    assert poll(_dead_letters(sub), 1, 0.2) == []
    assert store.claim("k1", fingerprint(b"order"), lease=1, ttl=600).status == "completed"


def test_a_message_whose_handler_never_finished_is_dead_lettered_saying_so() -> None:
    url = "mem://crash-never-finished"
    store = MemoryStore()
    for _ in range(3):  # three consumers took the key to run it and were killed mid-handler
        crashed = store.claim("k2", fingerprint(b"kills"), lease=0.05, ttl=600)
        assert crashed.status == "acquired"
        time.sleep(0.06)
    open_topic(url, profile=quick_profile(url)).publish(b"kills", idempotency_key="k2")
    sub = open_quick(url)
    calls: list[Message] = []
    finish = run_in_thread(sub, calls.append, idempotency=store, max_deliveries=3, poll=0.2)
    [dead] = poll(_dead_letters(sub), 1, 10)
    stats = finish()
    assert calls == []  # the base ran it: its delivery_attempt was 1
    reason = dead.attributes[DEAD_LETTER_REASON]
    assert "the handler started 3 times and never finished" in reason, reason
    assert stats.dead_lettered == 1
    again = store.claim(
        "k2", fingerprint(b"kills"), lease=1, ttl=600
    )  # the counts were dropped with it
    assert (again.status, again.starts) == ("acquired", 1)


def test_a_failing_handler_is_dead_lettered_with_how_often_it_failed_and_the_last_error() -> None:
    url = "mem://crash-fails"
    store = MemoryStore()
    open_topic(url, profile=quick_profile(url)).publish(b"poison", idempotency_key="k3")
    sub = open_quick(url)
    seen: list[int] = []

    def fail(m: Message) -> None:
        seen.append(m.delivery_attempt)
        raise ValueError(f"bad order #{len(seen)}")

    finish = run_in_thread(sub, fail, idempotency=store, max_deliveries=3, backoff=0, poll=0.2)
    [dead] = poll(_dead_letters(sub), 1, 10)
    stats = finish()
    assert (
        dead.attributes[DEAD_LETTER_REASON]
        == "the handler failed 3 times (last: ValueError: bad order #3)"
    )
    assert seen == [1, 2, 3] and stats.failed == 3 and stats.dead_lettered == 1


def test_a_reason_tells_failures_and_crashes_apart() -> None:
    url = "mem://crash-mixed"
    store = MemoryStore()
    crashed = store.claim(
        "k4", fingerprint(b"x"), lease=0.05, ttl=600
    )  # one start that never finished
    assert crashed.status == "acquired"
    time.sleep(0.06)
    open_topic(url, profile=quick_profile(url)).publish(b"x", idempotency_key="k4")
    sub = open_quick(url)

    def fail(m: Message) -> None:
        raise KeyError("sku")

    finish = run_in_thread(sub, fail, idempotency=store, max_deliveries=3, backoff=0, poll=0.2)
    [dead] = poll(_dead_letters(sub), 1, 10)
    finish()
    assert dead.attributes[DEAD_LETTER_REASON] == (
        "the handler started 3 times without success: it failed 2 times (last: KeyError: 'sku') "
        "and never finished once (the consumer crashed or timed out)"
    )


def test_without_a_store_the_reason_names_the_delivery_and_the_error() -> None:
    url = "mem://crash-no-store"
    open_topic(url, profile=quick_profile(url)).publish(b"poison")
    sub = open_quick(url)

    def fail(m: Message) -> None:
        raise ValueError("nope")

    finish = run_in_thread(sub, fail, max_deliveries=2, backoff=0, poll=0.2)
    [dead] = poll(_dead_letters(sub), 1, 10)
    finish()
    assert (
        dead.attributes[DEAD_LETTER_REASON]
        == "the handler failed on delivery 2 (max_deliveries=2): ValueError: nope"
    )


class _UncountedStore:
    """A third-party store whose claims carry no counts: the provider's delivery count decides."""

    def __init__(self) -> None:
        self.inner = MemoryStore()

    def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Any:
        claim = self.inner.claim(key, fingerprint, lease=lease, ttl=ttl)
        return dataclasses.replace(claim, lease_remaining=None, starts=None, failures=None)

    def complete(self, key: str, token: str, result: bytes | None) -> None:
        self.inner.complete(key, token, result)

    def release(self, key: str, token: str) -> None:
        self.inner.release(key, token)


def test_a_store_that_does_not_count_keeps_the_delivery_count_rule() -> None:
    url = "mem://crash-uncounted"
    store = _UncountedStore()
    open_topic(url, profile=quick_profile(url)).publish(b"p", idempotency_key="k5")
    sub = open_quick(url)
    for _ in range(2):  # two consumers crashed holding the message (no claim)
        [m] = poll(sub, 1, 5, lease=0.05)
        wait_for(lambda m=m: m.lease_remaining == 0, 2, "the lease to end")
    calls: list[Message] = []
    finish = run_in_thread(sub, calls.append, idempotency=store, max_deliveries=2, poll=0.2)
    [dead] = poll(_dead_letters(sub), 1, 10)
    finish()
    assert calls == []
    assert dead.attributes[DEAD_LETTER_REASON].startswith("delivered 3 times without success")


# ---------------------------------------------------------------- 15.7 (consumer half)
def _uncounted(sub: Subscription) -> Subscription:
    """``sub`` as a Pub/Sub subscription without a dead-letter policy sees it: attempt 1 forever."""
    sub.capabilities = dataclasses.replace(sub.capabilities, delivery_count=False)
    side = sub._side
    receive = side.receive

    def receive_attempt_one(max_messages: int, wait: float, lease: float) -> list[ReceivedMessage]:
        return [ReceivedMessage.like(m, m.handle, 1) for m in receive(max_messages, wait, lease)]

    side.receive = receive_attempt_one  # type: ignore[method-assign]
    return sub


def test_max_deliveries_is_refused_where_deliveries_are_not_counted_and_no_store_is_given() -> None:
    url = "mem://uncounted-refused"
    open_topic(url, profile=quick_profile(url)).publish(b"p")
    sub = _uncounted(open_quick(url))
    with pytest.raises(
        MissingCapability, match=r"dead-letter policy.*--max-delivery-attempts"
    ) as err:
        sub.run(lambda m: None, max_deliveries=3, handle_signals=False)
    assert "idempotency=store" in str(err.value)
    assert sub.stats().available == 1  # refused at start: nothing was received


def test_max_deliveries_none_runs_where_deliveries_are_not_counted() -> None:
    url = "mem://uncounted-none"
    open_topic(url, profile=quick_profile(url)).publish(b"p")
    sub = _uncounted(open_quick(url))
    handled: list[bytes] = []
    finish = run_in_thread(sub, lambda m: handled.append(m.body), max_deliveries=None, poll=0.2)
    wait_for(lambda: handled == [b"p"], 5, "the message")  # raises if the handler never ran
    finish()
    assert handled == [b"p"], "handled once, not refused for lack of a delivery count"


def test_with_a_store_run_counts_starts_itself_where_the_provider_does_not() -> None:
    """Pub/Sub without a dead-letter policy ran a poison message 2,678 times: now it stops at 3."""
    url = "mem://uncounted-store"
    open_topic(url, profile=quick_profile(url)).publish(
        b"poison"
    )  # no idempotency key: counted by message id
    sub = _uncounted(open_quick(url))
    attempts: list[int] = []

    def fail(m: Message) -> None:
        attempts.append(m.delivery_attempt)
        raise ValueError("poison")

    finish = run_in_thread(
        sub, fail, idempotency=MemoryStore(), max_deliveries=3, backoff=0, poll=0.2
    )
    [dead] = poll(_dead_letters(sub), 1, 10)
    finish()
    assert attempts == [1, 1, 1]  # what the provider said each time
    assert (
        dead.attributes[DEAD_LETTER_REASON]
        == "the handler failed 3 times (last: ValueError: poison)"
    )
