"""The cost meter's counts equal the requests moto served.

A counting proxy (tests/cost/_proxy.py) stands between the drivers and moto; it
records every request, and answers some with 503 SlowDown itself when a test
arms it (a throttled attempt the guard retries: the provider saw and billed two
requests). moto's own recorder (``/moto-api/recorder``) confirms the proxy
forwarded exactly what moto received. The meter's per-price-class counts must
equal the proxy's, request for request, over put, get, head, a listing of
several pages, copy, delete, a streamed write that fits one part, a
multipart streamed write, and retried calls; and SQS send (one and batched),
receive, ack, ack_many, nack; and the batch methods (put_many, get_many,
copy_many, delete_many), each one observed call of the guard.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from portable.cost import CostMeter, CostSettings
from portable.resilience import ResiliencePolicy, RetryPolicy

from ._proxy import CountingProxy, Seen

MiB = 1024 * 1024


def _moto_api(endpoint: str, action: str) -> bytes:
    method = "GET" if action == "download-recording" else "POST"
    req = urllib.request.Request(f"{endpoint}/moto-api/recorder/{action}", data=None if method == "GET" else b"", method=method)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.read()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def moto(moto_server: Any) -> Iterator[dict[str, str]]:
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
            mp.setenv(name, moto_server.env[name])
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        yield {"endpoint_url": moto_server.endpoints["endpoint_url"], "region": moto_server.endpoints["region"]}


@pytest.fixture
def proxy(moto: dict[str, str]) -> Iterator[CountingProxy]:
    p = CountingProxy(moto["endpoint_url"])
    try:
        yield p
    finally:
        p.close()


def _client(moto: dict[str, str], service: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        service, endpoint_url=moto["endpoint_url"], region_name=moto["region"],
        config=Config(s3={"addressing_style": "path"}),
    )  # fmt: skip


class Recording:
    """moto's request recorder, on for the ``with`` block."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.entries: list[dict[str, Any]] = []

    def __enter__(self) -> Recording:
        _moto_api(self.endpoint, "reset-recording")
        _moto_api(self.endpoint, "start-recording")
        return self

    def __exit__(self, *exc: object) -> None:
        _moto_api(self.endpoint, "stop-recording")
        text = _moto_api(self.endpoint, "download-recording").decode()
        self.entries = _json_stream(text)


def _json_stream(text: str) -> list[dict[str, Any]]:
    """The entries of moto's recording: JSON objects one after another. Mostly one per line, but moto
    appends concurrent requests' entries (obstore uploads parts in parallel) without a newline between
    them now and then, so each object is decoded where the last one ended."""
    decoder = json.JSONDecoder()
    entries: list[dict[str, Any]] = []
    at = 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            return entries
        entry, at = decoder.raw_decode(text, at)
        entries.append(entry)


def s3_class(seen: Seen) -> str:
    """The S3 price class of a request as the proxy saw it (AWS's pricing page groups)."""
    if seen.method == "DELETE":
        return "delete"
    if seen.method == "POST":
        return "delete" if "delete" in seen.query else "tier1"  # DeleteObjects; else multipart create/complete
    if seen.method == "PUT":
        return "tier1"  # PutObject, UploadPart, CopyObject
    if seen.method == "GET" and ("list-type" in seen.query or "uploads" in seen.query
                                 or seen.path.rstrip("/").count("/") == 1):  # fmt: skip
        return "tier1"  # ListObjectsV2, ListMultipartUploads
    return "tier2"  # GetObject, HeadObject


def _meter() -> CostMeter:
    return CostMeter(CostSettings(), export=False)


def _policy() -> ResiliencePolicy:
    return ResiliencePolicy(retry=RetryPolicy(max_attempts=4, initial_backoff=0.01, max_backoff=0.05))


