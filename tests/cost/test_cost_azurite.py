"""The cost meter's Azure Blob counts equal the requests Azurite served, by Azure's operation types.

A counting proxy (tests/cost/_proxy.py) stands in front of Azurite's blob endpoint
(Shared Key signatures cover the path, not the host, so requests pass unchanged).
Each request is mapped to the type Azure bills it as (Put Blob / Put Block /
Put Block List: write; Get Blob: read; List Blobs: list and create container;
Get Blob Properties: other; Delete Blob: free), and the meter's classes must
match request for request.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from portable.cost import CostMeter, CostSettings

from ._proxy import CountingProxy, Seen

MiB = 1024 * 1024
_CONN_ENV = "PORTABLE_TEST_COST_AZURE_CONN"


def azure_class(seen: Seen) -> str:
    comp = (seen.query.get("comp") or [""])[0]
    restype = (seen.query.get("restype") or [""])[0]
    if seen.method == "DELETE" or (seen.method == "POST" and comp == "batch"):
        return "delete"  # Delete Blob, or a Blob Batch of them (obstore deletes that way)
    if seen.method == "PUT":
        return "list_create" if restype == "container" and not comp else "write"
    if seen.method == "GET" and comp == "list":
        return "list_create"
    if seen.method == "GET" and not comp and restype != "container":
        return "read"
    return "other"  # HEAD (Get Blob Properties) and the rest


@pytest.fixture
def proxied(azurite: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[CountingProxy, str]]:
    blob = azurite.endpoints["blob_endpoint"].rstrip("/")
    account = azurite.endpoints["account_name"]
    origin = blob.rsplit("/", 1)[0] if blob.endswith("/" + account) else blob
    proxy = CountingProxy(origin)
    conn = azurite.endpoints["connection_string"].replace(origin, proxy.url)
    monkeypatch.setenv(_CONN_ENV, conn)
    try:
        yield proxy, account
    finally:
        proxy.close()


@pytest.mark.parametrize("engine", ["fsspec", "obstore"])
def test_azure_blob_requests_equal_what_azurite_served(proxied: tuple[CountingProxy, str], engine: str) -> None:
    from azure.storage.blob import BlobServiceClient

    from portable.storage import open_bucket

    proxy, _account = proxied
    container = f"pt-cost-{uuid.uuid4().hex[:10]}"
    BlobServiceClient.from_connection_string(os.environ[_CONN_ENV]).create_container(container)
    bucket = open_bucket(f"az://{container}?engine={engine}&connection_string_env={_CONN_ENV}")
    meter = CostMeter(CostSettings(), export=False)
    proxy.reset()
    with meter:
        for i in range(3):
            bucket.put(f"k/{i}", b"x" * (10 + i))
        assert bucket.get("k/1") == b"x" * 11
        assert bucket.head("k/2").size == 12
        assert len(list(bucket.list("k/", page_size=2))) == 3
        bucket.delete("k/0")
        with bucket.open("small", "wb") as f:                   # one part: Put Blob
            f.write(b"s" * 100)
        with bucket.open("big", "wb", part_size=5 * MiB) as f:  # 3 Put Block + Put Block List
            for _ in range(12):
                f.write(b"b" * MiB)
    seen = proxy.snapshot()
    by_class = Counter(azure_class(s) for s in seen)
    usage = meter.usage()
    counted = {c: usage.requests_of(c, service="azure-blob-hot") for c in by_class}
    assert counted == dict(by_class), [(s.method, s.path, s.query) for s in seen]
    assert usage.requests == len(seen)
    assert counted == {"write": 3 + 1 + 4, "read": 1, "other": 1, "list_create": 2, "delete": 1}
    assert {row.resource for row in usage.rows} == {container}


_KEY_ENV = "PORTABLE_TEST_COST_AZURE_KEY"


def test_azure_queue_operations_equal_what_azurite_served(azurite: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from azure.storage.queue import QueueServiceClient

    from portable.messaging import open_subscription, open_topic

    endpoint = azurite.endpoints["queue_endpoint"].rstrip("/")
    account = azurite.endpoints["account_name"]
    origin = endpoint.rsplit("/", 1)[0] if endpoint.endswith("/" + account) else endpoint
    proxy = CountingProxy(origin)
    monkeypatch.setenv(_KEY_ENV, azurite.endpoints["account_key"])
    queue = f"pt-cost-{uuid.uuid4().hex[:10]}"
    service = QueueServiceClient.from_connection_string(azurite.endpoints["connection_string"])
    service.create_queue(queue)
    service.create_queue(f"{queue}-poison")
    url = f"azqueue://{account}/{queue}?queue_endpoint={endpoint.replace(origin, proxy.url)}&account_key_env={_KEY_ENV}"
    try:
        topic, sub = open_topic(url), open_subscription(url)
        meter = CostMeter(CostSettings(), export=False)
        proxy.reset()
        with meter:
            topic.publish(b"one")
            topic.publish_batch([b"two", b"three"])         # no batches on Azure Queue: two Put Message
            got = []
            while len(got) < 3:
                batch = sub.receive(max_messages=10, wait=1)
                assert batch, "the queue ran dry"
                got += batch
            got[0].ack()                                   # Delete Message
            got[1].nack()                                  # Update Message
            got[2].ack()
        seen = proxy.snapshot()
        usage = meter.usage()
        assert usage.requests == len(seen), [(s.method, s.path, s.query) for s in seen]
        assert usage.requests_of("delete", service="azure-queue") == sum(1 for s in seen if s.method == "DELETE")
        assert {row.resource for row in usage.rows} == {queue}
        # 3 Put Message; Get Messages twice (3 of 10 came: the SDK asked again); 2 Delete; 1 Update
        assert usage.requests_of("operation") == 3 + 2 + 1 and usage.requests_of("delete") == 2
        topic.close()
        sub.close()
    finally:
        proxy.close()
        for name in (queue, f"{queue}-poison"):
            service.delete_queue(name)
