"""``kafka://`` — Kafka topics and consumer groups on kafka-python.

One driver serves Apache Kafka, Amazon MSK, Confluent Cloud, Azure Event Hubs'
Kafka endpoint, Redpanda and Tansu: only the URL differs.

URLs:
    ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC`` names a topic (the publishing side).
    ``kafka://HOST:PORT/TOPIC?group=GROUP`` adds the consumer group that receives:
    a portable Subscription *is* a consumer group, and every Subscription opened
    with the same group shares the topic's partitions (competing consumers).

    =====================  =======================================================================
    Apache Kafka, Tansu    ``kafka://broker:9092/orders?group=billing``
    Amazon MSK (IAM)       ``kafka://b-1.x.kafka.eu-west-1.amazonaws.com:9098/orders?group=billing
                           &security_protocol=SASL_SSL&sasl_mechanism=AWS_MSK_IAM``
                           (``pip install 'portable-kafka[msk-iam]'``; credentials and region from
                           the usual AWS chain)
    Amazon MSK (SCRAM)     ``...:9096/orders?security_protocol=SASL_SSL&sasl_mechanism=SCRAM-SHA-512``
    Confluent Cloud        ``kafka://pkc-xxxx.eu-west-1.aws.confluent.cloud:9092/orders?group=billing
                           &security_protocol=SASL_SSL&sasl_mechanism=PLAIN&create=false``
                           user = API key, password = API secret
    Azure Event Hubs       ``kafka://NAMESPACE.servicebus.windows.net:9093/EVENTHUB?group=billing
                           &security_protocol=SASL_SSL&sasl_mechanism=PLAIN
                           &sasl_username=$ConnectionString&sasl_password_env=EVENTHUBS_CONNECTION_STRING``
    =====================  =======================================================================

    Passwords never go in a URL (InvalidURL if one does). The user name is
    ``sasl_username=`` or the environment variable ``KAFKA_SASL_USERNAME`` (or
    the one named by ``sasl_username_env=``); the password is read from the
    environment variable named by ``sasl_password_env=`` (default
    ``KAFKA_SASL_PASSWORD``) when a client connects, and is never logged or shown.

Options:
    group: the consumer group of the receiving side. Required by ``open_subscription``.
    security_protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL. Defaults to PLAINTEXT.
    sasl_mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, AWS_MSK_IAM or OAUTHBEARER
        (the last needs ``KafkaMessaging(..., token_provider=)``).
    sasl_username, sasl_username_env, sasl_password_env: see above.
    ssl_cafile: a CA bundle for a private CA. ssl_check_hostname: defaults to true.
    create: create missing topics (the topic, and for a group its retry and
        dead-letter topics) when a side is opened. Defaults to true; set false where
        the credentials may not create topics (Confluent Cloud, Event Hubs Basic);
        then a missing topic is NotFound at open.
    partitions, replication: for topics this driver creates. Default: the broker's.
    retry_topic: where nacked messages wait out their delay. Defaults to
        ``TOPIC.GROUP.retry``; ``none`` keeps retries in this process (see below).
    dead_letter_topic: where ``dead_letter`` moves poison messages. Defaults to
        ``TOPIC.GROUP.dlq``; ``none`` leaves dead letters to the portable layer's
        ``dead_letter=`` topic.
    idempotent: the idempotent producer (acks=all, broker-side dedup of the
        producer's own resends, order kept). Defaults to true.
    acks: 0, 1 or all; only with idempotent=false. Defaults to all.
    linger_ms, batch_size: producer batching. Default 5 ms and 64 KiB.
    compression: none, gzip, snappy, lz4 or zstd. Defaults to none.
    max_message_bytes: the largest record this driver sends. Defaults to 1 MiB,
        Kafka's default ``max.message.bytes``; raise it together with the topic's.
    start: where a new group starts reading: earliest or latest. Defaults to
        earliest, so a message published before the first receive is delivered,
        as on every queue.
    assignor: range, roundrobin or cooperative-sticky. Defaults to range.
    session_timeout_ms: how long a silent member keeps its partitions. Defaults
        to 45000. heartbeat_interval_ms: defaults to min(3000, session/3).
    max_poll_interval_ms: the longest gap between receives before the member
        leaves the group. Defaults to 300000.
    connect_timeout: seconds to reach a bootstrap broker. Defaults to 10.
    request_timeout, delivery_timeout: seconds per request and per produced
        record (kafka-python's own resends included). Default 30 and 60.

Names and limits:
    Topic names are 1-249 of ``[A-Za-z0-9._-]``, not ``.`` or ``..`` (checked
    before any request, InvalidURL). A group is 1-255 printable characters; its
    default retry and dead-letter topics need it to be topic-name legal.
    Attributes travel as record headers (UTF-8 values), at most 64; the key is the
    record key. A body plus attributes may be ``max_message_bytes`` (or the topic's
    ``max.message.bytes`` where the broker reports it, if smaller) less 512 bytes
    kept for framing and retry headers. Batches of up to 10,000 records; leases and
    nack delays up to one day.

As:
    ``kafka.KafkaProducer`` (the publishing side's producer, or the
    subscription's retry producer), ``kafka.KafkaConsumer`` (the subscription's
    consumer; do not poll it yourself), ``kafka.admin.KafkaAdminClient`` (a new
    admin client; close it yourself).

Capabilities:
    ordering (per key: same key -> same partition, and one message of a key in
    flight at a time), native_dead_letter (the dead-letter topic), nack_delay
    (through the retry topic), delivery_count (a retry header counts attempts),
    lease_extension (of the local lease, see Leases). Not: exactly_once (an ack is
    a local mark until its offset is committed), publish_dedup.

Delivery guarantees:
    Publishing is acknowledged by all in-sync replicas (acks=all) and the
    idempotent producer never writes a record twice or out of order while
    *it* resends. A publish that fails and is retried by the portable layer is
    a new record: the consumer may see it twice (deduplicate with
    ``idempotency_key`` and ``run(..., idempotency=store)``).

    Receiving is at least once. A Subscription is a consumer-group member; ``ack``
    marks a message done, and the group's committed offset of its partition moves
    only over a contiguous run of done messages, never past one still in flight.
    Commits are sent when the next ``receive`` starts, shortly after acks, when
    partitions are revoked, and on ``close``. A member that dies, or is killed,
    loses its partitions after ``session_timeout_ms``; another member resumes from
    the last commit, so everything not yet committed (acked or not) is delivered
    again and nothing is lost.

Leases:
    Kafka has no per-message lease: the partition assignment is the lease. While
    this member holds a partition, no other member receives its messages; when it
    loses the partition (it closes, dies, stops receiving for
    ``max_poll_interval_ms``, or a rebalance moves the partition), every message
    of the partition above the last commit goes to the new owner, and ack or nack
    of a message received before returns PreconditionFailed.

    Inside the member, the driver keeps the portable lease itself: a message not
    settled within the ``lease`` of ``receive`` is delivered again by this member
    (the next attempt; the old delivery's ack then fails with PreconditionFailed),
    and ``extend_lease`` moves that local deadline. A local lease does not survive
    the process: a restart redelivers from the last commit, attempt count reset.
    Keep the ``max_poll_interval_ms`` above the longest gap between receives.

Retries and dead letters:
    ``nack(delay)`` publishes a copy to the retry topic, carrying the next attempt
    number and the time it is due, then settles the original. The group reads the
    retry topic too and holds each copy back until it is due (pausing that
    partition while it holds many). ``run(max_deliveries=N)`` sends a message that
    failed N times to the dead-letter topic with the ``portable.dead_letter_*``
    attributes. With ``retry_topic=none`` a nacked message is held in this process
    and its offset stays uncommitted (a crash redelivers it with the count reset).

Retries of kafka-python:
    The portable layer owns retries, except one: the idempotent producer keeps
    kafka-python's resends (bounded by ``delivery_timeout``), because they reuse
    the producer id and sequence number, so the broker drops duplicates and keeps
    the order, which a resend from outside cannot do. With ``idempotent=false``
    the producer makes no retry (``retries=0``). The consumer's offset commits
    are bounded by ``request_timeout``; nothing else retries.

Known differences:
    * Ordering holds while messages are acked. A nacked message goes through the
      retry topic, so later messages of its key may be delivered before its retry.
    * A nack delay is a minimum: copies wait in the retry topic in nack order, so
      a long delay ahead of a short one holds the short one back.
    * ``start=earliest`` means a new group first reads everything the topic retains.
    * Tansu accepts any topic size and name at the broker; portable checks names
      before sending, and sizes against ``max_message_bytes``.
    * Tansu forms a group half a session timeout after the first join: use a short
      ``session_timeout_ms`` (6000 in the tests) there.
"""

