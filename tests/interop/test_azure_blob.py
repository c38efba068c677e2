"""az:// against azure-storage-blob, Microsoft's own client, on Azurite: both directions, both engines.

What one side writes, the other reads exactly: bodies (text, binary, empty, a gzip body stored
with ``Content-Encoding: gzip``), keys with unicode and punctuation, metadata names (case,
dashes, portable's encoded form and native names that only look encoded), the content type and
the three headers (ContentSettings). The rules are the table in docs/native/names.md.
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import inspect
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from portable.driver.storage import WriteOptions
from portable.errors import Unsupported
from portable.storage import Bucket, open_bucket

CONNECTION_ENV = "PORTABLE_TEST_INTEROP_AZURITE_CONNECTION"
ENGINES = ["fsspec", "obstore"]
BODIES = {
    "text": "grüße, 世界\n".encode(),
    "binary": bytes(range(256)) * 3,
    "empty": b"",
}
KEYS = [
    "ünï/ключ/日本語.txt",
    "punct/a b+c%20d&e=f;g,h'i(j)k!l~m@n$o[p]#q.txt",
    "deep/a/b/c/d.bin",
]
HEADERS = {
    "cache_control": "public, max-age=60",
    "content_encoding": "gzip",
    "content_disposition": 'attachment; filename="report.csv"',
}


@pytest.fixture(scope="session")
def azure(azurite: Any) -> Iterator[dict[str, str]]:
    """Azurite's connection string, in a variable of this module's own for the session."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CONNECTION_ENV, azurite.endpoints["connection_string"])
        for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN"):
            mp.delenv(name, raising=False)
        yield {"connection_string": azurite.endpoints["connection_string"]}


@pytest.fixture(scope="session")
def container(azure: dict[str, str]) -> Any:
    """azure-storage-blob's ContainerClient on one container made for the session."""
    from azure.storage.blob import BlobServiceClient

    name = f"pti-{uuid.uuid4().hex[:12]}"
    return BlobServiceClient.from_connection_string(azure["connection_string"]).create_container(name)


def url(container: Any, prefix: str, engine: str) -> str:
    return f"az://{container.container_name}/{prefix}?engine={engine}&connection_string_env={CONNECTION_ENV}"


@pytest.fixture(params=ENGINES)
def bucket(request: pytest.FixtureRequest, azure: dict[str, str], container: Any, unique_name: str) -> Iterator[Bucket]:
    with open_bucket(url(container, unique_name, request.param)) as b:
        yield b


def put_with_headers(bucket: Bucket, key: str, data: bytes, **fields: Any) -> None:
    """``Bucket.put`` with the header arguments once the Bucket takes them, else the driver call it makes."""
    if "cache_control" in inspect.signature(bucket.put).parameters:
        bucket.put(key, data, **fields)
        return
    metadata = {k.lower(): v for k, v in (fields.pop("metadata", None) or {}).items()}
    bucket.driver.put(key, data, WriteOptions(metadata=metadata, **fields))


# ---------------------------------------------------------------- portable writes, azure-storage-blob reads
@pytest.mark.parametrize("kind", sorted(BODIES))
@pytest.mark.parametrize("key", KEYS)
def test_bodies_and_keys_portable_writes_read_natively(bucket: Bucket, container: Any, unique_name: str, key: str, kind: str) -> None:
    bucket.put(key, BODIES[kind], content_type="text/plain; charset=utf-8")
    blob = container.get_blob_client(f"{unique_name}/{key}")
    assert blob.download_blob().readall() == BODIES[kind]
    assert blob.get_blob_properties().content_settings.content_type == "text/plain; charset=utf-8"
    assert [b.name for b in container.list_blobs(name_starts_with=f"{unique_name}/")] == [f"{unique_name}/{key}"]


def test_headers_portable_writes_are_content_settings_and_metadata_stays_metadata(
    bucket: Bucket, container: Any, unique_name: str
) -> None:
    body = gzip.compress(b"a,b\n1,2\n")
    put_with_headers(
        bucket, "report.csv.gz", body, content_type="text/csv",
        metadata={"cache-control": "user value", "contenttype": "user too"}, **HEADERS,
    )
    blob = container.get_blob_client(f"{unique_name}/report.csv.gz")
    props = blob.get_blob_properties()
    settings = props.content_settings
    assert (settings.cache_control, settings.content_encoding, settings.content_disposition) == tuple(HEADERS.values())
    assert settings.content_type == "text/csv"
    # metadata never becomes a header: both names are stored encoded (neither is a header obstore could take)
    assert dict(props.metadata) == {"pt__cache_2dcontrol": "user value", "pt__contenttype": "user too"}
    assert blob.download_blob(decompress=False).readall() == body
    assert bucket.head("report.csv.gz").metadata == {"cache-control": "user value", "contenttype": "user too"}


def test_metadata_names_portable_writes_read_natively(bucket: Bucket, container: Any, unique_name: str) -> None:
    bucket.put("m", b"x", metadata={"Owner": "1", "x-trace": "2", "snake_case": "3", "1st": "4", "pt_raw": "5"})
    props = container.get_blob_client(f"{unique_name}/m").get_blob_properties()
    # C# identifiers stay as they are (lower-cased); the others carry the pt__ marker, '-' as _2d
    assert dict(props.metadata) == {"owner": "1", "pt__x_2dtrace": "2", "snake_case": "3", "pt__1st": "4", "pt_raw": "5"}


