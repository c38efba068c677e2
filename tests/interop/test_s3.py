"""S3 interop on moto, every engine: boto3 on one side, portable on the other, both directions.

What a native client sees is pinned in docs/native/s3.md; these tests hold it:

* boto3 ``put_object`` (metadata, content type, cache control, unicode keys,
  empty and binary bodies, a multipart upload) -> portable ``get`` / ``head`` /
  ``list`` report exactly that;
* portable ``put`` (metadata, header-like metadata names included, the named
  header arguments, streams, batches) -> boto3 ``head_object`` / ``get_object``
  see every metadata entry as ``x-amz-meta-<name>`` and headers only from the
  named arguments;
* multipart uploads that boto3 starts and leaves are found and aborted by
  ``abort_incomplete``.
"""

from __future__ import annotations

import datetime as dt
import inspect
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from portable.driver.storage import WriteOptions
from portable.storage import Bucket, open_bucket
from portable.testing.storage_suite import contract_profile

ENGINES = ["obstore", "fsspec", "opendal"]  # opendal: reads on OpenDAL, the rest on obstore
#: Every name obstore's attribute parser would read as a header, and ordinary ones.
HEADER_LIKE_METADATA = {
    "cache-control": "meta-cc",
    "content-type": "meta-ct",
    "content-encoding": "meta-ce",
    "content-disposition": "meta-cd",
    "content-language": "meta-cl",
    "storage-class": "GLACIERX",
    "contenttype": "meta-ct2",
    "cachecontrol": "meta-cc2",
    "owner": "ops",
    "run_id": "7",
}
UNICODE_KEYS = [
    "dir/naïve café.txt",
    "dir/日本語/ファイル",
    "dir/a+b=c&d@e,f;g",
    "dir/spaces and %20",
    "dir/ü+%2B",
    "dir/emoji 🎉",
    "dir/~tilde*star'quote(paren)!",
]


@pytest.fixture(scope="module")
def moto(moto_server: Any) -> Iterator[dict[str, str]]:
    """moto's endpoint, with its credentials in the environment while this module runs."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
            mp.setenv(name, moto_server.env[name])
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        yield {"endpoint_url": moto_server.endpoints["endpoint_url"], "region": moto_server.endpoints["region"]}


@pytest.fixture(scope="module")
def s3(moto: dict[str, str]) -> Any:
    """boto3's own S3 client on moto (path-style: there is no DNS for bucket.127.0.0.1)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=moto["endpoint_url"],
        region_name=moto["region"],
        config=Config(s3={"addressing_style": "path"}),
    )


@pytest.fixture(scope="module")
def s3_bucket(s3: Any) -> str:
    name = f"pti-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def prefix(unique_name: str) -> str:
    return unique_name


@pytest.fixture
def bucket(moto: dict[str, str], s3_bucket: str, prefix: str, engine: str) -> Iterator[Bucket]:
    url = f"s3://{s3_bucket}/{prefix}?engine={engine}&region={moto['region']}&endpoint_url={moto['endpoint_url']}"
    b = open_bucket(url, profile=contract_profile(url))
    yield b
    b.close()


def put_with_headers(bucket: Bucket, key: str, data: bytes, **options: Any) -> str | None:
    """A put with the named header arguments: through Bucket.put where it takes them, else the driver."""
    if "cache_control" in inspect.signature(bucket.put).parameters:
        if options.get("if_none_match"):
            options["if_none_match"] = "*"
        return bucket.put(key, data, **options)
    return bucket.driver.put(key, data, WriteOptions(**{**options, "if_none_match": bool(options.get("if_none_match"))}))


# -- boto3 writes, portable reads ----------------------------------------------------------
def test_native_headers_and_metadata_reach_head(bucket: Bucket, s3: Any, s3_bucket: str, prefix: str) -> None:
    s3.put_object(
        Bucket=s3_bucket,
        Key=f"{prefix}/native.json",
        Body=b'{"order": 42}',
        ContentType="application/json",
        CacheControl="max-age=60",
        ContentEncoding="identity",
        ContentDisposition='attachment; filename="o.json"',
        Metadata={"Owner": "ops", "cache-control": "meta", "trace_id": "abc"},
    )
    info = bucket.head("native.json")
    assert info.content_type == "application/json"
    assert info.cache_control == "max-age=60"
    assert info.content_encoding == "identity"
    assert info.content_disposition == 'attachment; filename="o.json"'
    # S3 lower-cases metadata names on the wire; the header-like one stays metadata
    assert dict(info.metadata) == {"owner": "ops", "cache-control": "meta", "trace_id": "abc"}
    assert bucket.get("native.json") == b'{"order": 42}'


