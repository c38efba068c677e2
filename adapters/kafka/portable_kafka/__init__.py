"""portable-cloud-kafka: the ``kafka://`` messaging driver (Apache Kafka, MSK, Confluent Cloud,
Azure Event Hubs, Tansu) on kafka-python. See :mod:`portable_kafka.kafka`."""

from .kafka import KafkaMessaging

__all__ = ["KafkaMessaging"]
