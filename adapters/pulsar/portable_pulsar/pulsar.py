"""``pulsar://`` — Apache Pulsar topics and subscriptions on pulsar-client (the C++ client).

URLs:
    ``pulsar://HOST:PORT/TENANT/NAMESPACE/TOPIC`` names a topic (the publishing side;
    ``persistent://TENANT/NAMESPACE/TOPIC`` at the broker). ``?subscription=NAME`` adds
    the receiving side, a durable Pulsar subscription of ``type=shared`` (the default:
    competing consumers), ``key_shared`` (one key to one consumer at a time),
    ``failover`` (one active consumer, a standby takes over) or ``exclusive``.
    The port defaults to 6650. A JWT is read at connect time from the environment
    variable ``token_env=`` names (default ``PULSAR_AUTH_TOKEN``), never from the URL.

Options:
    ``subscription``, ``type``, ``start`` (``earliest``, the default, or ``latest``: where
    a new subscription begins); ``admin_url`` (the broker's web service, default
    ``http://HOST:8080``: stats, ``temporary()``, creating the dead-letter subscription);
    dead letters: ``dead_letter_topic`` (default ``TOPIC-SUBSCRIPTION-DLQ``, Pulsar's own
    name; ``none`` turns it off), ``dead_letter_subscription`` (default: the
    subscription's name), ``max_redeliveries`` (Pulsar's DeadLetterPolicy: the client
    moves a message after that many redeliveries, without portable's reason
    attributes; default 0, off); consumer: ``receiver_queue_size`` (1000),
    ``nack_redelivery_ms`` (100: how soon a message given back is redelivered);
    producer: ``batching`` (true), ``batching_max_messages`` (1000),
    ``batching_max_bytes`` (131072), ``batching_max_delay_ms`` (10), ``max_pending`` (1000),
    ``compression`` (none, lz4, zlib, zstd, snappy), ``producer_name``; time:
    ``send_timeout``, ``operation_timeout`` (30 s), ``connect_timeout`` (10 s);
    ``max_message_bytes`` (the broker's ``maxMessageSize``, 5 MiB); ``persistent`` (true);
    ``token_env``. Any other option is an error.

As:
    ``pulsar.Client``, ``pulsar.Producer`` (the topic side's), ``pulsar.Consumer``
    (do not receive from it yourself: the leases kept here would not see it).

Async (``portable.aio``): thread-adapted (the default AsyncTopicDriver /
AsyncSubscriptionDriver). pulsar-client 3.13's asyncio API covers producers
only, and its consumer has no asyncio receive.

Capabilities, leases (kept in this process: :mod:`._subscription`), dead letters and
every known difference from the contract: docs/adapters/pulsar.md.
"""

# mypy: disable-error-code="import-untyped"
from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import urllib.error
from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any

from portable.driver.messaging import (
    MessagingCapabilities,
    MessagingDriver,
    OutgoingMessage,
    SubscriptionDriver,
    TopicDriver,
    plain_items,
)
from portable.driver.redaction import redact
from portable.errors import ErrorCode, InvalidURL, PortableError
from portable.urls import ParsedURL, parse_url

from ._admin import AdminError, admin_request
from ._settings import COMPRESSIONS, PulsarSettings, check_name, parse_settings
from ._subscription import LeaseLost, PulsarSubscription, message_id_text

__all__ = ["PulsarMessaging", "PulsarSendError"]

log = logging.getLogger("portable.pulsar")

#: Bytes kept back from max_message_bytes for the message metadata (properties, key, ids).
_METADATA_OVERHEAD = 1024


class PulsarSendError(Exception):
    """A message of ``publish_batch`` the broker or client refused; ``result`` is the pulsar.Result."""

    def __init__(self, result: Any) -> None:
        super().__init__(f"Pulsar refused the message: {result.name}")
        self.result = result


