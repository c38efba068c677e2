"""``kafka://`` URLs -> validated settings -> kafka-python client configurations.

Everything a URL can get wrong is caught here, before any connection is made:
bootstrap addresses, topic and group names, the security options, and a
password written into the URL (passwords come from environment variables only).
"""

# mypy: disable-error-code="import-untyped"
from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from portable.errors import ConfigError, InvalidURL
from portable.urls import ParsedURL

__all__ = [
    "DEFAULT_PASSWORD_ENV",
    "DEFAULT_USERNAME_ENV",
    "KafkaSettings",
    "check_topic_name",
    "parse_settings",
]

#: Kafka's own rule for topic names (kafka.common.internals.Topic).
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)$")

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "AWS_MSK_IAM", "OAUTHBEARER")
_PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
#: Client engines: confluent-kafka (librdkafka; the default where installed) and kafka-python (pure Python).
ENGINES = ("kafka-python", "confluent")

#: Batches in flight per broker connection: the most an idempotent producer keeps in order.
_IDEMPOTENT_IN_FLIGHT = 5

DEFAULT_USERNAME_ENV = "KAFKA_SASL_USERNAME"
DEFAULT_PASSWORD_ENV = "KAFKA_SASL_PASSWORD"
NONE = "none"


def check_topic_name(name: str, what: str = "topic") -> str:
    """Return ``name`` if Kafka accepts it as a topic name, else raise InvalidURL saying why."""
    if not _TOPIC_NAME.match(name) or name in (".", ".."):
        if len(name) > 249:
            problem = f"is {len(name)} characters; the limit is 249"
        elif not name:
            problem = "is empty"
        else:
            problem = "may hold only ASCII letters, digits, '.', '_' and '-' (and is not '.' or '..')"
        raise InvalidURL(f"Kafka {what} name {name[:80]!r} {problem}")
    return name


