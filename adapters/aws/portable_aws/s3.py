"""``s3://`` — Amazon S3 (and S3-compatible stores) through s3fs and aiobotocore.

URLs:
    ``s3://BUCKET`` or ``s3://BUCKET/PREFIX``. With a prefix every key is
    stored under ``PREFIX/``: ``s3://data/tenant-7`` and key ``a.json`` is the
    object ``tenant-7/a.json`` of bucket ``data``. The bucket must exist.

Options:
    ``region`` (str): the bucket's region, e.g. ``eu-west-1``. Defaults to the
    SDK's chain (``AWS_REGION``, the profile).
    ``endpoint_url`` (str): another endpoint (moto, MinIO, LocalStack, a VPC
    endpoint). Defaults to AWS.
    ``profile`` (str): a profile of ``~/.aws/config``. Defaults to the SDK's chain.
    ``addressing_style`` (``auto`` | ``path`` | ``virtual``): defaults to
    ``path`` with an ``endpoint_url`` (there is no DNS for
    ``bucket.127.0.0.1``) and ``auto`` on AWS.
    ``timeout`` (float): per-request connect and read timeout. Defaults to 30.
    ``concurrency`` (int): objects in flight in the batch methods
    (``get_many`` and friends), and the connection pool size. Defaults to 64.

    Credentials come from the SDK's chain (environment, profile, instance
    role); never put them in the URL.

Keys and limits:
    A key (with the URL's prefix and its ``/``) is at most 1,024 UTF-8 bytes;
    ``capabilities.max_key_bytes`` is 1,024 less the prefix, and the Bucket
    refuses a longer key with InvalidKey before any request. A bucket name is
    3-63 of ``a-z 0-9 . -``, starting and ending with a letter or digit, and
    not an IP address: another name is InvalidURL when the URL is opened.
    One ``put`` sends at most 5 GiB (TooLarge before any request); a streamed
    write (``open(key, "wb")``) uploads parts of at least 5 MiB, up to
    10,000 parts. User metadata is at most 2 KiB.

Retries:
    botocore's retries are off (``retries={"total_max_attempts": 1}``: in
    botocore ``max_attempts`` counts *re*-tries, so ``max_attempts=1`` would
    still retry once) and s3fs's ``retries`` is 1. The driver calls the
    aiobotocore client directly for every operation but streamed reads, so
    s3fs's ``_error_wrapper`` retry loop is not in the path either; only
    :mod:`portable.resilience` retries.

As:
    ``s3fs.S3FileSystem`` (the file system this driver runs on, sync mode),
    ``aiobotocore.client.AioBaseClient`` (its async S3 client, on
    ``fs.loop``), and ``botocore.client.BaseClient`` (a synchronous boto3 S3
    client with the same endpoint, credentials and retry settings).

Capabilities:
    conditional_create (``If-None-Match: *``), conditional_update
    (``If-Match``), conditional_streaming_write (the conditions are sent on
    CompleteMultipartUpload), signed_urls (SigV4 presigned GET and PUT, up to 7 days),
    server_side_copy (CopyObject; UploadPartCopy above 5 GiB), multipart, resumable_writes
    (ListMultipartUploads + ListParts find the upload again: :mod:`portable_aws._s3_resume`).

Metadata and headers:
    Every metadata entry is user metadata (``x-amz-meta-<name>``), a
    header-like name (``cache-control``) included; headers come only from
    ``content_type``, ``cache_control``, ``content_encoding`` and
    ``content_disposition``, and ``head`` reports them.

Leftovers:
    ``abort_incomplete`` is ListMultipartUploads (every page) and
    AbortMultipartUpload for each upload initiated before now - older_than.

Errors:
    NoSuchKey / 404 -> NotFound; 412 PreconditionFailed -> AlreadyExists when
    the request carried If-None-Match, else PreconditionFailed (decided by
    the request, not the body's ``<Condition>``, which only AWS and moto
    send); NotImplemented / 501 -> Unsupported; 409
    ConditionalRequestConflict -> Unavailable, retryable (S3 asks for a
    retry); SlowDown / 503 / 429 -> Throttled, retryable; AccessDenied / 403
    -> PermissionDenied; 5xx and connection errors -> Unavailable, retryable.

Known differences:
    * ``get`` is a single GetObject: s3fs's ``cat_file`` first sends a HEAD
      (to split large objects into concurrent ranges) whenever
      ``max_concurrency > 1``, which doubled the requests of small gets.
    * ``get_range`` with a start at or past the size returns ``b""``; S3
      answers 416 InvalidRange, which the driver turns into the empty slice.
    * ``put(..., if_match=...)`` on a missing key raises NotFound (S3 answers
      404 NoSuchKey), not PreconditionFailed.
    * moto 5.x enforces If-None-Match and If-Match on PutObject and
      If-None-Match on CompleteMultipartUpload, but ignores If-Match on
      CompleteMultipartUpload (AWS enforces it).
    * ListObjectsV2 asks for keys as XML text: botocore's automatic
      ``encoding-type=url`` is off (obstore never sends it), because a server
      that echoes it without encoding (s3s-fs) had ``a+b`` decoded to ``a b``.
      A listing that meets a native key with a C0 control character fails.
    * A streamed write is sent as one PutObject when it ends within its first
      part, and as a multipart upload otherwise; a failed or abandoned
      multipart upload is aborted, so no parts are left billed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import IO, Any, Literal, NoReturn, TypeVar

from portable.driver.aio_storage import AsyncStorageDriver
from portable.driver.conditions import note_condition
from portable.driver.http import normal_etag, range_header
from portable.driver.limits import S3_MAX_KEY_BYTES, S3_MAX_PUT_BYTES, s3_capabilities
from portable.driver.naming import check_s3_bucket_name, parse_s3_url
from portable.driver.storage import (
    ListPage,
    ObjectInfo,
    ResumableWriteStream,
    StorageDriver,
    WriteOptions,
    WriteStream,
)
from portable.errors import Internal
from portable.resilience import attempt_timeout
from portable.urls import ParsedURL

from ._aws import (
    AWSClassifier,
    AWSOptions,
    aws_error_code,
    boto_config,
    boto_config_kwargs,
    new_client,
)

__all__ = ["S3Storage", "check_bucket_name"]

T = TypeVar("T")

#: The largest object one PutObject sends.
MAX_PUT_BYTES = S3_MAX_PUT_BYTES
#: S3's key limit in UTF-8 bytes.
MAX_KEY_BYTES = S3_MAX_KEY_BYTES
_DELETE_BATCH = 1000

check_bucket_name = check_s3_bucket_name


class _S3Batches:
    """The batch methods: one event loop, bounded concurrency, no thread per object.

    Mixed into :class:`S3Storage`, whose coroutines (``_get``, ``_put``, ...) each object runs;
    deletes go 1,000 keys a DeleteObjects request.
    """

    bucket: str
    _root: str
    batch_concurrency: int

    def get_many(self, keys: list[str]) -> Iterator[tuple[str, bytes | BaseException]]:
        results = self._run(self._gather, self._get, [(k,) for k in keys])
        yield from zip(keys, results, strict=True)

    def put_many(
        self, items: list[tuple[str, bytes]], options: WriteOptions
    ) -> Iterator[tuple[str, str | BaseException | None]]:
        results = self._run(self._gather, self._put, [(k, d, options) for k, d in items])
        yield from zip((k for k, _ in items), results, strict=True)

    def delete_many(self, keys: list[str]) -> Iterator[tuple[str, BaseException | None]]:
        results = self._run(self._delete_batches, keys)
        yield from zip(keys, results, strict=True)

    def copy_many(self, pairs: list[tuple[str, str]]) -> Iterator[tuple[str, str | BaseException | None]]:
        results = self._run(self._gather, self._copy, pairs)
        yield from zip((dst for _, dst in pairs), results, strict=True)

    async def _gather(self, fn: Callable[..., Awaitable[T]], calls: list[tuple[Any, ...]]) -> list[T | BaseException]:
        await self._s3()
        limit = asyncio.Semaphore(self.batch_concurrency)

        async def one(args: tuple[Any, ...]) -> T | BaseException:
            async with limit:
                try:
                    return await fn(*args)
                except Exception as exc:
                    return exc

        return await asyncio.gather(*(one(a) for a in calls))

    async def _delete_batches(self, keys: list[str]) -> list[BaseException | None]:
        """DeleteObjects, 1,000 keys a request; per-key errors come back as ClientErrors."""
        from botocore.exceptions import ClientError

        s3 = await self._s3()
        out: dict[str, BaseException | None] = {}
        for i in range(0, len(keys), _DELETE_BATCH):
            chunk = keys[i : i + _DELETE_BATCH]
            try:
                resp = await s3.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": self._root + k} for k in chunk], "Quiet": True},
                )
            except Exception as exc:
                out.update((k, exc) for k in chunk)
                continue
            cut = len(self._root)
            for err in resp.get("Errors", ()):
                key = str(err.get("Key", ""))[cut:]
                if err.get("Code") == "NoSuchKey":
                    continue
                out[key] = ClientError(
                    {"Error": {"Code": err.get("Code", ""), "Message": err.get("Message", "")}}, "DeleteObjects"
                )
        return [out.get(k) for k in keys]


class S3Storage(_S3Batches, AWSClassifier, StorageDriver):
    """Objects in one S3 bucket, optionally under a prefix."""

    scheme = "s3"

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        options: AWSOptions | None = None,
        addressing_style: Literal["auto", "path", "virtual"] | None = None,
        concurrency: int = 64,
    ) -> None:
        import s3fs  # imported here so that a missing SDK names the extra, not a traceback

        self.bucket = check_bucket_name(bucket)
        self.prefix = prefix.strip("/")
        self._root = f"{self.prefix}/" if self.prefix else ""
        self.options = options or AWSOptions()
        self.endpoint = self.options.describe("s3")
        self.batch_concurrency = concurrency
        self.capabilities = dataclasses.replace(s3_capabilities(bucket, self.prefix), resumable_writes=True)
        self._addressing_style = addressing_style or ("path" if self.options.endpoint_url else "auto")
        session_kwargs = {"profile": self.options.profile} if self.options.profile else {}
        self.fs = s3fs.S3FileSystem(
            client_kwargs=self.options.client_kwargs(),
            config_kwargs=boto_config_kwargs(self.options, pool=max(10, concurrency), **self._s3_config()),
            skip_instance_cache=True,
            use_listings_cache=False,
            cache_regions=False,
            max_concurrency=1,
            **session_kwargs,
        )
        self.fs.retries = 1
        self._loop = self.fs.loop
        self._client: Any = None
        self._client_lock = threading.Lock()
        self._sync_client: Any = None

    @classmethod
    def from_url(cls, url: ParsedURL) -> S3Storage:
        where = parse_s3_url(url, default_concurrency=64)
        url.done()
        return cls(
            where.bucket,
            where.prefix,
            options=AWSOptions(*where.aws),
            addressing_style=where.addressing_style,
            concurrency=where.concurrency,
        )

    def __repr__(self) -> str:
        return f"S3Storage(bucket={self.bucket!r}, prefix={self.prefix!r}, endpoint={self.endpoint!r})"

    # -- plumbing --------------------------------------------------------
    def _run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run coroutine function ``fn`` on s3fs's event loop, bounded by the attempt's timeout."""
        from fsspec.asyn import sync

        limit = attempt_timeout()
        if limit is not None:
            limit = max(limit, 0.001)  # fsspec reads a timeout of 0 as "none"
        return sync(self._loop, fn, *args, timeout=limit)  # type: ignore[no-any-return]

    async def _s3(self) -> Any:
        """The aiobotocore S3 client, made on first use (on s3fs's loop, which it is bound to)."""
        client = self._client
        if client is None:
            client = await self.fs.set_session()
            _list_keys_as_sent(client)
            self._client = client
        return client

    def _s3_config(self) -> dict[str, Any]:
        """What both clients (s3fs's async one, as_()'s boto3 one) add to the botocore configuration.

        SigV4 throughout: botocore would presign URLs with SigV2.
        """
        return {"s3": {"addressing_style": self._addressing_style}, "signature_version": "s3v4"}

    # -- whole objects ---------------------------------------------------
    def get(self, key: str) -> bytes:
        return self._run(self._get, key)

    async def _get(self, key: str, span: str | None = None) -> bytes:
        s3 = await self._s3()
        if span is None:
            resp = await s3.get_object(Bucket=self.bucket, Key=self._root + key)
        else:
            resp = await s3.get_object(Bucket=self.bucket, Key=self._root + key, Range=span)
        body = resp["Body"]
        try:
            return await body.read()  # type: ignore[no-any-return]
        finally:
            body.close()

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        return self._run(self._get_range, key, start, end)

    async def _get_range(self, key: str, start: int, end: int | None) -> bytes:
        try:
            return await self._get(key, range_header(start, end))
        except Exception as exc:
            code, status = aws_error_code(exc)
            if code == "InvalidRange" or status == 416:
                return b""  # S3 answers 416 when start >= size: the object exists, the slice is empty
            raise

    def head(self, key: str) -> ObjectInfo:
        return self._run(self._head, key)

    async def _head(self, key: str) -> ObjectInfo:
        s3 = await self._s3()
        resp = await s3.head_object(Bucket=self.bucket, Key=self._root + key)
        return ObjectInfo(
            key=key,
            size=int(resp.get("ContentLength", 0)),
            etag=normal_etag(resp.get("ETag")),
            modified=resp.get("LastModified"),
            content_type=resp.get("ContentType"),
            metadata=dict(resp.get("Metadata") or {}),
            cache_control=resp.get("CacheControl"),
            content_encoding=resp.get("ContentEncoding"),
            content_disposition=resp.get("ContentDisposition"),
        )

    def put(self, key: str, data: bytes, options: WriteOptions) -> str | None:
        return self._run(self._put, key, data, options)

    async def _put(self, key: str, data: bytes, options: WriteOptions) -> str | None:
        s3 = await self._s3()
        kwargs = {**_write_kwargs(options), **_condition_kwargs(options)}
        try:
            resp = await s3.put_object(Bucket=self.bucket, Key=self._root + key, Body=data, **kwargs)
        except Exception as exc:
            note_condition(exc, options)  # AlreadyExists or PreconditionFailed, whatever the body says
            raise
        return normal_etag(resp.get("ETag"))

    def delete(self, key: str) -> None:
        self._run(self._delete, key)

    async def _delete(self, key: str) -> None:
        s3 = await self._s3()
        await s3.delete_object(Bucket=self.bucket, Key=self._root + key)

    def copy(self, src: str, dst: str) -> str | None:
        return self._run(self._copy, src, dst)

    async def _copy(self, src: str, dst: str) -> str | None:
        s3 = await self._s3()
        source = {"Bucket": self.bucket, "Key": self._root + src}
        try:
            resp = await s3.copy_object(Bucket=self.bucket, Key=self._root + dst, CopySource=source)
        except Exception as exc:
            code, _status = aws_error_code(exc)
            if code != "InvalidRequest" or "copy source is larger" not in str(exc).lower():
                raise
            # Over 5 GiB CopyObject is refused: copy part by part, still server-side.
            size = (await self._head(src)).size
            await self.fs._copy_managed(f"{self.bucket}/{self._root}{src}", f"{self.bucket}/{self._root}{dst}", size)
            return (await self._head(dst)).etag
        return normal_etag(resp.get("CopyObjectResult", {}).get("ETag"))

    # -- streams ---------------------------------------------------------
    def open_read(self, key: str) -> IO[bytes]:
        # s3fs's file HEADs once for the size, then reads ahead in ranged GETs.
        return self.fs.open(  # type: ignore[no-any-return]
            f"{self.bucket}/{self._root}{key}", "rb", block_size=8 * 1024 * 1024, cache_type="readahead"
        )

    def open_write(self, key: str, options: WriteOptions, part_size: int) -> WriteStream:
        return _S3Write(self, self._root + key, options, part_size)

    def open_resumable(self, key: str, options: WriteOptions, part_size: int) -> ResumableWriteStream:
        """A multipart upload that a later process finds and continues (:mod:`portable_aws._s3_resume`)."""
        from ._s3_resume import S3ResumableWrite

        return S3ResumableWrite(self, self._root + key, options, _write_kwargs(options))

    # -- listing ---------------------------------------------------------
    def list_page(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        return self._run(self._list_page, prefix, delimiter, start_after, page_size, token)

    async def _list_page(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        s3 = await self._s3()
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self._root + prefix, "MaxKeys": page_size}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        if token:
            kwargs["ContinuationToken"] = token
        elif start_after:
            kwargs["StartAfter"] = self._root + start_after
        resp = await s3.list_objects_v2(**kwargs)
        cut = len(self._root)
        objects = [
            ObjectInfo(
                key=item["Key"][cut:],
                size=int(item.get("Size", 0)),
                etag=normal_etag(item.get("ETag")),
                modified=item.get("LastModified"),
            )
            for item in resp.get("Contents", ())
        ]
        prefixes = [p["Prefix"][cut:] for p in resp.get("CommonPrefixes", ())]
        next_token = resp.get("NextContinuationToken") if resp.get("IsTruncated") else None
        return ListPage(objects, prefixes, next_token)

    # -- leftovers -------------------------------------------------------
    def abort_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        """Abort the multipart uploads under ``prefix`` initiated more than ``older_than`` ago.

        ListMultipartUploads (every page), then AbortMultipartUpload for each
        one old enough; an upload that is gone by then (NoSuchUpload) is not
        reported. Returns ``key#upload-id`` per aborted upload, keys relative
        to the URL's prefix.
        """
        return self._run(self._abort_incomplete, prefix, older_than)

    async def _abort_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        s3 = await self._s3()
        cutoff = dt.datetime.now(dt.UTC) - older_than
        stale: list[tuple[str, str]] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self._root + prefix}
        while True:
            resp = await s3.list_multipart_uploads(**kwargs)
            for upload in resp.get("Uploads", ()):
                initiated = upload.get("Initiated")
                if initiated is not None and initiated < cutoff:
                    stale.append((upload["Key"], upload["UploadId"]))
            marker = (resp.get("NextKeyMarker"), resp.get("NextUploadIdMarker"))
            if not resp.get("IsTruncated") or marker == (kwargs.get("KeyMarker"), kwargs.get("UploadIdMarker")):
                break
            kwargs["KeyMarker"], kwargs["UploadIdMarker"] = marker
        removed: list[str] = []
        cut = len(self._root)
        for key, upload_id in stale:
            try:
                await s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            except Exception as exc:
                if aws_error_code(exc)[0] != "NoSuchUpload":
                    raise
                continue  # completed or aborted by someone else meanwhile
            removed.append(f"{key[cut:]}#{upload_id}")
        return removed

    # -- signed URLs and escape hatches ---------------------------------
    def signed_url(
        self, key: str, method: Literal["GET", "PUT"], expires: dt.timedelta, content_type: str | None
    ) -> str:
        return self._run(self._signed_url, key, method, expires, content_type)

    async def _signed_url(
        self, key: str, method: Literal["GET", "PUT"], expires: dt.timedelta, content_type: str | None
    ) -> str:
        s3 = await self._s3()
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": self._root + key}
        if method == "PUT" and content_type:
            params["ContentType"] = content_type
        operation = "get_object" if method == "GET" else "put_object"
        return await s3.generate_presigned_url(  # type: ignore[no-any-return]
            operation, Params=params, ExpiresIn=int(expires.total_seconds())
        )

    def async_driver(self) -> AsyncStorageDriver:
        """aiobotocore natively: the coroutines above, awaited on s3fs's loop (:mod:`._s3_aio`)."""
        from ._s3_aio import S3AsyncStorage

        return S3AsyncStorage(self)

    def as_(self, kind: type[Any]) -> Any:
        import s3fs

        if isinstance(self.fs, kind) or kind is s3fs.S3FileSystem:
            return self.fs
        from aiobotocore.client import AioBaseClient
        from botocore.client import BaseClient

        if kind is AioBaseClient:
            return self._run(self._s3)
        if kind is BaseClient:
            return self._boto3_client()
        return None

    def _boto3_client(self) -> Any:
        with self._client_lock:
            if self._sync_client is None:
                config = boto_config(self.options, pool=self.batch_concurrency, **self._s3_config())
                self._sync_client = new_client("s3", self.options, config)
            return self._sync_client

    def close(self) -> None:
        client, self._client = self._client, None
        creator = getattr(self.fs, "_s3creator", None)
        if client is not None and creator is not None and not self._loop.is_closed():
            try:
                self._run(creator.__aexit__, None, None, None)
            except Exception:
                pass  # closing a connection pool that already failed is not worth an error
            self.fs._s3 = None
        if self._sync_client is not None:
            self._sync_client.close()
            self._sync_client = None