class PulsarMessaging(MessagingDriver):
    """The ``pulsar://`` driver: one pulsar.Client; classifies its errors; opens both sides."""

    scheme = "pulsar"

    def __init__(self, settings: PulsarSettings) -> None:
        self.settings = settings
        self.endpoint = settings.endpoint
        shared = settings.type in ("shared", "key_shared")
        self.capabilities = MessagingCapabilities(
            ordering=False,
            native_dead_letter=settings.dead_letter_topic is not None and settings.subscription is not None,
            lease_extension=True,
            exactly_once=False,
            publish_dedup=False,
            nack_delay=True,
            # the broker counts redeliveries for Shared and Key_Shared subscriptions only
            delivery_count=shared,
            max_lease_seconds=86400.0,
            min_lease_seconds=0.0,
            max_message_bytes=max(1, settings.max_message_bytes - _METADATA_OVERHEAD),
            max_attributes=64,
            max_batch=10000,
        )
        self._client: Any = None
        self._client_lock = threading.Lock()
        self._topic: PulsarTopic | None = None
        self._subscription: PulsarSubscription | None = None

    @classmethod
    def from_url(cls, url: ParsedURL) -> PulsarMessaging:
        return cls(parse_settings(url))

    def __repr__(self) -> str:
        s = self.settings
        return f"PulsarMessaging({redact(s.url_for(s.topic, s.subscription))!r})"

    # -- the client and the admin API -----------------------------------------------
    @property
    def client(self) -> Any:
        """The pulsar.Client, made on first use (the token is read then, and kept by the client only)."""
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    import pulsar

                    s = self.settings
                    token = s.token()
                    self._client = pulsar.Client(
                        s.service_url,
                        authentication=pulsar.AuthenticationToken(token) if token else None,
                        operation_timeout_seconds=max(1, round(s.operation_timeout)),
                        connection_timeout_ms=int(s.connect_timeout * 1000),
                        io_threads=1,
                        message_listener_threads=1,
                        logger=logging.getLogger("portable.pulsar.client"),
                    )
        return self._client

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        """One call of the broker's admin REST API (``admin_url``)."""
        s = self.settings
        return admin_request(s.admin_url, method, path, token=s.token(), body=body, timeout=s.operation_timeout)

    def ensure_subscription(self, topic: str, subscription: str) -> None:
        """Create ``subscription`` on ``topic`` (the topic too) unless it exists; from the earliest message."""
        check_name("topic", topic)
        check_name("subscription", subscription)
        s = self.settings
        try:
            self.admin("PUT", f"{s.rest_path(topic)}/subscription/{subscription}", body={"entryId": 0, "ledgerId": 0})
        except AdminError as exc:
            if exc.status != 409:  # 409: it exists
                raise

    # -- sides -------------------------------------------------------------------------
    def topic(self) -> TopicDriver:
        if self._topic is None:
            self._topic = PulsarTopic(self)
        return self._topic

    def subscription(self) -> SubscriptionDriver:
        s = self.settings
        if s.subscription is None:
            raise InvalidURL(
                f"a Pulsar subscription needs a name: write pulsar://{s.host}/{s.tenant}/{s.namespace}/"
                f"{s.topic}?subscription=NAME (&type=shared|key_shared|failover|exclusive)"
            )
        if self._subscription is None:
            self._subscription = PulsarSubscription(self)
        return self._subscription

    @contextlib.contextmanager
    def temporary(self, name: str) -> Iterator[str]:
        """A fresh topic ``name`` with a subscription ``name`` (and its dead-letter topic and
        subscription), for one contract test. Yields its URL; afterwards deletes both topics."""
        check_name("topic", name)
        s = self.settings
        dead = f"{name}-{name}-DLQ"
        self.ensure_subscription(name, name)
        self.ensure_subscription(dead, name)
        try:
            yield s.url_for(name, name)
        finally:
            for topic in (name, dead):
                try:
                    self.admin("DELETE", f"{s.rest_path(topic)}?force=true")
                except Exception as exc:
                    log.warning("could not delete the temporary topic %s: %s", topic, exc)

    def as_(self, kind: type[Any]) -> Any:
        import pulsar

        if kind is pulsar.Client:
            return self.client
        if kind is pulsar.Producer and self._topic is not None:
            return self._topic.producer
        if kind is pulsar.Consumer and self._subscription is not None:
            return self._subscription.consumer
        return None

    def close(self) -> None:
        for side in (self._subscription, self._topic):
            if side is not None:
                side.close()
        self._subscription = self._topic = None
        if self._client is not None:
            try:
                self._client.close()
            except Exception as exc:
                log.debug("closing the Pulsar client: %s", exc)
            self._client = None

    # -- errors ------------------------------------------------------------------------
    def code_of(self, exc: BaseException) -> ErrorCode:
        import pulsar.exceptions as E

        if isinstance(exc, PortableError):
            return exc.code
        if isinstance(exc, LeaseLost):
            return ErrorCode.PRECONDITION_FAILED
        if isinstance(exc, AdminError):
            return exc.code
        if isinstance(exc, PulsarSendError):
            name = exc.result.name
            error = getattr(E, name, None)
            return self._code_of_pulsar(error) if isinstance(error, type) else ErrorCode.UNKNOWN
        if isinstance(exc, urllib.error.URLError):
            return ErrorCode.UNAVAILABLE
        if isinstance(exc, E.PulsarException):
            return self._code_of_pulsar(type(exc))
        return super().code_of(exc)

    @staticmethod
    def _code_of_pulsar(kind: type[BaseException]) -> ErrorCode:
        return _PULSAR_CODES.get(kind.__name__, ErrorCode.UNKNOWN)

    def is_retryable(self, exc: BaseException) -> bool:
        if isinstance(exc, PortableError):
            return exc.retryable
        return self.code_of(exc) in (ErrorCode.UNAVAILABLE, ErrorCode.THROTTLED, ErrorCode.DEADLINE_EXCEEDED)