@dataclass(frozen=True)
class KafkaSettings:
    """Everything a ``kafka://`` URL says, validated. docs/adapters/kafka.md says what
    each option means and its default."""

    bootstrap: tuple[str, ...]
    topic: str | None
    group: str | None = None
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password_env: str = DEFAULT_PASSWORD_ENV
    ssl_cafile: str | None = None
    ssl_check_hostname: bool = True
    client_id: str = "portable"
    create: bool = True
    partitions: int = -1
    replication: int = -1
    retry_topic: str | None = None
    dead_letter_topic: str | None = None
    idempotent: bool = True
    acks: str = "all"
    linger_ms: int = 5
    batch_size: int = 65536
    compression: str = "none"
    max_message_bytes: int = 1048576
    start: str = "earliest"
    assignor: str = "range"
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300000
    connect_timeout: float = 10.0
    request_timeout: float = 30.0
    delivery_timeout: float = 60.0
    engine: str = "kafka-python"  # parse_settings picks default_engine() when the URL names none
    #: Options read from the URL, reproduced by :meth:`url_for` (never a secret).
    shown_options: Mapping[str, str] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        return ",".join(self.bootstrap)

    @property
    def send_timeout(self) -> float:
        """Seconds to wait for one sent record's acknowledgement: ``delivery_timeout``
        (kafka-python's own resends included) and one more request."""
        return self.delivery_timeout + self.request_timeout

    # -- client configurations --------------------------------------------------
    def _common_config(self, password: Callable[[], str | None]) -> dict[str, Any]:
        config: dict[str, Any] = {
            "bootstrap_servers": list(self.bootstrap),
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
            "request_timeout_ms": int(self.request_timeout * 1000),
            "bootstrap_timeout_ms": int(self.connect_timeout * 1000),
            "retry_backoff_ms": 100,
            "reconnect_backoff_max_ms": 1000,
        }
        if self.security_protocol in ("SSL", "SASL_SSL"):
            config["ssl_check_hostname"] = self.ssl_check_hostname
            if self.ssl_cafile:
                config["ssl_cafile"] = self.ssl_cafile
        if self.sasl_mechanism:
            config["sasl_mechanism"] = self.sasl_mechanism
            if self.sasl_mechanism in _PASSWORD_MECHANISMS:
                config["sasl_plain_username"] = self.sasl_username
                config["sasl_plain_password"] = password()
        return config

    def producer_config(self, password: Callable[[], str | None]) -> dict[str, Any]:
        """kafka-python KafkaProducer settings.

        The idempotent producer keeps kafka-python's own retries, the one
        exception to "only the portable layer retries" (docs/adapters/kafka.md,
        "Retries"): they resend a batch with the same producer id and sequence
        number, so the broker drops duplicates and keeps the order, where a
        retry from the portable layer would be a *new* record. They are bounded
        in time, not in count: ``retries`` is unlimited (kafka-python's default,
        set explicitly here), ``delivery_timeout_ms`` (``delivery_timeout``,
        60 s by default) ends every record's resends, each request waits at most
        ``request_timeout_ms``, ``retry_backoff_ms`` is 100 and at most
        ``max_in_flight_requests_per_connection`` = 5 batches are in flight (the
        most the idempotent producer keeps in order). Without idempotence the
        producer does not retry at all (``retries=0``), and portable's Guard
        owns every retry.
        """
        config = self._common_config(password)
        linger = self.linger_ms
        delivery_ms = int(self.delivery_timeout * 1000)
        request_ms = min(int(self.request_timeout * 1000), max(1000, delivery_ms - linger))
        config.update(
            enable_idempotence=self.idempotent,
            linger_ms=linger,
            batch_size=self.batch_size,
            max_request_size=max(self.max_message_bytes + 1024, 1048576),
            request_timeout_ms=request_ms,
            delivery_timeout_ms=max(delivery_ms, request_ms + linger),
            max_block_ms=int(max(self.connect_timeout, 1.0) * 1000),
            allow_auto_create_topics=self.create,
        )
        if self.compression != NONE:
            config["compression_type"] = self.compression
        if self.idempotent:
            config["acks"] = "all"
            config["retries"] = float("inf")  # bounded by delivery_timeout_ms, as the Java client's
            config["max_in_flight_requests_per_connection"] = _IDEMPOTENT_IN_FLIGHT
        else:
            config["acks"] = {"all": "all", "1": 1, "0": 0}[self.acks]
            config["retries"] = 0
        return config

    def consumer_config(self, password: Callable[[], str | None]) -> dict[str, Any]:
        """kafka-python KafkaConsumer settings: manual commits, no auto-commit."""
        from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        assignor = {
            "range": RangePartitionAssignor,
            "roundrobin": RoundRobinPartitionAssignor,
            "cooperative-sticky": CooperativeStickyAssignor,
        }[self.assignor]
        config = self._common_config(password)
        config.update(
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset=self.start,
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            max_poll_interval_ms=self.max_poll_interval_ms,
            partition_assignment_strategy=(assignor,),
            allow_auto_create_topics=self.create,
            # a rebalance must not wait long for a member that is not polling
            request_timeout_ms=max(int(self.request_timeout * 1000), self.session_timeout_ms + 5000),
        )
        return config

    def admin_config(self, password: Callable[[], str | None]) -> dict[str, Any]:
        return self._common_config(password)

    # -- derived names and URLs --------------------------------------------------
    def url_for(self, topic: str, group: str | None, **overrides: str) -> str:
        """A ``kafka://`` URL with these settings for another topic/group (no secret in it)."""
        options = dict(self.shown_options)
        options.pop("group", None)
        options.update(overrides)
        if group is not None:
            options["group"] = group
        query = "&".join(f"{k}={quote(v, safe='$-_.')}" for k, v in sorted(options.items()))
        return f"kafka://{self.endpoint}/{topic}" + (f"?{query}" if query else "")


def _bootstrap_servers(url: ParsedURL) -> tuple[str, ...]:
    netloc = url.netloc
    if "@" in netloc:
        raise InvalidURL(
            f"{url}: do not put credentials in a kafka:// URL; name the user with "
            f"sasl_username= (or {DEFAULT_USERNAME_ENV}) and put the password in the environment "
            f"variable named by sasl_password_env= (default {DEFAULT_PASSWORD_ENV})"
        )
    if not netloc:
        raise InvalidURL(f"{url}: name the brokers: kafka://host:9092[,host2:9092]/topic")
    servers = []
    for part in netloc.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or host.endswith(":"):
            host, port = part.strip(), "9092"
        if not host or not _HOST.match(host):
            raise InvalidURL(f"{url}: {part!r} is not a host:port bootstrap address")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidURL(f"{url}: the port in {part!r} must be a number from 1 to 65535")
        servers.append(f"{host}:{int(port)}")
    return tuple(servers)


def _one_of(url: ParsedURL, name: str, choices: tuple[str, ...], default: str | None, upper: bool) -> str | None:
    """Option ``name`` (or ``default``) in the case of ``choices``; InvalidURL if it is none of them."""
    value = url.take_str(name, default)
    if value is None:
        return None
    normal = value.upper() if upper else value.lower()
    if normal not in choices:
        raise InvalidURL(f"option {name}={value!r} in {url} must be one of: {', '.join(choices)}")
    return normal


