"""``pulsar://`` URL -> :class:`PulsarSettings`: every option read, checked and defaulted here.

An option that is not read here is an error (``ParsedURL.done``); a bad value is
InvalidURL naming the option and what it takes, before any connection is made.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from portable.errors import InvalidURL
from portable.urls import ParsedURL

__all__ = ["SUBSCRIPTION_TYPES", "PulsarSettings", "check_name", "parse_settings"]

#: ``type=`` values and the pulsar.ConsumerType member each names.
SUBSCRIPTION_TYPES = {"shared": "Shared", "key_shared": "KeyShared", "failover": "Failover", "exclusive": "Exclusive"}
COMPRESSIONS = {"none": "NONE", "lz4": "LZ4", "zlib": "ZLib", "zstd": "ZSTD", "snappy": "SNAPPY"}
#: The broker's ``maxMessageSize`` default (5 MiB).
DEFAULT_MAX_MESSAGE_BYTES = 5 * 1024 * 1024
DEFAULT_TOKEN_ENV = "PULSAR_AUTH_TOKEN"
#: Tenant, namespace, topic and subscription names: Pulsar allows more in topic names, but
#: these characters need no escaping in a URL, a REST path or a metrics label.
_NAME = re.compile(r"[A-Za-z0-9_.=:-]{1,200}")


def check_name(what: str, name: str) -> str:
    """``name`` if it is a valid tenant/namespace/topic/subscription name, else InvalidURL."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidURL(
            f"Pulsar {what} name {name!r} is not valid: use 1 to 200 of A-Z a-z 0-9 _ . = : -"
        )
    return name


@dataclass(frozen=True)
class PulsarSettings:
    """What a ``pulsar://`` URL says, with defaults applied (docs/adapters/pulsar.md, "Options")."""

    host: str
    tenant: str
    namespace: str
    topic: str
    subscription: str | None
    type: str
    admin_url: str
    dead_letter_topic: str | None
    dead_letter_subscription: str | None
    max_redeliveries: int
    receiver_queue_size: int
    batching: bool
    batching_max_messages: int
    batching_max_bytes: int
    batching_max_delay_ms: int
    compression: str
    max_pending: int
    producer_name: str | None
    start: str
    nack_redelivery_ms: int
    send_timeout: float
    operation_timeout: float
    connect_timeout: float
    max_message_bytes: int
    token_env: str
    persistent: bool

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.host}"

    @property
    def endpoint(self) -> str:
        return self.host

    def full_topic(self, topic: str | None = None) -> str:
        """``persistent://TENANT/NAMESPACE/TOPIC`` (``non-persistent://`` with persistent=false)."""
        domain = "persistent" if self.persistent else "non-persistent"
        return f"{domain}://{self.tenant}/{self.namespace}/{topic or self.topic}"

    def rest_path(self, topic: str | None = None) -> str:
        """The admin REST path of a topic: ``/admin/v2/persistent/TENANT/NAMESPACE/TOPIC``."""
        domain = "persistent" if self.persistent else "non-persistent"
        return f"/admin/v2/{domain}/{self.tenant}/{self.namespace}/{topic or self.topic}"

    def url_for(self, topic: str, subscription: str | None, **extra: str) -> str:
        """A URL on the same broker and namespace with this URL's connection options."""
        options: dict[str, str] = {}
        if subscription is not None:
            options["subscription"] = subscription
            options["type"] = self.type
        options["admin_url"] = self.admin_url
        if self.token_env != DEFAULT_TOKEN_ENV:
            options["token_env"] = self.token_env
        options.update(extra)
        query = urlencode(options, quote_via=quote, safe="/:,@")
        return f"pulsar://{self.host}/{self.tenant}/{self.namespace}/{topic}?{query}"

    def token(self) -> str | None:
        """The JWT from the environment variable ``token_env`` names, read at connect time."""
        value = os.environ.get(self.token_env)
        return value or None


