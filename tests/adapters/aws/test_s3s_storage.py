"""s3:// on a second S3 implementation, s3s-fs (bench/s3s-server): the storage contract, every engine.

moto is the reference emulator; s3s-fs is an independent S3 server (Rust,
file-backed, SigV4-checked) of the kind users point ``endpoint_url`` at
(MinIO, Ceph, R2, B2, s3s). The contract runs on it for the obstore engine
(the default), the fsspec engine and the opendal engine; each xfail names a limit of that server,
not of portable.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from portable.errors import AlreadyExists, PreconditionFailed, Unsupported
from portable.storage import Bucket, open_bucket
from portable.testing.storage_suite import StorageContract, contract_profile

#: What s3s-fs 0.14.1 itself does differently from S3 (read in its source, src/s3.rs), by test.
S3S_NO_LIST_UPLOADS = (
        "s3s-fs 0.14.1 answers ListMultipartUploads with NotImplemented, so no upload can be found "
        "again: a resumable write there is Unsupported at open; S3 and moto list them"
    )
S3S_LIMITS = {
    "test_a_resumable_write_continues_after_a_failed_attempt": S3S_NO_LIST_UPLOADS,
    "test_a_resumed_write_sends_again_the_parts_its_source_no_longer_has": S3S_NO_LIST_UPLOADS,
    "test_abort_discards_a_resumable_write": S3S_NO_LIST_UPLOADS,
    "test_key_and_prefix_coexist": (
        "s3s-fs stores an object as a file named by its key, so 'node' and 'node/child' cannot both "
        "exist (a file cannot also be a folder): the second put answers 500 InternalError"
    ),
    "test_a_key_over_the_byte_limit_raises_invalid_key": (
        "s3s-fs stores a key as a file path, so one path segment over the file system's 255 bytes "
        "answers 500 InternalError (ENAMETOOLONG); S3 takes any 1,024-byte key"
    ),
    "test_list_reports_size_and_etag": (
        "s3s-fs 0.14.1's ListObjectsV2 sends no <ETag> in <Contents> (its list_objects_recursive "
        "builds each Object with key, size and time only), so list reports None; HEAD and PUT send it"
    ),
}
S3S_RACE = (
    "s3s-fs checks If-None-Match / If-Match and then writes the file without a lock, so racing "
    "conditional writes can both win, some runs and not others; AWS S3 serialises them"
)
S3S_EARLY_412 = (
    "s3s-fs answers a conditional PutObject's 412 before it reads the body and closes the connection "
    "without draining it, so a client still sending a multi-MiB body (obstore sends a large "
    "conditional stream as one PUT) sees a broken pipe instead of the answer, in some runs; AWS and "
    "moto read the body first. The small conditional writes of the suite run"
)


@pytest.fixture(scope="module")
def s3s(s3s_server: Any) -> Iterator[dict[str, str]]:
    """s3s-fs's endpoint, with its credentials in the environment while this module runs."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
            mp.setenv(name, s3s_server.env[name])
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        yield {"endpoint_url": s3s_server.endpoints["endpoint_url"], "region": s3s_server.endpoints["region"]}


@pytest.fixture(scope="module")
def s3s_bucket(s3s: dict[str, str]) -> str:
    """One bucket for the module (CreateBucket, signed by boto3); tests work under prefixes."""
    import boto3
    from botocore.config import Config

    name = f"pt-{uuid.uuid4().hex[:12]}"
    client = boto3.client(
        "s3",
        endpoint_url=s3s["endpoint_url"],
        region_name=s3s["region"],
        config=Config(s3={"addressing_style": "path"}),
    )
    client.create_bucket(Bucket=name)
    return name


class TestS3sObstoreContract(StorageContract):
    xfail = S3S_LIMITS

    @pytest.fixture
    def bucket_url(self, s3s: dict[str, str], s3s_bucket: str, unique_name: str) -> str:
        return f"s3://{s3s_bucket}/{unique_name}?engine=obstore&region={s3s['region']}&endpoint_url={s3s['endpoint_url']}"

    @pytest.mark.skip(reason=S3S_RACE)
    def test_racing_create_only_writes_have_one_winner(self) -> None: ...

    @pytest.mark.skip(reason=S3S_RACE)
    def test_racing_compare_and_swap_has_one_winner(self) -> None: ...

    @pytest.mark.skip(reason=S3S_EARLY_412)
    def test_a_large_create_only_streamed_write_is_refused_when_the_key_exists(self) -> None: ...

    @pytest.mark.skip(reason=S3S_EARLY_412)
    def test_a_large_streamed_write_with_a_stale_etag_is_refused(self) -> None: ...


