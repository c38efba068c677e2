"""Batches: ``get_many``, ``iter_many``, ``put_many``, ``delete_many``, ``copy_many`` and ``copy_prefix``.

The driver moves a batch with its library's native concurrency and reports
each item's outcome; a failed item is classified here and, if retryable,
retried on its own under the policy, so one throttled object does not fail
(or repeat) the whole batch. ``iter_many`` streams instead: each object is
one guarded ``get`` on a small thread pool, handed over as it completes.
"""

from __future__ import annotations

import contextvars
import itertools
import queue
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, TypeVar

from ..errors import InvalidArgument, NotFound
from ..resilience import Guard
from ._requests import copy_many_request, copy_prefix_request, keys_request, put_many_request
from ._state import BucketState

T = TypeVar("T")

#: How many items a batch hands to the driver at once; in-flight work drains at each boundary.
DRIVER_BATCH_SIZE = 4096

#: How many objects ``copy_prefix`` copies per ``copy_many`` (one listing page).
COPY_PREFIX_BATCH = 1000

#: The most objects ``iter_many`` may hold at once (the URLs' ``concurrency`` goes to 512 too).
MAX_ITER_CONCURRENCY = 512


def check_concurrency(concurrency: object, default: int) -> int:
    """``concurrency`` of :meth:`BatchOperations.iter_many` (None: ``default``), else InvalidArgument."""
    if concurrency is None:
        return max(1, min(default, MAX_ITER_CONCURRENCY))
    if type(concurrency) is not int or not 1 <= concurrency <= MAX_ITER_CONCURRENCY:
        raise InvalidArgument(
            f"concurrency must be an int from 1 to {MAX_ITER_CONCURRENCY}, got {concurrency!r}"
        )
    return concurrency


def missing(key: str, provider: str) -> NotFound:
    """The NotFound of a batch read whose key has no object."""
    return NotFound(f"get {key}: no such object", provider=provider)


def worth_retrying(guard: Guard, op_class: str, what: str, first: BaseException) -> bool:
    """Settle one failed batch item's first error: True to retry it alone, False for a missing read.

    Raises the item's error, wrapped once, when it is final.
    """
    err = guard.wrap(what, first)
    if isinstance(err, NotFound) and op_class == "read":
        return False
    if not err.retryable:
        raise err from (None if err is first else first)
    return True


def driver_batches(items: list[T]) -> Iterator[list[T]]:
    """Yield ``items`` in order, in slices of at most :data:`DRIVER_BATCH_SIZE`."""
    for i in range(0, len(items), DRIVER_BATCH_SIZE):
        yield items[i : i + DRIVER_BATCH_SIZE]