def test_native_unicode_keys_list_and_read_exactly(bucket: Bucket, s3: Any, s3_bucket: str, prefix: str) -> None:
    for i, key in enumerate(UNICODE_KEYS):
        s3.put_object(Bucket=s3_bucket, Key=f"{prefix}/{key}", Body=str(i).encode())
    assert [e.key for e in bucket.list("dir/")] == sorted(UNICODE_KEYS, key=lambda k: k.encode())
    for i, key in enumerate(UNICODE_KEYS):
        assert bucket.get(key) == str(i).encode()


@pytest.mark.parametrize("body", [b"", bytes(range(256)) * 300, b"\x00\xff\xfe" + "ü".encode()])
def test_native_bodies_read_byte_for_byte(bucket: Bucket, s3: Any, s3_bucket: str, prefix: str, body: bytes) -> None:
    resp = s3.put_object(Bucket=s3_bucket, Key=f"{prefix}/body.bin", Body=body)
    assert bucket.get("body.bin") == body
    info = bucket.head("body.bin")
    assert info.size == len(body)
    assert info.etag == resp["ETag"]
    (listed,) = list(bucket.list("body"))
    assert (listed.size, listed.etag) == (len(body), resp["ETag"])


def test_a_native_multipart_object_reports_its_etag(bucket: Bucket, s3: Any, s3_bucket: str, prefix: str) -> None:
    key = f"{prefix}/mp.bin"
    part = b"p" * (5 * 1024 * 1024)
    upload = s3.create_multipart_upload(Bucket=s3_bucket, Key=key)["UploadId"]
    etags = [
        s3.upload_part(Bucket=s3_bucket, Key=key, UploadId=upload, PartNumber=n, Body=body)["ETag"]
        for n, body in ((1, part), (2, b"tail"))
    ]
    done = s3.complete_multipart_upload(
        Bucket=s3_bucket,
        Key=key,
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": n + 1, "ETag": e} for n, e in enumerate(etags)]},
    )
    assert done["ETag"].endswith('-2"')
    assert bucket.head("mp.bin").etag == done["ETag"]
    assert [e.etag for e in bucket.list("mp")] == [done["ETag"]]
    assert bucket.get("mp.bin") == part + b"tail"


# -- portable writes, boto3 reads ----------------------------------------------------------
def test_header_like_metadata_is_stored_as_user_metadata(bucket: Bucket, s3: Any, s3_bucket: str, prefix: str) -> None:
    etag = bucket.put("m.txt", b"meta", metadata=HEADER_LIKE_METADATA)
    native = s3.head_object(Bucket=s3_bucket, Key=f"{prefix}/m.txt")
    assert native["Metadata"] == HEADER_LIKE_METADATA  # each one an x-amz-meta-<name> header
    assert native["ETag"] == etag
    # ... and none became a header: moto's defaults stand, the storage class is untouched
    assert native["ContentType"] == "binary/octet-stream"
    assert "CacheControl" not in native and "ContentEncoding" not in native
    assert "ContentDisposition" not in native and "ContentLanguage" not in native
    assert native.get("StorageClass", "STANDARD") == "STANDARD"
    info = bucket.head("m.txt")
    assert dict(info.metadata) == HEADER_LIKE_METADATA
    assert (info.cache_control, info.content_encoding, info.content_disposition) == (None, None, None)


def test_named_header_arguments_are_the_only_headers(bucket: Bucket, s3: Any, s3_bucket: str, prefix: str) -> None:
    data = b"\x1f\x8b not really gzip"
    put_with_headers(
        bucket,
        "h.txt",
        data,
        content_type="text/plain; charset=utf-8",
        cache_control="no-store",
        content_encoding="gzip",
        content_disposition="inline",
        metadata={"owner": "ops"},
    )
    native = s3.head_object(Bucket=s3_bucket, Key=f"{prefix}/h.txt")
    assert native["ContentType"] == "text/plain; charset=utf-8"
    assert native["CacheControl"] == "no-store"
    assert native["ContentEncoding"] == "gzip"
    assert native["ContentDisposition"] == "inline"
    assert native["Metadata"] == {"owner": "ops"}
    info = bucket.head("h.txt")
    assert (info.content_type, info.cache_control, info.content_encoding, info.content_disposition) == (
        "text/plain; charset=utf-8",
        "no-store",
        "gzip",
        "inline",
    )
    # Content-Encoding is stored, never applied: both sides read the bytes as sent
    assert s3.get_object(Bucket=s3_bucket, Key=f"{prefix}/h.txt")["Body"].read() == data
    assert bucket.get("h.txt") == data


