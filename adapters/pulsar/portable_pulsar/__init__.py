"""portable-cloud-pulsar: the ``pulsar://`` messaging driver (Apache Pulsar topics and
subscriptions) on pulsar-client. See :mod:`portable_pulsar.pulsar`."""

from .pulsar import PulsarMessaging

__all__ = ["PulsarMessaging"]
