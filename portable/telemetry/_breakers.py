"""Breaker state changes as metrics: one listener on every breaker while metrics are on."""

from __future__ import annotations

import threading
from typing import Any

from ._observe import BREAKER_LISTENERS

__all__ = ["watch_breakers"]

_lock = threading.Lock()
_instruments: Any = None


def _on_change(breaker: Any, old: str, new: str) -> None:
    instruments = _instruments
    if instruments is None:
        return
    instruments.breaker_changes.add(
        1,
        {"portable.breaker.name": breaker.name, "portable.breaker.state": new, "portable.breaker.previous_state": old},
    )


def watch_breakers(instruments: Any) -> None:
    """Count every breaker's state changes with ``instruments`` (None: stop counting).

    The listener goes into :data:`portable.telemetry._observe.BREAKER_LISTENERS`, the list
    :func:`portable.resilience.add_breaker_listener` adds to.
    """
    global _instruments
    with _lock:
        _instruments = instruments
        listening = _on_change in BREAKER_LISTENERS
        if instruments is not None and not listening:
            BREAKER_LISTENERS.append(_on_change)
        elif instruments is None and listening:
            BREAKER_LISTENERS.remove(_on_change)
