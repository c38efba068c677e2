"""The rules both engines of s3/gs/az share: names, URL grammar, limits, conditions, credentials.

They live in portable.driver (naming, limits, conditions, http, credentials), so
that the fsspec and obstore engines cannot drift apart.
"""

import pytest

from portable import ConfigError, InvalidURL, PreconditionFailed
from portable.driver.conditions import CREATE_ONLY_GENERATION, generation_precondition
from portable.driver.credentials import (
    azure_account_from_endpoint,
    parse_azure_connection_string,
    resolve_azure_credentials,
)
from portable.driver.http import code_of_status, range_header
from portable.driver.limits import azure_blob_capabilities, gcs_capabilities, s3_capabilities
from portable.driver.naming import (
    GOOGLE_STORAGE_ENDPOINT,
    OBSTORE_HEADER_FIELDS,
    OBSTORE_HEADER_NAMES,
    AWSURLOptions,
    check_azure_account_name,
    check_azure_container_or_queue_name,
    check_gcs_bucket_name,
    check_prefix_segments,
    check_s3_bucket_name,
    decode_azure_metadata_name,
    encode_azure_metadata_name,
    gcs_endpoint,
    obstore_write_attributes,
    parse_gcs_url,
    parse_s3_url,
    split_obstore_attributes,
)
from portable.driver.storage import WriteOptions
from portable.errors import ErrorCode
from portable.urls import parse_url


@pytest.mark.parametrize(
    "name", ["run_id", "content-hash", "pt_x", "pt__x", "a__b", "x-_-y", "1st", "_h", "contenttype", "a" * 128]
)
def test_azure_metadata_names_round_trip_as_identifiers(name):
    stored = encode_azure_metadata_name(name)
    assert stored.replace("_", "a").isalnum() and not stored[0].isdigit()
    assert decode_azure_metadata_name(stored) == name


@pytest.mark.parametrize(
    ("name", "stored"),
    [
        ("plain", "plain"),
        ("snake_case", "snake_case"),
        ("pt_x", "pt_x"),  # the old marker is an ordinary name now
        ("x-trace", "pt__x_2dtrace"),
        ("1st", "pt__1st"),
        ("pt__x", "pt__pt_5f_5fx"),  # a name that starts with the marker is encoded too
        ("cachecontrol", "pt__cachecontrol"),  # obstore would send it as a header
    ],
)
def test_azure_metadata_names_are_stored_in_the_documented_form(name, stored):
    assert encode_azure_metadata_name(name) == stored


@pytest.mark.parametrize(
    ("native", "read"),
    [
        ("Owner", "owner"),  # Azure compares names without case: lower case, as on S3
        ("pt_raw", "pt_raw"),  # the old marker is never decoded
        ("pt_user_hash", "pt_user_hash"),
        ("pt_content_hhash", "pt_content_hhash"),
        ("pt__owner", "pt__owner"),  # marker, but portable writes 'owner' bare
        ("pt__x_y", "pt__x_y"),  # a lone '_' is no escape
        ("pt__x_5f", "pt__x_5f"),  # 'x_' is an identifier: portable would not encode it
        ("pt__", "pt__"),
        ("PT__X_2DTRACE", "x-trace"),  # exactly portable's form, in another case
    ],
)
def test_a_native_azure_name_is_decoded_only_when_it_is_exactly_portables_form(native, read):
    assert decode_azure_metadata_name(native) == read


def test_obstore_attributes_keep_headers_and_metadata_apart():
    options = WriteOptions(
        content_type="text/csv", metadata={"x-trace": "m"}, cache_control="no-cache",
        content_encoding="gzip", content_disposition="inline",
    )
    assert obstore_write_attributes(options, encode_azure_metadata_name) == {
        "pt__x_2dtrace": "m", "Content-Type": "text/csv", "Cache-Control": "no-cache",
        "Content-Encoding": "gzip", "Content-Disposition": "inline",
    }
    assert obstore_write_attributes(WriteOptions()) is None
    headers, metadata = split_obstore_attributes(
        {"Content-Type": "text/csv", "content-type": "meta", "Cache-Control": "no-cache", "Content-Language": "en",
         "pt__x_2dtrace": "m"},
        decode_azure_metadata_name,
    )
    assert headers == {"content_type": "text/csv", "cache_control": "no-cache"}
    assert metadata == {"content-type": "meta", "x-trace": "m"}  # a metadata entry named content-type stays metadata
    assert all(name.lower() in OBSTORE_HEADER_NAMES for name in OBSTORE_HEADER_FIELDS)


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


# ---------------------------------------------------------------- URL grammar both engines read
def test_s3_url_grammar_is_the_same_for_both_engines():
    url = parse_url("s3://data/team/a?region=eu-west-1&endpoint_url=http://127.0.0.1:9000/&addressing_style=path")
    where = parse_s3_url(url, default_concurrency=16)
    url.done()
    assert (where.bucket, where.prefix, where.addressing_style, where.concurrency) == ("data", "team/a", "path", 16)
    assert where.aws == AWSURLOptions("eu-west-1", "http://127.0.0.1:9000", None, 30.0)


