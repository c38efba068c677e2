"""``open(key, "wb", size=N)``: a stream of known length sent as ONE PutObject (obstore engine), on
moto and s3s-fs, signed (``aws-chunked``) and unsigned; and the length rule on every driver.

What must hold, as for any streamed write: nothing is visible before the commit (a short stream,
a long one, an exception in the ``with`` block after every byte was written); the stored bytes,
headers and metadata are the ones written; the etag is the MD5 of the body (what
portable.transfer verifies). A caller's bytearray reused after ``write`` returns does not change
what is stored (the driver holds only immutable bytes).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from portable.errors import InvalidArgument, NotFound
from portable.storage import Bucket, open_bucket

pytest.importorskip("obstore")

MIB = 1024 * 1024


def body_of(seed: int, size: int) -> bytes:
    block = hashlib.sha256(str(seed).encode()).digest() * 4096  # 128 KiB, not repeating at 1 MiB
    return (block * (size // len(block) + 1))[:size]


def _bucket_on(endpoint: str, env: dict[str, str], region: str, mp: pytest.MonkeyPatch) -> str:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
        mp.setenv(name, env[name])
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        mp.delenv(name, raising=False)
    import boto3
    from botocore.config import Config

    name = f"pz-{uuid.uuid4().hex[:12]}"
    client = boto3.client(  # the keys given: boto3's default session keeps the first ones it resolved in this process
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        config=Config(s3={"addressing_style": "path"}),
    )
    client.create_bucket(Bucket=name)
    return f"s3://{name}/{{prefix}}?engine=obstore&region={region}&endpoint_url={endpoint}"


@pytest.fixture(scope="module", params=["moto", "s3s"])
def s3_template(request: pytest.FixtureRequest) -> Iterator[str]:
    server: Any = request.getfixturevalue("moto_server" if request.param == "moto" else "s3s_server")
    with pytest.MonkeyPatch.context() as mp:
        yield _bucket_on(server.endpoints["endpoint_url"], server.env, server.endpoints["region"], mp)


@pytest.fixture(params=["signed", "unsigned"])
def bucket(s3_template: str, request: pytest.FixtureRequest) -> Bucket:
    url = s3_template.format(prefix=uuid.uuid4().hex[:8])
    return open_bucket(url + ("&sign_payload=false" if request.param == "unsigned" else ""))


def _missing(bucket: Bucket, key: str) -> bool:
    try:
        bucket.head(key)
    except NotFound:
        return True
    return False


def test_a_sized_stream_is_one_put_with_its_headers_metadata_and_md5_etag(bucket: Bucket) -> None:
    data = body_of(1, 11 * MIB + 5)  # a carried piece in the signed chunks: 3 MiB writes, 1 MiB chunks
    with bucket.open("o", "wb", size=len(data), content_type="application/x-test", cache_control="max-age=60",
                     metadata={"origin": "sized", "cache-control": "meta"}) as writer:
        assert writer.one_request is True
        for start in range(0, len(data), 3 * MIB):
            writer.write(data[start:start + 3 * MIB])
    assert writer.etag.strip('"') == hashlib.md5(data).hexdigest() == writer.md5.hex()
    assert bucket.get("o") == data
    info = bucket.head("o")
    assert (info.content_type, info.cache_control) == ("application/x-test", "max-age=60")
    assert info.metadata == {"origin": "sized", "cache-control": "meta"}


def test_an_empty_and_a_tiny_sized_stream(bucket: Bucket) -> None:
    with bucket.open("empty", "wb", size=0) as writer:
        pass
    assert writer.etag.strip('"') == hashlib.md5(b"").hexdigest()
    assert bucket.get("empty") == b""
    with bucket.open("tiny", "wb", size=3) as writer:
        writer.write(b"a")
        writer.write(b"bc")
    assert bucket.get("tiny") == b"abc"


def test_a_short_sized_stream_stores_nothing(bucket: Bucket) -> None:
    writer = bucket.open("short", "wb", size=6 * MIB)
    writer.write(body_of(2, 5 * MIB))
    with pytest.raises(InvalidArgument, match="closed after 5242880 bytes"):
        writer.close()
    assert _missing(bucket, "short")


def test_a_long_sized_stream_is_refused_at_the_write_and_stores_nothing(bucket: Bucket) -> None:
    with pytest.raises(InvalidArgument, match="size=1048576 but 1048577 bytes"), \
            bucket.open("long", "wb", size=MIB) as writer:
        writer.write(body_of(3, MIB))
        writer.write(b"x")
    assert _missing(bucket, "long")


def test_an_error_after_the_last_byte_stores_nothing(bucket: Bucket) -> None:
    data = body_of(4, 2 * MIB + 1)
    with pytest.raises(RuntimeError), bucket.open("late", "wb", size=len(data)) as writer:
        writer.write(data)  # every byte written: the last piece is held back until the commit
        raise RuntimeError("the caller's check failed")
    assert _missing(bucket, "late")


def test_a_reused_buffer_does_not_change_what_is_stored(bucket: Bucket) -> None:
    data = body_of(5, 4 * MIB)
    buffer = bytearray(MIB)
    with bucket.open("reused", "wb", size=len(data)) as writer:
        for start in range(0, len(data), MIB):
            buffer[:] = data[start:start + MIB]
            writer.write(buffer)
        buffer[:] = bytes(MIB)  # cleared before the commit sends the held piece
    assert hashlib.md5(bucket.get("reused")).hexdigest() == hashlib.md5(data).hexdigest()


def test_over_the_cutoff_or_with_a_condition_it_is_a_multipart_or_spooled_write(bucket: Bucket) -> None:
    from portable_obstore.s3 import SINGLE_PUT_CUTOFF

    writer = bucket.open("big", "wb", size=SINGLE_PUT_CUTOFF + 1)
    assert writer.one_request is False
    writer.abort()
    with bucket.open("cond", "wb", size=3, if_none_match="*") as writer:
        assert writer.one_request is False
        writer.write(b"abc")
    assert bucket.get("cond") == b"abc"


@pytest.mark.parametrize("url", ["mem://", "file://{tmp}"])
def test_the_length_rule_holds_where_the_driver_has_no_sized_write(url: str, tmp_path: Any) -> None:
    bucket = open_bucket(url.format(tmp=tmp_path))
    with bucket.open("ok", "wb", size=4) as writer:
        assert writer.one_request is False
        writer.write(b"abcd")
    assert bucket.get("ok") == b"abcd"
    writer = bucket.open("short", "wb", size=4)
    writer.write(b"abc")
    with pytest.raises(InvalidArgument, match="closed after 3 bytes"):
        writer.close()
    assert _missing(bucket, "short")


@pytest.mark.parametrize("size", [-1, 1.5, True, "3"])
def test_a_bad_size_is_refused_before_any_request(size: object) -> None:
    bucket = open_bucket("mem://")
    with pytest.raises(InvalidArgument, match="size must be an int >= 0"):
        bucket.open("k", "wb", size=size)  # type: ignore[call-overload]


def test_size_is_for_writes_only() -> None:
    bucket = open_bucket("mem://")
    with pytest.raises(InvalidArgument, match="size= is for mode 'wb'"):
        bucket.open("k", "rb", size=3)  # type: ignore[call-overload]


def test_a_lost_reply_to_the_one_put_is_the_success_it_was(bucket: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    from portable_obstore import s3

    sent = s3._SizedPut.commit

    def lost(self: Any) -> str | None:
        sent(self)  # the PUT took effect; its reply is lost on the way back
        raise ConnectionResetError("connection reset by peer")

    monkeypatch.setattr(s3._SizedPut, "commit", lost)
    data = body_of(6, 3 * MIB + 7)
    with bucket.open("lost", "wb", size=len(data)) as writer:
        writer.write(data)
    # the writer read back what the store holds (its MD5 is the stream's): a success, committed once
    assert writer.etag is not None and writer.etag.strip('"') == hashlib.md5(data).hexdigest()
    assert bucket.get("lost") == data


# ---------------------------------------------------------------- the async face: the same argument, the same rules
def _amissing(bucket: Any, key: str) -> Any:
    async def missing() -> bool:
        try:
            await bucket.head(key)
        except NotFound:
            return True
        return False

    return missing()


def test_the_async_face_sends_a_sized_stream_as_one_put_and_keeps_the_length_rule(s3_template: str) -> None:
    import asyncio

    import portable.aio as aio

    url = s3_template.format(prefix=uuid.uuid4().hex[:8])
    data = body_of(7, 5 * MIB + 3)

    async def main() -> None:
        async with aio.open_bucket(url) as b:
            async with b.open("a", "wb", size=len(data), content_type="application/x-test") as writer:
                assert writer.one_request is True
                for start in range(0, len(data), 2 * MIB):
                    await writer.write(data[start:start + 2 * MIB])
            assert writer.etag is not None
            assert writer.etag.strip('"') == hashlib.md5(data).hexdigest() == writer.md5.hex()
            assert await b.get("a") == data and (await b.head("a")).content_type == "application/x-test"

            short = await b.open("short", "wb", size=10)
            await short.write(b"abc")
            with pytest.raises(InvalidArgument, match="closed after 3 bytes"):
                await short.close()
            with pytest.raises(InvalidArgument, match="size=3 but 4 bytes"):
                async with b.open("long", "wb", size=3) as writer:
                    await writer.write(b"abcd")

            async def slow_writer() -> None:
                async with b.open("cancelled", "wb", size=4 * MIB) as writer:
                    await writer.write(data[: 3 * MIB])
                    await asyncio.sleep(30)  # cancelled here, with most of the body sent
                    await writer.write(data[: MIB])

            task = asyncio.ensure_future(slow_writer())
            await asyncio.sleep(1.0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            for key in ("short", "long", "cancelled"):
                assert await _amissing(b, key), f"{key}: nothing stored"

    asyncio.run(main())


def test_the_async_face_checks_size_before_any_request_and_where_no_sized_write_exists() -> None:
    import asyncio

    import portable.aio as aio

    async def main() -> None:
        async with aio.open_bucket("mem://") as b:
            for bad in (-1, 1.5, True, "3"):
                with pytest.raises(InvalidArgument, match="size must be an int >= 0"):
                    b.open("k", "wb", size=bad)  # type: ignore[call-overload]
            with pytest.raises(InvalidArgument, match="size= is for mode 'wb'"):
                b.open("k", "rb", size=3)  # type: ignore[call-overload]
            async with b.open("ok", "wb", size=4) as writer:
                assert writer.one_request is False
                await writer.write(b"abcd")
            assert await b.get("ok") == b"abcd"
            short = await b.open("short", "wb", size=4)
            await short.write(b"abc")
            with pytest.raises(InvalidArgument, match="closed after 3 bytes"):
                await short.close()
            assert await _amissing(b, "short")

    asyncio.run(main())