def _list_keys_as_sent(client: Any) -> None:
    """Make ListObjectsV2 carry keys as XML text, not URL-encoded: what obstore does.

    botocore asks for ``encoding-type=url`` on its own and URL-decodes (``+`` as
    a space) whenever the answer says ``<EncodingType>url</EncodingType>``.
    s3s-fs echoes that element without encoding the keys, so ``a+b`` listed as
    ``a b`` and ``%20`` as a space; other S3-compatible servers have had the
    same bug. A key portable wrote has no control character, so plain XML
    carries every one of them exactly.
    """
    from botocore.handlers import set_list_objects_encoding_type_url

    client.meta.events.unregister("before-parameter-build.s3.ListObjectsV2", set_list_objects_encoding_type_url)


def _write_kwargs(options: WriteOptions) -> dict[str, Any]:
    """The headers and user metadata of a write, as PutObject and CreateMultipartUpload take them.

    Headers come only from the named options; every metadata entry is user
    metadata (``x-amz-meta-<name>``), a header-like name such as
    ``cache-control`` included.
    """
    kwargs: dict[str, Any] = {}
    if options.content_type:
        kwargs["ContentType"] = options.content_type
    if options.cache_control is not None:
        kwargs["CacheControl"] = options.cache_control
    if options.content_encoding is not None:
        kwargs["ContentEncoding"] = options.content_encoding
    if options.content_disposition is not None:
        kwargs["ContentDisposition"] = options.content_disposition
    if options.metadata:
        kwargs["Metadata"] = dict(options.metadata)
    return kwargs