def _check_positive(url: ParsedURL, name: str, value: float, *, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidURL(f"option {name} in {url} must be {'>= 0' if allow_zero else '> 0'}, got {value}")


def parse_settings(url: ParsedURL, env: Mapping[str, str] | None = None) -> KafkaSettings:
    """Read every option of a ``kafka://`` URL; raise InvalidURL naming what to fix."""
    environ = os.environ if env is None else env
    bootstrap = _bootstrap_servers(url)
    path = url.path.strip("/")
    if "/" in path:
        raise InvalidURL(f"{url}: write one topic after the brokers: kafka://host:9092/TOPIC")
    topic = check_topic_name(path) if path else None
    shown: dict[str, str] = {}

    def show_if_given(name: str) -> None:
        if name in url.options:
            shown[name] = url.options[name]

    if "sasl_password" in url.options or "password" in url.options:
        raise InvalidURL(
            f"{url}: a password never goes in the URL; put it in an environment variable and "
            f"name that variable with sasl_password_env= (default {DEFAULT_PASSWORD_ENV})"
        )
    group = url.take_str("group")
    if group is not None and (not group or len(group) > 255 or not group.isprintable()):
        raise InvalidURL(f"option group={group!r} in {url} must be 1 to 255 printable characters")
    security = _one_of(url, "security_protocol", SECURITY_PROTOCOLS, "PLAINTEXT", True)
    mechanism = _one_of(url, "sasl_mechanism", SASL_MECHANISMS, None, True)
    assert security is not None
    if mechanism and not security.startswith("SASL_"):
        raise InvalidURL(
            f"{url}: sasl_mechanism={mechanism} needs security_protocol=SASL_SSL (or SASL_PLAINTEXT)"
        )
    if security.startswith("SASL_") and not mechanism:
        raise InvalidURL(f"{url}: security_protocol={security} needs sasl_mechanism= (PLAIN, SCRAM-SHA-512, ...)")
    if mechanism == "AWS_MSK_IAM" and security != "SASL_SSL":
        raise InvalidURL(f"{url}: sasl_mechanism=AWS_MSK_IAM needs security_protocol=SASL_SSL")
    username_env: str = url.take_str("sasl_username_env") or DEFAULT_USERNAME_ENV
    username = url.take_str("sasl_username") or environ.get(username_env)
    password_env: str = url.take_str("sasl_password_env") or DEFAULT_PASSWORD_ENV
    if mechanism in _PASSWORD_MECHANISMS and not username:
        raise ConfigError(
            f"{url}: sasl_mechanism={mechanism} needs a user name: sasl_username=NAME "
            f"or the environment variable {username_env}"
        )
    ssl_cafile = url.take_str("ssl_cafile")
    ssl_check_hostname = url.take("ssl_check_hostname", bool, True)
    for name in ("group", "security_protocol", "sasl_mechanism", "sasl_username", "sasl_username_env",
                 "sasl_password_env", "ssl_cafile", "ssl_check_hostname"):  # fmt: skip
        show_if_given(name)

    settings: dict[str, Any] = {}
    for name, kind, default in (
        ("client_id", str, "portable"),
        ("create", bool, True),
        ("partitions", int, -1),
        ("replication", int, -1),
        ("idempotent", bool, True),
        ("linger_ms", int, 5),
        ("batch_size", int, 65536),
        ("max_message_bytes", int, 1048576),
        ("session_timeout_ms", int, 45000),
        ("max_poll_interval_ms", int, 300000),
        ("connect_timeout", float, 10.0),
        ("request_timeout", float, 30.0),
        ("delivery_timeout", float, 60.0),
    ):
        settings[name] = url.take(name, kind, default)
        show_if_given(name)
    heartbeat = url.take("heartbeat_interval_ms", int, min(3000, settings["session_timeout_ms"] // 3))
    show_if_given("heartbeat_interval_ms")
    acks = _one_of(url, "acks", ("all", "1", "0"), "all", False)
    start = _one_of(url, "start", ("earliest", "latest"), "earliest", False)
    assignor = _one_of(url, "assignor", ASSIGNORS, "range", False)
    compression = _one_of(url, "compression", COMPRESSIONS, "none", False)
    engine = _one_of(url, "engine", ENGINES, None, False) or default_engine(mechanism)
    retry_topic = url.take_str("retry_topic")
    dead_letter_topic = url.take_str("dead_letter_topic")
    for name in ("acks", "start", "assignor", "compression", "engine", "retry_topic", "dead_letter_topic"):
        show_if_given(name)
    url.done()

    if settings["partitions"] == 0 or settings["partitions"] < -1:
        raise InvalidURL(f"option partitions in {url} must be >= 1 (or -1 for the broker's default)")
    if settings["replication"] == 0 or settings["replication"] < -1:
        raise InvalidURL(f"option replication in {url} must be >= 1 (or -1 for the broker's default)")
    for name in ("linger_ms",):
        _check_positive(url, name, settings[name], allow_zero=True)
    for name in ("batch_size", "max_message_bytes", "session_timeout_ms", "max_poll_interval_ms",
                 "connect_timeout", "request_timeout", "delivery_timeout"):  # fmt: skip
        _check_positive(url, name, settings[name])
    _check_positive(url, "heartbeat_interval_ms", heartbeat)
    if heartbeat >= settings["session_timeout_ms"]:
        raise InvalidURL(f"{url}: heartbeat_interval_ms must be below session_timeout_ms")
    if settings["idempotent"] and acks != "all":
        raise InvalidURL(f"{url}: acks={acks} needs idempotent=false (the idempotent producer uses acks=all)")
    if engine == "confluent":
        _check_confluent(url, mechanism)
    elif compression in ("snappy", "lz4", "zstd"):  # librdkafka has every codec built in
        _check_codec(url, compression)

    retry_topic = _retry_or_dead_letter_topic(url, topic, group, retry_topic, "retry", "retry_topic")
    dead_letter_topic = _retry_or_dead_letter_topic(url, topic, group, dead_letter_topic, "dlq", "dead_letter_topic")
    for derived in (retry_topic, dead_letter_topic):
        if derived is not None and derived == topic:
            raise InvalidURL(f"{url}: the retry and dead-letter topics must differ from the topic")

    return KafkaSettings(
        bootstrap=bootstrap,
        topic=topic,
        group=group,
        security_protocol=security,
        sasl_mechanism=mechanism,
        sasl_username=username,
        sasl_password_env=password_env,
        ssl_cafile=ssl_cafile,
        ssl_check_hostname=ssl_check_hostname,
        retry_topic=retry_topic,
        dead_letter_topic=dead_letter_topic,
        acks=acks or "all",
        start=start or "earliest",
        assignor=assignor or "range",
        compression=compression or "none",
        engine=engine or "kafka-python",
        heartbeat_interval_ms=heartbeat,
        shown_options=shown,
        **settings,
    )


def _retry_or_dead_letter_topic(
    url: ParsedURL, topic: str | None, group: str | None, given: str | None, suffix: str, option: str
) -> str | None:
    """The retry or dead-letter topic: ``given`` (``none`` for none), else ``TOPIC.GROUP.SUFFIX``."""
    if given is not None:
        return None if given.lower() == NONE else check_topic_name(given, option.replace("_", " "))
    if topic is None or group is None:
        return None
    name = f"{topic}.{group}.{suffix}"
    if not _TOPIC_NAME.match(name):
        raise InvalidURL(
            f"{url}: the default {option.replace('_', ' ')} {name[:80]!r} is not a legal Kafka topic "
            f"name (group {group!r} has characters topics cannot, or it is too long); name it "
            f"with {option}=NAME, or {option}=none"
        )
    return name


def _check_codec(url: ParsedURL, codec: str) -> None:
    from kafka import codec as kafka_codec

    has = {"snappy": kafka_codec.has_snappy, "lz4": kafka_codec.has_lz4, "zstd": kafka_codec.has_zstd}[codec]
    if not has():
        package = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}[codec]
        raise InvalidURL(f"{url}: compression={codec} needs the {package} package: pip install {package}")


def default_engine(mechanism: str | None) -> str:
    """The engine of a URL without ``engine=``: confluent where confluent-kafka is importable (and
    serves the URL's authentication), else kafka-python; as storage prefers obstore."""
    if mechanism in _CONFLUENT_UNWIRED:
        return "kafka-python"
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return "kafka-python"
    return "confluent"


#: sasl_mechanism values the confluent engine does not serve yet (kafka-python's token/IAM hooks).
_CONFLUENT_UNWIRED = ("AWS_MSK_IAM", "OAUTHBEARER")


def _check_confluent(url: ParsedURL, mechanism: str | None) -> None:
    """engine=confluent: confluent-kafka is installed and serves this URL's authentication."""
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        raise InvalidURL(
            f"{url}: engine=confluent needs confluent-kafka: pip install 'portable-cloud-kafka[confluent]' "
            "(or write engine=kafka-python, or leave engine= out)"
        ) from None
    if mechanism in _CONFLUENT_UNWIRED:
        raise InvalidURL(
            f"{url}: sasl_mechanism={mechanism} is not wired to engine=confluent yet; use the "
            "kafka-python engine (engine=kafka-python, or leave engine= out)"
        )


def read_password(settings: KafkaSettings, env: Mapping[str, str] | None = None) -> str | None:
    """The SASL password from its environment variable; ConfigError (naming only the variable) if unset."""
    if settings.sasl_mechanism not in _PASSWORD_MECHANISMS:
        return None
    environ = os.environ if env is None else env
    value = environ.get(settings.sasl_password_env)
    if not value:
        raise ConfigError(
            f"sasl_mechanism={settings.sasl_mechanism} needs a password: set the environment "
            f"variable {settings.sasl_password_env}"
        )
    return value