# ---------------------------------------------------------------- azure-storage-blob writes, portable reads
@pytest.mark.parametrize("kind", sorted(BODIES))
@pytest.mark.parametrize("key", KEYS)
def test_bodies_and_keys_native_writes_read_by_portable(bucket: Bucket, container: Any, unique_name: str, key: str, kind: str) -> None:
    from azure.storage.blob import ContentSettings

    container.upload_blob(f"{unique_name}/{key}", BODIES[kind], content_settings=ContentSettings(content_type="application/x-thing"))
    assert bucket.get(key) == BODIES[kind]
    info = bucket.head(key)
    assert (info.content_type, info.size) == ("application/x-thing", len(BODIES[kind]))
    with bucket.open(key) as stream:
        assert stream.read() == BODIES[kind]
    assert [o.key for o in bucket.list()] == [key]


def test_a_gzip_encoded_blob_reads_as_stored_with_its_headers(bucket: Bucket, container: Any, unique_name: str) -> None:
    from azure.storage.blob import ContentSettings

    body = gzip.compress(b"hello, " * 100)
    container.upload_blob(
        f"{unique_name}/page.html", body, content_settings=ContentSettings(content_type="text/html", **HEADERS)
    )
    info = bucket.head("page.html")
    assert (info.cache_control, info.content_encoding, info.content_disposition) == tuple(HEADERS.values())
    assert (info.content_type, info.size) == ("text/html", len(body))
    assert bucket.get("page.html") == body  # azure-storage-blob would gunzip it by default
    assert bucket.get_range("page.html", 0, 10) == body[:10]
    assert dict(bucket.get_many(["page.html"])) == {"page.html": body}
    with bucket.open("page.html") as stream:
        assert stream.read() == body


def test_native_metadata_names_are_never_misread_as_encoded_ones(bucket: Bucket, container: Any, unique_name: str) -> None:
    names = {
        "Owner": "case folds, as Azure compares names",
        "pt_raw": "the old marker: no longer decoded",
        "pt_user_hash": "a plausible native name",
        "pt__owner": "marker, but not what portable would write for any name",
        "pt__x_2dtrace": "exactly portable's form of x-trace",
        "contenttype": "a header's name, written natively",
    }
    container.upload_blob(f"{unique_name}/native", b"x", metadata=names)
    assert dict(bucket.head("native").metadata) == {
        "owner": names["Owner"],
        "pt_raw": names["pt_raw"],
        "pt_user_hash": names["pt_user_hash"],
        "pt__owner": names["pt__owner"],
        "x-trace": names["pt__x_2dtrace"],
        "contenttype": names["contenttype"],
    }


def test_both_engines_read_each_others_metadata_names(azure: dict[str, str], container: Any, unique_name: str) -> None:
    names = {"x-trace": "1", "1st": "2", "contenttype": "3", "plain": "4", "pt__a": "5"}
    for writer, reader in (("fsspec", "obstore"), ("obstore", "fsspec")):
        with open_bucket(url(container, unique_name, writer)) as w, open_bucket(url(container, unique_name, reader)) as r:
            w.put(f"by-{writer}", b"x", metadata=names)
            assert dict(r.head(f"by-{writer}").metadata) == names


# ---------------------------------------------------------------- leftovers (issue 25, item 7)
def stage(container: Any, name: str) -> None:
    """What a killed streamed write leaves: a staged block under a name with no committed content."""
    container.get_blob_client(name).stage_block(base64.b64encode(uuid.uuid4().bytes).decode(), b"partial")


def names_with_uncommitted(container: Any, prefix: str) -> list[str]:
    return sorted(b.name for b in container.list_blobs(name_starts_with=prefix, include=["uncommittedblobs"]))


def test_abort_incomplete_clears_blobs_that_hold_only_uncommitted_blocks(azure: dict[str, str], container: Any, unique_name: str) -> None:
    stage(container, f"{unique_name}/a/killed.bin")
    stage(container, f"{unique_name}/b/killed.bin")
    container.upload_blob(f"{unique_name}/a/kept.bin", b"committed")
    stage(container, f"{unique_name}/a/kept.bin")  # a killed overwrite of a committed blob: left alone
    stage(container, f"{unique_name}-other/killed.bin")  # outside the bucket's prefix
    with open_bucket(url(container, unique_name, "fsspec")) as b:
        assert b.driver.abort_incomplete("a/", dt.timedelta(hours=1)) == []  # all younger than an hour
        assert b.driver.abort_incomplete("a/", dt.timedelta(0)) == ["a/killed.bin"]
        assert b.get("a/kept.bin") == b"committed"
        assert b.driver.abort_incomplete("", dt.timedelta(0)) == ["b/killed.bin"]
        assert not b.exists("a/killed.bin")
    assert names_with_uncommitted(container, f"{unique_name}/") == [f"{unique_name}/a/kept.bin"]
    assert names_with_uncommitted(container, f"{unique_name}-other/") == [f"{unique_name}-other/killed.bin"]


def test_a_blob_committed_since_the_listing_is_never_removed(azure: dict[str, str], container: Any, unique_name: str) -> None:
    container.upload_blob(f"{unique_name}/fresh.bin", b"just committed")
    with open_bucket(url(container, unique_name, "fsspec")) as b:
        listed = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)  # as if it was uncommitted when listed
        assert b.driver._discard_uncommitted(f"{unique_name}/fresh.bin", listed) is False  # type: ignore[attr-defined]
        assert b.get("fresh.bin") == b"just committed"


def test_the_obstore_engine_names_the_engine_that_can_abort(azure: dict[str, str], container: Any, unique_name: str) -> None:
    with open_bucket(url(container, unique_name, "obstore")) as b, pytest.raises(Unsupported, match=r"\?engine=fsspec"):
        b.driver.abort_incomplete("", dt.timedelta(0))
