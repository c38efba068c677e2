"""Records and messages: the headers this driver adds, record ids, and the clock they use.

Shared by the publishing side (:mod:`._publish`), which turns attributes into
headers and acknowledgements into ids, and the receiving side (:mod:`._receive`,
:mod:`._commits`), which reads the retry headers back and writes them on a
nack's copy.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

__all__ = [
    "ATTEMPT_HEADER",
    "DUE_HEADER",
    "INTERNAL_PREFIX",
    "ORIGINAL_ID_HEADER",
    "PUBLISHED_HEADER",
    "epoch_ms",
    "record_id",
    "to_headers",
]

#: Headers this driver adds to retry copies; stripped from a delivery's attributes.
INTERNAL_PREFIX = "portable.kafka."
#: The delivery attempt the copy is (the original is attempt 1).
ATTEMPT_HEADER = "portable.kafka.attempt"
#: When the copy is due, in epoch milliseconds.
DUE_HEADER = "portable.kafka.due_ms"
#: The id of the original record, which every copy keeps.
ORIGINAL_ID_HEADER = "portable.kafka.id"
#: When the original record was published, in epoch milliseconds.
PUBLISHED_HEADER = "portable.kafka.published_ms"


def epoch_ms() -> int:
    """The wall clock in milliseconds since the epoch, as Kafka timestamps are."""
    return int(time.time() * 1000)


def record_id(topic: str, partition: int, offset: int) -> str:
    """A record's message id: ``TOPIC/PARTITION/OFFSET``."""
    return f"{topic}/{partition}/{offset}"


def to_headers(attributes: Mapping[str, str]) -> list[tuple[str, bytes]]:
    """Record headers for ``attributes``, in their order, values encoded as UTF-8."""
    return [(name, value.encode("utf-8")) for name, value in attributes.items()]