_PULSAR_CODES: dict[str, ErrorCode] = {
    **dict.fromkeys(("TopicNotFound", "SubscriptionNotFound", "ConsumerNotFound"), ErrorCode.NOT_FOUND),
    "MessageTooBig": ErrorCode.TOO_LARGE,
    **dict.fromkeys(
        ("AuthenticationError", "AuthorizationError", "ErrorGettingAuthenticationData"), ErrorCode.PERMISSION_DENIED
    ),
    **dict.fromkeys(
        ("ProducerBlockedQuotaExceededError", "ProducerBlockedQuotaExceededException",
         "TooManyLookupRequestException"), ErrorCode.THROTTLED,
    ),
    "Timeout": ErrorCode.DEADLINE_EXCEEDED,
    **dict.fromkeys(
        ("ConnectError", "NotConnected", "LookupError", "ServiceUnitNotReady", "BrokerPersistenceError",
         "BrokerMetadataError", "ProducerQueueIsFull", "MemoryBufferIsFull", "ReadError", "ChecksumError"),
        ErrorCode.UNAVAILABLE,
    ),
    **dict.fromkeys(
        ("InvalidConfiguration", "InvalidTopicName", "InvalidUrl", "InvalidMessage", "IncompatibleSchema",
         "CumulativeAcknowledgementNotAllowedError"), ErrorCode.INVALID_ARGUMENT,
    ),
    **dict.fromkeys(("OperationNotSupported", "UnsupportedVersionError", "NotAllowedError"), ErrorCode.UNSUPPORTED),
    # another consumer holds an exclusive/failover slot, or the topic no longer takes messages
    **dict.fromkeys(("ConsumerBusy", "ProducerBusy", "ProducerFenced", "TopicTerminated"), ErrorCode.PRECONDITION_FAILED),
    "Interrupted": ErrorCode.CANCELLED,
}


