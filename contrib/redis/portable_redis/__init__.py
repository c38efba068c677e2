"""portable-cloud-redis: a Redis idempotency store for :mod:`portable.idempotency`.

``open_store("redis://127.0.0.1:6379/0")`` returns a :class:`RedisStore`
(through the entry-point group ``portable.idempotency``).
"""

from __future__ import annotations

from .store import RedisStore

__all__ = ["RedisStore"]
