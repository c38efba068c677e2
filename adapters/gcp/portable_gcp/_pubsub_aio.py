"""``pubsub://`` on the event loop: the native async twin of :class:`~portable_gcp.pubsub.PubSubMessaging`.

``PubSubMessaging.async_driver()`` returns an :class:`AsyncPubSub`, which
sends Publish, Pull, Acknowledge and ModifyAckDeadline through
google-cloud-pubsub's async GAPIC clients (``PublisherAsyncClient``,
``SubscriberAsyncClient`` on a ``grpc.aio`` channel) on the running event
loop: no thread per call. It works against the emulator (``endpoint=`` or
``PUBSUB_EMULATOR_HOST``: an insecure ``grpc.aio`` channel) and against
Google (the application-default credentials, as the sync driver).

What goes on the wire and what a receive returns are the sync driver's own:
requests come from ``_publish_request``, ``_plan_batch``, ``_pull``,
``_modify_request``, ``_ack_request`` and ``_dead_letter_copy``, every one
with ``retry=None`` and the sync driver's timeout; deliveries from
``_delivery``; the pauses between the emulator's empty pulls from ``_pauses``;
a partly refused exactly-once Acknowledge is read by ``acks_failed``. Errors
are google.api_core's ``GoogleAPICallError`` subclasses (the async GAPIC
wrappers map ``grpc.aio`` errors to the same classes, ErrorInfo included),
classified by the sync driver's ``code_of``: a lost lease on an exactly-once
subscription is PRECONDITION_FAILED on both faces.

Clients: one channel and client pair per running event loop (a ``grpc.aio``
channel belongs to its loop); :meth:`AsyncPubSub.aclose` closes them.
Topic and subscription settings (ordering, exactly-once, dead-letter policy)
are those the sync side read when it was opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import google.api_core.exceptions as gexc
import google.auth.exceptions
from google.pubsub_v1 import types as pubsub_types

from portable.driver.aio_messaging import AsyncQueueDriver
from portable.driver.messaging import OutgoingMessage, ReceivedMessage
from portable.driver.threads import PerLoop

from . import _google
from .pubsub import _GRPC_OPTIONS, acks_failed

if TYPE_CHECKING:
    from .pubsub import PubSubMessaging

__all__ = ["AsyncPubSub"]



@dataclass(slots=True)
class _Clients:
    """The async clients of one event loop."""

    publisher: Any
    subscriber: Any
    channel: Any  # the emulator's grpc.aio channel, or None (the clients own theirs)


class AsyncPubSub(AsyncQueueDriver):
    """A Pub/Sub topic and/or subscription on the async GAPIC clients; paths and settings are the sync driver's."""

    native = True
    sync: PubSubMessaging

    def __init__(self, sync: PubSubMessaging) -> None:
        super().__init__(sync)
        self._clients: PerLoop[_Clients] = PerLoop(self._new_clients, _close_clients)

    async def _new_clients(self) -> _Clients:
        import grpc  # type: ignore[import-untyped]
        from google.pubsub_v1.services.publisher import PublisherAsyncClient
        from google.pubsub_v1.services.publisher.transports import PublisherGrpcAsyncIOTransport
        from google.pubsub_v1.services.subscriber import SubscriberAsyncClient
        from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcAsyncIOTransport

        emulator = self.sync.emulator
        if emulator:
            channel = grpc.aio.insecure_channel(emulator, options=_GRPC_OPTIONS)
            return _Clients(
                PublisherAsyncClient(transport=PublisherGrpcAsyncIOTransport(channel=channel)),
                SubscriberAsyncClient(transport=SubscriberGrpcAsyncIOTransport(channel=channel)),
                channel,
            )
        try:
            return _Clients(PublisherAsyncClient(), SubscriberAsyncClient(), None)
        except google.auth.exceptions.DefaultCredentialsError as exc:
            raise _google.no_credentials("pubsub", "endpoint") from exc

    # -- publishing ------------------------------------------------------
    async def _publish_raw(self, topic_path: str, raws: list[Any]) -> list[str]:
        publisher = (await self._clients.get()).publisher
        response = await publisher.publish(**self.sync._publish_request(topic_path, raws))
        return list(response.message_ids)

    async def publish(self, message: OutgoingMessage) -> str:
        topic = self.sync._topic_path
        assert topic is not None
        (raws,) = self.sync._plan_batch([message])
        return (await self._publish_raw(topic, raws))[0]

    async def publish_batch(self, messages: Iterable[OutgoingMessage]) -> list[str | BaseException]:
        topic = self.sync._topic_path
        assert topic is not None
        items = list(messages)
        out: list[str | BaseException] = []
        for raws in self.sync._plan_batch(items):  # one request after another: ordering keys keep their order
            try:
                out.extend(await self._publish_raw(topic, raws))
            except Exception as exc:
                if not out:
                    raise  # nothing judged yet: the portable layer retries the whole batch
                out.extend([exc] * (len(items) - len(out)))
                return out
        return out

    # -- receiving -------------------------------------------------------
    async def receive(self, max_messages: int, wait: float, lease: float) -> list[ReceivedMessage]:
        sync = self.sync
        subscriber = (await self._clients.get()).subscriber
        until = time.monotonic() + wait
        pauses = sync._pauses(until)
        while True:
            kwargs, bounded = sync._pull(max_messages, until)
            try:
                response = await subscriber.pull(**kwargs)
            except gexc.DeadlineExceeded:
                if sync._wait_ran_out(bounded, until):
                    return []
                raise
            received = pubsub_types.PullResponse.pb(response).received_messages
            if received:
                break
            pause = next(pauses, None)
            if pause is None:
                return []
            await asyncio.sleep(pause)
        seconds = sync._lease_to_set(lease)
        if seconds is not None:
            ack_ids = [r.ack_id for r in received]
            try:
                await self._modify(ack_ids, seconds)
            except BaseException:
                with contextlib.suppress(Exception):
                    # give them back rather than hold them unseen (also when the caller was cancelled)
                    await asyncio.shield(self._modify(ack_ids, 0))
                raise
        return [sync._delivery(r) for r in received]

    async def _modify(self, ack_ids: list[str], seconds: int) -> None:
        subscriber = (await self._clients.get()).subscriber
        await subscriber.modify_ack_deadline(**self.sync._modify_request(ack_ids, seconds))

    async def ack(self, handle: Any) -> None:
        subscriber = (await self._clients.get()).subscriber
        await subscriber.acknowledge(**self.sync._ack_request([handle]))

    async def ack_many(self, handles: Iterable[Any]) -> list[BaseException | None]:
        ids = list(handles)
        subscriber = (await self._clients.get()).subscriber
        try:
            await subscriber.acknowledge(**self.sync._ack_request(ids))
        except gexc.GoogleAPICallError as exc:
            return acks_failed(exc, ids)
        return [None] * len(ids)

    async def nack(self, handle: Any, delay: float) -> None:
        await self._modify([handle], math.ceil(delay))

    async def extend_lease(self, handle: Any, seconds: float) -> Any:
        await self._modify([handle], math.ceil(seconds))
        return handle

    async def dead_letter(self, message: ReceivedMessage, reason: str) -> None:
        topic, raw = self.sync._dead_letter_copy(message, reason)  # Unsupported without a policy, before any request
        await self._publish_raw(topic, [raw])
        await self.ack(message.handle)

    # -- lifetime ----------------------------------------------------------
    async def aclose(self) -> None:
        """Close this driver's channels and clients (one set per loop that used it)."""
        await self._clients.aclose()


async def _close_clients(clients: _Clients) -> None:
    if clients.channel is not None:
        await clients.channel.close()
        return
    for client in (clients.publisher, clients.subscriber):
        with contextlib.suppress(Exception):
            await client.transport.close()
