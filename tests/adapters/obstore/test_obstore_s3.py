"""s3:// on the obstore engine, on moto: the storage contract, plus what only this engine has."""

from __future__ import annotations

import re
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

import pytest

from portable.errors import InvalidKey, InvalidURL, PreconditionFailed, Unavailable
from portable.storage import Bucket, open_bucket
from portable.testing.storage_suite import StorageContract, contract_profile

MOTO_RACE = (
    "moto 5.2.5 checks If-None-Match / If-Match and then writes without a lock on its threaded "
    "server, so racing conditional writes can both win there; AWS S3 serialises them"
)


class TestObstoreS3Contract(StorageContract):
    xfail = {
    }

    @pytest.fixture
    def bucket_url(self, s3_bucket: str, unique_name: str, s3_query: str) -> str:
        return f"s3://{s3_bucket}/{unique_name}?engine=obstore&{s3_query}"

    @pytest.mark.skip(reason=MOTO_RACE)
    def test_racing_create_only_writes_have_one_winner(self) -> None: ...

    @pytest.mark.skip(reason=MOTO_RACE)
    def test_racing_compare_and_swap_has_one_winner(self) -> None: ...


@pytest.fixture
def url(s3_bucket: str, unique_name: str, s3_query: str) -> str:
    return f"s3://{s3_bucket}/{unique_name}?{s3_query}"


@pytest.fixture
def bucket(url: str) -> Any:
    b = open_bucket(url, profile=contract_profile(url))
    yield b
    b.close()


def _uploads(aws: dict[str, str], s3_bucket: str, prefix: str) -> list[str]:
    """Multipart uploads in flight under ``prefix`` (moto answers ListMultipartUploads unsigned)."""
    with urllib.request.urlopen(f"{aws['endpoint_url']}/{s3_bucket}?uploads&prefix={prefix}", timeout=10) as resp:
        return re.findall(r"<Key>([^<]*)</Key>", resp.read().decode())


def test_obstore_is_the_default_engine_and_fsspec_stays_reachable(url: str) -> None:
    from portable_obstore.s3 import ObstoreS3Storage

    from portable.urls import driver_class

    assert driver_class("storage", url) is ObstoreS3Storage
    assert driver_class("storage", url + "&engine=obstore") is ObstoreS3Storage
    assert driver_class("storage", url + "&engine=fsspec") is not ObstoreS3Storage


def test_obstore_retries_are_off(bucket: Bucket) -> None:
    from obstore.store import S3Store

    store = bucket.as_(S3Store)
    assert store.retry_config is not None and store.retry_config["max_retries"] == 0


def test_batches_run_on_a_few_worker_threads_not_a_thread_per_object(bucket: Bucket) -> None:
    items = {f"b/{i:03d}": bytes([i % 256]) * 10 for i in range(300)}
    bucket.put_many(items)  # starts the batch workers if no test did
    bucket.get_many(items)
    bucket.delete_many(items)  # and obstore's loop thread (S3's bulk delete runs as its coroutine)
    before = {t.ident for t in threading.enumerate()}
    bucket.put_many(items)
    assert bucket.get_many(items) == items
    bucket.delete_many(items)
    started = [t.name for t in threading.enumerate() if t.ident not in before]
    assert not started, started  # (an idle thread of an earlier test may have ended meanwhile)
    workers = [t for t in threading.enumerate() if t.name.startswith("portable-batch")]
    assert 1 <= len(workers) < 300
    assert list(bucket.list("b/")) == []


def test_batch_reads_of_large_bodies_switch_to_obstores_coroutines_and_back(bucket: Bucket) -> None:
    """Blocking reads while bodies are small; after a batch of large ones, the coroutine path."""
    from portable_obstore._common import BLOCKING_READ_LIMIT

    driver = bucket.driver
    small = {f"s/{i}": b"x" * 100 for i in range(20)}
    large = {f"l/{i}": bytes([i]) * (BLOCKING_READ_LIMIT * 2) for i in range(4)}
    bucket.put_many(small | large)
    assert bucket.get_many(small) == small and driver.small_reads
    assert bucket.get_many(large) == large and not driver.small_reads
    assert bucket.get_many(large) == large and not driver.small_reads  # read as coroutines, the same bytes
    assert bucket.get_many(small) == small and driver.small_reads