# mypy: disable-error-code="import-untyped"
from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import heapq
import itertools
import logging
import operator
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from portable.driver.messaging import (
    MessagingCapabilities,
    MessagingDriver,
    OutgoingMessage,
    QueueStats,
    ReceivedMessage,
    SubscriptionDriver,
    TopicDriver,
)
from portable.driver.redaction import redact
from portable.errors import (
    ErrorCode,
    InvalidURL,
    NotFound,
    PortableError,
    PreconditionFailed,
    TooLarge,
    Unavailable,
    Unsupported,
)
from portable.messaging import Delivery
from portable.resilience import remaining
from portable.urls import ParsedURL, parse_url

from ._progress import PartitionProgress
from ._settings import KafkaSettings, check_topic_name, parse_settings, read_password

__all__ = ["KafkaMessaging"]

log = logging.getLogger("portable.kafka")

#: Headers this driver adds to retry copies; stripped from a delivery's attributes.
_INTERNAL_PREFIX = "portable.kafka."
_ATTEMPT = "portable.kafka.attempt"
_DUE = "portable.kafka.due_ms"
_ORIGINAL_ID = "portable.kafka.id"
_PUBLISHED = "portable.kafka.published_ms"
#: Reserved dead-letter attributes (portable.messaging writes the same names).
_DL_REASON = "portable.dead_letter_reason"
_DL_SOURCE = "portable.dead_letter_source"
_DL_ATTEMPTS = "portable.delivery_attempts"
_DL_ORIGINAL = "portable.original_id"

#: Bytes kept back from max_message_bytes for the record's framing and retry headers.
_RECORD_OVERHEAD = 512
#: A partition is paused while this many of its fetched messages wait here, resumed below half.
_PAUSE_AT = 1000
#: Acks trigger a commit at most this often (seconds); receive and close always commit.
_ACK_COMMIT_INTERVAL = 0.2
#: publish_batch swaps acknowledged futures for ids every this many sends.
_HARVEST = 1000
#: Bytes a record adds to its body in a producer batch (a guess: varints, timestamps, offsets).
_RECORD_GUESS = 24
#: How long close() waits for LeaveGroup. A member whose JoinGroup is still parked at the
#: coordinator gets no answer before that join completes (requests on a connection are
#: answered in order), so waiting request_timeout would stall close for 30 s; the group
#: drops a member that left without a word after session_timeout_ms anyway.
_CLOSE_TIMEOUT_MS = 3000


#: Shared by every delivery without headers (read-only, so one object serves all).
_NO_ATTRIBUTES: Mapping[str, str] = MappingProxyType({})


class _LostLease(PreconditionFailed):
    """The message's partition left this member (or it was settled already)."""


