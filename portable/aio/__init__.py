"""portable.aio: the async face of every domain, mirroring the sync API.

Same names, arguments, errors, capabilities and validation as the sync types;
``async with`` for lifetimes::

    import portable.aio

    async with portable.aio.open_bucket("s3://bucket/prefix") as bucket:
        await bucket.put("reports/2026-12.json", data, if_none_match="*")
        async with bucket.open("big.bin", "rb") as reader:
            async for chunk in reader:
                ...

Each face shares the sync face's validation and resilience layer: one breaker
and one retry budget per endpoint, whichever face calls. A driver whose
library is natively async serves the calls on the event loop; any other is
adapted through one bounded thread pool (:mod:`portable.driver.threads`),
never a thread per call. See docs/async.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._bucket import AsyncBucket, open_bucket
    from ._compute import AsyncJob, AsyncLauncher, open_launcher
    from ._idempotency import AsyncIdempotencyStore, open_store
    from ._messaging import (
        AsyncMessage,
        AsyncSubscription,
        AsyncTopic,
        open_subscription,
        open_topic,
    )

# Each domain loads on first use, as in :mod:`portable` (PEP 562).
_LAZY = {
    "AsyncBucket": "_bucket",
    "AsyncIdempotencyStore": "_idempotency",
    "AsyncJob": "_compute",
    "AsyncLauncher": "_compute",
    "AsyncMessage": "_messaging",
    "AsyncSubscription": "_messaging",
    "AsyncTopic": "_messaging",
    "open_bucket": "_bucket",
    "open_launcher": "_compute",
    "open_store": "_idempotency",
    "open_subscription": "_messaging",
    "open_topic": "_messaging",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'portable.aio' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"portable.aio.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AsyncBucket",
    "AsyncIdempotencyStore",
    "AsyncJob",
    "AsyncLauncher",
    "AsyncMessage",
    "AsyncSubscription",
    "AsyncTopic",
    "open_bucket",
    "open_launcher",
    "open_store",
    "open_subscription",
    "open_topic",
]
