"""The messaging contract on Apache Kafka 4 (KRaft, the reference), kafka-python engine.

The four engine x broker classes live in four files (this one, ``..._tansu``,
``..._confluent``, ``..._confluent_tansu``): xdist's ``--dist loadfile`` gives a
file to one worker, and one file with all four ran them one after another.

Each test gets a fresh topic and consumer group (``unique_name``), with three
partitions so that keys spread. Both brokers run with
``session_timeout_ms=6000``: Tansu forms a group half a session timeout after
the first join, so that is 3 s per new group there.
"""

from __future__ import annotations

import pytest

from portable.testing.messaging_suite import MessagingContract
from tests.emulators.harness import EmulatorInfo

#: options every test URL carries: a short session (Tansu's join wait) and three partitions
TEST_OPTIONS = "session_timeout_ms=6000&partitions=3"


def kafka_url(broker: EmulatorInfo, name: str, engine: str) -> str:
    """A fresh topic and group on ``broker``, on ``engine`` (named: the default depends on what is installed)."""
    return f"kafka://{broker.endpoints['bootstrap']}/{name}?group={name}&{TEST_OPTIONS}&engine={engine}"


class TestApacheKafka(MessagingContract):
    @pytest.fixture
    def queue_url(self, kafka_broker: EmulatorInfo, unique_name: str) -> str:
        return kafka_url(kafka_broker, unique_name, "kafka-python")
