"""Object storage through one API: :class:`Bucket` and :func:`open_bucket`.

>>> import portable.storage
>>> bucket = portable.storage.open_bucket("mem://")
>>> bucket.put("reports/2026-11.json", b"{}", if_none_match="*") is not None
True
>>> bucket.get("reports/2026-11.json")
b'{}'

Every method validates its arguments before a driver sees them, runs the
driver call under the profile's retry policy, circuit breaker and deadline
(:mod:`portable.resilience`), and raises only :mod:`portable.errors` types,
with the provider's error as ``__cause__``.

Keys are portable: a key that one provider accepts, every provider accepts.
A key is a non-empty string of at most ``capabilities.max_key_bytes`` UTF-8
bytes (1,024 on every built-in provider), with no control characters (C0,
DEL, C1: NUL, newline, U+0085, ...) and no U+2028 or U+2029 line separators,
no leading or trailing ``/``, and no empty, ``.`` or ``..`` segment.
"""

from __future__ import annotations

# The names aliased to themselves are importable from here as they were before
# the package split, but not in __all__: their home is portable.driver.storage
# (check_key and the driver types), or they serve adapters and tests.
from ..driver.storage import ListPage, ObjectInfo, StorageCapabilities
from ..driver.storage import StorageDriver as StorageDriver
from ..driver.storage import WriteOptions as WriteOptions
from ..driver.storage import WriteStream as WriteStream
from ..driver.storage import check_key as check_key
from ._bucket import Bucket
from ._open import open_bucket
from ._open import open_driver as open_driver
from ._streams import DEFAULT_PART_SIZE as DEFAULT_PART_SIZE

__all__ = ["Bucket", "ListPage", "ObjectInfo", "StorageCapabilities", "open_bucket"]