class PulsarTopic(TopicDriver):
    """The publishing side: one producer (batching by default) on the topic."""

    def __init__(self, driver: PulsarMessaging) -> None:
        import pulsar

        s = driver.settings
        self.settings = s
        kwargs: dict[str, Any] = {}
        if s.producer_name is not None:
            kwargs["producer_name"] = s.producer_name
        self.producer = driver.client.create_producer(
            s.full_topic(),
            send_timeout_millis=int(s.send_timeout * 1000),
            compression_type=getattr(pulsar.CompressionType, COMPRESSIONS[s.compression]),
            max_pending_messages=s.max_pending,
            block_if_queue_full=True,
            batching_enabled=s.batching,
            batching_max_messages=s.batching_max_messages,
            batching_max_allowed_size_in_bytes=s.batching_max_bytes,
            batching_max_publish_delay_ms=s.batching_max_delay_ms,
            # keys go together, so a Key_Shared subscription can route a whole batch to one consumer
            batching_type=pulsar.BatchingType.KeyBased if s.batching else pulsar.BatchingType.Default,
            **kwargs,
        )
        self._ok = pulsar.Result.Ok
        # pulsar-client 3.13's binding under pulsar.Producer (``_producer``, ``_pulsar.MessageBuilder``):
        # the same calls as the wrapper's send_async makes
        import _pulsar

        self._native = self.producer._producer  # pinned: pulsar-client==3.13.0
        self._builder = _pulsar.MessageBuilder

    def publish(self, message: OutgoingMessage) -> str:
        done = threading.Event()
        outcome: list[Any] = []

        def sent(result: Any, mid: Any) -> None:
            outcome.append((result, mid))
            done.set()

        self._send_async(message, sent)
        self.producer.flush()  # do not wait out batching_max_delay_ms for a single message
        done.wait()
        result, mid = outcome[0]
        if result != self._ok:
            raise PulsarSendError(result)
        return message_id_text(mid)

    def publish_batch(self, messages: Iterable[OutgoingMessage]) -> list[str | BaseException]:
        batch = plain_items(messages)  # a body-only message stays its bytes (no object made for it)
        size = len(batch)
        out: list[str | BaseException] = [""] * size
        if not size:
            return out
        # next() of a count is atomic (the GIL), so the receipts need no lock: the one
        # that counts the last message (a receipt, or a refusal here) sets done
        settled = itertools.count(1).__next__
        done = threading.Event()
        ok = self._ok

        def sent(index: int, result: Any, mid: Any) -> None:
            # str(MessageId) is "(ledger,entry,partition,batch_index)": one call instead of four
            out[index] = str(mid)[1:-1].replace(",", ":") if result == ok else PulsarSendError(result)
            if settled() == size:
                done.set()

        send = self._send_async
        for index, message in enumerate(batch):
            try:
                send(message, partial(sent, index))
            except Exception as exc:  # refused by the client before it queued the message
                out[index] = exc
                if settled() == size:
                    done.set()
        self.producer.flush()
        done.wait()
        return out

    def _send_async(self, message: OutgoingMessage | bytes, callback: Any) -> None:
        # the binding's MessageBuilder, as pulsar.Producer.send_async builds it, without the
        # wrapper's per-argument type checks (the portable layer checked every argument already);
        # a body-only message of a batch comes as its bytes (plain_items)
        builder = self._builder()
        if type(message) is bytes:
            builder.content(message)
            self._native.send_async(builder.build(), callback)
            return
        assert isinstance(message, OutgoingMessage)
        builder.content(message.body)
        attributes = message.attributes
        if attributes:
            for name, value in attributes.items():
                builder.property(name, value)
        key = message.key
        if key is not None:
            builder.partition_key(key)
        self._native.send_async(builder.build(), callback)

    def close(self) -> None:
        try:
            self.producer.flush()
            self.producer.close()
        except Exception as exc:
            log.debug("closing the Pulsar producer: %s", exc)


def open_url(url: str) -> PulsarMessaging:
    """The driver of ``url`` (for tests and benchmarks that want the driver alone)."""
    return PulsarMessaging.from_url(parse_url(url))
