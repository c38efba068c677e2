"""Google Cloud drivers for portable.

Nothing here is imported until a URL of its scheme is opened:

================================  =============================================
URL                               driver
================================  =============================================
``gs://bucket/prefix``            :class:`portable_gcp.gcs.GCSStorage` (gcsfs)
``gcs://bucket/prefix``           the same
``pubsub://project/topics/t``     :class:`portable_gcp.pubsub.PubSubMessaging`
``pubsub://project/subscriptions/s``  the same
``firestore://project/collection``    :class:`portable_gcp.firestore.FirestoreIdempotencyStore`
================================  =============================================

Each module's docstring lists its URL options, name limits, native types
reachable through ``as_()``, capabilities and known differences.
"""

from __future__ import annotations

__all__: list[str] = []