def test_a_batch_under_a_deadline_runs_as_cancellable_coroutines(bucket: Bucket) -> None:
    from portable.resilience import deadline

    items = {f"d/{i}": bytes([i]) * 50 for i in range(30)}
    with deadline(30):
        bucket.put_many(items)
        assert bucket.get_many(items) == items
    assert "portable-obstore-loop" in {t.name for t in threading.enumerate()}
    bucket.delete_many(items)


def _parts_landed(aws: dict[str, str], s3_bucket: str, prefix: str, want: int) -> bool:
    """Whether moto holds ``want`` parts of the one upload under ``prefix`` (ListParts, unsigned as well)."""
    with urllib.request.urlopen(f"{aws['endpoint_url']}/{s3_bucket}?uploads&prefix={prefix}", timeout=10) as resp:
        listing = resp.read().decode()
    uploads = re.findall(r"<Upload>(.*?)</Upload>", listing, re.S)
    if len(uploads) != 1:
        return False
    upload_id = re.findall(r"<UploadId>([^<]*)</UploadId>", uploads[0])[0]
    key = re.findall(r"<Key>([^<]*)</Key>", uploads[0])[0]
    quoted = urllib.parse.quote(key)
    with urllib.request.urlopen(f"{aws['endpoint_url']}/{s3_bucket}/{quoted}?uploadId={upload_id}", timeout=10) as resp:
        return len(re.findall(r"<PartNumber>", resp.read().decode())) >= want


def test_an_aborted_multipart_write_leaves_no_parts(bucket: Bucket, aws: dict[str, str], s3_bucket: str) -> None:
    prefix = bucket.driver.prefix  # type: ignore[attr-defined]
    part = bucket.capabilities.min_part_bytes
    with pytest.raises(RuntimeError, match="interrupted"), bucket.open("mp.bin", "wb", part_size=part) as out:
        out.write(b"a" * (2 * part + 5))
        assert _uploads(aws, s3_bucket, prefix), "the write should be a multipart upload in flight"
        # obstore uploads parts in the background; an abort that races a part's PUT gets a 500 from
        # moto's threaded server ("dictionary changed size during iteration" in MultipartUpload.dispose),
        # where AWS S3 takes it. Abort once the two full parts are in, as a write interrupted later would.
        deadline = time.monotonic() + 20
        while not _parts_landed(aws, s3_bucket, prefix, 2):
            assert time.monotonic() < deadline, "the two parts never landed"
            time.sleep(0.05)
        raise RuntimeError("interrupted")
    assert _uploads(aws, s3_bucket, prefix) == []
    assert not bucket.exists("mp.bin")


def test_a_large_conditional_stream_is_one_conditional_put(bucket: Bucket, aws: dict[str, str], s3_bucket: str) -> None:
    part = bucket.capabilities.min_part_bytes
    stale = bucket.put("cas.bin", b"v1")
    bucket.put("cas.bin", b"v2")
    with pytest.raises(PreconditionFailed), bucket.open("cas.bin", "wb", if_match=stale, part_size=part) as out:
        out.write(b"z" * (2 * part + 10))
        assert _uploads(aws, s3_bucket, bucket.driver.prefix) == []  # type: ignore[attr-defined]
    assert bucket.get("cas.bin") == b"v2"


def test_presigned_get_and_put(bucket: Bucket) -> None:
    bucket.put("dl.txt", b"download me")
    with urllib.request.urlopen(bucket.signed_url("dl.txt", expires=60), timeout=10) as resp:
        assert resp.read() == b"download me"
    put_url = bucket.signed_url("ul.bin", method="PUT", expires=60)
    assert "X-Amz-Signature=" in put_url
    req = urllib.request.Request(put_url, data=b"\x00uploaded\xff", method="PUT")
    req.add_header("Content-Type", "application/octet-stream")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
    assert bucket.get("ul.bin") == b"\x00uploaded\xff"


def test_stored_keys_are_the_portable_keys(bucket: Bucket, aws: dict[str, str], s3_bucket: str) -> None:
    """object_store must not escape a portable key: the stored key is exactly prefix/key."""
    key = "odd/a+b=c&d@e,f;g %20 ~#[]{}^`|<>*?\"ü"
    bucket.put(key, b"k")
    with urllib.request.urlopen(f"{aws['endpoint_url']}/{s3_bucket}?list-type=2&prefix={bucket.driver.prefix}/odd/", timeout=10) as resp:  # type: ignore[attr-defined]
        body = resp.read().decode()
    import html

    assert [html.unescape(k) for k in re.findall(r"<Key>([^<]*)</Key>", body)] == [f"{bucket.driver.prefix}/{key}"]  # type: ignore[attr-defined]
    assert [e.key for e in bucket.list("odd/")] == [key]


