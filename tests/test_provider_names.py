"""The naming rules both engines of s3/gs/az share (portable.driver.naming)."""

import pytest

from portable import InvalidURL
from portable.driver.naming import (
    check_azure_account_name,
    check_azure_container_or_queue_name,
    check_gcs_bucket_name,
    check_s3_bucket_name,
    decode_azure_metadata_name,
    encode_azure_metadata_name,
)


@pytest.mark.parametrize("name", ["run_id", "content-hash", "pt_x", "a__b", "x-_-y", "Owner"])
def test_azure_metadata_names_round_trip_as_identifiers(name):
    stored = encode_azure_metadata_name(name)
    assert stored.replace("_", "a").isalnum()
    assert decode_azure_metadata_name(stored) == name


@pytest.mark.parametrize(
    ("check", "bad"),
    [
        (check_s3_bucket_name, "ab"),
        (check_s3_bucket_name, "a..b"),
        (check_s3_bucket_name, "192.168.0.1"),
        (check_gcs_bucket_name, "Upper"),
        (check_gcs_bucket_name, "goog-data"),
        (check_azure_account_name, "has-dash"),
        (lambda n: check_azure_container_or_queue_name(n, "container"), "a--b"),
    ],
)
def test_bad_names_raise_invalid_url(check, bad):
    with pytest.raises(InvalidURL):
        check(bad)


def test_good_names_pass_unchanged():
    assert check_s3_bucket_name("my.bucket-1") == "my.bucket-1"
    assert check_gcs_bucket_name("my_bucket.data") == "my_bucket.data"
    assert check_azure_account_name("devstoreaccount1") == "devstoreaccount1"
    assert check_azure_container_or_queue_name("$web", "container") == "$web"
