"""``pubsub://`` — Google Cloud Pub/Sub, through google-cloud-pubsub's GAPIC clients.

URLs:
    ``pubsub://PROJECT/topics/TOPIC`` publishes to TOPIC;
    ``pubsub://PROJECT/topics/TOPIC?subscription=SUB`` also receives from SUB
    (a subscription of the same project); ``pubsub://PROJECT/subscriptions/SUB``
    receives only (``open_topic`` on it raises InvalidURL). Topics and
    subscriptions must exist: create them with Pub/Sub's tools, or use
    :meth:`PubSubMessaging.temporary`.

Options:
    ``subscription`` (str): the subscription of a topic URL. Defaults to none.
    ``endpoint`` (str): ``host:port`` of an emulator, reached without TLS or
        credentials. Defaults to ``$PUBSUB_EMULATOR_HOST``, else Google's
        endpoint with the application-default credentials.
    ``timeout`` (float): seconds each RPC may take (publish, ack, modify).
        Defaults to 30; an overall ``portable.resilience.deadline`` shortens it.
    ``batch_max_messages`` (int): the most messages per Publish request,
        1-1,000. Defaults to 1,000; ``capabilities.max_batch`` follows it.
    ``batch_max_bytes`` (int): the most bytes of bodies and attributes per
        Publish request. Defaults to 9,000,000 (Pub/Sub takes 10 MB a request).

Names and limits (InvalidURL / TooLarge before any request):
    a project id is 6-30 characters of ``a-z 0-9 -``; a topic or subscription
    name is 3-255 characters of ``A-Z a-z 0-9 - _ . ~ + %``, starting with a
    letter and not with ``goog``. A message's body plus attributes is at most
    10,000,000 bytes, with at most 100 attributes; a message needs a body or
    an attribute (Pub/Sub refuses an empty one: InvalidArgument).

Publishing and batching:
    ``publish`` is one synchronous Publish RPC. ``publish_batch`` sends the
    messages in Publish requests of ``batch_max_messages`` / ``batch_max_bytes``,
    one after another, so messages with one ordering key keep their order; if
    a request fails, the messages after it are not sent and are reported with
    its error, so the portable layer retries them in order. (The library's
    batching ``PublisherClient`` is not used: it retries on its own, forever
    when ordering is on, and takes attributes as keyword arguments, so an
    attribute named ``timeout`` or ``retry`` would be misread.)

Receiving and leases:
    Synchronous Pull, not StreamingPull: the portable messaging protocol has no
    driver-provided run loop, so ``Subscription.run`` calls ``receive`` (one
    Pull) and settles each message with Acknowledge / ModifyAckDeadline. The
    ack deadline is the lease: ``receive(lease=)`` sets it right after the
    pull when it differs from the subscription's own (one ModifyAckDeadline),
    ``extend_lease`` and ``nack(delay)`` modify it, and 600 s is the maximum
    (``capabilities.max_lease_seconds``). Leases are whole seconds. A ``wait``
    with no messages is spent in pulls that the server (or, on the emulator, a
    short sleep between pulls) spaces out; a Pull cut by its deadline while the
    server was answering leaves those messages leased until their deadline,
    then they come again.

Subscription settings (read with GetSubscription, which needs
``pubsub.subscriptions.get``; without that permission they are taken as off):
    message ordering -> ``ordering``; exactly-once delivery -> ``exactly_once``
    (a stale ack or modify fails with PreconditionFailed); a dead-letter policy
    -> ``native_dead_letter`` and ``delivery_count`` (Pub/Sub counts delivery
    attempts only then). ``dead_letter`` publishes the message with the
    ``portable.dead_letter_*`` attributes to the policy's topic and acks it;
    the server also forwards a message after ``max_delivery_attempts``
    (5-100). ``dead_letter_url`` names the first subscription of the
    dead-letter topic: a dead-letter topic without a subscription drops what
    reaches it.

Wire form (what a native client sees, and reads back):
    ``body`` is the message's ``data``, byte for byte; ``attributes`` are its
    attributes as given; ``key`` is its ``ordering_key``. portable adds only
    reserved attributes: ``portable.idempotency_key`` (with ``idempotency_key=``)
    and, on a dead-lettered copy, ``portable.dead_letter_reason``,
    ``portable.dead_letter_source``, ``portable.delivery_attempts`` and
    ``portable.original_id``. No envelope. Received attributes pass through
    untouched whatever their names (``ce-*`` of the CloudEvents Pub/Sub binding,
    ``googclient_*`` set by Google); ``Message.headers`` holds them as
    ``(name, UTF-8 bytes)`` pairs sorted by name (Pub/Sub keeps attributes as a
    map: there is no wire order to keep), and ``Message.key_bytes`` is the
    ordering key's UTF-8 (Pub/Sub keys are strings). portable's own publish
    refuses attribute names starting with ``goog`` (Pub/Sub reserves them).

Retries:
    Every RPC passes ``retry=None`` and an explicit timeout, so google.api_core's
    Retry never runs and :mod:`portable.resilience` owns the retry budget.

As:
    ``google.pubsub_v1.PublisherClient`` and ``google.pubsub_v1.SubscriberClient``
    (the GAPIC clients this driver uses), ``grpc.Channel`` on an emulator.

Capabilities:
    lease_extension, nack_delay, ordering / exactly_once / native_dead_letter /
    delivery_count per subscription (see above); max_batch 1,000; leases
    1-600 s in whole seconds; 10,000,000 bytes and 100 attributes a message.

Known differences:
    * No publish dedup: the ``idempotency_key`` travels as
      ``portable.idempotency_key`` and ``Subscription.run(idempotency=...)``
      deduplicates.
    * ``delivery_attempt`` is exact only with a dead-letter policy; without one
      Pub/Sub does not count and every delivery reports 1, so the subscription
      declares ``delivery_count=False`` and ``Subscription.run(max_deliveries=)``
      cannot count on it: give the subscription a dead-letter policy.
    * Ordering applies to messages with a key. On an ordered exactly-once
      subscription an ack of a later message of a key before an earlier one
      fails transiently (``TRANSIENT_FAILURE_UNORDERED_ACK_ID``, retried as
      Unavailable). The emulator applies that to messages without a key too.
    * The emulator answers an empty Pull at once instead of holding it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import google.api_core.exceptions as gexc
import google.auth.exceptions
import grpc  # type: ignore[import-untyped]
from google.pubsub_v1 import types as pubsub_types
from google.pubsub_v1.services.publisher import PublisherClient
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.services.subscriber import SubscriberClient
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

from portable.driver.messaging import (
    MessagingCapabilities,
    MessagingDriver,
    OutgoingMessage,
    ReceivedMessage,
    SubscriptionDriver,
    TopicDriver,
)
from portable.driver.redaction import redact
from portable.errors import (
    ErrorCode,
    InvalidArgument,
    InvalidURL,
    PortableError,
    PreconditionFailed,
    Unavailable,
    Unsupported,
)
from portable.resilience import attempt_timeout
from portable.urls import ParsedURL

from . import _google

if TYPE_CHECKING:
    from ._pubsub_aio import AsyncPubSub

__all__ = ["PubSubMessaging", "acks_failed", "check_resource_name"]

GOOGLE_ENDPOINT = "pubsub.googleapis.com"
MAX_LEASE_SECONDS = 600.0
MAX_MESSAGE_BYTES = 10_000_000
MAX_ATTRIBUTES = 100
MAX_BATCH = 1000
#: Bytes a message adds to a Publish request beyond its body and attributes (a bound).
_PER_MESSAGE_OVERHEAD = 64

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}$")
_PATH = re.compile(r"^projects/([^/]+)/(topics|subscriptions)/([^/]+)$")
_GRPC_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]

_RawMessage = pubsub_types.PubsubMessage.pb()
_RawPublishRequest = pubsub_types.PublishRequest.pb()


def check_resource_name(kind: str, name: str, url: object) -> str:
    """Return ``name`` if Pub/Sub accepts it as a topic or subscription name, else raise InvalidURL."""
    if not _NAME.match(name or "") or name.lower().startswith("goog"):
        raise InvalidURL(
            f"{kind} name {name[:80]!r} in {url} is invalid: Pub/Sub names are 3-255 characters of "
            "A-Z, a-z, 0-9, '-', '_', '.', '~', '+' and '%', starting with a letter and not with 'goog'"
        )
    return name


def _size(message: OutgoingMessage) -> int:
    return (
        len(message.body)
        + sum(len(k) + len(v.encode("utf-8")) for k, v in message.attributes.items())
        + len(message.key or "")
        + _PER_MESSAGE_OVERHEAD
    )


def _raw(message: OutgoingMessage) -> Any:
    if not message.body and not message.attributes:
        raise InvalidArgument(
            "Pub/Sub refuses a message with an empty body and no attributes; send a body or an attribute"
        )
    return _RawMessage(data=message.body, attributes=message.attributes, ordering_key=message.key or "")


class _PubSubReceiving:
    """The subscription side: pulls, acks, lease changes and dead letters of a Pub/Sub subscription.

    Mixed into :class:`PubSubMessaging`, which holds the clients and the subscription's path.
    """

    # what PubSubMessaging sets (declared here for the type checker only)
    project: str
    subscription_name: str | None
    _subscriber: SubscriberClient
    _sub_path: str | None
    _ack_deadline: int | None
    _dead_letter_topic: str | None
    _dead_letter_url: str | None
    _rpc_timeout: Callable[[], float]
    _url: Callable[..., str]
    _publish_raw: Callable[[str, list[Any]], list[str]]

    def _pull(self, max_messages: int, until: float) -> tuple[dict[str, Any], bool]:
        """(Pull's arguments, whether the pull is bounded by ``until``): what both faces send.

        A pull with time left waits (up to the rest of ``wait``); one without
        returns at once.
        """
        assert self._sub_path is not None
        left = until - time.monotonic()
        bounded = left > 0
        request = {"subscription": self._sub_path, "max_messages": max_messages, "return_immediately": not bounded}
        timeout = min(self._rpc_timeout(), left) if bounded else self._rpc_timeout()
        return {"request": request, "retry": None, "timeout": timeout}, bounded

    @staticmethod
    def _wait_ran_out(bounded: bool, until: float) -> bool:
        """Whether a DeadlineExceeded of a pull only means the wait ran out with nothing to deliver."""
        return bounded and time.monotonic() >= until - 0.05

    @staticmethod
    def _pauses(until: float) -> Iterator[float]:
        """The pauses between empty pulls until ``until``: the emulator answers an empty pull at once."""
        pause = 0.02
        while (left := until - time.monotonic()) > 0:
            yield min(pause, left)
            pause = min(pause * 2, 0.25)

    def _lease_to_set(self, lease: float) -> int | None:
        """The ack deadline to set right after a pull for ``lease``, or None when it is the subscription's own."""
        seconds = math.ceil(lease)
        return None if seconds == self._ack_deadline else seconds

    def receive(self, max_messages: int, wait: float, lease: float) -> list[ReceivedMessage]:
        until = time.monotonic() + wait
        pauses = self._pauses(until)
        while True:
            kwargs, bounded = self._pull(max_messages, until)
            try:
                response = self._subscriber.pull(**kwargs)
            except gexc.DeadlineExceeded:
                if self._wait_ran_out(bounded, until):
                    return []
                raise
            received = pubsub_types.PullResponse.pb(response).received_messages
            if received:
                break
            pause = next(pauses, None)
            if pause is None:
                return []
            time.sleep(pause)
        seconds = self._lease_to_set(lease)
        if seconds is not None:
            ack_ids = [r.ack_id for r in received]
            try:
                self._modify(ack_ids, seconds)
            except Exception:
                with contextlib.suppress(Exception):
                    self._modify(ack_ids, 0)  # give them back rather than hold them unseen
                raise
        return [self._delivery(r) for r in received]

    @staticmethod
    def _delivery(r: Any) -> ReceivedMessage:
        m = r.message
        attributes = dict(m.attributes)
        return ReceivedMessage(
            id=m.message_id,
            body=m.data,
            attributes=attributes,
            key=m.ordering_key or None,
            publish_time=m.publish_time.ToDatetime(tzinfo=dt.UTC),
            delivery_attempt=max(1, r.delivery_attempt),
            handle=r.ack_id,
            # Pub/Sub attributes are a map with no wire order: sorted by name
            headers=tuple((name, attributes[name].encode("utf-8")) for name in sorted(attributes)),
        )

    def _modify_request(self, ack_ids: list[str], seconds: int) -> dict[str, Any]:
        """ModifyAckDeadline's arguments."""
        assert self._sub_path is not None
        return {
            "request": {"subscription": self._sub_path, "ack_ids": ack_ids, "ack_deadline_seconds": seconds},
            "retry": None,
            "timeout": self._rpc_timeout(),
        }

    def _ack_request(self, ack_ids: list[str]) -> dict[str, Any]:
        """Acknowledge's arguments."""
        assert self._sub_path is not None
        return {"request": {"subscription": self._sub_path, "ack_ids": ack_ids}, "retry": None, "timeout": self._rpc_timeout()}

    def _modify(self, ack_ids: list[str], seconds: int) -> None:
        self._subscriber.modify_ack_deadline(**self._modify_request(ack_ids, seconds))

    def ack(self, handle: Any) -> None:
        self._subscriber.acknowledge(**self._ack_request([handle]))

    def ack_many(self, handles: Iterable[Any]) -> list[BaseException | None]:
        ids = list(handles)
        try:
            self._subscriber.acknowledge(**self._ack_request(ids))
        except gexc.GoogleAPICallError as exc:
            return acks_failed(exc, ids)
        return [None] * len(ids)

    def nack(self, handle: Any, delay: float) -> None:
        self._modify([handle], math.ceil(delay))

    def extend_lease(self, handle: Any, seconds: float) -> Any:
        self._modify([handle], math.ceil(seconds))
        return handle

    def dead_letter(self, message: ReceivedMessage, reason: str) -> None:
        topic, raw = self._dead_letter_copy(message, reason)
        self._publish_raw(topic, [raw])
        self.ack(message.handle)

    def _dead_letter_copy(self, message: ReceivedMessage, reason: str) -> tuple[str, Any]:
        """(the dead-letter topic, the moved copy with the ``portable.dead_letter_*`` attributes).

        Raises:
            Unsupported: the subscription has no dead-letter policy (before any request).
        """
        if self._dead_letter_topic is None:
            raise Unsupported("this subscription has no dead-letter policy", provider="pubsub")
        attributes = dict(message.attributes)
        attributes["portable.dead_letter_reason"] = reason
        attributes["portable.dead_letter_source"] = redact(self._url("subscriptions", self.project, str(self.subscription_name)))
        attributes["portable.delivery_attempts"] = str(message.delivery_attempt)
        attributes["portable.original_id"] = message.id
        raw = _RawMessage(data=message.body, attributes=attributes, ordering_key=message.key or "")
        return self._dead_letter_topic, raw

    def dead_letter_url(self) -> str | None:
        return self._dead_letter_url


class PubSubMessaging(_PubSubReceiving, MessagingDriver, TopicDriver, SubscriptionDriver):
    """A Pub/Sub topic and/or subscription, on GAPIC clients with their retries off."""

    scheme = "pubsub"

    def __init__(
        self,
        project: str,
        *,
        topic: str | None = None,
        subscription: str | None = None,
        endpoint: str | None = None,
        timeout: float = 30.0,
        batch_max_messages: int = MAX_BATCH,
        batch_max_bytes: int = 9_000_000,
    ) -> None:
        self.project = project
        self.topic_name = topic
        self.subscription_name = subscription
        self.timeout = timeout
        self.batch_max_messages = batch_max_messages
        self.batch_max_bytes = batch_max_bytes
        emulator = endpoint or os.environ.get("PUBSUB_EMULATOR_HOST") or None
        self.emulator = emulator
        self.endpoint = emulator or GOOGLE_ENDPOINT
        self._channel: grpc.Channel | None = None
        self._closed = False
        if emulator:
            self._channel = grpc.insecure_channel(emulator, options=_GRPC_OPTIONS)
            self._publisher = PublisherClient(transport=PublisherGrpcTransport(channel=self._channel))
            self._subscriber = SubscriberClient(transport=SubscriberGrpcTransport(channel=self._channel))
        else:
            try:
                self._publisher = PublisherClient()
                self._subscriber = SubscriberClient()
            except google.auth.exceptions.DefaultCredentialsError as exc:
                raise _google.no_credentials("pubsub", "endpoint") from exc
        self._topic_path = f"projects/{project}/topics/{topic}" if topic else None
        self._sub_path = f"projects/{project}/subscriptions/{subscription}" if subscription else None
        self._ack_deadline: int | None = None
        self._dead_letter_topic: str | None = None
        self._dead_letter_url: str | None = None
        self.capabilities = MessagingCapabilities(
            ordering=True,
            native_dead_letter=False,
            lease_extension=True,
            exactly_once=False,
            publish_dedup=False,
            nack_delay=True,
            delivery_count=False,
            max_lease_seconds=MAX_LEASE_SECONDS,
            min_lease_seconds=1.0,
            lease_granularity_seconds=1.0,
            max_message_bytes=MAX_MESSAGE_BYTES,
            max_attributes=MAX_ATTRIBUTES,
            dedup_window_seconds=None,
            max_batch=min(MAX_BATCH, batch_max_messages),
        )

    @classmethod
    def from_url(cls, url: ParsedURL) -> PubSubMessaging:
        project = _google.check_project(url.host, url)
        parts = url.path.strip("/").split("/")
        if len(parts) != 2 or parts[0] not in ("topics", "subscriptions"):
            raise InvalidURL(
                f"{url} names no topic or subscription: write pubsub://PROJECT/topics/TOPIC"
                "[?subscription=SUB] or pubsub://PROJECT/subscriptions/SUB"
            )
        kind, name = parts
        subscription = url.take_str("subscription") if kind == "topics" else None
        endpoint = url.take_str("endpoint")
        timeout = url.take("timeout", float, 30.0)
        batch_max_messages = url.take("batch_max_messages", int, MAX_BATCH)
        batch_max_bytes = url.take("batch_max_bytes", int, 9_000_000)
        url.done()
        if not math.isfinite(timeout) or timeout <= 0:
            raise InvalidURL(f"timeout in {url} must be a number of seconds > 0")
        if not 1 <= batch_max_messages <= MAX_BATCH:
            raise InvalidURL(f"batch_max_messages in {url} must be from 1 to {MAX_BATCH}")
        if not 1024 <= batch_max_bytes <= MAX_MESSAGE_BYTES:
            raise InvalidURL(f"batch_max_bytes in {url} must be from 1,024 to {MAX_MESSAGE_BYTES:,}")
        check_resource_name("topic" if kind == "topics" else "subscription", name, url)
        if subscription is not None:
            check_resource_name("subscription", subscription, url)
        return cls(
            project,
            topic=name if kind == "topics" else None,
            subscription=name if kind == "subscriptions" else subscription,
            endpoint=endpoint,
            timeout=timeout,
            batch_max_messages=batch_max_messages,
            batch_max_bytes=batch_max_bytes,
        )

    def __repr__(self) -> str:
        return f"PubSubMessaging(topic={self._topic_path!r}, subscription={self._sub_path!r})"

    # -- plumbing ------------------------------------------------------------
    def _rpc_timeout(self) -> float:
        left = attempt_timeout()
        return self.timeout if left is None else max(0.001, min(self.timeout, left))

    def _options(self) -> dict[str, str]:
        """Options a URL of a sibling resource needs to reach the same server."""
        out: dict[str, str] = {}
        if self.emulator:
            out["endpoint"] = self.emulator
        if self.timeout != 30.0:
            out["timeout"] = str(self.timeout)
        return out

    def _url(self, kind: str, project: str, name: str, **extra: str) -> str:
        query = urlencode({**extra, **self._options()}, safe=":/")
        return f"pubsub://{project}/{kind}/{name}" + (f"?{query}" if query else "")

    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, PortableError):
            return exc.code
        if getattr(exc, "reason", None) == _google.EXACTLY_ONCE_FAILURE and _transient_only(exc):
            return ErrorCode.UNAVAILABLE
        code = _google.code_of(exc)
        return code if code is not None else super().code_of(exc)

    # -- sides -----------------------------------------------------------------
    def async_driver(self) -> AsyncPubSub:
        """Both sides on the async GAPIC clients, on the event loop (:mod:`portable_gcp._pubsub_aio`)."""
        from ._pubsub_aio import AsyncPubSub

        return AsyncPubSub(self)

    def topic(self) -> TopicDriver:
        if self._topic_path is None:
            raise InvalidURL(
                f"pubsub://{self.project}/subscriptions/{self.subscription_name} names a subscription, "
                f"not a topic: publish to pubsub://{self.project}/topics/TOPIC"
            )
        return self

    def subscription(self) -> SubscriptionDriver:
        if self._sub_path is None:
            raise InvalidURL(
                f"pubsub://{self.project}/topics/{self.topic_name} names no subscription: add "
                "?subscription=SUB, or open pubsub://PROJECT/subscriptions/SUB"
            )
        try:
            info = self._subscriber.get_subscription(
                subscription=self._sub_path, retry=None, timeout=self._rpc_timeout()
            )
        except gexc.PermissionDenied:
            # Consumers often hold only pubsub.subscriptions.consume: assume the settings off.
            self.capabilities = dataclasses.replace(self.capabilities, ordering=False)
            return self
        self._ack_deadline = int(info.ack_deadline_seconds) or None
        dead_topic = info.dead_letter_policy.dead_letter_topic or None
        self._dead_letter_topic = dead_topic
        if dead_topic:
            self._dead_letter_url = self._find_dead_letter_subscription(dead_topic)
        self.capabilities = dataclasses.replace(
            self.capabilities,
            ordering=bool(info.enable_message_ordering),
            exactly_once=bool(info.enable_exactly_once_delivery),
            native_dead_letter=dead_topic is not None,
            delivery_count=dead_topic is not None,
        )
        return self

    def _find_dead_letter_subscription(self, topic_path: str) -> str | None:
        try:
            pager = self._publisher.list_topic_subscriptions(
                topic=topic_path, retry=None, timeout=self._rpc_timeout()
            )
            first = next(iter(pager), None)
        except gexc.GoogleAPICallError:
            return None
        match = _PATH.match(first or "")
        return self._url("subscriptions", match.group(1), match.group(3)) if match else None

    # -- publishing ------------------------------------------------------------
    def _publish_request(self, topic_path: str, raw_messages: list[Any]) -> dict[str, Any]:
        """Publish's arguments (both faces send exactly these)."""
        request = pubsub_types.PublishRequest.wrap(_RawPublishRequest(topic=topic_path, messages=raw_messages))
        return {"request": request, "retry": None, "timeout": self._rpc_timeout()}

    def _publish_raw(self, topic_path: str, raw_messages: list[Any]) -> list[str]:
        response = self._publisher.publish(**self._publish_request(topic_path, raw_messages))
        return list(response.message_ids)

    def publish(self, message: OutgoingMessage) -> str:
        assert self._topic_path is not None
        return self._publish_raw(self._topic_path, [_raw(message)])[0]

    def _plan_batch(self, items: list[OutgoingMessage]) -> list[list[Any]]:
        """The messages of each Publish request for ``items``, in order (``batch_max_messages``/``_bytes``).

        Raises:
            InvalidArgument: a message is empty (the batch fails before any request).
        """
        raws = [_raw(item) for item in items]
        requests: list[list[Any]] = []
        start = 0
        while start < len(items):
            end, size = start, 0
            while end < len(items) and end - start < self.batch_max_messages:
                grow = _size(items[end])
                if end > start and size + grow > self.batch_max_bytes:
                    break
                size += grow
                end += 1
            requests.append(raws[start:end])
            start = end
        return requests

    def publish_batch(self, messages: Iterable[OutgoingMessage]) -> list[str | BaseException]:
        assert self._topic_path is not None
        items = list(messages)
        out: list[str | BaseException] = []
        for raws in self._plan_batch(items):
            try:
                out.extend(self._publish_raw(self._topic_path, raws))
            except Exception as exc:
                if not out:
                    raise  # nothing judged yet: the portable layer retries the whole batch
                # Stop here: later messages may share an ordering key with these.
                out.extend([exc] * (len(items) - len(out)))
                return out
        return out

    # -- administration ------------------------------------------------------------
    def temporary(self, name: str) -> contextlib.AbstractContextManager[str]:
        """A fresh topic NAME with subscription NAME: message ordering on and a dead-letter policy.

        What ``portable contract`` runs the messaging suite in; see :meth:`create_temporary`.
        """
        return self.create_temporary(name)

    @contextlib.contextmanager
    def create_temporary(
        self, name: str, *, ordering: bool = True, exactly_once: bool = False, max_delivery_attempts: int = 5
    ) -> Iterator[str]:
        """Create topic NAME and subscription NAME, yield a URL that opens both, delete them after.

        Also creates the dead-letter topic ``NAME-dlq`` with a subscription
        ``NAME-dlq``, and gives subscription NAME a dead-letter policy of
        ``max_delivery_attempts`` (5-100) towards it.
        """
        where = f"create_temporary({name!r})"
        check_resource_name("topic", name, where)
        check_resource_name("topic", f"{name}-dlq", where)
        if not 5 <= max_delivery_attempts <= 100:
            raise InvalidArgument(f"max_delivery_attempts must be from 5 to 100, got {max_delivery_attempts}")
        project = self.project
        topic, dlq = f"projects/{project}/topics/{name}", f"projects/{project}/topics/{name}-dlq"
        sub, dlq_sub = f"projects/{project}/subscriptions/{name}", f"projects/{project}/subscriptions/{name}-dlq"
        kw: dict[str, Any] = {"retry": None, "timeout": self.timeout}
        created: list[tuple[str, str]] = []
        try:
            for path in (topic, dlq):
                self._publisher.create_topic(name=path, **kw)
                created.append(("topic", path))
            self._subscriber.create_subscription(request={"name": dlq_sub, "topic": dlq}, **kw)
            created.append(("subscription", dlq_sub))
            self._subscriber.create_subscription(
                request={
                    "name": sub,
                    "topic": topic,
                    "ack_deadline_seconds": 10,
                    "enable_message_ordering": ordering,
                    "enable_exactly_once_delivery": exactly_once,
                    "dead_letter_policy": {"dead_letter_topic": dlq, "max_delivery_attempts": max_delivery_attempts},
                },
                **kw,
            )
            created.append(("subscription", sub))
            yield self._url("topics", project, name, subscription=name)
        finally:
            for kind, path in reversed(created):
                with contextlib.suppress(gexc.GoogleAPICallError):
                    if kind == "subscription":
                        self._subscriber.delete_subscription(subscription=path, **kw)
                    else:
                        self._publisher.delete_topic(topic=path, **kw)

    def as_(self, kind: type[Any]) -> Any:
        for native in (self._publisher, self._subscriber, self._channel):
            if native is not None and isinstance(native, kind):
                return native
        return None

    def close(self) -> None:
        # Topic.close() closes its side and then the driver: the same object here, so twice.
        if self._closed:
            return
        self._closed = True
        if self._channel is not None:
            self._channel.close()
        else:
            for client in (self._publisher, self._subscriber):
                with contextlib.suppress(Exception):
                    client.transport.close()  # type: ignore[no-untyped-call]