def parse_settings(url: ParsedURL) -> PulsarSettings:
    host = url.host
    if not host:
        raise InvalidURL(f"{url} names no broker: write pulsar://HOST:PORT/TENANT/NAMESPACE/TOPIC")
    if "@" in url.netloc:
        raise InvalidURL(
            f"{url}: credentials never go in a pulsar:// URL; put a JWT in the environment variable "
            f"named by token_env= (default {DEFAULT_TOKEN_ENV})"
        )
    if ":" not in host:
        host = f"{host}:6650"
    parts = [p for p in url.path.split("/") if p]
    if len(parts) != 3:
        raise InvalidURL(
            f"{url} must name TENANT/NAMESPACE/TOPIC after the broker, e.g. "
            f"pulsar://{host}/public/default/events?subscription=workers"
        )
    tenant, namespace, topic = (check_name(w, n) for w, n in zip(("tenant", "namespace", "topic"), parts, strict=True))
    subscription = url.take_str("subscription")
    if subscription is not None:
        check_name("subscription", subscription)
    kind = (url.take_str("type") or "shared").lower()
    if kind not in SUBSCRIPTION_TYPES:
        raise InvalidURL(f"type={kind!r} in {url}: takes {', '.join(SUBSCRIPTION_TYPES)}")
    admin_url = (url.take_str("admin_url") or f"http://{host.rsplit(':', 1)[0]}:8080").rstrip("/")
    if not re.fullmatch(r"https?://[^/?#@]+", admin_url):
        raise InvalidURL(f"admin_url={admin_url!r} in {url} must be http(s)://HOST:PORT (the broker's web service)")
    dead = url.take_str("dead_letter_topic")
    if dead is None:
        dead = f"{topic}-{subscription}-DLQ" if subscription else None  # Pulsar's own default name
    elif dead.lower() == "none":
        dead = None
    else:
        check_name("dead_letter_topic", dead)
    dead_sub = url.take_str("dead_letter_subscription") or subscription
    if dead_sub is not None:
        check_name("dead_letter_subscription", dead_sub)

    def positive(name: str, default: int, low: int = 1, high: int = 2**31 - 1) -> int:
        value = url.take(name, int, default)
        if not low <= value <= high:
            raise InvalidURL(f"{name}={value} in {url} must be between {low} and {high}")
        return value

    def seconds(name: str, default: float) -> float:
        value = url.take(name, float, default)
        if not 0 < value <= 3600:
            raise InvalidURL(f"{name}={value} in {url} must be seconds in (0, 3600]")
        return value

    compression = (url.take_str("compression") or "none").lower()
    if compression not in COMPRESSIONS:
        raise InvalidURL(f"compression={compression!r} in {url}: takes {', '.join(COMPRESSIONS)}")
    start = (url.take_str("start") or "earliest").lower()
    if start not in ("earliest", "latest"):
        raise InvalidURL(f"start={start!r} in {url}: takes earliest or latest")
    producer_name = url.take_str("producer_name")
    if producer_name is not None:
        check_name("producer_name", producer_name)
    max_redeliveries = positive("max_redeliveries", 0, low=0)
    if max_redeliveries and dead is None:
        raise InvalidURL(f"max_redeliveries={max_redeliveries} in {url} needs a dead-letter topic (not dead_letter_topic=none)")
    settings = PulsarSettings(
        host=host,
        tenant=tenant,
        namespace=namespace,
        topic=topic,
        subscription=subscription,
        type=kind,
        admin_url=admin_url,
        dead_letter_topic=dead,
        dead_letter_subscription=dead_sub,
        max_redeliveries=max_redeliveries,
        receiver_queue_size=positive("receiver_queue_size", 1000, low=1, high=1_000_000),
        batching=url.take("batching", bool, True),
        batching_max_messages=positive("batching_max_messages", 1000, high=1_000_000),
        batching_max_bytes=positive("batching_max_bytes", 128 * 1024),
        batching_max_delay_ms=positive("batching_max_delay_ms", 10, low=0, high=60_000),
        compression=compression,
        max_pending=positive("max_pending", 1000, high=1_000_000),
        producer_name=producer_name,
        start=start,
        nack_redelivery_ms=positive("nack_redelivery_ms", 100, low=1, high=3_600_000),
        send_timeout=seconds("send_timeout", 30.0),
        operation_timeout=seconds("operation_timeout", 30.0),
        connect_timeout=seconds("connect_timeout", 10.0),
        max_message_bytes=positive("max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES, low=1024),
        token_env=url.take_str("token_env") or DEFAULT_TOKEN_ENV,
        persistent=url.take("persistent", bool, True),
    )
    url.done()
    return settings