@pytest.mark.parametrize(
    "url",
    [
        "s3:///p",
        "s3://b?region=Europe",
        "s3://b?endpoint_url=127.0.0.1:9000",
        "s3://b?timeout=0",
        "s3://b?addressing_style=dns",
        "s3://b?concurrency=0",
        "s3://b/a/../c",
        "s3://b/a//c",
    ],
)
def test_bad_s3_urls_raise_invalid_url(url):
    with pytest.raises(InvalidURL):
        parse_s3_url(parse_url(url), default_concurrency=64)


def test_gcs_url_grammar_and_endpoint():
    where = parse_gcs_url(parse_url("gs://b/p?project=x&token=anon&timeout=5&concurrency=3"))
    assert (where.bucket, where.project, where.token, where.timeout, where.concurrency) == ("b", "x", "anon", 5.0, 3)
    with pytest.raises(InvalidURL):
        parse_gcs_url(parse_url("gs://b?concurrency=0"))
    assert gcs_endpoint(None, None) == (GOOGLE_STORAGE_ENDPOINT, False)
    assert gcs_endpoint(None, "127.0.0.1:4443") == ("http://127.0.0.1:4443", True)
    assert gcs_endpoint("https://gcs.example/", "127.0.0.1:4443") == ("https://gcs.example", True)


def test_prefix_segments():
    assert check_prefix_segments("/a/b/") == "a/b"
    assert check_prefix_segments("") == ""
    for bad in ("a//b", "a/./b", "a/.."):
        with pytest.raises(InvalidURL):
            check_prefix_segments(bad)


# ---------------------------------------------------------------- limits, conditions, HTTP
def test_capabilities_subtract_the_prefix_and_its_slash():
    assert s3_capabilities("b", "").max_key_bytes == 1024
    assert s3_capabilities("b", "ab").max_key_bytes == 1021
    assert gcs_capabilities("é", signed_urls=False, min_part_bytes=1).max_key_bytes == 1021
    assert azure_blob_capabilities("p", signed_urls=True, max_object_bytes=None).signed_urls
    with pytest.raises(InvalidURL):
        s3_capabilities("b", "k" * 1010)
    with pytest.raises(InvalidURL):
        azure_blob_capabilities("k" * 1023, signed_urls=False, max_object_bytes=None)


def test_generation_precondition():
    assert generation_precondition(WriteOptions()) is None
    assert generation_precondition(WriteOptions(if_none_match=True)) == CREATE_ONLY_GENERATION
    assert generation_precondition(WriteOptions(if_match="1712")) == "1712"
    with pytest.raises(PreconditionFailed, match="'k': '\"abc\"' is not a GCS generation"):
        generation_precondition(WriteOptions(if_match='"abc"'), key="k")


def test_http_status_codes_and_ranges():
    assert code_of_status(404) is ErrorCode.NOT_FOUND
    assert code_of_status(418) is ErrorCode.INVALID_ARGUMENT
    assert code_of_status(418, other_client_error=ErrorCode.UNKNOWN) is ErrorCode.UNKNOWN
    assert code_of_status(502) is ErrorCode.UNAVAILABLE
    assert code_of_status(503, {503: ErrorCode.THROTTLED}) is ErrorCode.THROTTLED
    assert code_of_status(304) is ErrorCode.UNKNOWN
    assert (range_header(5, None), range_header(0, 10)) == ("bytes=5-", "bytes=0-9")


# ---------------------------------------------------------------- Azure credentials
_AZURITE = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;"
    "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
)


@pytest.fixture
def clean_azure_env(monkeypatch):
    for name in (
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_ACCOUNT_NAME",
    ):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_azure_credentials_from_a_named_connection_string(clean_azure_env):
    clean_azure_env.setenv("PT_TEST_CS", _AZURITE)
    found = resolve_azure_credentials(
        parse_url("az://c?connection_string_env=PT_TEST_CS"), "blob", account=None, endpoint=None
    )
    assert (found.kind, found.account, found.endpoint) == (
        "connection_string",
        "devstoreaccount1",
        "http://127.0.0.1:10000/devstoreaccount1",
    )
    assert found.can_sign and "a2V5" not in repr(found)


def test_azure_credentials_auto_order_and_errors(clean_azure_env):
    url = parse_url("az://c")
    found = resolve_azure_credentials(url, "queue", account="acct", endpoint=None)
    assert (found.kind, found.endpoint) == ("identity", "https://acct.queue.core.windows.net")
    clean_azure_env.setenv("AZURE_STORAGE_CONNECTION_STRING", _AZURITE)
    # A connection string for another account is not borrowed.
    assert resolve_azure_credentials(parse_url("az://c"), "blob", account="other", endpoint=None).kind == "identity"
    with pytest.raises(ConfigError, match="NOT_SET_ANYWHERE"):
        resolve_azure_credentials(parse_url("az://c?sas_token_env=NOT_SET_ANYWHERE"), "blob", account="a1b", endpoint=None)
    with pytest.raises(InvalidURL):
        resolve_azure_credentials(parse_url("az://c?auth=magic"), "blob", account=None, endpoint=None)
    with pytest.raises(ConfigError, match="endpoint is for account"):
        resolve_azure_credentials(
            parse_url("az://c?auth=anonymous"), "blob", account="other", endpoint="http://127.0.0.1:10000/devstoreaccount1"
        )
    assert parse_azure_connection_string("A=1;B=x=y;") == {"a": "1", "b": "x=y"}
    assert azure_account_from_endpoint("https://acct.blob.core.windows.net") == "acct"
