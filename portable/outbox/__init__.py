"""The outbox: "object committed => event published", exactly once to an idempotent consumer.

>>> import uuid, portable.messaging, portable.storage
>>> from portable.outbox import Outbox
>>> name = uuid.uuid4().hex
>>> outbox = Outbox(portable.storage.open_bucket(f"mem://{name}"))
>>> write = outbox.put("reports/1.json", b"{}", event=b'{"report": 1}')
>>> topic = portable.messaging.open_topic(f"mem://{name}-events")
>>> outbox.relay_once(topic).published
1
>>> [m] = portable.messaging.open_subscription(f"mem://{name}-events").receive(wait=1)
>>> m.body, m.idempotency_key == write.idempotency_key
(b'{"report": 1}', True)

Both halves live on the bucket, so no database is needed: :meth:`Outbox.put`
writes a record under ``.outbox/`` (create-only, named by the write's
idempotency key) and then the object, tagged with the key; the relay
(:meth:`Outbox.relay_once`, :meth:`Outbox.run_relay`) publishes each record
whose object carries its tag and deletes the record after the broker
acknowledged. Consumers dedup by the message's idempotency key
(``Subscription.run(handler, idempotency=store)``). docs/outbox.md argues
each crash point.
"""

from __future__ import annotations

from ._outbox import DEFAULT_PREFIX, Outbox, OutboxWrite, RelayStats
from ._record import OBJECT_TAG, OutboxRecord

__all__ = ["DEFAULT_PREFIX", "OBJECT_TAG", "Outbox", "OutboxRecord", "OutboxWrite", "RelayStats"]
