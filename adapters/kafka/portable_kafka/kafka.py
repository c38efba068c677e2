"""``kafka://`` — Kafka topics and consumer groups on confluent-kafka's librdkafka
(:mod:`._confluent`, the default where it is installed) or on kafka-python
(``?engine=kafka-python``, and the fallback).

One driver serves Apache Kafka, Amazon MSK, Confluent Cloud, Azure Event Hubs'
Kafka endpoint, Redpanda and Tansu: only the URL differs.

URLs:
    ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC`` names a topic (the publishing side).
    ``kafka://HOST:PORT/TOPIC?group=GROUP`` adds the consumer group that receives:
    a portable Subscription *is* a consumer group, and every Subscription opened
    with the same group shares the topic's partitions (competing consumers).
    Passwords never go in a URL: they are read from an environment variable
    (``sasl_password_env=``, default ``KAFKA_SASL_PASSWORD``) when a client connects.

Options:
    ``group``; security: ``security_protocol``, ``sasl_mechanism`` (OAUTHBEARER
    needs ``KafkaMessaging(..., token_provider=)``), ``sasl_username``,
    ``sasl_username_env``, ``sasl_password_env``, ``ssl_cafile``,
    ``ssl_check_hostname``; topics: ``create``, ``partitions``, ``replication``,
    ``retry_topic``, ``dead_letter_topic`` (``none`` turns either off); producer:
    ``idempotent``, ``acks``, ``linger_ms``, ``batch_size``, ``compression``,
    ``max_message_bytes``; group: ``start``, ``assignor``, ``session_timeout_ms``,
    ``heartbeat_interval_ms``, ``max_poll_interval_ms``; time: ``connect_timeout``,
    ``request_timeout``, ``delivery_timeout``; ``client_id``; ``engine``
    (``confluent``, the default where confluent-kafka is installed, or
    ``kafka-python``: same options, capabilities and contract; docs/adapters/kafka.md,
    "Engines").

As:
    ``kafka.KafkaProducer``, ``kafka.KafkaConsumer`` (do not poll it yourself),
    ``kafka.admin.KafkaAdminClient`` (a new one: close it yourself).

Async (``portable.aio``):
    thread-adapted, on purpose: ``async_driver()`` is the default
    :class:`~portable.driver.aio_messaging.AsyncTopicDriver` /
    ``AsyncSubscriptionDriver`` (``native = False``), which runs these methods
    in the bounded pool of :mod:`portable.driver.threads`. aiokafka is not
    used: the receive contract here (local leases, key order, contiguous
    commits, the rebalance listener awaited on kafka-python's own network
    loop, its error classes) is written against kafka-python's consumer, and
    aiokafka's (its own commit and rebalance tasks, ``aiokafka.errors``)
    would change those semantics or need a second copy of that bookkeeping.
    A native async engine waits for issue 22, which splits the bookkeeping
    from the client for a confluent-kafka engine. Costs meanwhile: a
    ``receive(wait=)`` holds a pool thread for up to ``wait`` seconds (not
    when it is served from the buffer), and ``publish`` holds one until the
    broker acknowledges; ``publish_batch`` one per batch.
    docs/adapters/kafka.md ("Async") has the details.

docs/adapters/kafka.md is the reference: a URL per service (MSK, Confluent
Cloud, Event Hubs), every option with its default, names and limits,
capabilities, delivery guarantees, leases, retries and dead letters, and the
known differences. The pieces: :mod:`._settings` (URL -> settings),
:mod:`._publish` (topics), :mod:`._subscription` and the modules it builds on
(consumer groups).
"""

# mypy: disable-error-code="import-untyped"
from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from portable.driver.messaging import (
    MessagingCapabilities,
    MessagingDriver,
    SubscriptionDriver,
    TopicDriver,
)
from portable.driver.redaction import redact
from portable.errors import ErrorCode, InvalidURL, NotFound, PortableError, Unavailable
from portable.resilience import remaining
from portable.urls import ParsedURL, parse_url

from ._publish import KafkaTopic
from ._rebalance import Rebalancing
from ._settings import KafkaSettings, check_topic_name, parse_settings, read_password
from ._subscription import KafkaSubscription

__all__ = ["KafkaMessaging"]

log = logging.getLogger("portable.kafka")

#: Bytes kept back from max_message_bytes for the record's framing and retry headers.
_RECORD_OVERHEAD = 512