def test_header_like_metadata_with_headers_and_a_condition(bucket: Bucket, s3: Any, s3_bucket: str, prefix: str) -> None:
    from portable.errors import AlreadyExists

    put_with_headers(
        bucket, "c.txt", b"one", cache_control="max-age=1", metadata={"cache-control": "meta"}, if_none_match=True
    )
    native = s3.head_object(Bucket=s3_bucket, Key=f"{prefix}/c.txt")
    assert (native["CacheControl"], native["Metadata"]) == ("max-age=1", {"cache-control": "meta"})
    with pytest.raises(AlreadyExists):
        bucket.put("c.txt", b"two", metadata={"cache-control": "meta"}, if_none_match="*")
    assert bucket.get("c.txt") == b"one"


def test_streams_and_batches_store_header_like_metadata_as_metadata(
    bucket: Bucket, s3: Any, s3_bucket: str, prefix: str
) -> None:
    part = bucket.capabilities.min_part_bytes
    big = b"s" * (2 * part + 3)
    with bucket.open("stream.bin", "wb", metadata={"content-type": "meta", "owner": "ops"}, part_size=part) as out:
        out.write(big)
    bucket.put_many({"b/1": b"1", "b/2": b"2"}, metadata={"storage-class": "GLACIERX"})
    native = s3.head_object(Bucket=s3_bucket, Key=f"{prefix}/stream.bin")
    assert native["Metadata"] == {"content-type": "meta", "owner": "ops"}
    assert native["ContentLength"] == len(big)
    for key in ("b/1", "b/2"):
        assert s3.head_object(Bucket=s3_bucket, Key=f"{prefix}/{key}")["Metadata"] == {"storage-class": "GLACIERX"}
    assert s3.get_object(Bucket=s3_bucket, Key=f"{prefix}/stream.bin")["Body"].read() == big


def test_portable_keys_and_bodies_are_what_boto3_lists_and_reads(
    bucket: Bucket, s3: Any, s3_bucket: str, prefix: str
) -> None:
    bodies = {key: bytes([i]) * i for i, key in enumerate(UNICODE_KEYS)}  # the first is empty
    etags = {key: bucket.put(key, body) for key, body in bodies.items()}
    listed = s3.list_objects_v2(Bucket=s3_bucket, Prefix=f"{prefix}/dir/")["Contents"]
    assert {o["Key"][len(prefix) + 1 :]: o["ETag"] for o in listed} == etags
    for key, body in bodies.items():
        assert s3.get_object(Bucket=s3_bucket, Key=f"{prefix}/{key}")["Body"].read() == body


# -- leftovers: uploads boto3 started and left -----------------------------------------------
def test_abort_incomplete_aborts_the_uploads_a_native_writer_left(
    bucket: Bucket, s3: Any, s3_bucket: str, prefix: str
) -> None:
    mine = [f"{prefix}/tmp/a.bin", f"{prefix}/tmp/a.bin", f"{prefix}/tmp/ü b+c.bin"]  # one key twice
    uploads = [s3.create_multipart_upload(Bucket=s3_bucket, Key=key)["UploadId"] for key in mine]
    s3.upload_part(Bucket=s3_bucket, Key=mine[0], UploadId=uploads[0], PartNumber=1, Body=b"x" * 1024)
    other = s3.create_multipart_upload(Bucket=s3_bucket, Key=f"{prefix}/keep/b.bin")["UploadId"]

    # moto dates every upload 2010-11-10 (a constant), so nothing it holds is younger than a century
    assert bucket.driver.abort_incomplete("tmp/", dt.timedelta(days=365 * 100)) == []
    removed = bucket.driver.abort_incomplete("tmp/", dt.timedelta(hours=1))
    assert sorted(removed) == sorted(f"{key[len(prefix) + 1 :]}#{upload}" for key, upload in zip(mine, uploads, strict=True))
    left = s3.list_multipart_uploads(Bucket=s3_bucket, Prefix=f"{prefix}/").get("Uploads", [])
    assert [(u["Key"], u["UploadId"]) for u in left] == [(f"{prefix}/keep/b.bin", other)]
    assert bucket.driver.abort_incomplete("tmp/", dt.timedelta(0)) == []
