"""The batched loop's shared window (issue 22): a window whose keys are all new runs on one claim.

When a store answers every key of a window with one and the same new claim (SqliteStore's
``claim_many``, or any store for a window of one), ``Subscription.run(concurrency=1)`` runs the
window's handlers in a tight loop and holds their completions and acks back in bulk
(``ConsumerLoop._run_window``). These tests run it on the real sqlite:// queue and SqliteStore
files and check that it keeps every rule of the message script: a failed handler is retried
with its claim given back, a bytes result is kept, a message the handler settled itself is not
settled again, an interrupted run gives the rest of its window back unstarted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import portable.messaging as pm
from portable.idempotency import SqliteStore
from portable.messaging._consumer import ConsumerLoop
from tests.messaging.consumer_support import publish_keyed as _publish
from tests.messaging.consumer_support import store_rows as _rows


def _run_until(sub: pm.Subscription, handler: Any, done: Any, **kwargs: Any) -> pm.RunStats:
    stop = threading.Event()
    box: dict[str, pm.RunStats] = {}
    thread = threading.Thread(target=lambda: box.setdefault("stats", sub.run(
        handler, stop_event=stop, handle_signals=False, poll=0.05, **kwargs)), daemon=True)  # fmt: skip
    thread.start()
    until = time.monotonic() + 30
    while not done() and time.monotonic() < until:
        time.sleep(0.02)
    time.sleep(0.2)  # what the loop does after: settles the window, nothing more to receive
    stop.set()
    thread.join(30)
    assert done(), "the loop did not get there in time"
    return box["stats"]


@pytest.fixture
def windows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each window the loop ran on a shared claim."""
    sizes: list[int] = []
    original = ConsumerLoop._run_window

    def spy(self: ConsumerLoop, upcoming: list[pm.Message], claim: Any, window: list[pm.Message]) -> int:
        sizes.append(len(upcoming))
        return original(self, upcoming, claim, window)

    monkeypatch.setattr(ConsumerLoop, "_run_window", spy)
    return sizes


def _empty(sub: pm.Subscription) -> bool:
    stats = sub.stats()
    return (stats.available, stats.in_flight, stats.delayed) == (0, 0, 0)


def test_a_failed_handler_in_a_shared_window_is_retried_and_the_others_are_completed_once(
    tmp_path: Path, unique_name: str, windows: list[int]
) -> None:
    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    keys = _publish(url, 40)
    calls: Counter[str] = Counter()

    def handler(m: pm.Message) -> None:
        calls[m.idempotency_key] += 1  # type: ignore[index]
        if m.idempotency_key == "w-05" and calls["w-05"] == 1:
            raise ValueError("the first time")

    sub = pm.open_subscription(url)
    stats = _run_until(sub, handler, lambda: calls["w-05"] == 2 and _empty(sub), idempotency=SqliteStore(tmp_path / "i.db"),
                       backoff=0.05, max_backoff=0.05)  # fmt: skip
    assert windows and sum(windows) >= len(keys), windows  # every message ran in a shared window
    assert calls == Counter({k: 2 if k == "w-05" else 1 for k in keys})
    assert (stats.acked, stats.failed, stats.nacked, stats.skipped, stats.lost) == (40, 1, 1, 0, 0)
    rows = _rows(tmp_path / "i.db")
    assert {k: (r[0], r[2], r[3]) for k, r in rows.items()} == {k: (1, 2, 1) if k == "w-05" else (1, 1, 0) for k in keys}


