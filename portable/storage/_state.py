"""What the parts of :class:`~portable.storage.Bucket` share: its slots, declared once for the type checker."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..driver.storage import ObjectInfo, StorageCapabilities, StorageDriver
from ..resilience import Guard


class BucketState:
    """The attributes ``Bucket.__init__`` sets, which its mixins read.

    Annotations only: ``Bucket`` holds the slots, so a mixin adds no
    ``__dict__`` and no lookup cost.
    """

    __slots__ = ()

    _caps: StorageCapabilities
    _driver: StorageDriver
    _guard: Guard
    _max_key: int
    provider: str
    #: ``Bucket.list``, which ``copy_prefix`` pages through.
    list: Callable[..., Iterator[ObjectInfo]]
