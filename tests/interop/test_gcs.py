"""gs:// against google-cloud-storage, Google's own client, on fake-gcs-server: both directions.

What one side writes, the other reads exactly: bodies (text, binary, empty, a gzip body stored
with ``Content-Encoding: gzip``), keys with unicode and punctuation, metadata names (case,
dashes, names that look like headers or like Azure's encoded form), the content type and the
three headers (cacheControl, contentEncoding, contentDisposition). portable writes through the
fsspec engine (obstore's GCS engine speaks the XML API, whose uploads fake-gcs-server lacks) and
reads through both engines. The rules are the table in docs/native/names.md.
"""

from __future__ import annotations

import gzip
import inspect
import json
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from portable.driver.storage import WriteOptions
from portable.errors import InvalidArgument, Unsupported
from portable.storage import Bucket, open_bucket

BODIES = {
    "text": "grüße, 世界\n".encode(),
    "binary": bytes(range(256)) * 3,
    "empty": b"",
}
KEYS = [
    "ünï/ключ/日本語.txt",
    "punct/a b+c%20d&e=f;g,h'i(j)k!l~m@n$o.txt",
    "deep/a/b/c/d.bin",
]
HEADERS = {
    "cache_control": "public, max-age=60",
    "content_encoding": "gzip",
    "content_disposition": 'attachment; filename="report.csv"',
}


