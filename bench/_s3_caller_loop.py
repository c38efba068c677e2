"""The fsspec S3 engine's other async design, for bench/aio_bench.py only (not shipped in the adapter).

The adapter's async engine (``portable_aws._s3_aio.S3AsyncStorage``) runs the
driver's coroutines on s3fs's own loop. This one runs them on the caller's
loop with a client of its own; the benchmark measures both. It reaches into the
driver's private coroutines, which is acceptable for a measurement, not for
the product.
"""

from __future__ import annotations

import asyncio
import copy
import weakref
from collections.abc import AsyncIterator

from portable_aws.s3 import S3Storage

from portable.driver.aio_storage import AsyncStorageDriver
from portable.driver.storage import WriteOptions


class S3CallerLoopStorage(AsyncStorageDriver):
    """The other design, measured by bench/aio_bench.py only: an aiobotocore client per running loop.

    The same coroutines as the sync driver (``_get``, ``_put``, ...) run on a
    shallow copy of it whose client was made on the caller's loop, so each
    call is awaited where it is made, without a hop to s3fs's thread. One
    client (and connection pool) per loop that uses the bucket; ``aclose``
    closes the one of the loop it runs on. Only what the benchmark measures
    (``get``, ``put``, ``get_many``, ``put_many``) is served this way; the rest
    stays thread-adapted. Not returned by ``async_driver()``.
    """

    native = True
    sync: S3Storage

    def __init__(self, sync: S3Storage) -> None:
        super().__init__(sync)
        self._views: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, S3Storage] = weakref.WeakKeyDictionary()

    async def _view(self) -> S3Storage:
        loop = asyncio.get_running_loop()
        view = self._views.get(loop)
        if view is None:
            import s3fs  # type: ignore[import-untyped]
            from portable_aws.s3 import _list_keys_as_sent

            fs = self.sync.fs
            own = s3fs.S3FileSystem(
                client_kwargs=fs.client_kwargs, config_kwargs=fs.config_kwargs, skip_instance_cache=True,
                use_listings_cache=False, cache_regions=False, max_concurrency=1, asynchronous=True, loop=loop,
                **({"profile": self.sync.options.profile} if self.sync.options.profile else {}),
            )
            client = await own.set_session()
            _list_keys_as_sent(client)
            view = copy.copy(self.sync)
            view.fs, view._client, view._loop = own, client, loop
            view = self._views.setdefault(loop, view)
        return view

    async def get(self, key: str) -> bytes:
        return await (await self._view())._get(key)

    async def put(self, key: str, data: bytes, options: WriteOptions) -> str | None:
        return await (await self._view())._put(key, data, options)

    async def get_many(self, keys: list[str]) -> AsyncIterator[tuple[str, bytes | BaseException]]:
        view = await self._view()
        for pair in zip(keys, await view._gather(view._get, [(k,) for k in keys]), strict=True):
            yield pair

    async def put_many(
        self, items: list[tuple[str, bytes]], options: WriteOptions
    ) -> AsyncIterator[tuple[str, str | BaseException | None]]:
        view = await self._view()
        results = await view._gather(view._put, [(k, d, options) for k, d in items])
        for pair in zip((k for k, _ in items), results, strict=True):
            yield pair

    async def aclose(self) -> None:
        view = self._views.pop(asyncio.get_running_loop(), None)
        creator = getattr(view.fs, "_s3creator", None) if view is not None else None
        if creator is not None:
            await creator.__aexit__(None, None, None)
