"""portable-cloud-kafka: the ``kafka://`` messaging driver (Apache Kafka, MSK, Confluent Cloud,
Azure Event Hubs, Tansu) on kafka-python, or on confluent-kafka with ``?engine=confluent``.
See :mod:`portable_kafka.kafka`."""

from .kafka import KafkaMessaging

__all__ = ["KafkaMessaging"]