def _epoch_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------- the factory
class KafkaMessaging(MessagingDriver):
    """The ``kafka://`` driver: classifies kafka-python's errors and opens both sides."""

    scheme = "kafka"

    def __init__(self, settings: KafkaSettings, *, token_provider: Any = None) -> None:
        self.settings = settings
        self.endpoint = settings.endpoint
        self._token_provider = token_provider
        if settings.sasl_mechanism == "OAUTHBEARER" and token_provider is None:
            raise InvalidURL(
                "sasl_mechanism=OAUTHBEARER needs a token provider: open the driver with "
                "KafkaMessaging(settings, token_provider=...) (kafka.sasl.oauth.AbstractTokenProvider)"
            )
        self.capabilities = MessagingCapabilities(
            ordering=True,
            native_dead_letter=settings.dead_letter_topic is not None,
            lease_extension=True,
            exactly_once=False,
            publish_dedup=False,
            nack_delay=True,
            delivery_count=True,
            max_lease_seconds=86400.0,
            min_lease_seconds=0.0,
            max_message_bytes=max(1, settings.max_message_bytes - _RECORD_OVERHEAD),
            max_attributes=64,
            max_batch=10000,
        )
        self._topic: KafkaTopic | None = None
        self._subscription: KafkaSubscription | None = None

    @classmethod
    def from_url(cls, url: ParsedURL) -> KafkaMessaging:
        return cls(parse_settings(url))

    def __repr__(self) -> str:
        return f"KafkaMessaging({redact(self.settings.url_for(self.settings.topic or '', self.settings.group))!r})"

    # -- configs (the password is read here, at connect time, and kept nowhere) --
    def _password(self) -> str | None:
        return read_password(self.settings)

    def _with_token(self, config: dict[str, Any]) -> dict[str, Any]:
        if self._token_provider is not None:
            config["sasl_oauth_token_provider"] = self._token_provider
        return config

    def producer_config(self) -> dict[str, Any]:
        return self._with_token(self.settings.producer_config(self._password))

    def consumer_config(self) -> dict[str, Any]:
        return self._with_token(self.settings.consumer_config(self._password))

    def admin_config(self) -> dict[str, Any]:
        return self._with_token(self.settings.admin_config(self._password))

    # -- connecting --------------------------------------------------------------
    def _connect(self, factory: Callable[..., Any], config: dict[str, Any], what: str) -> Any:
        """Build a kafka-python client; a bootstrap that does not answer is Unavailable with the fix."""
        from kafka.errors import KafkaTimeoutError

        left = remaining()
        if left is not None:
            config["bootstrap_timeout_ms"] = max(1, min(config["bootstrap_timeout_ms"], int(left * 1000)))
        try:
            return factory(**config)
        except KafkaTimeoutError as exc:
            if "bootstrap" not in str(exc).lower():
                raise
            s = self.settings
            waited = config["bootstrap_timeout_ms"] / 1000.0
            # kafka-python retried the connection for the whole timeout already: not retryable again
            raise Unavailable(
                f"no Kafka broker answered at {s.endpoint} within {waited:g}s ({what}): check "
                f"the host and port, that security_protocol={s.security_protocol} matches the listener "
                "(a TLS listener needs SSL or SASL_SSL), and that the broker advertises an address this "
                "machine can reach; raise connect_timeout= for a slow network",
                provider=self.scheme,
                retryable=False,
            ) from exc

    def new_producer(self) -> Any:
        from kafka import KafkaProducer

        return self._connect(KafkaProducer, self.producer_config(), "producer")

    def new_admin(self) -> Any:
        from kafka.admin import KafkaAdminClient

        return self._connect(KafkaAdminClient, self.admin_config(), "admin")

    def ensure_topics(self, names: Iterable[str]) -> dict[str, int]:
        """Create the missing ``names`` (``create=true``) or check they exist (``create=false``).

        Returns the first topic's ``max.message.bytes`` (as ``{name: bytes}``) where the
        broker says it: in the CreateTopics answer, or else through DescribeConfigs.
        """
        from kafka.errors import TopicAlreadyExistsError, for_code

        wanted = [n for n in dict.fromkeys(names) if n]
        limits: dict[str, int] = {}
        if not wanted:
            return limits
        s = self.settings
        admin = self.new_admin()
        try:
            if not s.create:
                found = {t.get("name"): t for t in admin.describe_topics(wanted)}
                for name in wanted:
                    code = (found.get(name) or {}).get("error_code", 3)
                    if code:
                        raise NotFound(
                            f"Kafka topic {name!r} does not exist at {s.endpoint} ({for_code(code).__name__}); "
                            "create it, or open with create=true",
                            provider=self.scheme,
                        )
                return self._limit_of(admin, wanted[0])
            spec = {name: {"num_partitions": s.partitions, "replication_factor": s.replication} for name in wanted}
            answer = admin.create_topics(spec, raise_errors=False)
            created = []
            for topic in answer.get("topics", []):
                error = for_code(topic.get("error_code", 0))
                if topic.get("error_code", 0) and error is not TopicAlreadyExistsError:
                    raise error(topic.get("error_message") or topic.get("name"))
                if not topic.get("error_code", 0):
                    created.append(topic["name"])
                limit = ((topic.get("configs") or {}).get("max.message.bytes") or {}).get("value")
                if limit and str(limit).isdigit():
                    limits[topic["name"]] = int(limit)
            if created:
                admin.wait_for_topics(created, timeout_ms=int(s.request_timeout * 1000))
            if wanted[0] not in limits:
                limits.update(self._limit_of(admin, wanted[0]))
        finally:
            admin.close()
        return limits

    @staticmethod
    def _limit_of(admin: Any, topic: str) -> dict[str, int]:
        """``{topic: max.message.bytes}`` from DescribeConfigs, or {} where the broker does not say."""
        from kafka.admin import ConfigResource, ConfigResourceType

        try:
            answer = admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic, {"max.message.bytes": None})], config_filter="all"
            )
            value = answer["topic"][topic]["max.message.bytes"]["value"]
            return {topic: int(value)}
        except Exception as exc:  # Tansu has no DescribeConfigs; the broker still enforces its limit
            log.debug("could not read max.message.bytes of %s: %s", topic, exc)
            return {}

    # -- sides -------------------------------------------------------------------
    def topic(self) -> TopicDriver:
        s = self.settings
        if s.topic is None:
            raise InvalidURL(f"kafka://{s.endpoint}/ names no topic: write kafka://{s.endpoint}/TOPIC")
        if self._topic is None:
            limits = self.ensure_topics([s.topic])
            self._narrow(limits.get(s.topic))
            self._topic = KafkaTopic(self, s.topic)
        return self._topic

    def subscription(self) -> SubscriptionDriver:
        s = self.settings
        if s.topic is None or s.group is None:
            raise InvalidURL(
                f"a Kafka subscription is a consumer group: write kafka://{s.endpoint}/"
                f"{s.topic or 'TOPIC'}?group=GROUP"
            )
        if self._subscription is None:
            limits = self.ensure_topics([s.topic, s.retry_topic or "", s.dead_letter_topic or ""])
            self._narrow(limits.get(s.topic))
            self._subscription = KafkaSubscription(self)
        return self._subscription

    @contextlib.contextmanager
    def temporary(self, name: str) -> Iterator[str]:
        """A fresh topic and group named ``name`` on these brokers, for one contract test.

        Yields its URL; afterwards deletes the topic and its retry and
        dead-letter topics (best effort: a broker may refuse deletion).
        """
        check_topic_name(name)
        url = self.settings.url_for(name, name)
        temp = parse_settings(parse_url(url))
        try:
            yield url
        finally:
            topics = [t for t in (temp.topic, temp.retry_topic, temp.dead_letter_topic) if t]
            try:
                admin = self.new_admin()
                try:
                    admin.delete_topics(topics, raise_errors=False)
                finally:
                    admin.close()
            except Exception as exc:
                log.warning("could not delete the temporary topics %s: %s", topics, exc)

    def _narrow(self, broker_limit: int | None) -> None:
        if broker_limit and broker_limit - _RECORD_OVERHEAD < self.capabilities.max_message_bytes:
            self.capabilities = dataclasses.replace(
                self.capabilities, max_message_bytes=max(1, broker_limit - _RECORD_OVERHEAD)
            )

    def as_(self, kind: type[Any]) -> Any:
        from kafka import KafkaConsumer, KafkaProducer
        from kafka.admin import KafkaAdminClient

        if kind is KafkaProducer:
            if self._topic is not None:
                return self._topic.producer
            if self._subscription is not None:
                return self._subscription.producer()
        if kind is KafkaConsumer and self._subscription is not None:
            return self._subscription.consumer
        if kind is KafkaAdminClient:
            return self.new_admin()
        return None

    def close(self) -> None:
        for side in (self._subscription, self._topic):
            if side is not None:
                side.close()

    # -- errors ------------------------------------------------------------------
    def code_of(self, exc: BaseException) -> ErrorCode:
        import kafka.errors as E

        if isinstance(exc, PortableError):
            return exc.code
        if not isinstance(exc, E.KafkaError):
            return super().code_of(exc)
        if isinstance(exc, E.MessageSizeTooLargeError | E.RecordListTooLargeError):
            return ErrorCode.TOO_LARGE
        if isinstance(exc, E.TopicAlreadyExistsError):
            return ErrorCode.ALREADY_EXISTS
        if isinstance(exc, E.UnknownTopicOrPartitionError):
            return ErrorCode.NOT_FOUND if not self.settings.create else ErrorCode.UNAVAILABLE
        if isinstance(exc, E.AuthorizationError | E.SaslAuthenticationFailedError):
            return ErrorCode.PERMISSION_DENIED
        if isinstance(exc, E.ThrottlingQuotaExceededError | E.QuotaViolationError):
            return ErrorCode.THROTTLED
        if isinstance(
            exc,
            E.CommitFailedError | E.IllegalGenerationError | E.UnknownMemberIdError
            | E.RebalanceInProgressError | E.FencedInstanceIdError,
        ):
            return ErrorCode.PRECONDITION_FAILED
        if isinstance(
            exc,
            E.InvalidTopicError | E.InvalidPartitionsError | E.InvalidReplicationFactorError
            | E.InvalidConfigurationError | E.PolicyViolationError | E.KafkaConfigurationError
            | E.IllegalArgumentError | E.InvalidRequiredAcksError | E.UnsupportedSaslMechanismError
            | E.InvalidSessionTimeoutError | E.InvalidGroupIdError,
        ):
            return ErrorCode.INVALID_ARGUMENT
        if isinstance(exc, E.UnsupportedVersionError | E.UnsupportedCompressionTypeError):
            return ErrorCode.UNSUPPORTED
        if isinstance(exc, E.KafkaTimeoutError | E.RequestTimedOutError):
            return ErrorCode.DEADLINE_EXCEEDED
        if exc.retriable or isinstance(exc, _PRODUCER_FATAL):
            return ErrorCode.UNAVAILABLE
        return ErrorCode.UNKNOWN

    def is_retryable(self, exc: BaseException) -> bool:
        import kafka.errors as E

        if isinstance(exc, PortableError):
            return exc.retryable
        if isinstance(exc, E.KafkaError) and exc.retriable:
            return self.code_of(exc) not in (ErrorCode.NOT_FOUND, ErrorCode.PRECONDITION_FAILED)
        return self.code_of(exc) in (ErrorCode.UNAVAILABLE, ErrorCode.THROTTLED, ErrorCode.DEADLINE_EXCEEDED)