#: capabilities.max_batch on engine=confluent (kafka-python: 10,000).
_CONFLUENT_MAX_BATCH = 100_000


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
            # librdkafka's pipeline drains at the end of each driver batch (publish_batch waits
            # for every acknowledgement, for the ids): larger batches keep it full longer
            max_batch=_CONFLUENT_MAX_BATCH if settings.engine == "confluent" else 10000,
        )
        self._topic: TopicDriver | None = None
        self._subscription: Rebalancing | None = None

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
        """A producer of this URL's engine: kafka-python's KafkaProducer or librdkafka's Producer."""
        if self.settings.engine == "confluent":
            from confluent_kafka import Producer

            from ._confluent_config import confluent_producer_config

            return Producer(confluent_producer_config(self.settings, self._password))
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
                return self._max_message_bytes_of(admin, wanted[0])
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
                limits.update(self._max_message_bytes_of(admin, wanted[0]))
        finally:
            admin.close()
        return limits

    @staticmethod
    def _max_message_bytes_of(admin: Any, topic: str) -> dict[str, int]:
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
            self._narrow_max_message_bytes(limits.get(s.topic))
            if s.engine == "confluent":
                from ._confluent import ConfluentTopic

                self._topic = ConfluentTopic(self, s.topic)
            else:
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
            self._narrow_max_message_bytes(limits.get(s.topic))
            if s.engine == "confluent":
                from ._confluent import ConfluentSubscription

                self._subscription = ConfluentSubscription(self)
            else:
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

    def _narrow_max_message_bytes(self, broker_limit: int | None) -> None:
        """Lower ``capabilities.max_message_bytes`` to what the topic's ``broker_limit`` leaves."""
        if broker_limit and broker_limit - _RECORD_OVERHEAD < self.capabilities.max_message_bytes:
            self.capabilities = dataclasses.replace(
                self.capabilities, max_message_bytes=max(1, broker_limit - _RECORD_OVERHEAD)
            )

    def as_(self, kind: type[Any]) -> Any:
        from kafka import KafkaConsumer, KafkaProducer
        from kafka.admin import KafkaAdminClient

        if self.settings.engine == "confluent":
            from confluent_kafka import Consumer, Producer

            if kind is Producer:
                if self._topic is not None:
                    return getattr(self._topic, "producer", None)
                if self._subscription is not None:
                    return self._subscription.producer()
            if kind is Consumer and self._subscription is not None:
                return self._subscription.consumer
            if kind is KafkaAdminClient:
                return self.new_admin()
            return None
        if kind is KafkaProducer:
            if self._topic is not None:
                return getattr(self._topic, "producer", None)
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
        librdkafka = _librdkafka_error(exc)
        if librdkafka is not None:
            return self._code_of_librdkafka(librdkafka)
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

    def _code_of_librdkafka(self, error: Any) -> ErrorCode:
        """The code of a librdkafka KafkaError (the confluent engine's errors)."""
        from confluent_kafka import KafkaError as K

        code = error.code()
        if code in (K.MSG_SIZE_TOO_LARGE, K.RECORD_LIST_TOO_LARGE):
            return ErrorCode.TOO_LARGE
        if code == K.TOPIC_ALREADY_EXISTS:
            return ErrorCode.ALREADY_EXISTS
        if code in (K.UNKNOWN_TOPIC_OR_PART, K._UNKNOWN_TOPIC, K._UNKNOWN_PARTITION):
            return ErrorCode.NOT_FOUND if not self.settings.create else ErrorCode.UNAVAILABLE
        if code in (K.TOPIC_AUTHORIZATION_FAILED, K.GROUP_AUTHORIZATION_FAILED, K.CLUSTER_AUTHORIZATION_FAILED,
                    K.SASL_AUTHENTICATION_FAILED, K._AUTHENTICATION):  # fmt: skip
            return ErrorCode.PERMISSION_DENIED
        if code in (K.THROTTLING_QUOTA_EXCEEDED, K.POLICY_VIOLATION):
            return ErrorCode.THROTTLED if code == K.THROTTLING_QUOTA_EXCEEDED else ErrorCode.INVALID_ARGUMENT
        if code in (K.ILLEGAL_GENERATION, K.UNKNOWN_MEMBER_ID, K.REBALANCE_IN_PROGRESS, K.FENCED_INSTANCE_ID):
            return ErrorCode.PRECONDITION_FAILED
        if code in (K._INVALID_ARG, K.INVALID_CONFIG, K.TOPIC_EXCEPTION, K.INVALID_PARTITIONS,
                    K.INVALID_REPLICATION_FACTOR, K.INVALID_REQUIRED_ACKS, K.INVALID_SESSION_TIMEOUT):  # fmt: skip
            return ErrorCode.INVALID_ARGUMENT
        if code in (K._TIMED_OUT, K._MSG_TIMED_OUT, K.REQUEST_TIMED_OUT):
            return ErrorCode.DEADLINE_EXCEEDED
        if code in (K._NOT_IMPLEMENTED, K.UNSUPPORTED_VERSION, K.UNSUPPORTED_COMPRESSION_TYPE):
            return ErrorCode.UNSUPPORTED
        if error.retriable() or code in (K._TRANSPORT, K._ALL_BROKERS_DOWN, K._RESOLVE, K.NOT_LEADER_FOR_PARTITION):
            return ErrorCode.UNAVAILABLE
        return ErrorCode.UNKNOWN

    def is_retryable(self, exc: BaseException) -> bool:
        import kafka.errors as E

        if isinstance(exc, PortableError):
            return exc.retryable
        if _librdkafka_error(exc) is not None:
            return self.code_of(exc) in (ErrorCode.UNAVAILABLE, ErrorCode.THROTTLED, ErrorCode.DEADLINE_EXCEEDED)
        if isinstance(exc, E.KafkaError) and exc.retriable:
            return self.code_of(exc) not in (ErrorCode.NOT_FOUND, ErrorCode.PRECONDITION_FAILED)
        return self.code_of(exc) in (ErrorCode.UNAVAILABLE, ErrorCode.THROTTLED, ErrorCode.DEADLINE_EXCEEDED)


def _librdkafka_error(exc: BaseException) -> Any:
    """The librdkafka KafkaError inside a confluent-kafka KafkaException, else None."""
    if type(exc).__module__.split(".")[0] != "cimpl" and not type(exc).__module__.startswith("confluent_kafka"):
        return None
    error = exc.args[0] if exc.args else None
    return error if error is not None and hasattr(error, "retriable") and hasattr(error, "code") else None


def _fatal_producer_errors() -> tuple[type[BaseException], ...]:
    import kafka.errors as E

    return (E.OutOfOrderSequenceNumberError, E.InvalidProducerEpochError, E.ProducerFencedError,
            E.UnknownProducerIdError)  # fmt: skip


try:
    _PRODUCER_FATAL = _fatal_producer_errors()
except ImportError:  # pragma: no cover - kafka-python is a dependency
    _PRODUCER_FATAL = ()


