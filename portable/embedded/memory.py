"""``mem://`` — an in-process bucket.

URLs:
    ``mem://`` or ``mem://NAME``. Buckets with the same NAME in one process
    share their objects (like a server would); an empty NAME is private to
    the Bucket that opened it.

Options: none.

As: nothing.

Capabilities: everything but signed URLs and resumable writes. Objects live
in memory and vanish with the process, so ``open(key, "wb", resume=True)``
raises Unsupported: there is no later process for a resume to serve. Content type, the ``cache_control``, ``content_encoding``
and ``content_disposition`` headers and user metadata are kept as given and
returned by ``head``.

Listing: keys are kept in an ordered index, brought up to date when a
listing needs it (keys written since are inserted, or sorted in at once when
many). A page is a binary search and a slice; a folded prefix is stepped over
with one more search, whatever it holds.

Leftovers: none. A streamed write holds its bytes in the writer until commit,
so a killed writer leaves nothing; ``abort_incomplete`` returns ``[]``.
"""

from __future__ import annotations

import bisect
import datetime as dt
import io
import itertools
import threading
from dataclasses import dataclass
from typing import IO

from ..driver.storage import (
    ListPage,
    ObjectInfo,
    StorageCapabilities,
    StorageDriver,
    WriteOptions,
    WriteStream,
)
from ..errors import AlreadyExists, NotFound, PreconditionFailed
from ..urls import ParsedURL

__all__ = ["MemoryStorage"]


@dataclass(slots=True)
class _StoredObject:
    data: bytes
    etag: str
    modified: dt.datetime
    content_type: str | None
    metadata: dict[str, str]
    cache_control: str | None = None
    content_encoding: str | None = None
    content_disposition: str | None = None


class _ObjectStore:
    """The objects, and their keys in order for listing.

    ``sorted_keys`` is brought up to date when a listing needs it, under the
    lock: keys added since are inserted (a few one by one, many in one sort
    that merges two ordered runs), and keys deleted since stay in it
    (``stale``) until they are half of it (a listing skips a key no longer in
    ``objects``); a stale key stored again is in the index already.
    """

    def __init__(self) -> None:
        self.objects: dict[str, _StoredObject] = {}
        self.lock = threading.Lock()
        self.counter = itertools.count(1)
        self.sorted_keys: list[str] = []
        self.added: set[str] = set()
        self.stale: set[str] = set()

    def put(self, key: str, obj: _StoredObject) -> None:
        """Store ``obj`` under ``key``; the caller holds the lock."""
        if key in self.stale:
            self.stale.discard(key)  # still in sorted_keys
        elif key not in self.objects:
            self.added.add(key)
        self.objects[key] = obj

    def delete(self, key: str) -> None:
        """Remove ``key``; the caller holds the lock."""
        if self.objects.pop(key, None) is not None:
            if key in self.added:
                self.added.discard(key)
            else:
                self.stale.add(key)

    def keys_from(self, lower: str, inclusive: bool, count: int) -> list[str]:
        """Up to ``count`` keys from the first ``>= lower`` (``inclusive``) or ``> lower``, in order.

        A key deleted since the index was brought up to date may be among them.
        """
        with self.lock:
            keys = self.sorted_keys
            if len(self.stale) > len(keys) // 2:
                keys = self.sorted_keys = sorted(self.objects)
                self.added.clear()
                self.stale.clear()
            elif self.added:
                if len(self.added) <= _INSERT_ONE_BY_ONE:
                    for key in self.added:
                        bisect.insort(keys, key)
                else:
                    keys.extend(sorted(self.added))
                    keys.sort()  # two ordered runs: one merge
                self.added.clear()
            at = (bisect.bisect_left if inclusive else bisect.bisect_right)(keys, lower)
            return keys[at : at + count]


#: keys added since the last listing that are inserted one by one (more are sorted in at once)
_INSERT_ONE_BY_ONE = 64
_NAMED_STORES: dict[str, _ObjectStore] = {}
_NAMED_STORES_LOCK = threading.Lock()