def test_a_key_over_the_limit_counts_the_prefix(s3_bucket: str, s3_query: str) -> None:
    b = open_bucket(f"s3://{s3_bucket}/{'p' * 100}?{s3_query}")
    assert b.capabilities.max_key_bytes == 1024 - 101
    with pytest.raises(InvalidKey, match="limit"):
        b.put("k" * 924, b"x")


@pytest.mark.parametrize(
    "bad",
    [
        "s3://Upper_Case",
        "s3://ab",
        "s3://192.168.1.10",
        "s3:///no-bucket",
        "s3://good-name?regoin=eu-west-1",
        "s3://good-name?region=Europe",
        "s3://good-name?addressing_style=sideways",
        "s3://good-name?endpoint_url=localhost",
        "s3://good-name?concurrency=0",
        "s3://good-name?timeout=-1",
    ],
)
def test_bad_urls_raise_invalid_url_before_any_request(bad: str) -> None:
    sep = "&" if "?" in bad else "?"
    with pytest.raises(InvalidURL):
        open_bucket(f"{bad}{sep}engine=obstore")


def test_an_unreachable_endpoint_is_unavailable_and_retried(aws: dict[str, str], s3_bucket: str) -> None:
    from tests.emulators.harness import free_port

    url = f"s3://{s3_bucket}?region=us-east-1&endpoint_url=http://127.0.0.1:{free_port()}&timeout=2"
    b = open_bucket(url, profile=contract_profile(url))
    with pytest.raises(Unavailable) as info:
        b.get("x")
    assert info.value.retryable
    assert info.value.__cause__ is not None


def test_a_deadline_bounds_a_request_to_a_silent_server(aws: dict[str, str], s3_bucket: str) -> None:
    """A server that accepts and never answers: the call ends at the deadline, as DeadlineExceeded."""
    import socket
    import time

    from portable.errors import DeadlineExceeded
    from portable.resilience import deadline

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        url = f"s3://{s3_bucket}?region=us-east-1&endpoint_url=http://127.0.0.1:{silent.getsockname()[1]}"
        b = open_bucket(url, profile=contract_profile(url))
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded), deadline(0.5):
            b.get("x")
        assert time.monotonic() - started < 3
    finally:
        silent.close()