def _transient_only(exc: BaseException) -> bool:
    metadata = getattr(exc, "metadata", None) or {}
    return bool(metadata) and all(str(v).startswith("TRANSIENT_") for v in metadata.values())


def acks_failed(exc: gexc.GoogleAPICallError, ids: list[str]) -> list[BaseException | None]:
    """Each ack id's outcome, in order, of an Acknowledge of ``ids`` that raised ``exc``."""
    failures = _ack_failures(exc)
    if failures is None:
        return [exc] * len(ids)
    return [failures.get(ack_id) for ack_id in ids]


def _ack_failures(exc: gexc.GoogleAPICallError) -> dict[str, BaseException | None] | None:
    """Per ack id outcome of a partly failed exactly-once Acknowledge, or None if it failed whole."""
    if getattr(exc, "reason", None) != _google.EXACTLY_ONCE_FAILURE:
        return None
    metadata: Mapping[str, str] = getattr(exc, "metadata", None) or {}
    out: dict[str, BaseException | None] = {}
    for ack_id, status in metadata.items():
        if str(status).startswith("TRANSIENT_"):
            out[ack_id] = Unavailable(f"ack {status}: try again", provider="pubsub")
        else:
            out[ack_id] = PreconditionFailed(
                f"ack refused ({status}): the lease was lost and the message will be delivered again",
                provider="pubsub",
            )
    return out