@pytest.fixture(scope="session")
def gcs(fake_gcs: Any) -> dict[str, str]:
    """fake-gcs-server's endpoint, its project and one bucket for the session."""
    endpoint = fake_gcs.endpoints["endpoint_url"].rstrip("/")
    bucket = f"pti-{uuid.uuid4().hex[:12]}"
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project={fake_gcs.endpoints['project']}",
        data=json.dumps({"name": bucket}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    return {"endpoint_url": endpoint, "bucket": bucket, "project": fake_gcs.endpoints["project"]}


@pytest.fixture(scope="session")
def native(gcs: dict[str, str]) -> Any:
    """google-cloud-storage's Bucket, anonymous, on the emulator."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage  # type: ignore[attr-defined, import-untyped, unused-ignore]

    client = storage.Client(
        project=gcs["project"],
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": gcs["endpoint_url"]},
    )
    return client.bucket(gcs["bucket"])


def url(gcs: dict[str, str], prefix: str, engine: str) -> str:
    return f"gs://{gcs['bucket']}/{prefix}?engine={engine}&endpoint_url={gcs['endpoint_url']}"


@pytest.fixture(params=["fsspec", "obstore"])
def reader(request: pytest.FixtureRequest, gcs: dict[str, str], unique_name: str) -> Iterator[Bucket]:
    with open_bucket(url(gcs, unique_name, request.param)) as bucket:
        yield bucket


@pytest.fixture
def writer(gcs: dict[str, str], unique_name: str) -> Iterator[Bucket]:
    with open_bucket(url(gcs, unique_name, "fsspec")) as bucket:
        yield bucket


def put_with_headers(bucket: Bucket, key: str, data: bytes, **fields: Any) -> None:
    """``Bucket.put`` with the header arguments once the Bucket takes them, else the driver call it makes."""
    if "cache_control" in inspect.signature(bucket.put).parameters:
        bucket.put(key, data, **fields)
        return
    metadata = {k.lower(): v for k, v in (fields.pop("metadata", None) or {}).items()}
    bucket.driver.put(key, data, WriteOptions(metadata=metadata, **fields))


# ---------------------------------------------------------------- portable writes, google-cloud-storage reads
@pytest.mark.parametrize("kind", sorted(BODIES))
@pytest.mark.parametrize("key", KEYS)
def test_bodies_and_keys_portable_writes_read_natively(writer: Bucket, native: Any, unique_name: str, key: str, kind: str) -> None:
    writer.put(key, BODIES[kind], content_type="text/plain; charset=utf-8")
    blob = native.get_blob(f"{unique_name}/{key}")
    assert blob is not None, "the native client finds the object under the same name"
    assert blob.download_as_bytes(raw_download=True) == BODIES[kind]
    assert blob.content_type == "text/plain; charset=utf-8"
    assert [b.name for b in native.list_blobs(prefix=f"{unique_name}/")] == [f"{unique_name}/{key}"]


def test_headers_portable_writes_are_real_gcs_headers_and_metadata_stays_metadata(
    writer: Bucket, native: Any, unique_name: str
) -> None:
    body = gzip.compress(b"a,b\n1,2\n")
    put_with_headers(
        writer, "report.csv.gz", body, content_type="text/csv", metadata={"cache-control": "user value"}, **HEADERS
    )
    blob = native.get_blob(f"{unique_name}/report.csv.gz")
    assert (blob.cache_control, blob.content_encoding, blob.content_disposition) == tuple(HEADERS.values())
    assert blob.content_type == "text/csv"
    assert blob.metadata == {"cache-control": "user value"}  # a metadata name never becomes a header
    assert blob.download_as_bytes(raw_download=True) == body
    assert blob.download_as_bytes() == b"a,b\n1,2\n"  # GCS's own transcoding, for clients that want it


def test_metadata_names_portable_writes_read_natively(writer: Bucket, native: Any, unique_name: str) -> None:
    names = {"Owner": "1", "x-trace": "2", "snake_case": "3", "pt_raw": "4", "pt__x_2dtrace": "5", "1st": "6"}
    writer.put("m", b"x", metadata=names)
    blob = native.get_blob(f"{unique_name}/m")
    # lower-cased by portable (as on S3 and Azure), otherwise exactly as written: no encoding on GCS
    assert blob.metadata == {k.lower(): v for k, v in names.items()}


# ---------------------------------------------------------------- google-cloud-storage writes, portable reads
@pytest.mark.parametrize("kind", sorted(BODIES))
@pytest.mark.parametrize("key", KEYS)
def test_bodies_and_keys_native_writes_read_by_portable(reader: Bucket, native: Any, unique_name: str, key: str, kind: str) -> None:
    native.blob(f"{unique_name}/{key}").upload_from_string(BODIES[kind], content_type="application/x-thing")
    assert reader.get(key) == BODIES[kind]
    assert reader.head(key).content_type == "application/x-thing"
    assert reader.head(key).size == len(BODIES[kind])
    with reader.open(key) as stream:
        assert stream.read() == BODIES[kind]
    assert [o.key for o in reader.list()] == [key]


def test_a_gzip_encoded_object_reads_as_stored_with_its_headers(reader: Bucket, native: Any, unique_name: str) -> None:
    body = gzip.compress(b"hello, " * 100)
    blob = native.blob(f"{unique_name}/page.html")
    blob.cache_control, blob.content_encoding, blob.content_disposition = HEADERS.values()
    blob.upload_from_string(body, content_type="text/html")
    info = reader.head("page.html")
    assert (info.cache_control, info.content_encoding, info.content_disposition) == tuple(HEADERS.values())
    assert (info.content_type, info.size) == ("text/html", len(body))
    assert reader.get("page.html") == body  # not gunzipped by the client, not transcoded by GCS
    assert reader.get_range("page.html", 0, 10) == body[:10]
    assert dict(reader.get_many(["page.html"])) == {"page.html": body}
    with reader.open("page.html") as stream:
        assert stream.read() == body


def test_native_metadata_names_read_as_gcs_keeps_them(writer: Bucket, native: Any, unique_name: str) -> None:
    """GCS names are case-sensitive: the fsspec engine reports each as stored, ``Owner`` and ``owner`` apart."""
    names = {"Owner": "A", "owner": "b", "pt_raw": "r", "pt__x_2dtrace": "e", "content-type": "meta"}
    blob = native.blob(f"{unique_name}/native")
    blob.metadata = names
    blob.upload_from_string(b"x", content_type="text/plain")
    info = writer.head("native")
    assert dict(info.metadata) == names  # nothing decoded, nothing folded
    assert info.content_type == "text/plain"  # the metadata entry named content-type is not the header


def test_native_metadata_names_on_the_obstore_engine_read_lower_case(gcs: dict[str, str], native: Any, unique_name: str) -> None:
    """The XML API sends metadata as x-goog-meta-* headers, which fold case: obstore reads ``owner``."""
    blob = native.blob(f"{unique_name}/native")
    blob.metadata = {"Owner": "A", "pt_raw": "r", "content-type": "meta", "cache-control": "meta2"}
    blob.cache_control = "no-store"
    blob.upload_from_string(b"x", content_type="text/plain")
    with open_bucket(url(gcs, unique_name, "obstore")) as bucket:
        info = bucket.head("native")
    assert dict(info.metadata) == {"owner": "A", "pt_raw": "r", "content-type": "meta", "cache-control": "meta2"}
    assert (info.content_type, info.cache_control) == ("text/plain", "no-store")


def test_the_obstore_engine_refuses_metadata_it_would_send_as_headers(gcs: dict[str, str], unique_name: str) -> None:
    with open_bucket(url(gcs, unique_name, "obstore")) as bucket:
        for name in ("cache-control", "contenttype", "Content-Encoding"):
            with pytest.raises(InvalidArgument, match=r"would become HTTP headers.*cache_control="):
                bucket.put("k", b"x", metadata={name: "v"})


# ---------------------------------------------------------------- leftovers
def test_abort_incomplete_has_nothing_to_list_on_gcs(gcs: dict[str, str], unique_name: str) -> None:
    """Resumable sessions are not listable (and expire in a week); obstore's XML multipart uploads are listable
    only by the XML API, which object_store does not expose: that engine says so."""
    import datetime as dt

    with open_bucket(url(gcs, unique_name, "fsspec")) as bucket:
        assert bucket.driver.abort_incomplete("", dt.timedelta(0)) == []
    with open_bucket(url(gcs, unique_name, "obstore")) as bucket, pytest.raises(Unsupported, match="engine=fsspec"):
        bucket.driver.abort_incomplete("", dt.timedelta(0))