def test_large_objects_round_trip_through_every_read_path(bucket: Bucket) -> None:
    data = bytes(range(256)) * (300 * 1024 // 256)  # over the 64 KiB inline limit
    bucket.put("big", data)
    assert bucket.get("big") == data
    assert bucket.get_many(["big"]) == {"big": data}
    assert bucket.get_range("big", 1000, 200_000) == data[1000:200_000]
    assert bucket.get_range("big", 100) == data[100:]


# -- requests obstore cannot make, signed by the driver ------------------------------------
@pytest.mark.parametrize(
    ("url", "token", "payload"),
    [
        ("http://127.0.0.1:9000/bkt/k%C3%BC%20b%2Bc", None, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("http://127.0.0.1:9000/bkt?prefix=a%2Fb%20c&uploads=", None, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("https://bkt.s3.eu-west-1.amazonaws.com/x/y.bin?uploadId=a%2Bb", "SESSION-TOKEN", "UNSIGNED-PAYLOAD"),
    ],
)
def test_the_signature_is_botocores(url: str, token: str | None, payload: str) -> None:
    """The driver's SigV4 (sigv4_headers) gives the signature botocore gives the same request."""
    import datetime as dt
    from unittest import mock
    from urllib.parse import urlsplit

    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    from portable_obstore.s3 import sigv4_headers

    now = dt.datetime(2026, 12, 1, 10, 0, 0, tzinfo=dt.UTC)
    headers = {"x-amz-meta-cache-control": "meta  value", "Cache-Control": "no-store", "If-None-Match": "*"}
    from botocore.config import Config

    native = AWSRequest(method="PUT", url=url, headers=headers)
    native.context["client_config"] = Config(s3={"payload_signing_enabled": payload != "UNSIGNED-PAYLOAD"})
    with mock.patch("botocore.auth.get_current_datetime", return_value=now.replace(tzinfo=None)):
        S3SigV4Auth(Credentials("AKID", "SECRET", token), "s3", "eu-west-1").add_auth(native)
    parts = urlsplit(url)
    ours = sigv4_headers(
        "PUT", parts.netloc, parts.path, parts.query, headers, payload,
        credentials=("AKID", "SECRET", token), region="eu-west-1", now=now,
    )
    assert ours["authorization"] == native.headers["Authorization"]
    assert "SECRET" not in repr(ours)


def test_header_like_metadata_stays_metadata_and_headers_come_from_named_options(bucket: Bucket) -> None:
    from portable.driver.storage import WriteOptions

    metadata = {"cache-control": "m1", "content-type": "m2", "storage-class": "GLACIERX", "contentencoding": "m3"}
    etag = bucket.put("hl.txt", b"x", metadata=metadata)  # GLACIERX as a header would fail the put
    info = bucket.head("hl.txt")
    assert (dict(info.metadata), info.etag, info.cache_control) == (metadata, etag, None)
    bucket.driver.put("named.txt", b"y", WriteOptions(cache_control="no-cache", content_disposition="inline"))
    info = bucket.head("named.txt")
    assert (info.cache_control, info.content_disposition, dict(info.metadata)) == ("no-cache", "inline", {})


def test_the_signed_requests_are_classified(bucket: Bucket) -> None:
    from portable_obstore.s3 import S3RequestFailed

    from portable.driver.conditions import note_condition
    from portable.driver.storage import WriteOptions
    from portable.errors import AlreadyExists, NotFound, Throttled, Unsupported

    def wrapped(exc: Exception) -> Exception:
        return bucket._guard.wrap("put k", exc)

    refused = S3RequestFailed("PUT 'k'", 412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
    assert type(wrapped(refused)) is PreconditionFailed
    note_condition(refused, WriteOptions(if_none_match=True))
    assert type(wrapped(refused)) is AlreadyExists
    assert type(wrapped(S3RequestFailed("GET", 501, "NotImplemented", "no"))) is Unsupported
    assert type(wrapped(S3RequestFailed("DELETE", 404, "NoSuchUpload", "gone"))) is NotFound
    assert type(wrapped(S3RequestFailed("PUT", 503, "SlowDown", "slow"))) is Throttled
    assert wrapped(S3RequestFailed("PUT", 500, "InternalError", "oops")).retryable


def test_an_unreachable_endpoint_for_a_signed_request_is_unavailable(aws: dict[str, str], s3_bucket: str) -> None:
    from tests.emulators.harness import free_port

    url = f"s3://{s3_bucket}?region=us-east-1&endpoint_url=http://127.0.0.1:{free_port()}&timeout=2"
    b = open_bucket(url, profile=contract_profile(url))
    with pytest.raises(Unavailable) as info:
        b.put("x", b"1", metadata={"cache-control": "m"})
    assert info.value.retryable


def test_a_cancelled_async_batch_starts_no_more_puts_and_leaves_no_partial_object(url: str) -> None:
    """``AsyncBucket.put_many`` on obstore's worker threads, cancelled mid-batch on moto: the
    cancellation waits for the puts in flight, no put starts after it, and every object there
    is whole (one request each: nothing partial can be listed)."""
    import asyncio

    import portable.aio as aio

    items = {f"c/{i:05d}": bytes([i % 251]) * 1024 for i in range(5000)}

    async def main() -> tuple[int, int]:
        async with aio.open_bucket(url, profile=contract_profile(url)) as b:
            task = asyncio.ensure_future(b.put_many(items))
            await asyncio.sleep(0.15)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            at_cancel = len([o.key async for o in b.list("c/")])
            await asyncio.sleep(0.5)  # a put still running after the cancellation would land now
            later = [o.key async for o in b.list("c/")]
            got = await b.get_many(later)
            assert all(got[k] == items[k] for k in later), "every object listed is whole"
            await b.delete_many(later)
            return at_cancel, len(later)

    at_cancel, later = asyncio.run(main())
    assert 0 < at_cancel < len(items), "cancelled mid-batch"
    assert later == at_cancel, "no put started or landed after the cancellation returned"
