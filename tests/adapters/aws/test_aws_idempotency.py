"""Idempotency on AWS: the store contract on DynamoDB (moto) and on an s3:// bucket.

The contract is the one every store passes (``tests/idempotency/test_store_contract.py``);
its tests are collected here again with this module's ``kit`` fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from portable_aws._aws import AWSOptions
from portable_aws.dynamodb import DynamoDBStore

import tests.idempotency.test_store_contract as store_contract
from portable.errors import InvalidURL
from portable.idempotency import BucketStore, Claim, fingerprint, open_store
from portable.storage import open_bucket
from tests.idempotency.conftest import FakeClock, Kit

globals().update({name: getattr(store_contract, name) for name in dir(store_contract) if name.startswith("test_")})

FP = fingerprint(b"payload")


@pytest.fixture(scope="session")
def dynamo_table(aws: dict[str, str]) -> str:
    store = DynamoDBStore("pt-idempotency", options=AWSOptions(aws["region"], aws["endpoint_url"]))
    store.create_table()
    store.close()
    return "pt-idempotency"


@pytest.fixture(params=["dynamodb", "s3-bucket"])
def kit(request: pytest.FixtureRequest, aws: dict[str, str], unique_name: str, query: str) -> Iterator[Kit]:
    clock = FakeClock()
    if request.param == "dynamodb":
        table = request.getfixturevalue("dynamo_table")
        options = AWSOptions(aws["region"], aws["endpoint_url"])
        store = DynamoDBStore(table, unique_name, options=options, clock=clock)
        yield Kit("dynamodb", store, clock)
        store.close()
    else:
        bucket_name = request.getfixturevalue("s3_bucket")
        bucket = open_bucket(f"s3://{bucket_name}/{unique_name}?engine=fsspec&{query}")
        yield Kit("s3-bucket", BucketStore(bucket, clock=clock), clock)
        bucket.close()


def test_open_store_finds_dynamodb_through_its_entry_point(dynamo_table: str, query: str, unique_name: str) -> None:
    store = open_store(f"dynamodb://{dynamo_table}/{unique_name}?{query}&max_result_bytes=1000")
    assert isinstance(store, DynamoDBStore)
    assert store.max_result_bytes == 1000
    claim = store.claim("k", FP, lease=10, ttl=100)
    assert claim.status == "acquired" and claim.token
    store.complete("k", claim.token, b"done")
    assert store.claim("k", FP, lease=10, ttl=100) == Claim("completed", None, b"done")


def test_records_carry_a_ttl_attribute_for_dynamodbs_expiry(dynamo_table: str, aws: dict[str, str], unique_name: str) -> None:
    from botocore.client import BaseClient

    clock = FakeClock()
    store = DynamoDBStore(dynamo_table, unique_name, options=AWSOptions(aws["region"], aws["endpoint_url"]), clock=clock)
    store.claim("k", FP, lease=10, ttl=3600)
    client: Any = store.as_(BaseClient)
    item = client.get_item(TableName=dynamo_table, Key={"id": {"S": f"{unique_name}/k:k"}})["Item"]
    assert int(item["expiration"]["N"]) == int(clock.now + 3600) + 1
    described = client.describe_time_to_live(TableName=dynamo_table)["TimeToLiveDescription"]
    assert described == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expiration"}


def test_a_retried_claim_whose_reply_was_lost_is_still_ours(dynamo_table: str, aws: dict[str, str], unique_name: str) -> None:
    store = DynamoDBStore(dynamo_table, unique_name, options=AWSOptions(aws["region"], aws["endpoint_url"]))
    first = store._claim("k", FP, 10, 100, "token-1")
    again = store._claim("k", FP, 10, 100, "token-1")  # the same attempt sent twice
    assert first == again == Claim("acquired", "token-1")
    store.complete("k", "token-1", None)
    store.complete("k", "token-1", None)
    store.release("gone", "whatever")  # releasing an absent record is a no-op


def test_long_keys_are_hashed_under_the_partition_key_limit(dynamo_table: str, aws: dict[str, str], unique_name: str) -> None:
    store = DynamoDBStore(dynamo_table, unique_name, options=AWSOptions(aws["region"], aws["endpoint_url"]))
    key = "ключ" * 256  # 1,024 characters, 2,048 bytes
    claim = store.claim(key, FP, lease=10, ttl=100)
    assert claim.token and store._id(key).startswith(f"{unique_name}/h:")
    store.complete(key, claim.token, b"r")
    assert store.claim(key, FP, lease=10, ttl=100).result == b"r"


@pytest.mark.parametrize(
    "bad",
    ["dynamodb://", "dynamodb://ab", "dynamodb://t?ttl_attribute=bad-name", "dynamodb://t?max_result_bytes=500000", "dynamodb://t?x=1"],
)
def test_bad_urls_fail_before_any_request(bad: str) -> None:
    with pytest.raises(InvalidURL):
        open_store(bad)