class TestS3sOpenDALContract(StorageContract):
    """The opendal engine (whole-object reads on OpenDAL, the rest on obstore): the bench's server."""

    xfail = S3S_LIMITS

    @pytest.fixture
    def bucket_url(self, s3s: dict[str, str], s3s_bucket: str, unique_name: str) -> str:
        pytest.importorskip("portable_opendal", reason="portable-cloud-opendal is not installed")
        return f"s3://{s3s_bucket}/{unique_name}?engine=opendal&region={s3s['region']}&endpoint_url={s3s['endpoint_url']}"

    @pytest.mark.skip(reason=S3S_RACE)
    def test_racing_create_only_writes_have_one_winner(self) -> None: ...

    @pytest.mark.skip(reason=S3S_RACE)
    def test_racing_compare_and_swap_has_one_winner(self) -> None: ...

    @pytest.mark.skip(reason=S3S_EARLY_412)
    def test_a_large_create_only_streamed_write_is_refused_when_the_key_exists(self) -> None: ...

    @pytest.mark.skip(reason=S3S_EARLY_412)
    def test_a_large_streamed_write_with_a_stale_etag_is_refused(self) -> None: ...


class TestS3sFsspecContract(StorageContract):
    xfail = S3S_LIMITS

    @pytest.fixture
    def bucket_url(self, s3s: dict[str, str], s3s_bucket: str, unique_name: str) -> str:
        return f"s3://{s3s_bucket}/{unique_name}?engine=fsspec&region={s3s['region']}&endpoint_url={s3s['endpoint_url']}"

    @pytest.mark.skip(reason=S3S_RACE)
    def test_racing_create_only_writes_have_one_winner(self) -> None: ...

    @pytest.mark.skip(reason=S3S_RACE)
    def test_racing_compare_and_swap_has_one_winner(self) -> None: ...


# -- what the contract does not pin down, on this server ------------------------------------
@pytest.fixture(params=["obstore", "fsspec"])
def bucket(request: pytest.FixtureRequest, s3s: dict[str, str], s3s_bucket: str, unique_name: str) -> Iterator[Bucket]:
    url = f"s3://{s3s_bucket}/{unique_name}?engine={request.param}&region={s3s['region']}&endpoint_url={s3s['endpoint_url']}"
    b = open_bucket(url, profile=contract_profile(url))
    yield b
    b.close()


def test_a_refused_create_only_write_is_already_exists_without_a_condition_element(bucket: Bucket) -> None:
    """s3s-fs's 412 body has no <Condition> (only AWS and moto send one): the request's condition decides."""
    bucket.put("once", b"first")
    with pytest.raises(AlreadyExists):
        bucket.put("once", b"second", if_none_match="*")
    stale = bucket.head("once").etag
    bucket.put("once", b"third")
    with pytest.raises(PreconditionFailed):
        bucket.put("once", b"fourth", if_match=stale)
    assert bucket.get("once") == b"third"


def test_keys_list_exactly_as_written(bucket: Bucket) -> None:
    """s3s-fs echoes encoding-type=url without encoding its keys: '+' and '%20' must not be decoded."""
    keys = ["k/a+b", "k/%20", "k/100%", "k/plus+and space", "k/ü+%2B"]
    for key in keys:
        bucket.put(key, b"x")
    assert [e.key for e in bucket.list("k/")] == sorted(keys, key=lambda k: k.encode())
    assert [e.key for e in bucket.list("", delimiter="/")] == ["k/"]


def test_listing_multipart_uploads_is_unsupported_here(bucket: Bucket) -> None:
    """s3s-fs 0.14.1 answers ListMultipartUploads with 501 NotImplemented: Unsupported, not a retried outage."""
    with pytest.raises(Unsupported, match="NotImplemented"):
        try:
            bucket.driver.abort_incomplete("", dt.timedelta(0))
        except Exception as exc:  # wrapped as Bucket wraps every driver error
            raise bucket._guard.wrap("abort_incomplete", exc) from exc


def test_header_like_metadata_is_signed_for_a_server_that_checks(
    bucket: Bucket, s3s: dict[str, str], s3s_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """obstore's engine signs these puts itself (SigV4): s3s-fs verifies every signature."""
    import traceback

    from portable.errors import PermissionDenied

    metadata = {"cache-control": "m1", "content-type": "m2", "owner": "ops"}
    etag = bucket.put("signed.txt", b"s", metadata=metadata, content_type="text/plain")
    info = bucket.head("signed.txt")
    assert (dict(info.metadata), info.content_type, info.etag) == (metadata, "text/plain", etag)

    secret = "not-the-SECRET-7f3a"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    engine = "obstore" if "obstore" in type(bucket.driver).__module__ else "fsspec"
    url = f"s3://{s3s_bucket}/x?engine={engine}&region={s3s['region']}&endpoint_url={s3s['endpoint_url']}"
    wrong = open_bucket(url, profile=contract_profile(url))
    try:
        with pytest.raises(PermissionDenied) as refused:
            wrong.put("signed.txt", b"t", metadata=metadata)
        shown = "".join(traceback.format_exception(refused.value))
        assert secret not in shown
    finally:
        wrong.close()
