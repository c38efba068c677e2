"""Listing for the obstore engine: one page from one listing request where it can.

A mixin of :class:`~portable_obstore._common.ObstoreStorage` (kept apart so each module stays
one a reader can hold).

The page logic is written once, as *steps* (a generator that asks for listing
batches and returns the page), and run by :meth:`ListingMixin.list_page` on
obstore's sync iterator or by :meth:`ListingMixin.alist_page` on its async
one: the sync and async faces page identically.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import Any, NamedTuple

import obstore

from portable.driver.storage import ListPage, ObjectInfo

#: The most keys one listing request returns (S3, GCS, Azure).
_MOST_PER_REQUEST = 1000

class _List(NamedTuple):
    """A step: start a listing of ``folder`` from past ``offset``, ``chunk`` objects a batch."""

    folder: str | None
    offset: str | None
    chunk: int


class _Got(NamedTuple):
    """What :meth:`ListingMixin._batches` found in one batch, and whether more may follow."""

    metas: list[Mapping[str, Any]]
    more: bool


#: What a page's steps ask for: a new listing ``(folder, offset, chunk)``, or None for the next
#: batch of the current one; they are sent the batch (None once the listing is exhausted).
Step = _List | None
Batch = list[Mapping[str, Any]] | None
Steps = Generator[Step, Batch, ListPage]


class ListingMixin:
    """``list_page`` over ``obstore.list``; the driver provides ``store``, ``_root``, ``_cut``
    and ``list_etag``."""

    store: Any
    _root: str
    _cut: int
    list_etag: Callable[[Mapping[str, Any]], str | None]

    def list_page(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        """One page from one listing request where it can: ``obstore.list`` from an offset.

        A page of 1,000 (the most one request returns) that ends where its
        request did holds 999 keys: the 1,000th is known to exist, so the
        token is sure to lead somewhere, without a second request to find out.
        """
        steps = self._page_steps(prefix, delimiter, start_after, page_size, token)
        listing: Any = None
        try:
            step = next(steps)
            while True:
                if step is not None:
                    listing = iter(obstore.list(self.store, step.folder, offset=step.offset, chunk_size=step.chunk))
                step = steps.send(next(listing, None))
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    async def alist_page(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        """:meth:`list_page` on obstore's async listing, awaited on the running loop."""
        steps = self._page_steps(prefix, delimiter, start_after, page_size, token)
        listing: Any = None
        try:
            step = next(steps)
            while True:
                if step is not None:
                    listing = obstore.list(self.store, step.folder, offset=step.offset, chunk_size=step.chunk)
                try:
                    batch: Batch = await listing.__anext__()
                except StopAsyncIteration:
                    batch = None
                step = steps.send(batch)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    def _page_steps(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> Steps:
        after = max(filter(None, (start_after, token)), default=None)
        if delimiter:
            skip = token if token and token.endswith("/") else None
            return self._delimited_page(prefix, after, page_size, skip)
        return self._flat_page(prefix, after, page_size)

    def _batches(self, full: str, offset: str | None, chunk: int) -> Generator[Step | _Got, Batch, None]:
        """Steps that list the objects whose path starts with ``full`` and is past ``offset``, in order:
        each batch as a :class:`_Got` with whether more may follow (the request's batch was full).
        Read them with :func:`_pull`.

        obstore lists by path segment (``a/b`` lists ``a/b/...``, never
        ``a/bc``), so a prefix that ends mid-segment lists its parent folder
        from just before the prefix and stops once keys pass it.
        """
        cut = full.rfind("/") + 1
        folder = full[: cut - 1] if cut else ""
        if full[cut:] and (offset is None or offset < full):
            offset = _just_before(full)
        batch = yield _List(folder or None, offset, chunk)
        while batch is not None:
            metas: list[Mapping[str, Any]] = []
            for meta in batch:
                path = meta["path"]
                if path.startswith(full):
                    if offset is None or path > offset:
                        metas.append(meta)
                elif path > full:
                    yield _Got(metas, False)
                    return
            yield _Got(metas, len(batch) == chunk)
            batch = yield None

    def _object(self, meta: Mapping[str, Any]) -> ObjectInfo:
        return ObjectInfo(
            key=str(meta["path"])[self._cut :],
            size=int(meta.get("size", 0)),
            etag=self.list_etag(meta),
            modified=meta.get("last_modified"),
        )

    def _flat_page(self, prefix: str, after: str | None, page_size: int) -> Steps:
        objects: list[ObjectInfo] = []
        offset = self._root + after if after else None
        listing = self._batches(self._root + prefix, offset, min(page_size + 1, _MOST_PER_REQUEST))
        while (got := (yield from _pull(listing))) is not None:
            for meta in got.metas:
                if len(objects) == page_size:
                    return ListPage(objects, [], objects[-1].key)
                objects.append(self._object(meta))
            if got.more and len(objects) == page_size > 1:
                objects.pop()  # the page ends with its request (see list_page)
                return ListPage(objects, [], objects[-1].key)
        return ListPage(objects, [], None)

    def _delimited_page(self, prefix: str, after: str | None, page_size: int, skip: str | None) -> Steps:
        """One level under ``prefix``, folded here from the flat listing; a folded prefix whose keys
        outlast the batch is stepped over with a new request from past it.

        The token is the last key or folded prefix returned; a folded prefix
        (ending in ``/``, which no key can) skips every key under it.
        """
        full = self._root + prefix
        offset = self._root + after if after else None
        if skip is not None:
            offset = max(offset or "", self._root + skip + "\U0010ffff")  # past every key under it
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        folded: str | None = None  # the last folded prefix, with the root
        chunk = min(page_size + 1, _MOST_PER_REQUEST)
        while True:
            listing = self._batches(full, offset, chunk)
            while (got := (yield from _pull(listing))) is not None:
                metas = got.metas
                for meta in metas:
                    path = str(meta["path"])
                    if folded is not None and path.startswith(folded):
                        continue
                    if len(objects) + len(prefixes) == page_size:
                        return ListPage(objects, prefixes, _last(objects, prefixes))
                    cut = path.find("/", len(full))
                    if cut >= 0:
                        folded = path[: cut + 1]
                        prefixes.append(folded[self._cut :])
                    else:
                        objects.append(self._object(meta))
                if got.more and folded is not None and metas and str(metas[-1]["path"]).startswith(folded):
                    offset = folded + "\U0010ffff"
                    break  # the rest of this folded prefix is not worth reading: ask from past it
                if got.more and len(objects) + len(prefixes) == page_size > 1:
                    if prefixes and (not objects or prefixes[-1] > objects[-1].key):
                        prefixes.pop()  # the page ends with its request (see list_page)
                    else:
                        objects.pop()
                    return ListPage(objects, prefixes, _last(objects, prefixes))
            else:
                return ListPage(objects, prefixes, None)


def _pull(listing: Generator[Step | _Got, Batch, None]) -> Generator[Step, Batch, _Got | None]:
    """Resume ``listing`` until it gives its next :class:`_Got` (None when it is done), passing its
    requests out to whoever runs the steps."""
    try:
        out = next(listing)
        while not isinstance(out, _Got):
            out = listing.send((yield out))
    except StopIteration:
        return None
    return out


def _last(objects: list[ObjectInfo], prefixes: list[str]) -> str:
    """The greater of the last object's key and the last prefix: where the next page starts."""
    return max(objects[-1].key if objects else "", prefixes[-1] if prefixes else "")


def _just_before(text: str) -> str:
    """A string that sorts just before ``text`` and before every string that starts with it.

    ``text`` is a portable key prefix (no control characters), so lowering its
    last character by one and appending the highest code point gives a bound
    that no key starting with ``text`` can be below.
    """
    last = text[-1]
    return text[:-1] + chr(ord(last) - 1) + "\U0010ffff"
