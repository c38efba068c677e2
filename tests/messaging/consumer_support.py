"""Helpers shared by the consumer-loop tests: a quick-retry profile and run() in a thread."""

from __future__ import annotations

import threading
from typing import Any

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