def _fatal_producer_errors() -> tuple[type[BaseException], ...]:
    import kafka.errors as E

    return (E.OutOfOrderSequenceNumberError, E.InvalidProducerEpochError, E.ProducerFencedError,
            E.UnknownProducerIdError)  # fmt: skip


try:
    _PRODUCER_FATAL = _fatal_producer_errors()
except ImportError:  # pragma: no cover - kafka-python is a dependency
    _PRODUCER_FATAL = ()


# ---------------------------------------------------------------- records <-> messages
def _headers(attributes: Mapping[str, str], extra: Mapping[str, str] | None = None) -> list[tuple[str, bytes]]:
    headers = [(name, value.encode("utf-8")) for name, value in attributes.items()]
    if extra:
        headers.extend((name, value.encode("utf-8")) for name, value in extra.items())
    return headers


def _key_bytes(key: str | None) -> bytes | None:
    return None if key is None else key.encode("utf-8")


def _explained(exc: BaseException, topic: str) -> BaseException:
    """A broker's size refusal as TooLarge saying what to change; any other error as it is."""
    import kafka.errors as E

    if isinstance(exc, E.MessageSizeTooLargeError | E.RecordListTooLargeError):
        too_large = TooLarge(
            f"the broker refused a record for topic {topic!r} as too large ({exc}): raise the topic's "
            "max.message.bytes (and the URL's max_message_bytes=) or store the payload in a bucket "
            "and publish its key",
            provider="kafka",
        )
        too_large.__cause__ = exc
        return too_large
    return exc


@functools.cache
def _record_fields() -> Callable[[Any], tuple[int, int, bytes | None, bytes | None, Any]]:
    """(offset, timestamp, key, value, headers) of a kafka-python ConsumerRecord, in one C call."""
    from kafka.consumer.fetcher import ConsumerRecord

    names = ConsumerRecord._fields
    return operator.itemgetter(*(names.index(n) for n in ("offset", "timestamp", "key", "value", "headers")))


def _record_id(topic: str, partition: int, offset: int) -> str:
    return f"{topic}/{partition}/{offset}"


