"""Lost commit replies on s3:// (moto), both engines: streamed writes report the success they were.

Before the fix, obstore failed with "I/O operation on closed file" (its writer
was closed a second time) and fsspec with AlreadyExists on create-only writes.
"""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from portable.resilience import ResiliencePolicy, RetryPolicy
from portable.storage import open_bucket
from portable.testing.chaos import chaos_of

from .test_streamed_commit import body_of, check_stored, stream_many

POLICY = ResiliencePolicy(retry=RetryPolicy(max_attempts=6, initial_backoff=0, max_backoff=0), breaker=None)


@pytest.fixture(scope="module")
def s3_base(moto_server: Any) -> Iterator[str]:
    """A fresh bucket on moto, with moto's credentials in the environment for the module."""
    endpoint = moto_server.endpoints["endpoint_url"]
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
            mp.setenv(name, moto_server.env[name])
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        bucket = f"pts-{uuid.uuid4().hex[:12]}"
        with urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=30) as resp:
            assert resp.status == 200
        yield f"s3://{bucket}/{{prefix}}?region={moto_server.endpoints['region']}&endpoint_url={endpoint}"


@pytest.mark.parametrize("engine", ["obstore", "fsspec"])
@pytest.mark.parametrize("if_none_match", [None, "*"], ids=["plain", "create-only"])
def test_no_false_failures_under_lost_replies_on_s3(s3_base: str, engine: str, if_none_match: str | None) -> None:
    pytest.importorskip("obstore" if engine == "obstore" else "s3fs")
    url = s3_base.format(prefix=uuid.uuid4().hex[:8]) + f"&engine={engine}"
    bucket = open_bucket(f"chaos+{url}&seed=2&error_rate=0.3&faults=lost_reply", policy=POLICY)
    n = 120
    failures = stream_many(bucket, n, if_none_match=if_none_match, part_size=5 * 1024 * 1024, size=2500)
    stats = chaos_of(bucket).stats
    assert stats.injected["lost_reply"] > 15
    assert failures == []
    check_stored(open_bucket(url, policy=POLICY), n, 2500)
    assert all(stats.applied[f"o/{i}"] == 1 for i in range(n)), stats.applied.most_common(3)


@pytest.mark.parametrize("engine", ["obstore", "fsspec"])
def test_a_lost_reply_on_a_multipart_commit_is_a_success(s3_base: str, engine: str) -> None:
    pytest.importorskip("obstore" if engine == "obstore" else "s3fs")
    url = s3_base.format(prefix=uuid.uuid4().hex[:8]) + f"&engine={engine}"
    bucket = open_bucket(f"chaos+{url}&error_rate=1&faults=lost_reply", policy=POLICY)
    data = body_of(1, 11 * 1024 * 1024 + 5)
    with bucket.open("big", "wb", part_size=5 * 1024 * 1024) as out:
        for at in range(0, len(data), 1 << 20):
            out.write(data[at : at + (1 << 20)])
    stats = chaos_of(bucket).stats
    assert stats.injected["lost_reply"] == 1 and stats.applied["big"] == 1
    assert open_bucket(url, policy=POLICY).get("big") == data
