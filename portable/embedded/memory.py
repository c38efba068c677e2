"""``mem://`` — an in-process bucket.

URLs:
    ``mem://`` or ``mem://NAME``. Buckets with the same NAME in one process
    share their objects (like a server would); an empty NAME is private to
    the Bucket that opened it.

Options: none.

As: nothing.

Capabilities: everything but signed URLs. Objects live in memory and vanish
with the process. Content type, the ``cache_control``, ``content_encoding``
and ``content_disposition`` headers and user metadata are kept as given and
returned by ``head``.

Leftovers: none. A streamed write holds its bytes in the writer until commit,
so a killed writer leaves nothing; ``abort_incomplete`` returns ``[]``.
"""

from __future__ import annotations

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
    page_of_sorted_keys,
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
    def __init__(self) -> None:
        self.objects: dict[str, _StoredObject] = {}
        self.lock = threading.Lock()
        self.counter = itertools.count(1)


_NAMED_STORES: dict[str, _ObjectStore] = {}
_NAMED_STORES_LOCK = threading.Lock()


class MemoryStorage(StorageDriver):
    """Objects in a dict, guarded by one lock for conditional writes."""

    scheme = "mem"
    capabilities = StorageCapabilities(signed_urls=False, min_part_bytes=1, max_metadata_bytes=2048)

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
            store.objects[key] = _StoredObject(
                data, etag, dt.datetime.now(dt.UTC), options.content_type, dict(options.metadata),
                options.cache_control, options.content_encoding, options.content_disposition,
            )
        return etag

    def delete(self, key: str) -> None:
        with self._store.lock:
            self._store.objects.pop(key, None)

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
        objects = self._store.objects

        def info(key: str) -> ObjectInfo | None:
            obj = objects.get(key)
            if obj is None:
                return None
            return ObjectInfo(key, len(obj.data), obj.etag, obj.modified, obj.content_type)

        keys = sorted(k for k in list(objects) if k.startswith(prefix))
        return page_of_sorted_keys(keys, info, prefix, delimiter, start_after, page_size, token)

    def abort_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        """Nothing to remove: an uncommitted stream's bytes live only in its writer."""
        return []

    def list_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        return []


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