# ---------------------------------------------------------------- publishing
class KafkaTopic(TopicDriver):
    """Publishes with one thread-safe KafkaProducer: key -> partition, attributes -> headers."""

    def __init__(self, driver: KafkaMessaging, topic: str) -> None:
        self._driver = driver
        self.topic = topic
        self._lock = threading.Lock()
        self._closed = False
        self.producer = driver.new_producer()
        self._wait = driver.settings.delivery_timeout + driver.settings.request_timeout

    def _healthy_producer(self) -> Any:
        producer = self.producer
        manager = getattr(producer, "_transaction_manager", None)
        if manager is not None and getattr(manager, "has_fatal_error", lambda: False)():
            with self._lock:
                if self.producer is producer:
                    log.warning("the idempotent producer hit a fatal error; starting a new one")
                    producer.close(timeout=1)
                    self.producer = self._driver.new_producer()
                producer = self.producer
        return producer

    def _send(self, producer: Any, message: OutgoingMessage) -> Any:
        return producer.send(
            self.topic,
            value=message.body,
            key=_key_bytes(message.key),
            headers=_headers(message.attributes) if message.attributes else None,
        )

    def publish(self, message: OutgoingMessage) -> str:
        producer = self._healthy_producer()
        try:
            metadata = self._send(producer, message).get(timeout=remaining(self._wait))
        except Exception as exc:
            explained = _explained(exc, self.topic)
            if explained is exc:
                raise
            raise explained from exc
        return _record_id(metadata.topic, metadata.partition, metadata.offset)

    def publish_batch(self, messages: Iterable[OutgoingMessage]) -> list[str | BaseException]:
        """Send every message, then flush; the results are ids (or errors) in order.

        Each send's future is swapped for its id as soon as it is acknowledged
        (checked every ``_HARVEST`` sends), so a batch of many thousands does not
        keep thousands of futures and their metadata alive until the flush: the
        garbage collector's full passes cost in proportion to live objects.
        """
        producer = self._healthy_producer()
        topic = self.topic
        send = producer.send
        out: list[Any] = []  # futures, then ids or errors
        add = out.append
        done = 0  # out[:done] holds ids or errors
        pool = self._partitions(producer)
        batch_size = self._driver.settings.batch_size
        turn = random.randrange(len(pool)) if pool else 0
        room = batch_size
        for message in messages:
            key = message.key
            attributes = message.attributes
            partition = None
            if key is None and pool:  # sticky: fill one partition's batch, then the next
                room -= len(message.body) + _RECORD_GUESS
                if room < 0:
                    turn += 1
                    room = batch_size - len(message.body) - _RECORD_GUESS
                partition = pool[turn % len(pool)]
            try:
                add(
                    send(
                        topic,
                        value=message.body,
                        key=None if key is None else key.encode("utf-8"),
                        headers=_headers(attributes) if attributes else None,
                        partition=partition,
                    )
                )
            except Exception as exc:
                add(_explained(exc, topic))
            if len(out) - done >= _HARVEST:
                done = self._harvest(out, done, wait=False)
        producer.flush(timeout=remaining(self._wait))
        self._harvest(out, done, wait=True)
        return out

    def _partitions(self, producer: Any) -> list[int]:
        """The partitions a batch's keyless records may go to: those with a leader, else all.

        ``publish_batch`` spreads keyless records as the Java client's sticky
        partitioner does: each partition in turn gets about one producer batch
        (``batch_size``) of them. Batches fill, fewer requests go out, and each
        record skips kafka-python's per-record partitioner (a sort and a random
        choice: about a microsecond). Empty when the metadata cannot be had:
        then kafka-python's own partitioner chooses, record by record.
        """
        try:
            every = producer.partitions_for(self.topic)
            metadata = getattr(producer, "_metadata", None)
            available = metadata.available_partitions_for_topic(self.topic) if metadata is not None else None
        except Exception:  # send() reports the same trouble, record by record
            return []
        return sorted(available or every or ())

    def _harvest(self, out: list[Any], start: int, *, wait: bool) -> int:
        """Replace the futures in ``out[start:]`` by ids or errors, stopping at the first not
        acknowledged yet unless ``wait``; return the index of the first future left."""
        for i in range(start, len(out)):
            item = out[i]
            if isinstance(item, str | BaseException):
                continue
            if not item.is_done and not wait:
                return i
            try:
                if item.is_done and item.exception is None:
                    metadata = item.value  # the common case, without get()'s timer
                else:
                    metadata = item.get(timeout=remaining(self._wait))
            except Exception as exc:
                out[i] = _explained(exc, self.topic)
            else:
                out[i] = _record_id(metadata.topic, metadata.partition, metadata.offset)
        return len(out)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.producer.close(timeout=self._driver.settings.request_timeout)


# ---------------------------------------------------------------- receiving
def _release_parked_records(consumer: Any) -> None:
    """Work around kafka-python 3.0.12 stranding the records of a paused-then-resumed partition.

    Its fetcher parks the fetched records of a partition paused before they were
    returned, and gives them back after ``resume`` only while its "next
    partition records" slot is None; but a drained slot keeps its empty object,
    so the parked records (and with them every later fetch of that partition,
    which waits for them) would never come. Emptying the drained slot lets the
    fetcher pick them up on the next poll, as it intends.
    """
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is None or not getattr(fetcher, "_paused_partition_records", None):
        return
    current = getattr(fetcher, "_next_partition_records", None)
    if current is not None and not current:
        fetcher._next_partition_records = None


class _Delivery(Delivery):
    """One delivery of a fetched record: the Message the application gets and this member's
    bookkeeping of it, in one object.

    A consumer handles many thousands of messages a second, and every object kept per
    message in flight costs allocation and garbage-collector time, so there is one (a
    :class:`portable.messaging.Delivery`, which the Subscription hands out as it is).
    ``_handle`` is an int token, new for every delivery: a later delivery of the same
    record is a new object with a new token, and a stale handle finds nothing.
    """

    __slots__ = ("batch", "due", "lease_ends", "offset", "raw_key", "tp")

    tp: Any  # kafka.TopicPartition
    offset: int
    raw_key: bytes | None
    due: float  # held copies: epoch ms from the header, then time.monotonic() when due
    lease_ends: float  # time.monotonic()
    batch: _LeaseBatch  # the receive that leased it

    def __init__(
        self,
        id: str,
        body: bytes,
        attributes: Mapping[str, str],
        key: str | None,
        publish_time: dt.datetime,
        delivery_attempt: int,
        handle: int,
        tp: Any = None,
        offset: int = -1,
        raw_key: bytes | None = None,
        due: float = 0.0,
    ) -> None:
        self._id = id
        self._body = body
        self._attributes = attributes
        self._key = key
        self._published = publish_time
        self._attempt = delivery_attempt
        self._handle = handle
        self.tp = tp
        self.offset = offset
        self.raw_key = raw_key
        self.due = due


class _LeaseBatch:
    """The deliveries one receive leased together, until their lease ends or all are settled.

    The lease heap holds batches, not deliveries, and a batch lets go of its
    deliveries as soon as the last is settled: a settled message is not kept
    alive (its body included) until its lease would have ended.
    """

    __slots__ = ("items", "left")

    def __init__(self, items: list[_Delivery]) -> None:
        self.items = items
        self.left = len(items)


_NOTHING: list[_Delivery] = []