class MemoryStorage(StorageDriver):
    """Objects in a dict, guarded by one lock for conditional writes."""

    scheme = "mem"
    capabilities = StorageCapabilities(signed_urls=False, min_part_bytes=1, max_metadata_bytes=2048)
    #: every call is a dict operation under a lock held for microseconds: the async face awaits it
    #: inline instead of through the thread pool (portable.driver.aio_storage)
    never_blocks = True
    resume_limitation = "mem:// objects and uploads end with the process, so no later process could resume one"

    def __init__(self, name: str = "") -> None:
        self.endpoint = f"mem://{name}"
        if name:
            with _NAMED_STORES_LOCK:
                self._store = _NAMED_STORES.setdefault(name, _ObjectStore())
        else:
            self._store = _ObjectStore()

    @classmethod
    def from_url(cls, url: ParsedURL) -> MemoryStorage:
        url.done()
        return cls((url.netloc + url.path).strip("/"))

    def _not_found(self, key: str) -> NotFound:
        return NotFound(f"no object {key!r}", provider=self.scheme)

    def get(self, key: str) -> bytes:
        obj = self._store.objects.get(key)
        if obj is None:
            raise self._not_found(key)
        return obj.data

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        return self.get(key)[start:end]

    def head(self, key: str) -> ObjectInfo:
        obj = self._store.objects.get(key)
        if obj is None:
            raise self._not_found(key)
        return ObjectInfo(
            key, len(obj.data), obj.etag, obj.modified, obj.content_type, dict(obj.metadata),
            cache_control=obj.cache_control, content_encoding=obj.content_encoding,
            content_disposition=obj.content_disposition,
        )

    def put(self, key: str, data: bytes, options: WriteOptions) -> str:
        store = self._store
        with store.lock:
            if options.if_none_match and key in store.objects:
                raise AlreadyExists(f"{key!r} exists", provider=self.scheme)
            if options.if_match is not None:
                current = store.objects.get(key)
                if current is None or current.etag != options.if_match:
                    raise PreconditionFailed(f"{key!r} does not have etag {options.if_match}", provider=self.scheme)
            etag = f'"m{next(store.counter)}"'
            store.put(key, _StoredObject(
                data, etag, dt.datetime.now(dt.UTC), options.content_type, dict(options.metadata),
                options.cache_control, options.content_encoding, options.content_disposition,
            ))
        return etag

    def delete(self, key: str) -> None:
        with self._store.lock:
            self._store.delete(key)

    def copy(self, src: str, dst: str) -> str:
        obj = self._store.objects.get(src)
        if obj is None:
            raise self._not_found(src)
        options = WriteOptions(
            obj.content_type, obj.metadata, cache_control=obj.cache_control,
            content_encoding=obj.content_encoding, content_disposition=obj.content_disposition,
        )
        return self.put(dst, obj.data, options)

    def open_read(self, key: str) -> IO[bytes]:
        return io.BytesIO(self.get(key))

    def open_write(self, key: str, options: WriteOptions, part_size: int) -> WriteStream:
        return _MemoryWrite(self, key, options)

    def list_page(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        """One page from the ordered key index: a binary search to the page's start, then its keys;
        a folded prefix is stepped over with one more search, whatever it holds."""
        objects = self._store.objects
        after = max(filter(None, (start_after, token)), default="")
        lower, inclusive = (prefix, True) if prefix > after else (after, False)
        if token and delimiter and token.endswith(delimiter) and _past(token) > lower:
            lower, inclusive = _past(token), True  # every key under the folded prefix was skipped
        found: list[ObjectInfo] = []
        prefixes: list[str] = []
        last: str | None = None
        step = page_size + 1
        while True:
            left = page_size - len(found) - len(prefixes) + 1  # one more than the page holds: is there more?
            want = min(left, step)
            step = 2 * step  # after a folded prefix the next batch starts small: it may be another one
            batch = self._store.keys_from(lower, inclusive, want)
            for key in batch:
                if not key.startswith(prefix):
                    return ListPage(found, prefixes, None)
                lower, inclusive = key, False
                obj = objects.get(key)
                if obj is None:
                    continue  # deleted since the index was brought up to date
                if len(found) + len(prefixes) >= page_size:
                    return ListPage(found, prefixes, last)
                if delimiter and (cut := key.find(delimiter, len(prefix))) >= 0:
                    last = key[: cut + 1]
                    prefixes.append(last)
                    lower, inclusive = _past(last), True
                    step = 2
                    break  # search again past the folded prefix
                found.append(ObjectInfo(key, len(obj.data), obj.etag, obj.modified, obj.content_type))
                last = key
            else:
                if len(batch) < want:
                    return ListPage(found, prefixes, None)  # the index ran out

    def abort_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        """Nothing to remove: an uncommitted stream's bytes live only in its writer."""
        return []

    def list_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        return []


def _past(folded: str) -> str:
    """The least string above every key that starts with ``folded`` (which ends in the delimiter)."""
    return folded[:-1] + chr(ord(folded[-1]) + 1)


class _MemoryWrite(WriteStream):
    def __init__(self, driver: MemoryStorage, key: str, options: WriteOptions) -> None:
        self._driver = driver
        self._key = key
        self._options = options
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self._parts.append(data)

    def commit(self) -> str:
        return self._driver.put(self._key, b"".join(self._parts), self._options)

    def abort(self) -> None:
        self._parts.clear()