class BatchOperations(BucketState):
    """The batch half of :class:`~portable.storage.Bucket`."""

    __slots__ = ()

    def _missing(self, key: str) -> NotFound:
        return missing(key, self.provider)

    def get_many(self, keys: Iterable[str], *, missing_ok: bool = False) -> dict[str, bytes]:
        """Fetch many objects concurrently (the driver's native concurrency, bounded).

        Every body is held until the call returns, so this is the call for
        small objects; for large ones (or many), :meth:`iter_many` streams
        them with at most ``concurrency`` bodies in memory.

        Each object is retried on its own. A missing key raises NotFound
        naming it, unless ``missing_ok``, when it is left out of the result.

        Raises:
            InvalidKey: a key is not a portable key (before any request).
            InvalidArgument: ``keys`` is one str rather than an iterable of keys.
            NotFound: a key has no object (and not ``missing_ok``).
        """
        keys = keys_request(keys, self._max_key)
        out: dict[str, bytes] = {}
        for batch in driver_batches(keys):
            for key, result in self._guard.observed_batch("read", "get_many", batch, self._driver.get_many(batch)):
                if isinstance(result, BaseException):
                    data = self._retry_alone("read", f"get {key}", result, self._driver.get, key)
                    if data is None:
                        if missing_ok:
                            continue
                        raise self._missing(key)
                    result = data
                out[key] = result
        return out

    def iter_many(
        self, keys: Iterable[str], *, missing_ok: bool = False, concurrency: int | None = None
    ) -> Iterator[tuple[str, bytes]]:
        """Fetch many objects concurrently, yielding ``(key, bytes)`` in completion order.

        Memory is bounded: at most ``concurrency`` bodies exist at once,
        counting those being fetched, those fetched but not yet taken and the
        one the caller holds; the next fetch starts only when the caller asks
        for the next item, so a slow consumer slows the fetching instead of
        letting results pile up. Each object is one ``get`` under the
        bucket's retry policy, breaker and deadline (a ``deadline`` in force
        when ``iter_many`` is called applies to every fetch).

        Keys are checked when ``iter_many`` is called, before any request;
        fetching starts at the first ``next()``. Closing the iterator (or
        leaving a ``for`` loop over it) starts no further fetch and waits for
        the ones in flight (at most ``concurrency - 1``) to end, retries
        included, so no thread outlives it; their bodies are dropped.

        Args:
            keys: the keys to fetch; a key given twice is fetched twice.
            missing_ok: skip a key that has no object instead of raising.
            concurrency: fetches in flight (and the bound on bodies held).
                Defaults to the driver's batch concurrency (the URL's
                ``concurrency``; 16 unless set).

        Raises:
            InvalidKey: a key is not a portable key (at the call).
            InvalidArgument: ``concurrency`` is not an int from 1 to 512, or
                ``keys`` is one str (at the call).
            NotFound: a key has no object (and not ``missing_ok``), when the
                iterator reaches it; fetches in flight are abandoned as on close.
            PortableError: another failure, after its retries, likewise.
        """
        checked = keys_request(keys, self._max_key)
        limit = check_concurrency(concurrency, self._driver.batch_concurrency)
        # the caller's context (its deadline) now: a generator's body runs only at the first next()
        return self._stream(checked, missing_ok, limit, contextvars.copy_context())

    def _stream(
        self, keys: list[str], missing_ok: bool, limit: int, context: contextvars.Context
    ) -> Iterator[tuple[str, bytes]]:
        """The generator behind :meth:`iter_many`: at most ``limit`` fetches started and not yet taken."""
        if not keys:
            return
        call, get = self._guard.call, self._driver.get
        done: queue.SimpleQueue[tuple[str, bytes | None, BaseException | None]] = queue.SimpleQueue()

        def fetch(key: str) -> None:
            try:
                done.put((key, context.copy().run(call, "read", f"get {key}", get, key), None))
            except BaseException as exc:  # handed to the consumer's thread, raised there
                done.put((key, None, exc))

        pending = iter(keys)
        pool = ThreadPoolExecutor(max_workers=min(limit, len(keys)), thread_name_prefix="portable-iter-many")
        in_flight = 0  # fetches started and not yet taken: each holds (or will hold) one body
        try:
            for key in itertools.islice(pending, limit):
                pool.submit(fetch, key)
                in_flight += 1
            while in_flight:
                key, data, error = done.get()
                in_flight -= 1
                if isinstance(error, NotFound):
                    if not missing_ok:
                        raise self._missing(key) from error
                elif error is not None:
                    raise error
                else:
                    assert data is not None
                    yield key, data
                    del data  # the caller holds it now; this frame must not keep it alive
                for key in itertools.islice(pending, 1):
                    pool.submit(fetch, key)
                    in_flight += 1
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

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
        checked, options = put_many_request(
            items, self._caps, self.provider, content_type, metadata, cache_control, content_encoding,
            content_disposition,
        )
        out: dict[str, str | None] = {}
        for batch in driver_batches(checked):
            results = self._driver.put_many(batch, options)
            for key, result in self._guard.observed_batch("write", "put_many", batch, results):
                if isinstance(result, BaseException):
                    data = dict(batch)[key]
                    result = self._retry_alone("write", f"put {key}", result, self._driver.put, key, data, options)
                out[key] = result
        return out

    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete many objects concurrently; missing keys are not an error."""
        keys = keys_request(keys, self._max_key)
        for batch in driver_batches(keys):
            for key, result in self._guard.observed_batch("write", "delete_many", batch, self._driver.delete_many(batch)):
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
        checked = copy_many_request(pairs, self._max_key)
        out: dict[str, str | None] = {}
        for batch in driver_batches(checked):
            source_of = {dst: src for src, dst in batch}
            for dst, result in self._guard.observed_batch("write", "copy_many", batch, self._driver.copy_many(batch)):
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
        src, dst = copy_prefix_request(src_prefix, dst_prefix)
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
        if not worth_retrying(self._guard, op_class, what, first):
            return None
        try:
            return self._guard.call(op_class, what, fn, *args)
        except NotFound:
            if op_class == "read":
                return None
            raise
