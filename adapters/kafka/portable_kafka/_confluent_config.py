"""librdkafka (confluent-kafka) configurations for ``kafka://...?engine=confluent``.

The same URL options as the kafka-python engine, in librdkafka's names, with the
same meaning (docs/adapters/kafka.md, "Engines"): manual commits, the idempotent
producer's resends bounded by ``delivery_timeout`` and no producer retries without
idempotence, murmur2 key partitioning (the Java client's and kafka-python's, so a
key lands on the same partition whichever engine published it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ._settings import _IDEMPOTENT_IN_FLIGHT, KafkaSettings

__all__ = ["confluent_consumer_config", "confluent_producer_config"]

#: librdkafka's wait before fetching again when its local queue is full (its default: 1,000).
_FETCH_QUEUE_BACKOFF_MS = 20
#: The longest the broker holds a fetch that found no new records (librdkafka's default: 500).
_FETCH_WAIT_MAX_MS = 100


def _common(settings: KafkaSettings, password: Callable[[], str | None]) -> dict[str, Any]:
    s = settings
    config: dict[str, Any] = {
        "bootstrap.servers": ",".join(s.bootstrap),
        "client.id": s.client_id,
        "security.protocol": s.security_protocol,
        "socket.connection.setup.timeout.ms": max(1000, int(s.connect_timeout * 1000)),
        "retry.backoff.ms": 100,
        "reconnect.backoff.max.ms": 1000,
        # librdkafka's log lines go to logging, not to stderr
        "logger": logging.getLogger("portable.kafka.librdkafka"),
    }
    if s.security_protocol in ("SSL", "SASL_SSL"):
        config["ssl.endpoint.identification.algorithm"] = "https" if s.ssl_check_hostname else "none"
        if s.ssl_cafile:
            config["ssl.ca.location"] = s.ssl_cafile
    if s.sasl_mechanism:
        config["sasl.mechanism"] = s.sasl_mechanism
        config["sasl.username"] = s.sasl_username
        config["sasl.password"] = password()
    return config


def confluent_producer_config(settings: KafkaSettings, password: Callable[[], str | None]) -> dict[str, Any]:
    """librdkafka producer settings: as :meth:`KafkaSettings.producer_config`, in librdkafka's names."""
    s = settings
    config = _common(s, password)
    linger = s.linger_ms
    delivery_ms = int(s.delivery_timeout * 1000)
    request_ms = min(int(s.request_timeout * 1000), max(1000, delivery_ms - linger))
    config.update(
        {
            "enable.idempotence": s.idempotent,
            "linger.ms": linger,
            "batch.size": s.batch_size,
            "message.max.bytes": max(s.max_message_bytes + 1024, 1048576),
            "request.timeout.ms": request_ms,
            "delivery.timeout.ms": max(delivery_ms, request_ms + linger),
            "compression.type": s.compression,
            "partitioner": "murmur2_random",
        }
    )
    if s.idempotent:
        config["acks"] = "all"
        config["max.in.flight.requests.per.connection"] = _IDEMPOTENT_IN_FLIGHT
    else:
        config["acks"] = {"all": "all", "1": "1", "0": "0"}[s.acks]
        config["retries"] = 0
    return config


def confluent_consumer_config(settings: KafkaSettings, password: Callable[[], str | None]) -> dict[str, Any]:
    """librdkafka consumer settings: manual commits of explicit offsets, no auto-commit."""
    s = settings
    config = _common(s, password)
    config.update(
        {
            "group.id": s.group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": s.start,
            "session.timeout.ms": s.session_timeout_ms,
            "heartbeat.interval.ms": s.heartbeat_interval_ms,
            "max.poll.interval.ms": s.max_poll_interval_ms,
            "partition.assignment.strategy": s.assignor,
            "allow.auto.create.topics": s.create,
            "enable.partition.eof": False,
            "fetch.message.max.bytes": max(s.max_message_bytes + 1024, 1048576),
            # librdkafka prefetches up to queued.min.messages (100,000) a partition; past that it
            # waits this long before it fetches again (1,000 ms by default), and a consumer that
            # drains the queue in less (any fast one: 100,000 records take ~0.1 s here) then
            # stands still for most of a second. bench/kafka_bench.py: 0.85 s lost per 200,000.
            "fetch.queue.backoff.ms": _FETCH_QUEUE_BACKOFF_MS,
            # while one fetch waits on the broker, a partition that became fetchable after it was
            # sent waits for it too (500 ms by default): the main topic's first records after an
            # assignment did, behind the retry topic's (now parked: _confluent.py, _on_assign),
            # and a retry partition resumed while the main topic is idle still does. At 100, an
            # idle member sends ten fetches a second to each broker it reads from, instead of two.
            "fetch.wait.max.ms": _FETCH_WAIT_MAX_MS,
        }
    )
    return config
