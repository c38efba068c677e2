"""Queues and pub/sub through one API: :class:`Topic`, :class:`Subscription`, :class:`Message`.

>>> import portable.messaging as pm
>>> topic = pm.open_topic("mem://doc-orders")
>>> message_id = topic.publish(b'{"order": 1}', key="customer-7", attributes={"kind": "order"})
>>> sub = pm.open_subscription("mem://doc-orders", lease=30)
>>> [m] = sub.receive(max_messages=10, wait=1)
>>> m.body, m.key, m.attributes["kind"], m.delivery_attempt
(b'{"order": 1}', 'customer-7', 'order', 1)
>>> m.ack()

Or let the consumer loop do the leasing, acking, retrying and dead-lettering::

    sub.run(handle_order, concurrency=8, max_deliveries=5, idempotency=store)

Delivery is at least once: a message not acked within its lease is delivered
again. Effects are exactly once where ``run(..., idempotency=store)`` is given.

Which URL opens what
--------------------

``open_topic(url)`` opens the publishing side the URL names and
``open_subscription(url)`` the receiving side (see :mod:`portable.driver.messaging`):
a queue URL is both (``sqs://events``, ``azqueue://acct/q``, ``mem://q``,
``sqlite://./q.db?name=q``); ``pubsub://project/topics/t`` is a topic, and
``pubsub://project/subscriptions/s`` or ``pubsub://project/topics/t?subscription=s``
a subscription; ``kafka://host:9092/topic?group=g`` is both. A URL that does
not name the side asked for raises InvalidURL before any request. With no URL,
the active profile's ``queue`` is opened and its ``requires`` are checked
(MissingCapability at start-up, not in production).

What every provider accepts (checked before any request, with a typed error):

* a body is ``bytes`` (``bytearray``/``memoryview`` are copied); ``str`` raises
  InvalidArgument. Body plus attribute names and values must fit
  ``capabilities.max_message_bytes`` (TooLarge otherwise): SQS 256 KiB,
  Azure Storage Queue about 48 KiB, Pub/Sub 10 MB, sqlite 16 MiB;
* attribute names are 1-128 of ``[A-Za-z0-9_.-]``, starting with a letter or
  digit, without ``..`` or a trailing ``.``; names starting with ``portable.``,
  ``goog``, ``aws.`` or ``amazon.`` (any case) are reserved. Values are
  non-empty ``str`` of at most 1,024 UTF-8 bytes without control characters
  (tab and newlines allowed). At most ``capabilities.max_attributes`` attributes,
  the reserved ones this layer adds included (SQS: 9);
* an ordering ``key`` and an ``idempotency_key`` are 1-128 printable ASCII
  characters without spaces (SQS's MessageGroupId alphabet).

What a received :class:`Message` carries: ``body`` (bytes), ``key`` and ``attributes``
(``dict[str, str]``) are the convenient view; three fields are the lossless one, for
services that share a queue with native producers:

* ``headers``: every header or attribute as sent, ``(name, bytes)`` pairs, duplicates
  kept: Kafka record headers in record order (binary values as they are), SQS message
  attributes sorted by name (Binary ones as their bytes), mem and sqlite the attributes in
  publish order; ``()`` where a provider has none. ``attributes`` holds only the text ones,
  and of a name given twice the last;
* ``key_bytes``: the key exactly as sent (a Kafka key of any bytes; elsewhere the UTF-8
  of ``key``), or None;
* ``tombstone``: True for a Kafka record whose value is null (the delete marker of a
  compacted topic); ``body`` is then ``b""``, so code that reads bytes keeps working.

Where providers differ (the capabilities say which applies):

* ordering per key holds only with ``capabilities.ordering``; elsewhere the key is
  carried but order is best effort;
* ``nack(delay=)`` and leases are capped at ``max_lease_seconds`` (Pub/Sub 600 s)
  and rounded up to ``lease_granularity_seconds`` (SQS, Azure: whole seconds);
* ``publish(..., idempotency_key=k)`` always carries ``k`` as the attribute
  ``portable.idempotency_key``; with ``publish_dedup`` the provider also drops a
  repeat within ``dedup_window_seconds`` (SQS FIFO, sqlite, mem);
* ``delivery_attempt`` is exact only with ``delivery_count`` (not Pub/Sub without
  a dead-letter policy, not Kafka without its retry header).
"""

from __future__ import annotations

# The package: _validation (what every provider accepts), _open (URL or profile to a driver,
# and the base Topic and Subscription share), _topic, _message (Message and how it is
# settled), _subscription, _consumer (the run() loop) and _claims (its idempotency claims).
#
# The names outside __all__ stay importable from here, as before the package (``X as X``
# marks them re-exported for type checkers).
from ..driver.idempotency import Claim, IdempotencyStore
from ..driver.messaging import DEAD_LETTER_ATTRIBUTES as DEAD_LETTER_ATTRIBUTES
from ..driver.messaging import DEAD_LETTER_REASON as DEAD_LETTER_REASON
from ..driver.messaging import DEAD_LETTER_SOURCE as DEAD_LETTER_SOURCE
from ..driver.messaging import DELIVERY_ATTEMPTS as DELIVERY_ATTEMPTS
from ..driver.messaging import IDEMPOTENCY_ATTRIBUTE as IDEMPOTENCY_ATTRIBUTE
from ..driver.messaging import ORIGINAL_ID as ORIGINAL_ID
from ..driver.messaging import RESERVED_PREFIX as RESERVED_PREFIX
from ..driver.messaging import Delivery as Delivery
from ..driver.messaging import MessagingCapabilities, OutgoingMessage, QueueStats
from ..driver.messaging import MessagingDriver as MessagingDriver
from ..driver.messaging import ReceivedMessage as ReceivedMessage
from ..driver.messaging import SubscriptionDriver as SubscriptionDriver
from ..driver.messaging import TopicDriver as TopicDriver
from ._claims import default_idempotency_key as default_idempotency_key
from ._consumer import RunStats
from ._message import Message
from ._open import open_driver as open_driver
from ._subscription import DEFAULT_LEASE as DEFAULT_LEASE
from ._subscription import Subscription, open_subscription
from ._topic import Topic, open_topic
from ._validation import check_attributes as check_attributes

__all__ = [
    "Claim",
    "IdempotencyStore",
    "Message",
    "MessagingCapabilities",
    "OutgoingMessage",
    "QueueStats",
    "RunStats",
    "Subscription",
    "Topic",
    "open_subscription",
    "open_topic",
]
