"""``s3://...?engine=obstore`` — Amazon S3 (and S3-compatible stores) on obstore (Rust object_store).

This is the default engine for ``s3://`` wherever ``portable-cloud[obstore]`` is
installed; ``?engine=fsspec`` picks the s3fs driver (:mod:`portable_aws.s3`),
which takes the same URL options.

URLs:
    ``s3://BUCKET`` or ``s3://BUCKET/PREFIX``. With a prefix every key is
    stored under ``PREFIX/``. The bucket must exist.

Options (the same as the fsspec engine's):
    ``region`` (str): the bucket's region, e.g. ``eu-west-1``. Defaults to
        ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, else ``us-east-1``.
    ``endpoint_url`` (str): another endpoint (moto, MinIO, LocalStack, a VPC
        endpoint). Defaults to AWS (or ``AWS_ENDPOINT_URL``).
    ``profile`` (str): a profile of ``~/.aws/config``, read through boto3's
        credential chain (needs boto3). Defaults to the chain described below.
    ``addressing_style`` (``auto`` | ``path`` | ``virtual``): defaults to
        ``path`` with an ``endpoint_url`` and ``virtual`` on AWS.
    ``timeout`` (float): per-request timeout in seconds. Defaults to 30.
    ``concurrency`` (int): objects in flight in ``get_many`` / ``put_many`` /
        ``delete_many``. Defaults to 16.
    ``sign_payload`` (bool): put the body's SHA-256 into the SigV4 signature.
        Defaults to true over ``http://`` and false over ``https://``, where TLS
        protects the body (``UNSIGNED-PAYLOAD``, as botocore does over HTTPS
        and OpenDAL always does); hashing costs about 2.5 ms per MiB on both
        ends. An engine-specific option: the fsspec engine does not take it.

Credentials:
    Never in the URL. ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /
    ``AWS_SESSION_TOKEN`` from the environment are used directly. Otherwise,
    when a profile is named (``profile=``, ``AWS_PROFILE``) or an ``~/.aws``
    configuration exists and boto3 is installed, boto3's chain supplies them
    (``obstore.auth.boto3``); else object_store's own chain (web identity,
    ECS/EKS container credentials, EC2 instance metadata).

Keys and limits:
    A key with the URL's prefix is at most 1,024 UTF-8 bytes
    (``capabilities.max_key_bytes`` subtracts the prefix). Bucket names follow
    S3's rules (InvalidURL otherwise). One ``put`` sends at most 5 GiB.
    User metadata is at most 2 KiB.

Batch reads:
    ``get_many`` of small bodies over ``http://`` with static credentials sends
    GETs signed here on kept-alive connections of the private loop
    (:mod:`portable_obstore._s3_reads`, docs/adapters/obstore.md): about half
    the client CPU of the fastest library call; an answer it does not read is
    read again through obstore.

Retries:
    obstore's retries are off (``retry_config={"max_retries": 0}``); only
    :mod:`portable.resilience` retries.

As:
    ``obstore.store.S3Store`` (the store this driver uses, without the prefix).

Capabilities:
    conditional_create (``If-None-Match: *``, obstore ``PutMode`` create),
    conditional_update (``If-Match``, ``PutMode`` update), conditional
    streaming writes (see below), signed_urls (SigV4 via ``obstore.sign``),
    server_side_copy (CopyObject), multipart (obstore's multipart writer),
    resumable_writes (a multipart upload of requests signed here, found again by
    ListMultipartUploads and ListParts: :mod:`portable_obstore._s3_resume`).

Metadata and headers:
    Every metadata entry is user metadata (``x-amz-meta-<name>``), as on the
    fsspec engine; headers come only from ``content_type``, ``cache_control``,
    ``content_encoding`` and ``content_disposition``, and ``head`` reports
    them. obstore reads an attribute *named* like a header (``cache-control``,
    ``content-type``, ``storage-class``, ...) as that header and cannot send
    ``Attribute::Metadata`` under such a name, so a write whose metadata has
    one is sent as a PutObject this driver signs itself (:class:`_SignedS3`,
    SigV4 with the store's credentials); streamed, such a write is spooled
    and sent whole.

Leftovers:
    ``abort_incomplete`` lists (ListMultipartUploads) and aborts
    (AbortMultipartUpload) with signed requests of its own: obstore has
    neither. Credentials: the store's provider, else ``AWS_*`` variables,
    else boto3's chain where boto3 is installed (MissingDependency otherwise).

Errors:
    obstore's own types (NotFound, AlreadyExists for a refused create-only
    write, Precondition for a refused ``if_match``), else the HTTP status; an
    answer to a request signed here is :class:`S3RequestFailed`, classified by
    its S3 code and status: 412 by the condition the request carried,
    NotImplemented / 501 Unsupported.

Known differences from the fsspec engine:
    * A streamed write *with a condition* is spooled (memory up to one part,
      then a temporary file) and sent as one conditional PutObject at close,
      because obstore's multipart writer cannot carry conditions; it is
      therefore limited to 5 GiB. Unconditional streams are multipart.
    * ``copy`` returns None (CopyObject's etag is not reported by obstore);
      ``head`` gives it.
    * ``put(..., if_match=...)`` on a missing key raises PreconditionFailed.
    * A streamed write whose metadata has a header-like name is spooled and
      sent as one PutObject (up to 5 GiB), like a conditional one.
    * ``delete_many`` sends DeleteObjects requests of up to 1,000 keys (object_store batches them).
    * A delimited ``list`` reads the whole level (obstore's
      ``list_with_delimiter``) for each page; flat listings page natively
      with ``start-after``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import http.client
import os
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from portable.driver.conditions import refused_condition_code
from portable.driver.http import code_of_status, normal_etag
from portable.driver.limits import S3_MAX_KEY_BYTES, S3_MAX_PUT_BYTES, s3_capabilities
from portable.driver.naming import check_s3_bucket_name, parse_s3_url
from portable.driver.redaction import redact
from portable.driver.storage import ResumableWriteStream, StorageDriver, WriteOptions, WriteStream
from portable.errors import ErrorCode, MissingDependency
from portable.resilience import attempt_timeout, remaining
from portable.urls import ParsedURL

from ._common import (
    _HTTP_CODES,
    NO_RETRIES,
    ObstoreStorage,
    StreamFailed,
    bounded,
    client_options,
    header_attributes,
    header_like_names,
    read_whole_async,
    run_batch,
    run_on_loop,
    small_bodies,
)
from ._s3_reads import ErrorAnswer, FastReads, fast_reads_for
from ._s3_resume import CompleteFailed, S3ResumableWrite
from ._s3_signed import (
    S3RequestFailed,
    _quote,
    _SignedS3,
    answer_error,
    signing_key,
    sigv4_headers,
    static_credentials,
)

__all__ = ["ObstoreS3Storage", "S3RequestFailed", "check_bucket_name", "sigv4_headers"]

MAX_PUT_BYTES = S3_MAX_PUT_BYTES
MAX_KEY_BYTES = S3_MAX_KEY_BYTES
check_bucket_name = check_s3_bucket_name


def _boto3_wanted(profile: str | None) -> bool:
    if profile:
        return True
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return False
    if os.environ.get("AWS_PROFILE"):
        return True
    home = Path.home() / ".aws"
    files = [os.environ.get("AWS_SHARED_CREDENTIALS_FILE"), os.environ.get("AWS_CONFIG_FILE")]
    return any(Path(f).is_file() for f in files if f) or (home / "credentials").is_file() or (home / "config").is_file()


#: The longest stream sent as one PutObject when its length is known (``open(..., size=)``): rclone's
#: default ``--s3-upload-cutoff``; a longer one is a multipart upload (a failed part is resent alone).
SINGLE_PUT_CUTOFF = 200 * 1024 * 1024

#: Bytes per signed chunk of a streamed PutObject whose payload is signed (``aws-chunked``).
SIGNED_CHUNK = 1024 * 1024

_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_SIGNATURE_LINE = len(";chunk-signature=") + 64 + 2


def _framed(n: int) -> int:
    """The length on the wire of one ``aws-chunked`` chunk of ``n`` bytes."""
    return len(f"{n:x}") + _SIGNATURE_LINE + n + 2


class _SizedPut(WriteStream):
    """One PutObject of a known length whose body is streamed from the writes (``open(..., size=)``).

    The request's headers go out at open, each :meth:`write` onto the socket
    (backpressure is the socket's), and :meth:`commit` reads the answer. The
    last byte written (signed: the CRLF that ends the last chunk, and the
    final empty chunk) is held back until :meth:`commit`, so the server never
    has the whole body before the caller commits: an :meth:`abort` (or a
    killed process) closes the connection with the body short, and S3 stores
    nothing; what was sent is not kept here. With ``sign_payload`` (the
    default on ``http://``) the body is sent ``aws-chunked`` with every
    :data:`SIGNED_CHUNK` signed (``STREAMING-AWS4-HMAC-SHA256-PAYLOAD``);
    otherwise ``UNSIGNED-PAYLOAD``. Metadata go as ``x-amz-meta-<name>``,
    as in :meth:`_SignedS3.put_object`. The etag of the answer is the MD5 of
    the body, which the caller verifies. A failed send spoils the stream
    (StreamFailed, not retryable: a body cannot be rewound).
    """

    def __init__(self, signed: _SignedS3, full_key: str, options: WriteOptions, size: int) -> None:
        self._what = f"PUT {full_key!r}"
        self._chunked = signed.sign_payload
        headers = header_attributes(options)
        for name, value in options.metadata.items():
            headers[f"x-amz-meta-{name}"] = value
        if self._chunked:
            full, rest = divmod(size, SIGNED_CHUNK)
            length = full * _framed(SIGNED_CHUNK) + (_framed(rest) if rest else 0) + _framed(0)
            encoding = headers.pop("Content-Encoding", None)
            headers["content-encoding"] = "aws-chunked" + (f",{encoding}" if encoding else "")
            headers["x-amz-decoded-content-length"] = str(size)
            payload = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
        else:
            length, payload = size, "UNSIGNED-PAYLOAD"
        headers["content-length"] = str(length)
        base = urllib.parse.urlsplit(signed.base_url)
        path = base.path + "/" + _quote(full_key, "/~")
        access_key, secret, token = signed._credentials()
        now = dt.datetime.now(dt.UTC)
        day = now.strftime("%Y%m%d")
        self._stamp = now.strftime("%Y%m%dT%H%M%SZ")
        self._scope = f"{day}/{signed.region}/s3/aws4_request"
        self._signing_key = signing_key(secret, day, signed.region)
        sent = sigv4_headers(
            "PUT", base.netloc, path, "", headers, payload,
            credentials=(access_key, secret, token), region=signed.region, now=now,
        )
        self._previous = sent["authorization"].rsplit("Signature=", 1)[1]
        limit = attempt_timeout()
        timeout = max(0.001, signed.timeout if limit is None else min(limit, signed.timeout))
        kind = http.client.HTTPSConnection if base.scheme == "https" else http.client.HTTPConnection
        self._connection: http.client.HTTPConnection = kind(base.hostname or "", base.port, timeout=timeout)
        self._carry = bytearray()
        self._held: tuple[bytes, ...] = ()
        self._failed: BaseException | None = None
        self._spent = False
        try:
            self._connection.putrequest("PUT", path, skip_host=True, skip_accept_encoding=True)
            for name, value in sent.items():
                self._connection.putheader(name, value)
            self._connection.endheaders()
        except BaseException:
            self._connection.close()
            raise

    def _check(self) -> None:
        if self._failed is not None:
            raise StreamFailed("an earlier write of this stream failed; it was aborted") from self._failed
        if self._spent:
            raise StreamFailed("this stream's request was sent already: write again from the start")

    def _send(self, pieces: tuple[bytes | memoryview, ...], keep: bytes) -> None:
        """Send what was held, then ``pieces``; hold ``keep`` (a few bytes, copied: the caller's
        buffer is free once this returns) as the last the server is to get before the commit."""
        for piece in (*self._held, *pieces):
            self._connection.send(piece)
        self._held = (keep,) if keep else ()

    def _frame(self, data: bytes | memoryview) -> None:
        """Sign and queue one ``aws-chunked`` chunk (each signature chains on the one before)."""
        digest = hashlib.sha256(data).hexdigest()
        to_sign = f"AWS4-HMAC-SHA256-PAYLOAD\n{self._stamp}\n{self._scope}\n{self._previous}\n{_EMPTY_SHA256}\n{digest}"
        self._previous = hmac.new(self._signing_key, to_sign.encode(), hashlib.sha256).hexdigest()
        self._send((f"{len(data):x};chunk-signature={self._previous}\r\n".encode(), data), b"\r\n")

    def write(self, data: bytes) -> None:
        self._check()
        try:
            if not self._chunked:
                if data:
                    view = memoryview(data)
                    self._send((view[:-1],), bytes(view[-1:]))
                return
            view = memoryview(data)
            if self._carry:
                need = SIGNED_CHUNK - len(self._carry)
                self._carry += view[:need]
                view = view[need:]
                if len(self._carry) < SIGNED_CHUNK:
                    return
                self._frame(bytes(self._carry))
                self._carry.clear()
            while len(view) >= SIGNED_CHUNK:
                self._frame(view[:SIGNED_CHUNK])
                view = view[SIGNED_CHUNK:]
            if view:
                self._carry += view
        except Exception as exc:
            self._failed = exc
            self._connection.close()
            raise StreamFailed(f"sending the body of {self._what} failed: {exc}") from exc

    def commit(self) -> str | None:
        self._check()
        self._spent = True
        try:
            if self._chunked:
                if self._carry:
                    self._frame(bytes(self._carry))
                self._frame(b"")
            self._send((), b"")
            response = self._connection.getresponse()
            answer = response.read()
            etag = response.getheader("etag")
        except Exception as exc:
            self._failed = exc
            raise StreamFailed(f"sending {self._what} failed: {exc}") from exc
        finally:
            self._held = ()
            self._connection.close()
        if response.status >= 300:
            raise answer_error(self._what, response.status, answer)
        return normal_etag(etag)

    def abort(self) -> None:
        """Close the connection with the body short of its length: the server stores nothing."""
        self._spent = True
        self._held = ()
        self._carry.clear()
        self._connection.close()


class ObstoreS3Storage(ObstoreStorage):
    """Objects in one S3 bucket, optionally under a prefix, on obstore's S3Store."""

    scheme = "s3"

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        profile: str | None = None,
        addressing_style: Literal["auto", "path", "virtual"] | None = None,
        timeout: float = 30.0,
        concurrency: int = 16,
        sign_payload: bool | None = None,
    ) -> None:
        from obstore.store import S3Store

        self.bucket = check_bucket_name(bucket)
        prefix = prefix.strip("/")
        capabilities = s3_capabilities(bucket, prefix)
        endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        # shown in reprs and errors: an endpoint from AWS_ENDPOINT_URL may carry user info
        self.endpoint = redact(endpoint.rstrip("/")) if endpoint else f"https://s3.{region or 'us-east-1'}.amazonaws.com"
        style = addressing_style or ("path" if endpoint else "virtual")
        config: dict[str, Any] = {"virtual_hosted_style_request": style == "virtual" and not endpoint}
        if endpoint:
            endpoint = endpoint.rstrip("/")
            if style == "virtual":  # object_store wants the bucket in a virtual-hosted endpoint
                scheme, _, host = endpoint.partition("://")
                config["virtual_hosted_style_request"] = True
                config["endpoint"] = f"{scheme}://{self.bucket}.{host}"
            else:
                config["endpoint"] = endpoint
        if region:
            config["region"] = region
        if sign_payload is None:
            sign_payload = self.endpoint.startswith("http://")
        config["unsigned_payload"] = not sign_payload
        provider = None
        if _boto3_wanted(profile):
            try:
                import boto3  # type: ignore[import-untyped,unused-ignore]
                from obstore.auth.boto3 import Boto3CredentialProvider
            except ImportError as exc:
                if profile:
                    raise MissingDependency(
                        "s3://...?profile= on the obstore engine reads ~/.aws through boto3: pip install boto3"
                    ) from exc
            else:
                session = boto3.Session(profile_name=profile) if profile else boto3.Session()
                if session.get_credentials() is not None:
                    provider = Boto3CredentialProvider(session)
                    if not region and session.region_name:
                        config["region"] = session.region_name
        store = S3Store(
            self.bucket,
            config=config,  # type: ignore[arg-type]
            client_options=client_options(timeout, endpoint),  # type: ignore[arg-type]
            retry_config=NO_RETRIES,  # type: ignore[arg-type]
            credential_provider=provider,
        )
        super().__init__(store, prefix, concurrency=concurrency)
        self.capabilities = dataclasses.replace(capabilities, resumable_writes=True)
        signing_region = str(config.get("region") or "us-east-1")
        if "endpoint" in config:
            base = config["endpoint"] if config["virtual_hosted_style_request"] else f"{config['endpoint']}/{self.bucket}"
        elif config["virtual_hosted_style_request"]:
            base = f"https://{self.bucket}.s3.{signing_region}.amazonaws.com"
        else:
            base = f"https://s3.{signing_region}.amazonaws.com/{self.bucket}"
        self._signed = _SignedS3(self, base, signing_region, timeout, sign_payload)
        #: batch reads of small bodies over plain HTTP with static credentials (None: obstore reads)
        self.fast_reads: FastReads | None = fast_reads_for(base, signing_region, timeout, provider is not None)

    @classmethod
    def from_url(cls, url: ParsedURL) -> ObstoreS3Storage:
        where = parse_s3_url(url, default_concurrency=16)
        sign_payload = url.take("sign_payload", bool, None)
        url.done()
        return cls(
            where.bucket,
            where.prefix,
            region=where.aws.region,
            endpoint_url=where.aws.endpoint_url,
            profile=where.aws.profile,
            addressing_style=where.addressing_style,
            timeout=where.aws.timeout,
            concurrency=where.concurrency,
            sign_payload=sign_payload,
        )

    def __repr__(self) -> str:
        return f"ObstoreS3Storage(bucket={self.bucket!r}, prefix={self.prefix!r}, endpoint={self.endpoint!r})"

    def signed_url(
        self, key: str, method: Literal["GET", "PUT"], expires: dt.timedelta, content_type: str | None
    ) -> str:
        import obstore

        return obstore.sign(self.store, method, self._root + key, expires)

    # -- what obstore cannot send: user metadata named like a header ----------
    def etag_of(self, result: Mapping[str, Any]) -> str | None:
        return normal_etag(result.get("e_tag"))

    def sent_whole(self, options: WriteOptions) -> bool:
        return super().sent_whole(options) or bool(header_like_names(options.metadata))

    def signs_itself(self, options: WriteOptions) -> bool:
        return bool(header_like_names(options.metadata))

    def put(self, key: str, data: bytes, options: WriteOptions) -> str | None:
        """PutObject through obstore; one signed here when a metadata name is header-like.

        obstore sends an attribute named ``cache-control`` (or another header's
        name) as that header, so such a write is sent by :class:`_SignedS3`
        with every entry as ``x-amz-meta-<name>``, as the fsspec engine sends it.
        """
        if self.signs_itself(options):
            return self._signed.put_object(self._root + key, data, options)
        return super().put(key, data, options)

    def put_many(
        self, items: list[tuple[str, bytes]], options: WriteOptions
    ) -> Iterator[tuple[str, str | BaseException | None]]:
        if header_like_names(options.metadata):
            yield from StorageDriver.put_many(self, items, options)  # threads, each a signed put
            return
        yield from super().put_many(items, options)

    def open_sized_write(self, key: str, options: WriteOptions, size: int) -> WriteStream | None:
        """One streamed PutObject of ``size`` bytes (:class:`_SizedPut`), as rclone sends an object under
        its upload cutoff; None (a multipart upload) above :data:`SINGLE_PUT_CUTOFF`, and for a
        conditional write (spooled and sent with its condition, as without ``size``)."""
        if size > SINGLE_PUT_CUTOFF or ObstoreStorage.sent_whole(self, options):
            return None
        return _SizedPut(self._signed, self._root + key, options, size)

    def open_resumable(self, key: str, options: WriteOptions, part_size: int) -> ResumableWriteStream:
        """A multipart upload of signed requests that a later process finds and continues
        (obstore's own writer cannot be resumed: see :mod:`portable_obstore._s3_resume`)."""
        return S3ResumableWrite(self._signed, self._root + key, options)

    # -- leftovers -------------------------------------------------------
    def abort_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        """Abort the multipart uploads under ``prefix`` initiated more than ``older_than`` ago.

        obstore has no ListMultipartUploads: both requests are signed here
        (:class:`_SignedS3`). Returns ``key#upload-id`` per aborted upload, keys
        relative to the URL's prefix; one that is gone meanwhile is not reported.
        """
        return [
            f"{key[self._cut:]}#{upload_id}"
            for key, upload_id in self._stale_uploads(prefix, older_than)
            if self._signed.abort_upload(key, upload_id)
        ]

    def list_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        """The ``key#upload-id`` of each multipart upload :meth:`abort_incomplete` would abort now."""
        return sorted(f"{key[self._cut:]}#{upload_id}" for key, upload_id in self._stale_uploads(prefix, older_than))

    def _stale_uploads(self, prefix: str, older_than: dt.timedelta) -> list[tuple[str, str]]:
        cutoff = dt.datetime.now(dt.UTC) - older_than
        return [
            (key, upload_id)
            for key, upload_id, initiated in self._signed.multipart_uploads(self._root + prefix)
            if initiated is not None and initiated <= cutoff
        ]

    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, S3RequestFailed | CompleteFailed):
            if exc.status == 412 or exc.code == "PreconditionFailed":
                return refused_condition_code(exc)
            if exc.code == "NotImplemented" or exc.status == 501:
                return ErrorCode.UNSUPPORTED
            if exc.code in ("NoSuchKey", "NoSuchBucket", "NoSuchUpload"):
                return ErrorCode.NOT_FOUND
            if exc.code == "SlowDown":
                return ErrorCode.THROTTLED
            return code_of_status(exc.status, _HTTP_CODES)
        return super().code_of(exc)

    def get_many(self, keys: list[str]) -> Iterator[tuple[str, bytes | BaseException]]:
        """Every object of ``keys``; small bodies over plain HTTP on the fast path of :mod:`._s3_reads`.

        While the last batch read small bodies (as for the blocking path of the other stores), an
        ``http://`` endpoint with static credentials is read by signed GETs on keep-alive
        connections of the private loop, ``batch_concurrency`` in flight. An error answer is an
        :class:`S3RequestFailed` (404 NoSuchKey is NotFound, 503 SlowDown Throttled, as for the
        other requests signed here); a key whose answer this path does not read (a redirect, a
        403, a chunked or malformed answer, a dropped connection, a timeout) is read again
        through obstore, whose result or error it gets. Otherwise obstore reads every key
        (``ObstoreStorage.get_many``).
        """
        credentials = self.fast_credentials()
        if credentials is None:
            yield from super().get_many(keys)
            return
        fast_get = self.fast_get

        async def one(key: str) -> bytes:
            return await fast_get(key, credentials)

        results = run_batch(bounded(one, keys, self.batch_concurrency), len(keys), remaining())
        self.small_reads = small_bodies(results)
        yield from zip(keys, results, strict=True)

    def fast_credentials(self) -> tuple[str, str, str | None] | None:
        """The credentials of a read on the fast path now, or None when obstore reads.

        None without a fast path (see :func:`._s3_reads.fast_reads_for`), after a batch of large
        bodies (``small_reads`` is False), and when the environment holds no static credentials.
        """
        if self.fast_reads is None or not self.small_reads:
            return None
        return static_credentials()

    async def fast_get(self, key: str, credentials: tuple[str, str, str | None]) -> bytes:
        """One whole object on the fast path (on the running loop); through obstore where it hands over.

        Raises:
            S3RequestFailed: S3 answered an error (404 NoSuchKey, 503 SlowDown, ...).
        """
        assert self.fast_reads is not None
        full = self._root + key
        try:
            body = await self.fast_reads.get(full, credentials)
        except ErrorAnswer as exc:
            raise answer_error(f"GET {full!r}", exc.status, exc.body) from None
        if body is None:
            return await read_whole_async(self.store, full)
        return body

    def close(self) -> None:
        """Close the fast path's idle connections (obstore's pool closes with the store)."""
        if self.fast_reads is not None:
            self.fast_reads.close()
        super().close()

    def delete_many(self, keys: list[str]) -> Iterator[tuple[str, BaseException | None]]:
        """One DeleteObjects request per chunk (S3 counts a missing key as deleted); key by key if it fails."""
        import obstore

        paths = [self._root + k for k in keys]

        async def bulk() -> None:
            await obstore.delete_async(self.store, paths)

        try:
            run_on_loop(bulk(), remaining())
        except Exception:
            yield from super().delete_many(keys)  # find out which keys failed, and why
            return
        for key in keys:
            yield key, None