class _Rebalance:
    """Commits what is safe before partitions leave, and drops their in-flight state.

    An AsyncConsumerRebalanceListener: kafka-python awaits it on its network
    loop, so the commit is awaited there instead of blocking the heartbeats.
    """

    def __init__(self, subscription: KafkaSubscription) -> None:
        self._sub = subscription

    async def on_partitions_revoked(self, revoked: Any) -> None:
        offsets = self._sub._offsets_to_commit(revoked)
        if offsets:
            coordinator = self._sub.consumer._coordinator
            try:
                await coordinator._commit_offsets_sync_async(offsets, timeout_ms=self._sub._commit_timeout_ms)
            except Exception as exc:  # the new owner will redeliver: at least once holds
                log.warning("commit before giving up %s failed: %s", sorted(revoked), exc)
        self._sub._drop(revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self._sub._assign(assigned)

    async def on_partitions_lost(self, lost: Any) -> None:
        self._sub._drop(lost, lost=True)


def _listener(subscription: KafkaSubscription) -> Any:
    from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener

    class Listener(_Rebalance, AsyncConsumerRebalanceListener):  # type: ignore[misc]
        pass

    return Listener(subscription)


class KafkaSubscription(SubscriptionDriver):
    """A consumer-group member: poll-based receive, contiguous-ack commits, retry and DLQ topics.

    Threads: ``receive`` holds ``_poll_lock`` while it touches the consumer (which
    is not thread-safe); ``ack``/``nack`` from handler threads touch only the
    bookkeeping under ``_state`` and send commits when the consumer is free.
    kafka-python's network thread runs the rebalance listener, which also takes
    only ``_state``.
    """

    def __init__(self, driver: KafkaMessaging) -> None:
        from kafka import KafkaConsumer

        s = driver.settings
        assert s.topic is not None and s.group is not None
        self._driver = driver
        self.settings = s
        self.topic = s.topic
        self.retry_topic = s.retry_topic
        self.dead_letter_topic = s.dead_letter_topic
        self._poll_lock = threading.RLock()
        self._state = threading.Lock()
        self._progress: dict[Any, PartitionProgress] = {}
        self._leased: dict[int, _Delivery] = {}  # handle -> delivery in flight
        self._ready: deque[_Delivery] = deque()
        self._held: list[tuple[float, int, _Delivery]] = []  # (due, seq, delivery): not yet due
        self._leases: list[tuple[float, int, _LeaseBatch]] = []  # (ends, seq, batch), checked lazily
        self._waiting: dict[str, deque[_Delivery]] = {}  # key -> later records of a key in flight
        self._busy_keys: set[str] = set()
        self._last_ms = -1  # publish times of a batch repeat: keep the last one's datetime
        self._last_time = dt.datetime.fromtimestamp(0, dt.UTC)
        self._paused: set[Any] = set()
        self._rewind: dict[Any, int] = {}  # revoked tp -> offset to read again from if it comes back
        self._unpause: set[Any] = set()
        self._epochs = itertools.count(1)
        self._tokens = itertools.count(1)
        self._seq = itertools.count()
        self._last_commit = 0.0
        self._producer: Any = None
        self._closed = False
        self._commit_timeout_ms = int(s.request_timeout * 1000)
        self._wait = s.delivery_timeout + s.request_timeout
        self.consumer = driver._connect(KafkaConsumer, driver.consumer_config(), "consumer")
        topics = [self.topic] + ([self.retry_topic] if self.retry_topic else [])
        self.consumer.subscribe(topics, listener=_listener(self))

    # -- rebalance callbacks (kafka-python's network thread) -------------------
    def _assign(self, assigned: Iterable[Any]) -> None:
        """Start fresh bookkeeping for new partitions.

        kafka-python keeps the fetch position (and pause flag) of a partition that
        an eager rebalance revoked and gave straight back to this member; its
        unsettled messages were dropped with the revocation, so read them again
        from the resume point that was noted then.
        """
        with self._state:
            rewind, self._rewind = self._rewind, {}
            unpause, self._unpause = self._unpause, set()
            for tp in assigned:
                if tp not in self._progress:
                    self._progress[tp] = PartitionProgress(next(self._epochs))
                self._paused.discard(tp)
        for tp in assigned:
            if tp in rewind:
                self.consumer.seek(tp, rewind[tp])
            if tp in unpause:
                self.consumer.resume(tp)

    def _drop(self, revoked: Iterable[Any], *, lost: bool = False) -> None:
        """Forget revoked partitions: their unsettled messages will be delivered again from the commit."""
        gone = set(revoked)
        with self._state:
            for tp in gone:
                progress = self._progress.pop(tp, None)
                point = progress.resume_point() if progress is not None else None
                if point is not None and not lost:
                    self._rewind[tp] = point
                if tp in self._paused:
                    self._unpause.add(tp)
                self._paused.discard(tp)
            for delivery in [d for d in self._leased.values() if d.tp in gone]:
                self._unlease(delivery)  # its lease batch skips it when the lease ends
                if delivery._key is not None:
                    self._busy_keys.discard(delivery._key)
            self._ready = deque(d for d in self._ready if d.tp not in gone)
            self._held = [h for h in self._held if h[2].tp not in gone]
            heapq.heapify(self._held)
            for key in list(self._waiting):
                kept = deque(e for e in self._waiting[key] if e.tp not in gone)
                if kept:
                    self._waiting[key] = kept
                else:
                    del self._waiting[key]

    def _offsets_to_commit(self, partitions: Iterable[Any] | None = None) -> dict[Any, Any]:
        from kafka.structs import OffsetAndMetadata

        offsets: dict[Any, Any] = {}
        with self._state:
            for tp in self._progress if partitions is None else partitions:
                progress = self._progress.get(tp)
                at = progress.to_commit() if progress is not None else None
                if at is not None:
                    assert progress is not None
                    progress.committed = at
                    offsets[tp] = OffsetAndMetadata(at, "", -1)
        return offsets

    # -- commits (caller holds _poll_lock) -----------------------------------------
    def _commit_async(self) -> None:
        offsets = self._offsets_to_commit()
        if not offsets:
            return
        self._last_commit = time.monotonic()

        def done(committed: Any, result: Any) -> None:
            if isinstance(result, BaseException):
                log.debug("async commit of %s failed: %s; the next commit covers it", committed, result)
                with self._state:
                    for tp, meta in committed.items():
                        progress = self._progress.get(tp)
                        if progress is not None and progress.committed == meta.offset:
                            progress.committed = None

        self.consumer.commit_async(offsets, callback=done)

    def _commit_soon(self) -> None:
        """After an ack: commit now if the consumer is free and the last commit is not too recent."""
        if time.monotonic() - self._last_commit < _ACK_COMMIT_INTERVAL and self._ready:
            return
        if self._poll_lock.acquire(blocking=False):
            try:
                if not self._closed:
                    self._commit_async()
            except Exception as exc:  # receive and close commit again
                log.debug("commit after ack failed: %s", exc)
            finally:
                self._poll_lock.release()

    # -- receive -------------------------------------------------------------------
    def receive(self, max_messages: int, wait: float, lease: float) -> list[_Delivery]:  # type: ignore[override]
        deadline = time.monotonic() + wait
        with self._poll_lock:
            if self._closed:
                raise Unavailable("the Kafka subscription is closed", provider="kafka")
            self._commit_async()
            polled = False
            while True:
                out = self._take(max_messages, lease)
                if out:
                    return out
                now = time.monotonic()
                left = deadline - now
                if polled and left <= 0:
                    return out
                timeout = max(0.0, left)
                with self._state:
                    for heap in (self._held, self._leases):
                        if heap:
                            timeout = min(timeout, max(0.0, heap[0][0] - now))
                self._pace()  # here nothing deliverable is buffered: only held and key-blocked records
                records = self.consumer.poll(timeout_ms=int(timeout * 1000), max_records=max(max_messages, 10))
                polled = True
                if records:
                    self._admit(records)

    def _admit(self, records: Mapping[Any, list[Any]]) -> None:
        """Track fetched records: ready now, or held until a retry copy is due (caller holds _poll_lock).

        This runs once per fetched record, so the common record (no headers)
        takes the inline path: one object per message, no call.
        """
        ready = self._ready.append
        token = self._tokens.__next__
        fields = _record_fields()
        wall: int | None = None
        with self._state:
            last_ms, last_time = self._last_ms, self._last_time
            for tp, batch in records.items():
                progress = self._progress.get(tp)
                if progress is None:
                    continue  # revoked while the fetch was in flight
                prefix = f"{tp.topic}/{tp.partition}/"
                for record in progress.fetched_many(batch):
                    offset, published, key, value, headers = fields(record)
                    if headers:
                        delivery = self._delivery_with_headers(tp, record)
                        if delivery.due:
                            wall = _epoch_ms() if wall is None else wall
                            if delivery.due > wall:
                                delivery.due = time.monotonic() + (delivery.due - wall) / 1000.0
                                heapq.heappush(self._held, (delivery.due, next(self._seq), delivery))
                                continue
                        ready(delivery)
                        continue
                    if published != last_ms:  # records of one batch share it
                        last_ms = published
                        last_time = dt.datetime.fromtimestamp(max(published, 0) / 1000.0, dt.UTC)
                    ready(
                        _Delivery(
                            prefix + str(offset),
                            b"" if value is None else value,
                            _NO_ATTRIBUTES,
                            None if key is None else key.decode("utf-8", "replace"),
                            last_time,
                            1,
                            token(),
                            tp,
                            offset,
                            key,
                            0.0,
                        )
                    )
            self._last_ms, self._last_time = last_ms, last_time

    def _delivery_with_headers(self, tp: Any, record: Any) -> _Delivery:
        attributes: dict[str, str] = {}
        attempt = 1
        due = 0
        original: str | None = None
        published = record.timestamp
        for name, value in record.headers:
            text = value.decode("utf-8", "replace") if value is not None else ""
            if name.startswith(_INTERNAL_PREFIX):
                try:
                    if name == _ATTEMPT:
                        attempt = max(1, int(text))
                    elif name == _DUE:
                        due = int(text)
                    elif name == _ORIGINAL_ID:
                        original = text
                    elif name == _PUBLISHED:
                        published = int(text)
                except ValueError:
                    log.warning("ignoring a malformed %s header on %s/%s", name, tp, record.offset)
                continue
            attributes[name] = text
        key = record.key
        return _Delivery(
            original or _record_id(tp.topic, tp.partition, record.offset),
            b"" if record.value is None else record.value,
            attributes,
            None if key is None else key.decode("utf-8", "replace"),
            dt.datetime.fromtimestamp(max(published, 0) / 1000.0, dt.UTC),
            attempt,
            next(self._tokens),
            tp,
            record.offset,
            key,
            float(due),
        )

    def _again(self, old: _Delivery) -> _Delivery:
        """The next delivery of the record ``old`` delivered: the next attempt, a new handle."""
        return _Delivery(
            old.id, old.body, old.attributes, old.key, old.publish_time, old.delivery_attempt + 1,
            next(self._tokens), old.tp, old.offset, old.raw_key, 0.0,
        )  # fmt: skip

    def _take(self, max_messages: int, lease: float) -> list[_Delivery]:
        """Deliver up to ``max_messages`` ready records, one in flight per key (caller holds _poll_lock)."""
        now = time.monotonic()
        taken: list[_Delivery] = []
        with self._state:
            if self._leases and self._leases[0][0] <= now:
                self._expire(now)
            leases = self._leases
            while leases and not leases[0][2].left:  # settled in full: nothing to expire
                heapq.heappop(leases)
            held = self._held
            while held and held[0][0] <= now:
                self._ready.append(heapq.heappop(held)[2])
            ready = self._ready
            if not ready:
                return taken
            busy = self._busy_keys
            leased = self._leased
            ends = now + lease
            lease_batch = _LeaseBatch(taken)
            take = ready.popleft
            add = taken.append
            while ready and len(taken) < max_messages:
                delivery = take()
                key = delivery._key
                if key is not None:
                    if key in busy:
                        self._waiting.setdefault(key, deque()).append(delivery)
                        continue
                    busy.add(key)
                delivery.lease_ends = ends
                delivery.batch = lease_batch
                leased[delivery._handle] = delivery
                add(delivery)
            if taken:
                lease_batch.left = len(taken)
                heapq.heappush(self._leases, (ends, next(self._seq), lease_batch))
        return taken

    def _expire(self, now: float) -> None:
        """Take back deliveries whose lease ended; they go first, ahead of their key (caller holds _state)."""
        leases = self._leases
        leased = self._leased
        expired: list[_Delivery] = []
        while leases and leases[0][0] <= now:
            batch: _LeaseBatch = heapq.heappop(leases)[2]
            for delivery in batch.items:
                if leased.get(delivery._handle) is not delivery:
                    continue  # settled, or its partition left
                if delivery.lease_ends > now:  # extended: look again then
                    batch.left -= 1
                    delivery.batch = _LeaseBatch([delivery])
                    heapq.heappush(leases, (delivery.lease_ends, next(self._seq), delivery.batch))
                    continue
                self._unlease(delivery)
                if delivery._key is not None:
                    self._busy_keys.discard(delivery._key)
                expired.append(self._again(delivery))
            batch.items = _NOTHING
        if expired:
            self._ready.extendleft(reversed(expired))

    def _pace(self) -> None:
        """Pause partitions whose held or key-blocked records pile up here; resume them when they drain."""
        with self._state:
            if not self._paused and len(self._held) < _PAUSE_AT and self._waiting_count() < _PAUSE_AT:
                return
            counts: dict[Any, int] = {}
            for _, _, entry in self._held:
                counts[entry.tp] = counts.get(entry.tp, 0) + 1
            for blocked in self._waiting.values():
                for other in blocked:
                    counts[other.tp] = counts.get(other.tp, 0) + 1
            pause = [tp for tp, n in counts.items() if n >= _PAUSE_AT and tp not in self._paused]
            resume = [tp for tp in self._paused if counts.get(tp, 0) < _PAUSE_AT // 2]
            self._paused.update(pause)
            self._paused.difference_update(resume)
        if pause:
            self.consumer.pause(*pause)
        if resume:
            self.consumer.resume(*resume)
        if self._paused or resume:
            _release_parked_records(self.consumer)

    def _waiting_count(self) -> int:
        return sum(len(w) for w in self._waiting.values()) if self._waiting else 0

    # -- settling --------------------------------------------------------------------
    def _leased_delivery(self, handle: Any) -> _Delivery:
        """The delivery in flight under ``handle`` (caller holds _state), or _LostLease."""
        delivery = self._leased.get(handle)
        if delivery is None:
            raise _LostLease(
                "the message is no longer leased here: its lease ended and it was delivered again, "
                "its partition moved to another group member (it will be delivered again from the "
                "last commit), or it was settled already",
                provider="kafka",
            )
        return delivery

    def _unlease(self, delivery: _Delivery) -> None:
        """Take ``delivery`` out of the leased set; its batch lets go when it was the last (caller holds _state)."""
        del self._leased[delivery._handle]
        batch = delivery.batch
        batch.left -= 1
        if not batch.left:
            batch.items = _NOTHING

    def _settle(self, delivery: _Delivery) -> None:
        """Mark ``delivery`` done and let the next message of its key go (caller holds _state)."""
        self._unlease(delivery)
        self._progress[delivery.tp].settle(delivery.offset)
        if delivery._key is not None:
            self._release_key(delivery._key)

    def _release_key(self, key: str) -> None:
        """The message of ``key`` in flight was settled: the key's next one goes first (caller holds _state)."""
        self._busy_keys.discard(key)
        waiting = self._waiting.get(key)
        if waiting:
            self._ready.appendleft(waiting.popleft())
            if not waiting:
                del self._waiting[key]

    def _settle_if_leased(self, handle: Any, delivery: _Delivery) -> None:
        with self._state:
            if self._leased.get(handle) is not delivery:
                raise _LostLease(
                    "the message's partition moved to another group member while it was being "
                    "republished; it will also be delivered again from the last commit",
                    provider="kafka",
                )
            self._settle(delivery)

    def ack(self, handle: Any) -> None:
        with self._state:
            self._settle(self._leased_delivery(handle))
        self._commit_soon()

    def ack_many(self, handles: Iterable[Any]) -> list[BaseException | None]:
        handles = list(handles)
        out: list[BaseException | None] = [None] * len(handles)
        leased = self._leased
        with self._state:
            for i, handle in enumerate(handles):
                delivery = leased.get(handle)
                if delivery is None:
                    out[i] = _LostLease("the message is no longer leased here", provider="kafka")
                else:
                    self._settle(delivery)
        self._commit_soon()
        return out

    def nack(self, handle: Any, delay: float) -> None:
        if self.retry_topic is None:
            with self._state:
                self._redeliver_locally(self._leased_delivery(handle), delay)
            return
        with self._state:
            delivery = self._leased_delivery(handle)
        extra = {
            _ATTEMPT: str(delivery.delivery_attempt + 1),
            _DUE: str(_epoch_ms() + int(delay * 1000)),
            _ORIGINAL_ID: delivery.id,
            _PUBLISHED: str(int(delivery.publish_time.timestamp() * 1000)),
        }
        self._republish(self.retry_topic, delivery, dict(delivery.attributes), extra)
        self._settle_if_leased(handle, delivery)
        self._commit_soon()

    def _redeliver_locally(self, delivery: _Delivery, delay: float) -> None:
        """retry_topic=none: hold the record here, its offset uncommitted, and deliver it again later."""
        self._unlease(delivery)
        if delivery._key is not None:
            self._busy_keys.discard(delivery._key)
        again = self._again(delivery)
        again.due = time.monotonic() + delay
        heapq.heappush(self._held, (again.due, next(self._seq), again))

    def extend_lease(self, handle: Any, seconds: float) -> Any:
        with self._state:
            self._leased_delivery(handle).lease_ends = time.monotonic() + seconds
        return handle

    def dead_letter(self, message: ReceivedMessage, reason: str) -> None:
        if self.dead_letter_topic is None:
            raise Unsupported("this Kafka subscription has no dead-letter topic (dead_letter_topic=none)")
        with self._state:
            delivery = self._leased_delivery(message.handle)
        attributes = dict(delivery.attributes)
        attributes.update(
            {
                _DL_REASON: reason,
                _DL_SOURCE: self.settings.url_for(self.topic, self.settings.group),
                _DL_ATTEMPTS: str(delivery.delivery_attempt),
                _DL_ORIGINAL: delivery.id,
            }
        )
        self._republish(self.dead_letter_topic, delivery, attributes, None)
        self._settle_if_leased(message.handle, delivery)
        self._commit_soon()

    def dead_letter_url(self) -> str | None:
        if self.dead_letter_topic is None:
            return None
        return self.settings.url_for(
            self.dead_letter_topic, f"{self.settings.group}.dlq", retry_topic="none", dead_letter_topic="none"
        )

    def producer(self) -> Any:
        """The producer of retry and dead-letter copies, started on first use."""
        with self._state:
            producer = self._producer
        if producer is None:
            producer = self._driver.new_producer()
            with self._state:
                if self._producer is None:
                    self._producer = producer
                else:
                    producer.close(timeout=1)
                    producer = self._producer
        return producer

    def _republish(
        self, topic: str, delivery: _Delivery, attributes: dict[str, str], extra: dict[str, str] | None
    ) -> None:
        future = self.producer().send(
            topic, value=delivery.body, key=delivery.raw_key, headers=_headers(attributes, extra)
        )
        future.get(timeout=remaining(self._wait))

    # -- the rest ----------------------------------------------------------------------
    def stats(self) -> QueueStats:
        with self._poll_lock:
            with self._state:
                partitions = list(self._progress)
                in_flight = len(self._leased)
                delayed = len(self._held)
                ready = len(self._ready) + sum(len(w) for w in self._waiting.values())
            lag = 0
            for tp in partitions:
                high = self.consumer.highwater(tp)
                if high is None:
                    continue
                try:
                    position = self.consumer.position(tp, timeout_ms=1000)
                except Exception:
                    continue
                lag += max(0, high - position)
        return QueueStats(available=ready + lag, in_flight=in_flight, delayed=delayed, dead_letters=None)

    def close(self) -> None:
        with self._poll_lock:
            if self._closed:
                return
            self._closed = True
            try:
                offsets = self._offsets_to_commit()
                if offsets:
                    self.consumer.commit(offsets, timeout_ms=self._commit_timeout_ms)
            except Exception as exc:
                log.warning("final commit failed: %s; uncommitted messages will be delivered again", exc)
            finally:
                self.consumer.close(autocommit=False, timeout_ms=_CLOSE_TIMEOUT_MS)
                if self._producer is not None:
                    self._producer.close(timeout=self.settings.request_timeout)