@pytest.mark.parametrize("engine", ["fsspec", "obstore"])
def test_s3_requests_equal_what_moto_served(moto: dict[str, str], proxy: CountingProxy, engine: str) -> None:
    from portable.storage import open_bucket

    name = f"pt-cost-{uuid.uuid4().hex[:10]}"
    _client(moto, "s3").create_bucket(Bucket=name)
    bucket = open_bucket(f"s3://{name}?engine={engine}&region={moto['region']}&endpoint_url={proxy.url}", policy=_policy())
    meter = _meter()
    proxy.reset()
    with Recording(moto["endpoint_url"]) as recording, meter:
        for i in range(5):
            bucket.put(f"k/{i}", b"x" * (100 + i))                      # 5 PutObject
        assert bucket.get("k/1") == b"x" * 101                          # GetObject
        assert bucket.get_range("k/2", 0, 10) == b"x" * 10              # GetObject (ranged)
        assert bucket.head("k/3").size == 103                           # HeadObject
        assert len(list(bucket.list("k/", page_size=2))) == 5           # 3 ListObjectsV2 pages
        bucket.copy("k/0", "c/0")                                       # CopyObject
        bucket.delete("c/0")                                            # DeleteObject (free)
        with bucket.open("small", "wb") as f:                           # fits one part: 1 PutObject
            f.write(b"s" * 1000)
        with bucket.open("big", "wb", part_size=5 * MiB) as f:          # 12 MiB in 5 MiB parts:
            for _ in range(12):                                         # create + 3 parts + complete
                f.write(b"b" * MiB)
        assert bucket.head("big").size == 12 * MiB                      # HeadObject
        # a throttled GET and a throttled PUT: each attempt reached the provider
        proxy.fail_next(lambda s: s.method == "GET" and s.path.endswith("/k/4"))
        assert bucket.get("k/4") == b"x" * 104                          # 503 + GetObject
        proxy.fail_next(lambda s: s.method == "PUT" and s.path.endswith("/k/retried"), times=2)
        bucket.put("k/retried", b"r")                                   # 503, 503, PutObject
    seen = proxy.snapshot()
    by_class = Counter(s3_class(s) for s in seen)
    usage = meter.usage()
    counted = {c: usage.requests_of(c, service="s3-standard") for c in ("tier1", "tier2", "delete")}

    assert sum(1 for s in seen if s.failed) == 3
    assert len(recording.entries) == sum(1 for s in seen if not s.failed)  # moto saw what the proxy forwarded
    assert counted == {"tier1": by_class["tier1"], "tier2": by_class["tier2"], "delete": by_class["delete"]}
    assert counted == {"tier1": 5 + 3 + 1 + 1 + 5 + 3, "tier2": 2 + 1 + 1 + 2, "delete": 1}
    assert usage.requests == len(seen)
    assert {row.resource for row in usage.rows} == {name}  # counted per bucket
    assert usage.bytes_out() == 101 + 10 + 104
    report = meter.report()
    assert report.usd == pytest.approx(18 * 0.005 / 1000 + 6 * 0.0004 / 1000)


@pytest.mark.parametrize("method", ["put_many", "get_many", "copy_many", "delete_many"])
def test_s3_batches_are_counted(moto: dict[str, str], proxy: CountingProxy, method: str) -> None:
    from portable.storage import open_bucket

    name = f"pt-cost-{uuid.uuid4().hex[:10]}"
    _client(moto, "s3").create_bucket(Bucket=name)
    bucket = open_bucket(f"s3://{name}?engine=fsspec&region={moto['region']}&endpoint_url={proxy.url}", policy=_policy())
    keys = [f"b/{i}" for i in range(4)]
    if method != "put_many":
        for key in keys:
            bucket.put(key, b"z")
    meter = _meter()
    proxy.reset()
    with meter:
        if method == "put_many":
            assert len(bucket.put_many([(k, b"y") for k in keys])) == 4     # 4 PutObject
        elif method == "get_many":
            assert len(bucket.get_many(keys)) == 4                          # 4 GetObject
        elif method == "copy_many":
            assert len(bucket.copy_many([(k, "c" + k) for k in keys])) == 4  # 4 CopyObject
        else:
            bucket.delete_many(keys)                                        # 1 DeleteObjects (free)
    by_class = Counter(s3_class(s) for s in proxy.snapshot())
    usage = meter.usage()
    assert sum(by_class.values()) == (1 if method == "delete_many" else 4)
    assert {c: usage.requests_of(c) for c in by_class} == dict(by_class)


def _sqs_action(seen: Seen) -> str:
    target = seen.headers.get("X-Amz-Target") or seen.headers.get("x-amz-target") or ""
    if target:
        return target.rsplit(".", 1)[-1]
    form = {k: v for k, v in (p.split("=", 1) for p in seen.body.decode().split("&") if "=" in p)}
    return form.get("Action", "?")


