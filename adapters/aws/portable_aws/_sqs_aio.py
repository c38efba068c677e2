"""``sqs://`` on the event loop: the native async twin of :class:`~portable_aws.sqs.SQSMessaging`.

``SQSMessaging.async_driver()`` returns an :class:`AsyncSQS`, which sends
every request the portable layer awaits (SendMessage, SendMessageBatch,
ReceiveMessage, DeleteMessage, DeleteMessageBatch, ChangeMessageVisibility,
the dead-letter move) through an aiobotocore client on the running event
loop: no thread per call, and a 20-second long poll holds a socket, not a
thread. ``stats`` stays thread-adapted (it is not on a hot path).

What goes on the wire and what a receive returns are the sync driver's own:
the request arguments come from the same methods (``_entry``,
``_receive_request``, ``_plan_batches``, ``_ack_batches``,
``_dead_letter_request``) and answers are read by the same ones
(``_received``, ``_batch_sent``, ``_acks_failed``), so a message published on
one face reads identically on the other and on any SQS client. Errors are
aiobotocore's ``ClientError`` (botocore's class), classified by the sync
driver's ``code_of``.

Clients: one aiobotocore client per running event loop (an aiohttp session
cannot cross loops), made on first use with the sync driver's options:
botocore's retries off, the same timeouts and pool size. :meth:`AsyncSQS.aclose`
closes the client of the calling loop and those of other loops still running.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from portable.driver.aio_messaging import AsyncQueueDriver
from portable.driver.messaging import OutgoingMessage, ReceivedMessage
from portable.driver.threads import PerLoop, run_blocking

from ._aws import boto_config_kwargs
from .sqs import batch_outcomes

if TYPE_CHECKING:
    from .sqs import SQSMessaging

__all__ = ["AsyncSQS", "PerLoop"]


_SESSIONS: dict[str | None, Any] = {}
_SESSIONS_LOCK = threading.Lock()


def _session(profile: str | None) -> Any:
    """An aiobotocore session per profile, shared (creating one loads the service models)."""
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(profile)
        if session is None:
            from aiobotocore.session import AioSession  # type: ignore[import-untyped]

            session = _SESSIONS[profile] = AioSession(profile=profile)
        return session


class AsyncSQS(AsyncQueueDriver):
    """Both sides of an SQS queue on aiobotocore; the queue and its settings are the sync driver's."""

    native = True
    sync: SQSMessaging

    def __init__(self, sync: SQSMessaging) -> None:
        super().__init__(sync)
        self._clients: PerLoop[Any] = PerLoop(self._new_client, _close_client)
        self._client = self._clients.get

    async def _new_client(self) -> Any:
        from aiobotocore.config import AioConfig  # type: ignore[import-untyped]

        options = self.sync.options
        timeouts = replace(options, timeout=max(options.timeout, 25.0))  # a 20 s long poll is never cut
        config = AioConfig(**boto_config_kwargs(timeouts, pool=32))
        context = _session(options.profile).create_client("sqs", config=config, **options.client_kwargs())
        return await context.__aenter__()

    async def _queue_url(self) -> str:
        url = self.sync._queue_url
        if url is None:  # the portable layer opened the side already; this is for direct driver use
            await run_blocking(self.sync._open)
            url = self.sync._queue_url
            assert url is not None
        return url

    # -- publishing ------------------------------------------------------
    async def publish(self, message: OutgoingMessage) -> str:
        entry, _size = self.sync._entry(message)
        client = await self._client()
        resp = await client.send_message(QueueUrl=await self._queue_url(), **entry)
        return self.sync._published(message, resp["MessageId"])

    async def publish_batch(self, messages: Iterable[OutgoingMessage]) -> list[str | BaseException]:
        items = list(messages)
        out, batches = self.sync._plan_batches(items)
        client = await self._client()
        queue_url = await self._queue_url()
        for entries in batches:  # one request after another: one key's messages keep their order
            resp = await client.send_message_batch(QueueUrl=queue_url, Entries=entries)
            self.sync._batch_sent(items, resp, out)
        return batch_outcomes(out)

    # -- receiving -------------------------------------------------------
    async def receive(self, max_messages: int, wait: float, lease: float) -> list[ReceivedMessage]:
        if self.sync._queue_url is None:
            await self._queue_url()
        client = await self._client()
        resp = await client.receive_message(**self.sync._receive_request(max_messages, wait, lease))
        return [self.sync._received(m) for m in resp.get("Messages", ())]

    async def ack(self, handle: Any) -> None:
        client = await self._client()
        await client.delete_message(QueueUrl=await self._queue_url(), ReceiptHandle=handle)

    async def ack_many(self, handles: Iterable[Any]) -> list[BaseException | None]:
        items = list(handles)
        out: list[BaseException | None] = [None] * len(items)
        client = await self._client()
        queue_url = await self._queue_url()
        for entries in self.sync._ack_batches(items):
            try:
                resp = await client.delete_message_batch(QueueUrl=queue_url, Entries=entries)
            except Exception as exc:
                for entry in entries:
                    out[int(entry["Id"])] = exc
                continue
            self.sync._acks_failed(resp, out)
        return out

    async def _change_visibility(self, handle: Any, seconds: float) -> None:
        client = await self._client()
        await client.change_message_visibility(
            QueueUrl=await self._queue_url(), ReceiptHandle=handle, VisibilityTimeout=math.ceil(seconds)
        )

    async def nack(self, handle: Any, delay: float) -> None:
        await self._change_visibility(handle, delay)

    async def extend_lease(self, handle: Any, seconds: float) -> Any:
        await self._change_visibility(handle, seconds)
        return handle

    async def dead_letter(self, message: ReceivedMessage, reason: str) -> None:
        if self.sync._dead_letter_name() is None:
            return self.sync.dead_letter(message, reason)  # no redrive target: Unsupported, before any request
        lookup, entry = self.sync._dead_letter_request(message, reason)
        client = await self._client()
        dlq_url = (await client.get_queue_url(**lookup))["QueueUrl"]
        await client.send_message(QueueUrl=dlq_url, **entry)
        await self.ack(message.handle)

    # -- lifetime ----------------------------------------------------------
    async def aclose(self) -> None:
        """Close this driver's aiobotocore clients (one per loop that used it)."""
        await self._clients.aclose()


async def _close_client(client: Any) -> None:
    await client.__aexit__(None, None, None)
