"""Batches: ``get_many``, ``put_many``, ``delete_many``, ``copy_many`` and ``copy_prefix``.

The driver moves a batch with its library's native concurrency and reports
each item's outcome; a failed item is classified here and, if retryable,
retried on its own under the policy, so one throttled object does not fail
(or repeat) the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal, TypeVar

from ..driver.storage import check_key
from ..errors import InvalidArgument, NotFound
from ._checks import check_prefix, checked_bytes, checked_write_options
from ._state import BucketState

T = TypeVar("T")

#: How many items a batch hands to the driver at once; in-flight work drains at each boundary.
DRIVER_BATCH_SIZE = 4096

#: How many objects ``copy_prefix`` copies per ``copy_many`` (one listing page).
COPY_PREFIX_BATCH = 1000


def driver_batches(items: list[T]) -> Iterator[list[T]]:
    """Yield ``items`` in order, in slices of at most :data:`DRIVER_BATCH_SIZE`."""
    for i in range(0, len(items), DRIVER_BATCH_SIZE):
        yield items[i : i + DRIVER_BATCH_SIZE]


class BatchOperations(BucketState):
    """The batch half of :class:`~portable.storage.Bucket`."""

    __slots__ = ()

    def get_many(self, keys: Iterable[str], *, missing_ok: bool = False) -> dict[str, bytes]:
        """Fetch many objects concurrently (the driver's native concurrency, bounded).

        Each object is retried on its own. A missing key raises NotFound
        naming it, unless ``missing_ok``, when it is left out of the result.
        """
        keys = [check_key(k, self._max_key) for k in keys]
        out: dict[str, bytes] = {}
        for batch in driver_batches(keys):
            for key, result in self._driver.get_many(batch):
                if isinstance(result, BaseException):
                    data = self._retry_alone("read", f"get {key}", result, self._driver.get, key)
                    if data is None:
                        if missing_ok:
                            continue
                        raise NotFound(f"get {key}: no such object", provider=self.provider)
                    result = data
                out[key] = result
        return out

    def put_many(
        self,
        items: Mapping[str, bytes] | Iterable[tuple[str, bytes]],
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        cache_control: str | None = None,
        content_encoding: str | None = None,
        content_disposition: str | None = None,
    ) -> dict[str, str | None]:
        """Store many objects concurrently; return each key's etag.

        Content type, metadata and headers apply to every object (see ``put``).
        A failed object is retried on its own; the first that still fails raises.
        """
        pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
        checked = [(check_key(k, self._max_key), checked_bytes(v)) for k, v in pairs]
        options = checked_write_options(
            content_type, metadata, None, None, self._caps, self.provider,
            cache_control=cache_control, content_encoding=content_encoding, content_disposition=content_disposition,
        )
        out: dict[str, str | None] = {}
        for batch in driver_batches(checked):
            for key, result in self._driver.put_many(batch, options):
                if isinstance(result, BaseException):
                    data = dict(batch)[key]
                    result = self._retry_alone("write", f"put {key}", result, self._driver.put, key, data, options)
                out[key] = result
        return out

    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete many objects concurrently; missing keys are not an error."""
        keys = [check_key(k, self._max_key) for k in keys]
        for batch in driver_batches(keys):
            for key, result in self._driver.delete_many(batch):
                if isinstance(result, BaseException):
                    self._retry_alone("write", f"delete {key}", result, self._driver.delete, key)

    def copy_many(self, pairs: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str | None]:
        """Copy many objects concurrently, server-side where the provider can; return each
        destination key's etag (None where the provider does not say).

        ``pairs`` maps source keys to destination keys (or is ``(source, destination)``
        pairs). Every key is checked before anything is copied, and a destination may
        appear only once. Each copy is retried on its own; a missing source raises
        NotFound naming it. The first copy that still fails raises; copies of earlier
        batches are done by then, and copies of its batch may be.
        """
        items = list(pairs.items()) if isinstance(pairs, Mapping) else list(pairs)
        checked = [(check_key(src, self._max_key), check_key(dst, self._max_key)) for src, dst in items]
        targets = [dst for _, dst in checked]
        if len(set(targets)) != len(targets):
            twice = next(dst for dst in targets if targets.count(dst) > 1)
            raise InvalidArgument(f"copy_many: destination {twice[:200]!r} appears more than once")
        out: dict[str, str | None] = {}
        for batch in driver_batches(checked):
            source_of = {dst: src for src, dst in batch}
            for dst, result in self._driver.copy_many(batch):
                if isinstance(result, BaseException):
                    src = source_of[dst]
                    result = self._retry_alone("write", f"copy {src} -> {dst}", result, self._driver.copy, src, dst)
                out[dst] = result
        return out

    def copy_prefix(self, src_prefix: str, dst_prefix: str) -> int:
        """Copy every object under ``src_prefix`` to the same key under ``dst_prefix``; return how many.

        Server-side where the provider can, :meth:`copy_many` a listing page at a
        time (so any number of objects streams through bounded memory). The two
        prefixes must not overlap (one a prefix of the other): the copies would be
        listed again. Not a snapshot: an object written under ``src_prefix`` while
        it runs may or may not be copied.

        Raises:
            InvalidArgument: the prefixes overlap (before any request).
            InvalidKey: a destination key would be invalid (too long); objects of
                earlier pages are copied by then.
        """
        src = check_prefix(src_prefix)
        dst = check_prefix(dst_prefix)
        if src.startswith(dst) or dst.startswith(src):
            raise InvalidArgument(
                f"copy_prefix: {src!r} and {dst!r} overlap (one is a prefix of the other); "
                "copy to a prefix outside the source"
            )
        copied = 0
        batch: list[tuple[str, str]] = []
        for info in self.list(src, page_size=COPY_PREFIX_BATCH):
            batch.append((info.key, dst + info.key[len(src) :]))
            if len(batch) >= COPY_PREFIX_BATCH:
                copied += len(self.copy_many(batch))
                batch = []
        if batch:
            copied += len(self.copy_many(batch))
        return copied

    def _retry_alone(
        self, op_class: Literal["read", "write"], what: str, first: BaseException, fn: Callable[..., Any], *args: Any
    ) -> Any:
        """Settle one failed batch item: raise it if final, else retry it alone under the policy.

        A read of a missing object returns None (the caller decides whether
        that is an error); anything else returns what ``fn`` returns.
        """
        err = self._guard.wrap(what, first)
        if isinstance(err, NotFound) and op_class == "read":
            return None
        if not err.retryable:
            raise err from (None if err is first else first)
        try:
            return self._guard.call(op_class, what, fn, *args)
        except NotFound:
            if op_class == "read":
                return None
            raise
