"""az:// and abfs:// on the obstore engine, on Azurite: the storage contract, plus what only this engine has."""

from __future__ import annotations

import urllib.request
from typing import Any

import pytest
from obstore_support import AZ_CONNECTION_ENV, AZ_KEY_ENV

from portable.errors import ConfigError, InvalidURL, NotFound
from portable.storage import Bucket, open_bucket
from portable.testing.storage_suite import StorageContract, contract_profile


class TestObstoreBlobContract(StorageContract):
    xfail: dict[str, str] = {}

    @pytest.fixture
    def bucket_url(self, blob_container: str, unique_name: str) -> str:
        return f"az://{blob_container}/{unique_name}?engine=obstore&connection_string_env={AZ_CONNECTION_ENV}"


class TestObstoreAbfsKeyContract(StorageContract):
    """The ADLS Gen2 URL form with a shared key from its own variable."""

    xfail: dict[str, str] = {}

    @pytest.fixture
    def bucket_url(self, azure: dict[str, str], blob_container: str, unique_name: str) -> str:
        return (
            f"abfs://{blob_container}@{azure['account']}.dfs.core.windows.net/{unique_name}"
            f"?blob_endpoint={azure['blob_endpoint']}&account_key_env={AZ_KEY_ENV}"
        )


@pytest.fixture
def bucket(blob_container: str, unique_name: str) -> Any:
    url = f"az://{blob_container}/{unique_name}?connection_string_env={AZ_CONNECTION_ENV}"
    b = open_bucket(url, profile=contract_profile(url))
    yield b
    b.close()


def test_obstore_is_the_default_engine(bucket: Bucket) -> None:
    from portable_obstore.azure import ObstoreAzureStorage

    assert isinstance(bucket.driver, ObstoreAzureStorage)


def test_metadata_names_are_escaped_like_the_fsspec_engine(bucket: Bucket, azure: dict[str, str], blob_container: str) -> None:
    from azure.storage.blob import BlobServiceClient

    names = {"content-hash": "abc", "pt_x": "1", "plain": "2", "pt__y": "3", "contenttype": "4"}
    bucket.put("m", b"x", metadata=names)
    assert dict(bucket.head("m").metadata) == names
    name = f"{bucket.driver.prefix}/m"  # type: ignore[attr-defined]
    props = BlobServiceClient.from_connection_string(azure["connection_string"]).get_blob_client(blob_container, name).get_blob_properties()
    # contenttype is encoded too: obstore would send it as the Content-Type header
    assert dict(props.metadata) == {
        "pt__content_2dhash": "abc", "pt_x": "1", "plain": "2", "pt__pt_5f_5fy": "3", "pt__contenttype": "4",
    }
    assert props.content_settings.content_type != "4"


def test_a_signed_put_needs_the_blob_type_header(bucket: Bucket) -> None:
    url = bucket.signed_url("up.bin", method="PUT", expires=60)
    assert "sig=" in url and "AccountKey" not in url
    req = urllib.request.Request(url, data=b"\x00up\xff", method="PUT", headers={"x-ms-blob-type": "BlockBlob"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 201
    assert bucket.get("up.bin") == b"\x00up\xff"


def test_a_missing_container_is_not_found(azure: dict[str, str]) -> None:
    url = f"az://no-such-container/p?connection_string_env={AZ_CONNECTION_ENV}"
    with open_bucket(url, profile=contract_profile(url)) as b, pytest.raises(NotFound):
        b.get("k")


@pytest.mark.parametrize(
    ("option", "fix"),
    [("account_key", "account_key_env"), ("sas_token", "sas_token_env"), ("connection_string", "connection_string_env")],
)
def test_a_secret_in_the_url_is_refused_with_the_fix(option: str, fix: str) -> None:
    with pytest.raises(InvalidURL, match=fix) as info:
        open_bucket(f"az://data/p?engine=obstore&account=acct&{option}=TOPSECRETVALUE")
    assert "TOPSECRETVALUE" not in str(info.value)


@pytest.mark.parametrize("name", ["ab", "UPPER", "double--hyphen", "-lead"])
def test_bad_container_names_are_invalid_urls(name: str) -> None:
    with pytest.raises(InvalidURL):
        open_bucket(f"az://{name}/p?engine=obstore&account=acct&auth=anonymous&blob_endpoint=http://127.0.0.1:9/acct")


def test_an_unset_secret_variable_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="NOT_SET_ANYWHERE"):
        open_bucket("az://data/p?engine=obstore&account=acct&account_key_env=NOT_SET_ANYWHERE")


def test_without_a_shared_key_signing_is_unsupported(azure: dict[str, str], blob_container: str) -> None:
    with open_bucket(f"az://{blob_container}/p?auth=anonymous&blob_endpoint={azure['blob_endpoint']}") as b:
        assert not b.capabilities.signed_urls