def test_sqs_requests_equal_what_moto_served(moto: dict[str, str], proxy: CountingProxy) -> None:
    from portable.messaging import open_subscription, open_topic

    queue = f"pt-cost-{uuid.uuid4().hex[:10]}"
    _client(moto, "sqs").create_queue(QueueName=queue)
    url = f"sqs://{queue}?region={moto['region']}&endpoint_url={proxy.url}"
    meter = _meter()
    proxy.reset()
    with Recording(moto["endpoint_url"]) as recording, meter:
        topic = open_topic(url, policy=_policy())                       # GetQueueUrl + GetQueueAttributes
        sub = open_subscription(url, policy=_policy())                  # the same two
        topic.publish(b"one")                                           # SendMessage
        topic.publish_batch([b"two", b"three", b"four"])                # 1 SendMessageBatch
        proxy.fail_next(lambda s: _sqs_action(s) == "SendMessage")
        topic.publish(b"five")                                          # 503, SendMessage
        got = []
        while len(got) < 5:
            batch = sub.receive(max_messages=10, wait=1)                # ReceiveMessage each
            assert batch, "the queue ran dry before five messages came back"
            got += batch
        got[0].ack()                                                    # DeleteMessage
        got[1].nack()                                                   # ChangeMessageVisibility
        sub.ack_many(got[2:])                                           # 1 DeleteMessageBatch
        topic.close()
        sub.close()
    seen = proxy.snapshot()
    actions = Counter(_sqs_action(s) for s in seen)
    usage = meter.usage()
    assert len(recording.entries) == sum(1 for s in seen if not s.failed)
    assert actions["GetQueueUrl"] == 2 and actions["SendMessageBatch"] == 1 and actions["DeleteMessageBatch"] == 1
    assert usage.requests_of("request", service="sqs-standard") == len(seen)
    assert {row.resource for row in usage.rows} == {queue}  # counted per queue
    assert usage.units_of("request", service="sqs-standard") == len(seen)  # every payload under 64 KiB
    assert meter.report().usd == pytest.approx(len(seen) * 0.40 / 1_000_000)


def test_sqs_large_messages_are_billed_per_64_kib(moto: dict[str, str], proxy: CountingProxy) -> None:
    from portable.messaging import open_topic

    queue = f"pt-cost-{uuid.uuid4().hex[:10]}"
    _client(moto, "sqs").create_queue(QueueName=queue)
    topic = open_topic(f"sqs://{queue}?region={moto['region']}&endpoint_url={proxy.url}", policy=_policy())
    meter = _meter()
    proxy.reset()
    with meter:
        topic.publish(b"a" * (150 * 1024))  # one request, three 64 KiB chunks
    topic.close()
    usage = meter.usage()
    assert [_sqs_action(s) for s in proxy.snapshot()] == ["SendMessage"]
    assert usage.requests_of("request") == 1
    assert usage.units_of("request") == 3


@pytest.mark.parametrize("engine", ["fsspec", "obstore"])
def test_s3_async_face_is_counted_the_same(moto: dict[str, str], proxy: CountingProxy, engine: str) -> None:
    import asyncio

    import portable.aio

    name = f"pt-cost-{uuid.uuid4().hex[:10]}"
    _client(moto, "s3").create_bucket(Bucket=name)
    meter = _meter()

    async def run() -> None:
        async with portable.aio.open_bucket(
            f"s3://{name}?engine={engine}&region={moto['region']}&endpoint_url={proxy.url}", policy=_policy()
        ) as bucket:
            proxy.reset()
            with meter:
                for i in range(3):
                    await bucket.put(f"a/{i}", b"x" * 10)                    # 3 PutObject
                assert await bucket.get("a/1") == b"x" * 10                  # GetObject
                assert (await bucket.head("a/2")).size == 10                 # HeadObject
                assert len([e async for e in bucket.list("a/", page_size=2)]) == 3   # 2 pages
                await bucket.delete("a/0")                                    # DeleteObject
                async with bucket.open("big", "wb", part_size=5 * MiB) as f:  # create + 3 parts + complete
                    for _ in range(11):
                        await f.write(b"b" * MiB)
                proxy.fail_next(lambda s: s.method == "GET" and s.path.endswith("/a/2"))
                assert await bucket.get("a/2") == b"x" * 10                  # 503 + GetObject

    asyncio.run(run())
    seen = proxy.snapshot()
    by_class = Counter(s3_class(s) for s in seen)
    usage = meter.usage()
    assert {c: usage.requests_of(c) for c in by_class} == dict(by_class), [(s.method, s.path, s.query) for s in seen]
    assert dict(by_class) == {"tier1": 3 + 2 + 5, "tier2": 1 + 1 + 2, "delete": 1}
