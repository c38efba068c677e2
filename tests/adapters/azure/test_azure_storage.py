"""az:// and abfs:// on Azurite: the storage contract, plus what only Azure Blob has.

Every URL pins ``engine=fsspec``: this file tests the adlfs/blob-SDK driver, and
without the option the obstore engine would be chosen wherever it is installed.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from azure_support import KEY_ENV, blob_service
from portable_azure._common import resolve_auth
from portable_azure.blob import BlobStorage, decode_metadata_name, encode_metadata_name

from portable.config import Profile
from portable.errors import (
    AlreadyExists,
    ConfigError,
    DeadlineExceeded,
    InvalidKey,
    InvalidURL,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    Throttled,
    Unavailable,
    Unsupported,
)
from portable.resilience import BreakerPolicy, ResiliencePolicy, RetryPolicy, deadline
from portable.storage import Bucket, open_bucket
from portable.testing.fault_suite import StorageFaultSuite
from portable.testing.storage_suite import StorageContract, contract_profile


class TestBlobContract(StorageContract):
    xfail: dict[str, str] = {}

    @pytest.fixture
    def bucket_url(self, blob_container: str, unique_name: str, conn_query: str) -> str:
        return f"az://{blob_container}/{unique_name}?engine=fsspec&{conn_query}"


class TestAbfsKeyContract(StorageContract):
    """The whole contract again through the ADLS Gen2 URL form and a shared key from its own variable."""

    xfail: dict[str, str] = {}

    @pytest.fixture
    def bucket_url(self, azure: dict[str, str], blob_container: str, unique_name: str) -> str:
        return (
            f"abfs://{blob_container}@{azure['account']}.dfs.core.windows.net/{unique_name}"
            f"?engine=fsspec&blob_endpoint={azure['blob_endpoint']}&account_key_env={KEY_ENV}"
        )


def open_url(url: str, **retry: Any) -> Bucket:
    policy = ResiliencePolicy(retry=RetryPolicy(**({"max_attempts": 3, "initial_backoff": 0.01} | retry)), breaker=None)
    profile = Profile(name="t", storage=url, queue="mem://t", jobs="local://./.portable/jobs", resilience=policy)
    return open_bucket(url, profile=profile)


@pytest.fixture
def bucket(blob_container: str, unique_name: str, conn_query: str) -> Any:
    b = open_url(f"az://{blob_container}/{unique_name}?engine=fsspec&{conn_query}")
    yield b
    b.close()


# -- credentials and URLs ------------------------------------------------------------
@pytest.mark.parametrize("option", ["account_key", "connection_string", "sas_token", "sig", "key"])
def test_a_secret_in_the_url_is_refused_and_not_echoed(option: str) -> None:
    with pytest.raises(InvalidURL, match=r"environment variable") as info:
        open_bucket(f"az://data/p?engine=fsspec&account=acct&{option}=TOPSECRETVALUE")
    assert "TOPSECRETVALUE" not in str(info.value)


def test_a_password_in_the_netloc_is_refused() -> None:
    with pytest.raises(InvalidURL) as info:
        open_bucket("abfs://data:TOPSECRETVALUE@acct.dfs.core.windows.net/p?engine=fsspec")
    assert "TOPSECRETVALUE" not in str(info.value)


@pytest.mark.parametrize("name", ["ab", "UPPER", "has_underscore", "double--hyphen", "-leading", "x" * 64])
def test_invalid_container_names_raise_before_any_request(name: str) -> None:
    # The endpoint is a closed port: an InvalidURL (not Unavailable) proves no request was made.
    with pytest.raises(InvalidURL, match="container name"):
        open_bucket(f"az://{name}/p?engine=fsspec&account=acct&auth=anonymous&blob_endpoint=http://127.0.0.1:9/acct")


def test_the_key_limit_leaves_room_for_the_prefix(blob_container: str, conn_query: str) -> None:
    prefix = "p" * 100
    with open_url(f"az://{blob_container}/{prefix}?engine=fsspec&{conn_query}") as b:
        assert b.capabilities.max_key_bytes == 1024 - 101
        with pytest.raises(InvalidKey, match="limit"):
            b.put("k" * (1024 - 100), b"x")
        b.put("k" * (1024 - 101), b"fits")  # a full blob name of exactly 1,024 characters
        assert b.get("k" * (1024 - 101)) == b"fits"


def test_missing_named_variable_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="NOT_SET_ANYWHERE"):
        open_bucket("az://data/p?engine=fsspec&account=acct&account_key_env=NOT_SET_ANYWHERE")


def test_auto_auth_prefers_named_variables_then_the_standard_ones(monkeypatch: pytest.MonkeyPatch, azure: dict[str, str]) -> None:
    from portable.urls import parse_url

    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azure["connection_string"])
    auth = resolve_auth(parse_url("az://c/p"), "blob", account=None, endpoint=None)
    assert (auth.kind, auth.account, auth.endpoint) == ("connection_string", "devstoreaccount1", azure["blob_endpoint"])
    # A URL for another account does not borrow this account's connection string.
    auth = resolve_auth(parse_url("az://c/p"), "blob", account="other", endpoint=None)
    assert (auth.kind, auth.endpoint) == ("identity", "https://other.blob.core.windows.net")
    monkeypatch.setenv("PT_KEY", "a2V5")
    auth = resolve_auth(parse_url("az://c/p?account_key_env=PT_KEY"), "blob", account="other", endpoint=None)
    assert auth.kind == "key" and auth.can_sign and "a2V5" not in repr(auth)


def test_connection_string_for_another_account_is_a_config_error(blob_container: str, conn_query: str) -> None:
    with pytest.raises(ConfigError, match="devstoreaccount1"):
        open_bucket(f"az://{blob_container}/p?engine=fsspec&account=otheraccount&{conn_query}")


def test_secrets_never_show_in_repr_or_errors(azure: dict[str, str], blob_container: str, conn_query: str) -> None:
    key = azure["connection_string"].split("AccountKey=")[1].split(";")[0]
    with open_url(f"az://{blob_container}/secrets?engine=fsspec&{conn_query}") as b:
        with pytest.raises(NotFound) as info:
            b.get("missing")
        assert key not in str(info.value) and key not in repr(b) and key not in repr(b.driver)
        url = b.signed_url("missing", expires=60)
        assert "sig=" in url  # the caller asked for the secret-bearing URL; errors never carry it
    with open_url(f"az://no-such-container/p?engine=fsspec&{conn_query}") as b, pytest.raises(NotFound) as info:
        b.put("k", b"x")
    assert key not in str(info.value)
    assert "sig=" not in str(info.value)


# -- Azure-specific behaviour -----------------------------------------------------------
def test_metadata_names_azure_rejects_are_escaped_and_read_back(bucket: Bucket, azure: dict[str, str], blob_container: str) -> None:
    names = {"content-hash": "1", "1st": "2", "pt_x": "3", "plain": "4", "snake_case": "5", "pt__y": "6", "contenttype": "7"}
    bucket.put("meta", b"x", metadata=names)
    assert dict(bucket.head("meta").metadata) == names
    stored = blob_service(azure).get_blob_client(blob_container, f"{bucket.driver.prefix}/meta").get_blob_properties()  # type: ignore[attr-defined]
    assert set(stored.metadata) == {encode_metadata_name(n) for n in names}
    assert set(stored.metadata) == {"pt__content_2dhash", "pt__1st", "pt_x", "plain", "snake_case", "pt__pt_5f_5fy", "pt__contenttype"}
    assert all(decode_metadata_name(encode_metadata_name(n)) == n for n in [*names, "a__b", "_h", "pt_", "pt__"])


def test_a_multi_part_stream_is_committed_as_blocks(bucket: Bucket, azure: dict[str, str], blob_container: str) -> None:
    part = 64 * 1024
    with bucket.open("blocks.bin", "wb", part_size=part, if_none_match="*") as out:
        out.write(b"a" * (3 * part + 5))
    client = blob_service(azure).get_blob_client(blob_container, f"{bucket.driver.prefix}/blocks.bin")  # type: ignore[attr-defined]
    committed, uncommitted = client.get_block_list("all")
    assert [b.size for b in committed] == [part, part, part, 5]
    assert uncommitted == []


def test_a_block_stream_commits_its_headers_as_content_settings(bucket: Bucket, azure: dict[str, str], blob_container: str) -> None:
    from portable.driver.storage import WriteOptions

    part = 64 * 1024
    options = WriteOptions(content_type="text/csv", cache_control="no-store", content_encoding="br", content_disposition="inline")
    stream = bucket.driver.open_write("headers.bin", options, part)
    for _ in range(3):
        stream.write(b"z" * part)
    stream.commit()
    client = blob_service(azure).get_blob_client(blob_container, f"{bucket.driver.prefix}/headers.bin")  # type: ignore[attr-defined]
    settings = client.get_blob_properties().content_settings
    assert (settings.content_type, settings.cache_control, settings.content_encoding, settings.content_disposition) == (
        "text/csv", "no-store", "br", "inline",
    )
    assert bucket.get("headers.bin") == b"z" * 3 * part  # as stored: no decoding of "br"
    assert bucket.head("headers.bin").content_encoding == "br"


def test_a_one_part_stream_is_a_single_put(bucket: Bucket, azure: dict[str, str], blob_container: str) -> None:
    with bucket.open("single.bin", "wb", if_none_match="*") as out:
        out.write(b"small")
    client = blob_service(azure).get_blob_client(blob_container, f"{bucket.driver.prefix}/single.bin")  # type: ignore[attr-defined]
    committed, _ = client.get_block_list("committed")
    assert committed == []  # Put Blob, not Put Block List
    assert bucket.get("single.bin") == b"small"


def _overtake(bucket: Bucket, key: str, part: int) -> None:
    # Another streamed writer commits first; Put Block List discards every block it does not
    # name, ours included. (Azure's Put Blob discards them too; Azurite 3.35's does not.)
    with bucket.open(key, "wb", part_size=part) as other:
        other.write(b"2" * (2 * part))


def test_a_stream_overtaken_by_another_writer_fails_at_commit(bucket: Bucket) -> None:
    part = 64 * 1024
    out = bucket.open("contended.bin", "wb", part_size=part)
    out.write(b"1" * (3 * part))
    _overtake(bucket, "contended.bin", part)
    with pytest.raises(PreconditionFailed, match="another writer"):
        out.close()
    assert bucket.get("contended.bin") == b"2" * (2 * part)


def test_a_create_only_stream_overtaken_by_another_writer_raises_already_exists(bucket: Bucket) -> None:
    part = 64 * 1024
    out = bucket.open("contended.bin", "wb", part_size=part, if_none_match="*")
    out.write(b"1" * (3 * part))
    _overtake(bucket, "contended.bin", part)
    with pytest.raises(AlreadyExists):
        out.close()
    assert bucket.get("contended.bin") == b"2" * (2 * part)


def test_a_get_only_signed_url_cannot_put(bucket: Bucket) -> None:
    bucket.put("ro.txt", b"read only")
    url = bucket.signed_url("ro.txt", expires=60)
    req = urllib.request.Request(url, data=b"overwrite", method="PUT", headers={"x-ms-blob-type": "BlockBlob"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    assert info.value.code == 403
    assert bucket.get("ro.txt") == b"read only"


def test_no_shared_key_means_no_signed_urls(azure: dict[str, str], blob_container: str) -> None:
    url = f"az://{blob_container}/p?engine=fsspec&auth=anonymous&blob_endpoint={azure['blob_endpoint']}"
    with open_url(url) as b:
        assert not b.capabilities.signed_urls
        with pytest.raises(Unsupported):
            b.signed_url("k")


def test_anonymous_access_reads_a_public_container(azure: dict[str, str], unique_name: str) -> None:
    blob_service(azure).create_container(unique_name, public_access="blob")
    blob_service(azure).get_blob_client(unique_name, "pub.txt").upload_blob(b"public")
    with open_url(f"az://{unique_name}?engine=fsspec&auth=anonymous&blob_endpoint={azure['blob_endpoint']}") as b:
        assert b.get("pub.txt") == b"public"
        with pytest.raises(PermissionDenied):
            b.put("pub.txt", b"vandal")


def test_as_returns_adlfs_sharing_the_client(bucket: Bucket, blob_container: str) -> None:
    from adlfs import AzureBlobFileSystem
    from azure.storage.blob.aio import BlobServiceClient, ContainerClient

    bucket.put("via-adlfs.txt", b"shared")
    fs = bucket.as_(AzureBlobFileSystem)
    assert fs.cat_file(f"{blob_container}/{bucket.driver.prefix}/via-adlfs.txt") == b"shared"  # type: ignore[attr-defined]
    assert fs.service_client is bucket.as_(BlobServiceClient)
    assert bucket.as_(ContainerClient).container_name == blob_container


def test_a_missing_container_raises_not_found(conn_query: str) -> None:
    with open_url(f"az://no-such-container/p?engine=fsspec&{conn_query}") as b:
        with pytest.raises(NotFound, match="ContainerNotFound"):
            b.get("k")
        with pytest.raises(NotFound):
            b.delete("k")  # a missing key is fine; a missing container is not


# -- retries belong to the portable layer ----------------------------------------------
@pytest.mark.parametrize(
    ("status", "code", "error"),
    [(500, "InternalError", Unavailable), (503, "ServerBusy", Throttled), (404, "BlobNotFound", NotFound)],
)
def test_the_sdk_makes_one_attempt_per_portable_attempt(stub_server: Any, status: int, code: str, error: type[Exception]) -> None:
    server = stub_server(status, code)
    url = f"az://data/p?engine=fsspec&auth=anonymous&blob_endpoint={server.endpoint()}"
    with open_url(url, max_attempts=3, initial_backoff=0.0) as b, pytest.raises(error):
        b.get("k")
    expected = 1 if error is NotFound else 3
    assert server.requests == expected


def test_retry_after_from_the_provider_is_honoured(stub_server: Any) -> None:
    server = stub_server(503, "ServerBusy", {"x-ms-retry-after-ms": "300"})
    started = time.monotonic()
    url = f"az://data/p?engine=fsspec&auth=anonymous&blob_endpoint={server.endpoint()}"
    with open_url(url, max_attempts=2) as b, pytest.raises(Throttled) as info:
        b.get("k")
    assert info.value.retry_after == pytest.approx(0.3)
    assert time.monotonic() - started >= 0.3
    assert server.requests == 2


def test_a_deadline_bounds_a_hanging_request(stub_server: Any) -> None:
    server = stub_server(200, delay=10.0)
    with open_url(f"az://data/p?engine=fsspec&auth=anonymous&blob_endpoint={server.endpoint()}", max_attempts=5) as b:
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded), deadline(0.5):
            b.get("k")
        assert time.monotonic() - started < 3.0


def test_an_unreachable_endpoint_is_unavailable_and_opens_the_breaker() -> None:
    policy = ResiliencePolicy(
        retry=RetryPolicy(max_attempts=1),
        breaker=BreakerPolicy(failure_rate=0.5, window=4, min_calls=2, open_seconds=60),
    )
    url = "az://data/p?engine=fsspec&auth=anonymous&blob_endpoint=http://127.0.0.1:9/devstoreaccount1&connection_timeout=2"
    profile = Profile(name="t", storage=url, queue="mem://t", jobs="local://./.portable/jobs", resilience=policy)
    with open_bucket(url, profile=profile) as b:
        for _ in range(2):
            with pytest.raises(Unavailable):
                b.get("k")
        with pytest.raises(Unavailable, match="circuit breaker"):
            b.get("k")


def test_concurrent_gets_share_one_client(bucket: Bucket) -> None:
    bucket.put_many({f"c/{i}": bytes([i]) * 100 for i in range(20)})
    results: dict[int, bytes] = {}

    def read(i: int) -> None:
        results[i] = bucket.get(f"c/{i}")

    threads = [threading.Thread(target=read, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: bytes([i]) * 100 for i in range(20)}


def test_the_contract_profile_opens_an_az_bucket(blob_container: str, conn_query: str) -> None:
    url = f"az://{blob_container}/profile?engine=fsspec&{conn_query}"
    with open_bucket(url, profile=contract_profile(url)) as b:
        assert isinstance(b.driver, BlobStorage)
        assert b.provider == "az"


class TestBlobFaults(StorageFaultSuite):
    """Create-only puts with idempotency keys under injected faults: none lost, none doubled."""

    fault_count = 200

    @pytest.fixture
    def fault_storage_url(self, blob_container: str, conn_query: str) -> str:
        return f"az://{blob_container}/faults?engine=fsspec&{conn_query}"