def test_a_shared_window_keeps_bytes_results_and_what_the_handler_settled_itself(
    tmp_path: Path, unique_name: str, windows: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    """Even keys return bytes (kept as the key's result), w-01 is acked by its handler (counted
    once, not acked again), w-03 is nacked by its handler (not acked by the loop; its key is
    completed, so the redelivery is skipped)."""
    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    keys = _publish(url, 12)
    calls: Counter[str] = Counter()

    def handler(m: pm.Message) -> bytes | None:
        key = m.idempotency_key
        assert key is not None
        calls[key] += 1
        if key == "w-01":
            m.ack()
        elif key == "w-03":
            m.nack(0)
        return f"result of {key}".encode() if int(key[2:]) % 2 == 0 else None

    sub = pm.open_subscription(url)
    caplog.set_level(logging.WARNING, "portable.messaging")
    stats = _run_until(sub, handler, lambda: len(calls) == 12 and _empty(sub), idempotency=SqliteStore(tmp_path / "i.db"))
    assert windows, "the shared window was not taken"
    assert calls == Counter(dict.fromkeys(keys, 1))  # w-03's redelivery skipped, not run
    assert (stats.acked, stats.skipped, stats.failed, stats.lost) == (12, 1, 0, 0)  # w-03 acked when skipped
    assert not [r for r in caplog.records if "ack of message" in r.getMessage()]  # w-01 not acked twice
    rows = _rows(tmp_path / "i.db")
    assert {k: (r[0], r[1]) for k, r in rows.items()} == {
        k: (1, f"result of {k}".encode() if int(k[2:]) % 2 == 0 else None) for k in keys
    }


def test_an_interrupted_shared_window_completes_what_ran_and_gives_back_the_rest_unstarted(
    tmp_path: Path, unique_name: str, windows: list[int]
) -> None:
    """KeyboardInterrupt in the 4th handler of the first window (the first batch: 8 messages):
    the first three are completed and acked, the 4th's claim is released, the other four go
    back with their claims taken back (no start counted); the next run handles the other 17,
    each once, and never the first three."""
    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    keys = _publish(url, 20)
    store_path = tmp_path / "i.db"
    first: list[str] = []

    def interrupted(m: pm.Message) -> None:
        first.append(m.idempotency_key)  # type: ignore[arg-type]
        if len(first) == 4:
            raise KeyboardInterrupt

    sub = pm.open_subscription(url, lease=60)
    with pytest.raises(KeyboardInterrupt):
        sub.run(interrupted, idempotency=SqliteStore(store_path), handle_signals=False, poll=0.05, drain_timeout=1)
    assert windows == [8] and first == keys[:4]
    rows = _rows(store_path)
    assert {k: (r[0], r[4]) for k, r in rows.items() if k in keys[:4]} == {
        **{k: (1, 0) for k in keys[:3]}, keys[3]: (0, 1)
    }  # completed x3; the 4th released
    assert all(rows.get(k, (0, None, 0))[2] == 0 for k in keys[4:8]), rows  # given back unstarted
    again: list[str] = []
    _run_until(sub, lambda m: again.append(m.idempotency_key), lambda: len(again) >= 17 and _empty(sub),
               idempotency=SqliteStore(store_path))  # fmt: skip
    assert sorted(again) == keys[3:]


@pytest.mark.parametrize("key_of", ["publisher's key", "a key function"])
def test_the_shared_window_is_taken_for_distinct_keys_and_not_for_a_repeated_one(
    tmp_path: Path, unique_name: str, windows: list[int], key_of: str
) -> None:
    """With the publisher's key or a key function of the caller's: a window of distinct keys runs
    on the shared claim; a window with a key twice takes the general path (its second copy is
    skipped after the first completes)."""
    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    keys = _publish(url, 30)
    kwargs: dict[str, Any] = {} if key_of == "publisher's key" else {"idempotency_key": lambda m: m.body.decode()}
    handled: list[bytes] = []
    sub = pm.open_subscription(url)
    store = SqliteStore(tmp_path / "i.db")
    _run_until(sub, lambda m: handled.append(m.body), lambda: len(handled) == 30 and _empty(sub), idempotency=store, **kwargs)
    assert sum(windows) == 30
    windows.clear()
    with pm.open_topic(url) as topic:  # a body twice: the key function's key twice (the queue keeps both: no publisher's key)
        topic.publish_batch([b"x-1", b"x-2", b"x-1"])
    handled.clear()
    stats = _run_until(sub, lambda m: handled.append(m.body), lambda: _empty(sub), idempotency=store, **kwargs)
    if key_of == "publisher's key":  # no key at all: nothing to claim, the general path runs all three
        assert sorted(handled) == [b"x-1", b"x-1", b"x-2"] and windows == []
    else:
        assert sorted(handled) == [b"x-1", b"x-2"] and stats.skipped == 1 and windows == []
    assert sorted(set(_rows(tmp_path / "i.db"))) >= sorted(keys)


@pytest.mark.parametrize("first_nacked", [False, True])
def test_the_batched_ack_reports_a_lost_lease_against_its_own_message(tmp_path: Path, unique_name: str, first_nacked: bool) -> None:
    """``Subscription._ack_each`` (the loop's one ack a batch): one message's lease ran out and it was
    delivered again elsewhere; its error is reported at its own place in the list (also behind a
    message the handler had settled already), the others are acked."""
    url = f"sqlite://{tmp_path / 'q.db'}?name={unique_name}"
    _publish(url, 4)
    sub, other = pm.open_subscription(url), pm.open_subscription(url)
    got = sub.receive(4, wait=1.0, lease=1.0)
    assert len(got) == 4
    stale = got[1]
    for m in got[2:]:
        m.extend_lease(30)
    time.sleep(1.1)
    again = other.receive(4, wait=1.0, lease=30)
    assert [m.idempotency_key for m in again] == [got[0].idempotency_key, stale.idempotency_key]
    got[0] = again[0]  # held by the other consumer now (a handle is a handle: this one acks it)
    if first_nacked:
        got[0].nack(0)  # settled before the batch's ack: left alone
    errors = sub._ack_each(got)
    assert [type(e).__name__ for e in errors] == ["NoneType", "PreconditionFailed", "NoneType", "NoneType"], errors
    assert [m._state for m in got] == ["nacked" if first_nacked else "acked", "leased", "acked", "acked"]
    again[1].ack()
    left = sub.stats()
    assert (left.available + left.delayed, left.in_flight) == (1 if first_nacked else 0, 0)
