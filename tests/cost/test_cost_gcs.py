"""The cost meter's GCS counts equal the requests fake-gcs-server served, by Class A and B.

A counting proxy (tests/cost/_proxy.py) stands in front of fake-gcs-server; each
JSON-API request is mapped to its GCS operation class (uploads, copies/rewrites
and object lists: Class A; object gets, media downloads: Class B; deletes: free).
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from portable.cost import CostMeter, CostSettings

from ._proxy import CountingProxy, Seen

MiB = 1024 * 1024


def gcs_class(seen: Seen) -> str:
    if seen.method == "DELETE":
        return "delete"
    if seen.method in ("POST", "PUT", "PATCH"):
        return "class_a"  # insert (simple, multipart, resumable), rewrite/copy, compose
    if seen.method == "GET" and seen.path.rstrip("/").endswith("/o"):
        return "class_a"  # objects.list
    return "class_b"  # objects.get (metadata or media)


@pytest.fixture
def bucket_name(fake_gcs: Any) -> str:
    endpoint = fake_gcs.endpoints["endpoint_url"]
    name = f"pt-cost-{uuid.uuid4().hex[:10]}"
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project={fake_gcs.endpoints['project']}",
        data=json.dumps({"name": name}).encode(), headers={"Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    return name


@pytest.fixture
def proxy(fake_gcs: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingProxy]:
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    p = CountingProxy(fake_gcs.endpoints["endpoint_url"])
    try:
        yield p
    finally:
        p.close()


def test_gcs_requests_equal_what_fake_gcs_served(proxy: CountingProxy, bucket_name: str) -> None:
    from portable.storage import open_bucket

    query = urllib.parse.urlencode({"engine": "fsspec", "endpoint_url": proxy.url}, safe=":/")
    bucket = open_bucket(f"gs://{bucket_name}?{query}")
    bucket.put("warm", b"w")  # gcsfs's first request sets up its session
    meter = CostMeter(CostSettings(), export=False)
    proxy.reset()
    with meter:
        for i in range(3):
            bucket.put(f"k/{i}", b"x" * (10 + i))
        assert bucket.get("k/1") == b"x" * 11
        assert bucket.head("k/2").size == 12
        assert len(list(bucket.list("k/", page_size=2))) == 3
        bucket.copy("k/0", "c/0")
        bucket.delete("c/0")
        with bucket.open("small", "wb") as f:                   # one part: one upload
            f.write(b"s" * 100)
        with bucket.open("big", "wb", part_size=5 * MiB) as f:  # resumable: initiate + 3 chunks
            for _ in range(12):
                f.write(b"b" * MiB)
    seen = proxy.snapshot()
    by_class = Counter(gcs_class(s) for s in seen)
    usage = meter.usage()
    counted = {c: usage.requests_of(c, service="gcs-standard") for c in by_class}
    assert counted == dict(by_class), [(s.method, s.path, s.query) for s in seen]
    assert usage.requests == len(seen)
    assert counted == {"class_a": 3 + 2 + 1 + 1 + 4, "class_b": 2, "delete": 1}