def _condition_kwargs(options: WriteOptions) -> dict[str, Any]:
    """The condition of a write, as PutObject and CompleteMultipartUpload take it."""
    if options.if_none_match:
        return {"IfNoneMatch": "*"}
    if options.if_match is not None:
        return {"IfMatch": options.if_match}
    return {}


class _S3Write(WriteStream):
    """A streamed write: one PutObject if it fits one part, else a multipart upload.

    One part is held back until the next arrives, so a stream that ends
    within its first part is a single atomic PutObject with its conditions.
    Parts are uploaded in order as they fill; commit sends the conditions on
    CompleteMultipartUpload; abort (and a failed commit) aborts the upload.
    """

    def __init__(self, driver: S3Storage, full_key: str, options: WriteOptions, part_size: int) -> None:
        self._driver = driver
        self._key = full_key
        self._options = options
        self._part_size = part_size
        self._pending = bytearray()
        self._broken: BaseException | None = None
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []

    def write(self, data: bytes) -> None:
        mark = self._take(data)
        flushed = 0
        try:
            for part in self._full_parts():
                self._driver._run(self._upload_part, part)
                flushed += 1
        except Exception as exc:
            self._write_failed(exc, mark, flushed)

    # A failed write must append nothing (the Bucket may retry it): before any part of it went
    # out, the bytes are taken back; after, the stream cannot be made whole. The sync and async
    # streams (portable_aws._s3_aio) share these three steps; only their sending differs.
    def _take(self, data: bytes) -> int:
        """Buffer ``data``; return where it starts in the buffer (to take it back)."""
        if self._broken is not None:
            raise Internal("an earlier write of this stream failed part-way; it was aborted", retryable=False)
        mark = len(self._pending)
        self._pending += data
        return mark

    def _full_parts(self) -> Iterator[bytes]:
        """The parts to send now, holding one part back; each leaves the buffer once the caller sent it."""
        while len(self._pending) > self._part_size:
            yield bytes(self._pending[: self._part_size])
            del self._pending[: self._part_size]

    def _write_failed(self, exc: BaseException, mark: int, flushed: int) -> NoReturn:
        if flushed == 0:
            del self._pending[mark:]
            raise exc
        self._broken = exc
        raise Internal(
            f"a part upload failed after {flushed} part(s) of this write went out; the stream is aborted",
            retryable=False,
        ) from exc

    async def _upload_part(self, data: bytes) -> None:
        s3 = await self._driver._s3()
        if self._upload_id is None:
            resp = await s3.create_multipart_upload(
                Bucket=self._driver.bucket, Key=self._key, **_write_kwargs(self._options)
            )
            self._upload_id = resp["UploadId"]
        number = len(self._parts) + 1
        resp = await s3.upload_part(
            Bucket=self._driver.bucket, Key=self._key, UploadId=self._upload_id, PartNumber=number, Body=data
        )
        self._parts.append({"PartNumber": number, "ETag": resp["ETag"]})

    def commit(self) -> str | None:
        return self._driver._run(self._commit)

    async def _commit(self) -> str | None:
        """The commit's requests as one coroutine (one hop to s3fs's loop, from either face)."""
        self._take(b"")  # refuses a broken stream
        driver = self._driver
        if self._upload_id is None:
            return await driver._put(self._key[len(driver._root) :], bytes(self._pending), self._options)
        if self._pending:
            await self._upload_part(bytes(self._pending))
            self._pending.clear()
        return await self._complete()

    async def _complete(self) -> str | None:
        s3 = await self._driver._s3()
        try:
            resp = await s3.complete_multipart_upload(
                Bucket=self._driver.bucket,
                Key=self._key,
                UploadId=self._upload_id,
                MultipartUpload={"Parts": self._parts},
                **_condition_kwargs(self._options),
            )
        except Exception as exc:
            note_condition(exc, self._options)
            code, _status = aws_error_code(exc)
            if code in ("PreconditionFailed", "NoSuchKey", "ConditionalRequestConflict") or _status == 412:
                await self._abort()  # the condition failed for good: free the parts now
            raise
        self._upload_id = None
        return normal_etag(resp.get("ETag"))

    def abort(self) -> None:
        self._pending.clear()
        if self._upload_id is not None:
            self._driver._run(self._abort)

    async def _abort(self) -> None:
        upload_id, self._upload_id = self._upload_id, None
        if upload_id is None:
            return
        s3 = await self._driver._s3()
        try:
            await s3.abort_multipart_upload(Bucket=self._driver.bucket, Key=self._key, UploadId=upload_id)
        except Exception as exc:
            if aws_error_code(exc)[0] != "NoSuchUpload":
                raise
