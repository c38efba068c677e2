"""portable.outbox on cloud buckets (moto's S3, Azurite, fake-gcs-server): create-only records, the
compare-and-swap mark and the relay's decisions hold where the bucket is a real server."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from portable.errors import IdempotencyConflict
from portable.messaging import open_subscription, open_topic
from portable.outbox import OBJECT_TAG, Outbox
from portable.storage import open_bucket
from tests.transfer.conftest import Place


@pytest.fixture(params=["s3", "az", "gs"])
def place(request: pytest.FixtureRequest) -> Place:
    return request.getfixturevalue(f"{request.param}_place")  # type: ignore[no-any-return]


def test_outbox_round_trip_and_retry(place: Place, tmp_path: Path) -> None:
    bucket = open_bucket(place.url(uuid.uuid4().hex[:8]))
    queue = f"sqlite://{tmp_path / 'q.db'}?name=events&dedup_window=0"
    outbox = Outbox(bucket)
    write = outbox.put("data/1", b"payload", event=b"made 1", metadata={"team": "a"})
    [record] = outbox.pending()
    assert record.committed and bucket.head("data/1").metadata == {"team": "a", OBJECT_TAG: write.idempotency_key}
    again = outbox.put("data/1", b"payload", event=b"made 1", metadata={"team": "a"})
    assert again.resumed and again.idempotency_key == write.idempotency_key
    with pytest.raises(IdempotencyConflict):
        outbox.put("data/1", b"other", idempotency_key=write.idempotency_key)
    assert outbox.relay_once(open_topic(queue)).published == 1
    assert list(outbox.pending()) == []
    [m] = open_subscription(queue).receive(max_messages=10, wait=1)
    assert (m.body, m.idempotency_key) == (b"made 1", write.idempotency_key)
