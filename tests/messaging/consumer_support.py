"""Helpers shared by the consumer-loop tests: a quick-retry profile, run() in a thread, keyed
messages on a queue and the rows of a SqliteStore file."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import portable.messaging as pm
from portable.config import Profile
from portable.messaging import Subscription, open_subscription
from portable.resilience import ResiliencePolicy, RetryPolicy


def quick_profile(queue: str) -> Profile:
    """A profile on ``queue`` with two quick attempts and no breaker."""
    return Profile(
        name="t", storage="mem://t", queue=queue, jobs="local://./jobs",
        resilience=ResiliencePolicy(retry=RetryPolicy(max_attempts=2, initial_backoff=0.01), breaker=None),
    )  # fmt: skip


def open_quick(url: str) -> Subscription:
    return open_subscription(url, profile=quick_profile(url))


def run_in_thread(sub: Subscription, handler: Any, **options: Any) -> Any:
    """Start ``sub.run(handler, ...)`` in a thread; return ``finish()``, which stops it and gives its stats."""
    stop = threading.Event()
    box: dict[str, Any] = {}

    def target() -> None:
        box["stats"] = sub.run(handler, stop_event=stop, handle_signals=False, **options)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()

    def finish() -> Any:
        stop.set()
        thread.join(30)
        assert not thread.is_alive()
        return box["stats"]

    return finish


def publish_keyed(url: str, n: int) -> list[str]:
    """Publish ``n`` messages to ``url``, ``w-00``, ``w-01``, ...: each its key as body and publisher's key."""
    keys = [f"w-{i:02}" for i in range(n)]
    with pm.open_topic(url) as topic:
        topic.publish_batch([pm.OutgoingMessage(k.encode(), idempotency_key=k) for k in keys])
    return keys


def store_rows(path: Path) -> dict[str, tuple[Any, ...]]:
    """key -> (completed, result, starts, failures, released) as the SqliteStore file at ``path`` holds them."""
    with sqlite3.connect(path) as conn:
        return {row[0]: row[1:] for row in conn.execute(
            "SELECT key, completed, result, starts, failures, released FROM portable_idempotency")}  # fmt: skip
