"""``azqueue://`` on the event loop: the native async twin of :class:`~portable_azure.queue.StorageQueueMessaging`.

``StorageQueueMessaging.async_driver()`` returns an :class:`AsyncStorageQueue`,
which sends Put Message, Get Messages, Delete Message and Update Message
through ``azure.storage.queue.aio`` (aiohttp) on the running event loop: no
thread per call, and ``receive(wait=)``'s polls pause with ``asyncio.sleep``.
``stats`` stays thread-adapted (not a hot path), and so does one rare step of
``receive``: a message whose text does not fit the queue's encoding is set
aside (moved to the poison queue, or the receive raises ConfigError) by the
sync driver's own code, in the bounded pool.

What goes on the wire and what a receive returns are the sync driver's own:
texts come from ``_text`` / ``_plan_batch`` / ``_poison_text`` (envelope,
encoding, size checks), requests from ``_receive_request`` and the per-request
timeouts of ``_kw``, deliveries from ``_delivery``, and the polls' pauses from
``_polls``. Errors are azure-core's (the same classes for both clients),
classified by the sync driver's ``code_of``: a stale pop receipt is
PRECONDITION_FAILED on both faces.

Clients: one ``QueueServiceClient`` (and its queue and poison-queue clients)
per running event loop, built like the sync one (``retry_total=0``, no
secondary, the same timeouts); :meth:`AsyncStorageQueue.aclose` closes them,
and the ``azure.identity.aio`` credential the driver made for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from portable.driver.aio_messaging import AsyncQueueDriver
from portable.driver.messaging import OutgoingMessage, ReceivedMessage
from portable.driver.threads import PerLoop, run_blocking
from portable.errors import ConfigError

from ._common import error_code
from .queue import PUBLISH_AT_ONCE

if TYPE_CHECKING:
    from .queue import StorageQueueMessaging

__all__ = ["AsyncStorageQueue"]


@dataclass(slots=True)
class _Clients:
    """The aio clients of one event loop."""

    service: Any
    queue: Any
    poison: Any | None
    credential: Any  # one this driver made (azure.identity.aio), closed with the clients; else None


class AsyncStorageQueue(AsyncQueueDriver):
    """Both sides of an Azure Storage queue on the SDK's aio clients; the settings are the sync driver's."""

    native = True
    sync: StorageQueueMessaging

    def __init__(self, sync: StorageQueueMessaging) -> None:
        super().__init__(sync)
        self._clients: PerLoop[_Clients] = PerLoop(self._new_clients, _close_clients)

    async def _new_clients(self) -> _Clients:
        from azure.storage.queue.aio import QueueServiceClient

        sync = self.sync
        credential = sync.auth.sdk_credential(asynchronous=True)
        service = QueueServiceClient(
            sync.auth.endpoint,
            credential=credential,
            retry_total=0,
            retry_to_secondary=False,
            connection_timeout=sync._connection_timeout,
            read_timeout=sync._timeout,
            user_agent="portable-azure",
        )
        queue = service.get_queue_client(sync.queue)
        poison = service.get_queue_client(sync.poison_queue) if sync.poison_queue else None
        owned = None if credential is sync.auth.async_token_credential else credential
        return _Clients(service, queue, poison, owned)

    # -- publishing ------------------------------------------------------
    async def publish(self, message: OutgoingMessage) -> str:
        text = self.sync._text(message)
        clients = await self._clients.get()
        return await self._send(clients.queue, text)

    async def _send(self, client: Any, text: str) -> str:
        sent = await client.send_message(text, time_to_live=self.sync._ttl, **self.sync._kw())
        return str(sent.id)

    async def publish_batch(self, messages: Iterable[OutgoingMessage]) -> list[str | BaseException]:
        items = list(messages)
        texts, groups = self.sync._plan_batch(items)
        results: list[str | BaseException] = [RuntimeError("not sent")] * len(items)
        queue = (await self._clients.get()).queue
        at_once = asyncio.Semaphore(PUBLISH_AT_ONCE)

        async def send_group(indexes: list[int]) -> None:
            failed: BaseException | None = None
            for i in indexes:
                if failed is not None:
                    results[i] = failed  # one key's order: nothing is sent past a failed message
                    continue
                try:
                    async with at_once:
                        results[i] = await self._send(queue, texts[i])
                except Exception as exc:
                    results[i] = failed = exc

        await asyncio.gather(*(send_group(g) for g in groups))  # Azure has no batch send: 8 at once, as sync
        return results

    # -- receiving -------------------------------------------------------
    async def receive(self, max_messages: int, wait: float, lease: float) -> list[ReceivedMessage]:
        polls = self.sync._polls(wait)
        while True:
            got = await self._receive_once(max_messages, lease)
            pause = next(polls, None)
            if got or pause is None:
                return got
            await asyncio.sleep(pause)

    async def _receive_once(self, max_messages: int, lease: float) -> list[ReceivedMessage]:
        out: list[ReceivedMessage] = []
        misfits: list[tuple[Any, ConfigError]] = []
        queue = (await self._clients.get()).queue
        async for item in queue.receive_messages(**self.sync._receive_request(max_messages, lease)):
            self.sync._sort(item, out, misfits)
        if misfits:  # rare: the sync driver's own code moves them (its clients accept these pop receipts)
            await run_blocking(self.sync._set_aside, misfits, out)
        return out

    async def ack(self, handle: Any) -> None:
        message_id, pop_receipt = handle
        queue = (await self._clients.get()).queue
        await queue.delete_message(message_id, pop_receipt, **self.sync._kw())

    async def ack_many(self, handles: Iterable[Any]) -> list[BaseException | None]:
        async def one(handle: Any) -> BaseException | None:
            try:
                await self.ack(handle)
            except Exception as exc:
                return exc
            return None

        return list(await asyncio.gather(*(one(h) for h in handles)))

    async def nack(self, handle: Any, delay: float) -> None:
        message_id, pop_receipt = handle
        queue = (await self._clients.get()).queue
        await queue.update_message(message_id, pop_receipt, visibility_timeout=math.ceil(delay), **self.sync._kw())

    async def extend_lease(self, handle: Any, seconds: float) -> Any:
        message_id, pop_receipt = handle
        queue = (await self._clients.get()).queue
        updated = await queue.update_message(
            message_id, pop_receipt, visibility_timeout=max(1, math.ceil(seconds)), **self.sync._kw()
        )
        return (message_id, updated.pop_receipt)

    async def dead_letter(self, message: ReceivedMessage, reason: str) -> None:
        text = self.sync._poison_text(message, reason)  # Unsupported without a poison queue, before any request
        from azure.core.exceptions import ResourceNotFoundError

        clients = await self._clients.get()
        assert clients.poison is not None
        try:
            await self._send(clients.poison, text)
        except ResourceNotFoundError as exc:
            if error_code(exc) != "QueueNotFound":
                raise
            await clients.poison.create_queue(**self.sync._kw())  # created on first use, as Azure Functions does
            await self._send(clients.poison, text)
        await self.ack(message.handle)

    # -- lifetime ----------------------------------------------------------
    async def aclose(self) -> None:
        """Close this driver's aio clients (one set per loop that used it)."""
        await self._clients.aclose()


async def _close_clients(clients: _Clients) -> None:
    await clients.service.close()
    close = getattr(clients.credential, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):
            result = close()
            if asyncio.iscoroutine(result):
                await result
