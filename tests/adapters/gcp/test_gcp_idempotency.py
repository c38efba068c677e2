"""Idempotency on GCP: the store contract on Firestore (its emulator) and on a gs:// bucket (fake-gcs-server).

The contract is the one every store passes (``tests/idempotency/test_store_contract.py``);
its tests are collected here again with this module's ``kit`` fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from portable_gcp.firestore import FirestoreIdempotencyStore

import tests.idempotency.test_store_contract as store_contract
from portable.errors import InvalidURL
from portable.idempotency import BucketStore, Claim, fingerprint, open_store
from portable.storage import open_bucket
from tests.idempotency.conftest import FakeClock, Kit

# The store contract's tests, run against the kits below.
globals().update({name: getattr(store_contract, name) for name in dir(store_contract) if name.startswith("test_")})


@pytest.fixture(scope="session")
def firestore(firestore_emulator: Any) -> dict[str, str]:
    return {"project": firestore_emulator.endpoints["project"], "endpoint": firestore_emulator.endpoints["host_port"]}


@pytest.fixture(params=["firestore", "gs-bucket"])
def kit(request: pytest.FixtureRequest, unique_name: str) -> Iterator[Kit]:
    clock = FakeClock()
    if request.param == "firestore":
        info = request.getfixturevalue("firestore")
        store = FirestoreIdempotencyStore(info["project"], unique_name, endpoint=info["endpoint"], clock=clock)
        yield Kit("firestore", store, clock)
        store.close()
    else:
        gcs = request.getfixturevalue("gcs")
        bucket = open_bucket(f"gs://{gcs['bucket']}/{unique_name}?engine=fsspec&endpoint_url={gcs['endpoint_url']}")
        yield Kit("gs-bucket", BucketStore(bucket, clock=clock), clock)
        bucket.close()


def test_open_store_finds_firestore_through_its_entry_point(firestore: dict[str, str], unique_name: str) -> None:
    url = f"firestore://{firestore['project']}/tenants/acme/{unique_name}?endpoint={firestore['endpoint']}"
    store = open_store(url)
    assert isinstance(store, FirestoreIdempotencyStore)
    fp = fingerprint(b"x")
    claim = store.claim("k", fp, lease=10, ttl=100)
    assert claim.status == "acquired" and claim.token
    store.complete("k", claim.token, b"done")
    assert store.claim("k", fp, lease=10, ttl=100) == Claim("completed", None, b"done")
    store.close()


@pytest.mark.parametrize(
    "url",
    [
        "firestore://test-project",
        "firestore://test-project/a/b",
        "firestore://test-project/__reserved__",
        "firestore://Bad_Project/records",
        "firestore://test-project/records?max_result_bytes=2000000",
        "firestore://test-project/records?timeout=0",
        "firestore://test-project/records?colour=blue",
    ],
)
def test_bad_urls_fail_before_any_request(url: str) -> None:
    with pytest.raises(InvalidURL):
        open_store(url + ("&" if "?" in url else "?") + "endpoint=127.0.0.1:9")


def test_a_change_from_a_stale_read_loses_the_compare_and_swap(firestore: dict[str, str], unique_name: str) -> None:
    store = FirestoreIdempotencyStore(firestore["project"], unique_name, endpoint=firestore["endpoint"])
    try:
        claim = store.claim("cas", fingerprint(b"p"), lease=30, ttl=300)
        doc = store._doc("cas")
        found = store._read(doc)
        assert found is not None
        record, read_at = found
        assert store._write(doc, {**record, "lease_until": 1.0}, update_time=read_at)
        assert not store._write(doc, {**record, "lease_until": 2.0}, update_time=read_at)  # stale: refused
        again = store._read(doc)
        assert again is not None and again[0]["lease_until"] == 1.0
        assert claim.token
    finally:
        store.close()
