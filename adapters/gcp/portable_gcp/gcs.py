"""``gs://`` — Google Cloud Storage, through gcsfs's HTTP client.

URLs:
    ``gs://BUCKET`` or ``gs://BUCKET/PREFIX`` (``gcs://`` is the same). Keys
    are relative to PREFIX: ``put("a/b", ...)`` on ``gs://data/team`` writes
    the object ``team/a/b`` of bucket ``data``.

Options:
    ``project`` (str): the project, needed only to create or list buckets.
        Defaults to ``$GOOGLE_CLOUD_PROJECT``, else gcsfs's default.
    ``endpoint_url`` (str): where requests go, such as an emulator
        (``http://127.0.0.1:4443``). Defaults to ``$STORAGE_EMULATOR_HOST``,
        else ``https://storage.googleapis.com``.
    ``token`` (str): the credentials, as gcsfs names them: ``anon``,
        ``google_default``, ``cloud`` (the metadata server) or the path of a
        JSON key file. Defaults to ``anon`` when an endpoint is given (an
        emulator), else ``google_default``.
    ``signing_key_file`` (str): the path of a service-account JSON key that
        signs URLs. Defaults to the ``token`` credentials when they can sign
        (a service-account key); otherwise ``signed_urls`` is off.
    ``timeout`` (float): seconds to connect, and to wait between bytes, on
        each request. Defaults to 60.
    ``concurrency`` (int): objects moved at once by ``get_many``,
        ``put_many`` and ``delete_many``. Defaults to 16.

Names and keys:
    Bucket names are 3-63 characters of ``a-z 0-9 - _ .`` (up to 222 with
    dots, 63 between dots), starting and ending with a letter or digit, not
    an IP address, not starting with ``goog`` and not containing ``google``;
    a bad name raises InvalidURL before any request. A key is at most 1,024
    UTF-8 bytes *including the URL's prefix and its slash*, so
    ``capabilities.max_key_bytes`` shrinks by the prefix's length.

Metadata and headers:
    User metadata is the object's ``metadata`` map and nothing else: a name
    such as ``cache-control`` stays metadata. GCS names are case-sensitive
    and ``head`` reports each exactly as stored (a native ``Owner`` reads as
    ``Owner``, apart from an ``owner``); portable writes names lower-cased
    (the Bucket's rule), and nothing is encoded. ``content_type``,
    ``cache_control``, ``content_encoding`` and ``content_disposition`` are
    the object's ``contentType``, ``cacheControl``, ``contentEncoding`` and
    ``contentDisposition``, reported by ``head``. Reads return the bytes as
    stored: an object with ``contentEncoding: gzip`` is not gunzipped (the
    driver accepts gzip, so GCS does not transcode, and does not decompress).
    The whole table: docs/providers.md, "metadata names".

Leftovers:
    ``abort_incomplete`` returns ``[]``: a killed streamed write leaves only
    a resumable session, which no API lists and which expires in a week.

Etags and conditions:
    The etag portable reports is the object's *generation* (a decimal
    string), not GCS's content ``etag``: ``put(..., if_match=etag)`` sends
    ``ifGenerationMatch=etag`` and ``if_none_match="*"`` sends
    ``ifGenerationMatch=0``, so compare-and-swap is enforced by the server.
    An etag that is not a generation (from another provider) fails with
    PreconditionFailed without a request.

Writes:
    ``put`` of up to 32 MiB is one multipart upload request; larger puts and
    streamed writes (``open(key, "wb")``) use a resumable upload session in
    chunks of ``part_size`` rounded down to a multiple of 256 KiB. A stream
    that never fills a part is sent as one simple upload at ``close``.
    Nothing is visible before the last chunk; ``abort`` cancels the session
    (``DELETE``), and an abandoned session expires after a week, so a failed
    write never leaves a partial object. A chunk request that fails is
    retried by portable after asking the session how much it kept
    (``Content-Range: bytes */*``), so a retry never duplicates bytes.

Reads:
    ``get_range`` past the end returns ``b""`` (GCS answers 416; the driver
    hides it). ``open(key)`` returns gcsfs's buffered, seekable file.

Retries:
    gcsfs retries each request six times inside ``GCSFileSystem._request``
    (a ``retry_request(retries=6)`` decorator bound when the class is
    defined, so neither ``GCSFileSystem.retries`` nor a constructor argument
    changes it). This driver uses a subclass whose ``_request`` is the
    undecorated function (``inspect.unwrap``), so each portable attempt is
    exactly one HTTP request and :mod:`portable.resilience` owns the retry
    budget. The driver never calls gcsfs helpers that retry on their own
    (``rm`` of many files, ``get_file``). It uses the core
    ``gcsfs.core.GCSFileSystem``, never ``ExtendedGcsFileSystem``, so no
    gRPC bucket-layout probe runs (``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT`` does
    not matter here; raw gcsfs on an emulator needs it set to ``false``).

As:
    ``gcsfs.GCSFileSystem`` (``gcsfs.core.GCSFileSystem``): the retry-free
    instance this bucket uses; ``fsspec.AbstractFileSystem`` too.
    ``google.auth.credentials.Credentials``: the signing credentials, when
    there are any.

Capabilities:
    conditional_create, conditional_update, conditional_streaming_write,
    server_side_copy (``rewriteTo``), multipart (resumable uploads, parts of
    at least 256 KiB), signed_urls (V4, only with signing credentials);
    objects up to 5 TiB; user metadata up to 8 KiB.

Known differences:
    * ``list`` skips "folder placeholder" objects whose names end in ``/``
      (other tools create them); they cannot be portable keys.
    * Zonal (Rapid) and hierarchical-namespace buckets are not supported.
    * fake-gcs-server (the emulator) enforces generation preconditions on
      simple uploads only, not on resumable ones; it also treats a session
      status query (``bytes */*``) as a final chunk, and with a delimiter it
      returns every common prefix on the first page.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import gzip
import inspect
import json
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import IO, Any, Literal, TypeVar
from urllib.parse import quote

import aiohttp
import fsspec.asyn  # type: ignore[import-untyped]
import gcsfs.core  # type: ignore[import-untyped]
import gcsfs.retry  # type: ignore[import-untyped]
import google.auth.credentials
import google.auth.exceptions
import requests.exceptions

from portable.driver import Classifier
from portable.driver.conditions import generation_precondition
from portable.driver.http import HTTP_STATUS_CODES, code_of_status, range_header
from portable.driver.limits import GCS_MAX_METADATA_BYTES, GCS_MAX_OBJECT_BYTES, gcs_capabilities
from portable.driver.naming import (
    GOOGLE_STORAGE_ENDPOINT,
    check_gcs_bucket_name,
    gcs_endpoint,
    parse_gcs_url,
)
from portable.driver.storage import (
    ListPage,
    ObjectInfo,
    StorageDriver,
    WriteOptions,
    WriteStream,
    check_key,
)
from portable.errors import (
    AlreadyExists,
    ErrorCode,
    InvalidKey,
    InvalidURL,
    PortableError,
    PreconditionFailed,
)
from portable.resilience import attempt_timeout
from portable.urls import ParsedURL

from ._gcs_resume import GCSResumeMixin, resumable

__all__ = ["GCSStorage", "check_bucket_name"]

T = TypeVar("T")

GOOGLE_ENDPOINT = GOOGLE_STORAGE_ENDPOINT
#: Resumable chunks must be multiples of this (all but the last).
CHUNK_UNIT = 256 * 1024
#: ``put`` of more than this many bytes uses a resumable session.
SIMPLE_UPLOAD_LIMIT = 32 * 1024 * 1024
#: Chunk size of a large ``put``.
PUT_CHUNK = 16 * 1024 * 1024
MAX_OBJECT_BYTES = GCS_MAX_OBJECT_BYTES
MAX_METADATA_BYTES = GCS_MAX_METADATA_BYTES

check_bucket_name = check_gcs_bucket_name
#: GCS's 409 is a conflict with an existing resource, not a race to retry.
_HTTP_CODES = {**HTTP_STATUS_CODES, 409: ErrorCode.ALREADY_EXISTS}


class _SingleShotGCSFileSystem(gcsfs.core.GCSFileSystem):  # type: ignore[misc]
    """gcsfs with its per-request retry loop removed: one call, one HTTP request.

    ``retry_request(retries=6)`` wraps these methods when gcsfs's class body
    runs; ``inspect.unwrap`` returns the functions it wrapped.
    """

    retries = 1
    _request = inspect.unwrap(gcsfs.core.GCSFileSystem._request)
    _get_file_request = inspect.unwrap(gcsfs.core.GCSFileSystem._get_file_request)
    _get_file_concurrent = inspect.unwrap(gcsfs.core.GCSFileSystem._get_file_concurrent)


def _parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _info(key: str, resource: Mapping[str, Any], with_metadata: bool) -> ObjectInfo:
    """The ObjectInfo of a JSON API object resource; metadata names as GCS keeps them (case too)."""
    if not with_metadata:
        return ObjectInfo(
            key=key,
            size=int(resource.get("size", 0)),
            etag=str(resource["generation"]) if "generation" in resource else None,
            modified=_parse_time(resource.get("updated")),
            content_type=resource.get("contentType"),
        )
    return ObjectInfo(
        key=key,
        size=int(resource.get("size", 0)),
        etag=str(resource["generation"]) if "generation" in resource else None,
        modified=_parse_time(resource.get("updated")),
        content_type=resource.get("contentType"),
        metadata=dict(resource.get("metadata") or {}),
        cache_control=resource.get("cacheControl"),
        content_encoding=resource.get("contentEncoding"),
        content_disposition=resource.get("contentDisposition"),
    )


def _resource(name: str, options: WriteOptions) -> dict[str, Any]:
    """The JSON API object resource of a write: content type, the three headers, user metadata.

    Metadata goes only to ``metadata`` (GCS keeps it apart from headers), so a
    metadata name such as ``cache-control`` stays user metadata.
    """
    resource: dict[str, Any] = {"name": name, "contentType": options.content_type or "application/octet-stream"}
    if options.cache_control is not None:
        resource["cacheControl"] = options.cache_control
    if options.content_encoding is not None:
        resource["contentEncoding"] = options.content_encoding
    if options.content_disposition is not None:
        resource["contentDisposition"] = options.content_disposition
    if options.metadata:
        resource["metadata"] = dict(options.metadata)
    return resource


def _confirmed_bytes(headers: Mapping[str, str]) -> int:
    """How many bytes a resumable session holds, from its ``Range: bytes=0-N`` header."""
    value = headers.get("Range") or headers.get("range")
    if not value:
        return 0
    return int(value.rpartition("-")[2]) + 1


class GCSClassifier(Classifier):
    """Classifies gcsfs, aiohttp and google-auth errors by HTTP status and kind.

    gcsfs raises ``HttpError`` with the status as ``code``, FileNotFoundError
    for a 404 and FileExistsError for every 412.
    """

    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, PortableError):
            return exc.code
        if isinstance(exc, FileNotFoundError):
            return ErrorCode.NOT_FOUND
        if isinstance(exc, FileExistsError):
            return ErrorCode.PRECONDITION_FAILED
        if isinstance(exc, gcsfs.retry.HttpError):
            return _http_code(exc.code)
        if isinstance(exc, TimeoutError):  # asyncio and aiohttp timeouts, fsspec's FSTimeoutError
            return ErrorCode.DEADLINE_EXCEEDED
        if isinstance(exc, aiohttp.ClientResponseError):
            return _http_code(exc.status)
        if isinstance(
            exc,
            aiohttp.ClientError
            | requests.exceptions.RequestException
            | ConnectionError
            | gcsfs.retry.ChecksumError
            | google.auth.exceptions.TransportError,
        ):
            return ErrorCode.UNAVAILABLE
        if isinstance(exc, google.auth.exceptions.RefreshError):
            return ErrorCode.UNAVAILABLE if getattr(exc, "retryable", False) else ErrorCode.PERMISSION_DENIED
        if isinstance(exc, google.auth.exceptions.GoogleAuthError):
            return ErrorCode.PERMISSION_DENIED
        if isinstance(exc, OSError) and str(exc).startswith("Forbidden"):
            return ErrorCode.PERMISSION_DENIED
        if isinstance(exc, ValueError) and str(exc).startswith("Bad Request"):
            return ErrorCode.INVALID_ARGUMENT
        return super().code_of(exc)


class _GCSBatches:
    """The batch methods: one asyncio.gather on gcsfs's loop, not a thread per object.

    Mixed into :class:`GCSStorage`, whose coroutines (``_aget``, ``_aput``, ...) each object runs.
    """

    batch_concurrency: int

    def _gather(self, fn: Callable[[Any], Awaitable[Any]], items: list[Any]) -> list[Any]:
        async def run() -> list[Any]:
            gate = asyncio.Semaphore(self.batch_concurrency)

            async def one(item: Any) -> Any:
                async with gate:
                    try:
                        return await fn(item)
                    except Exception as exc:
                        return exc

            return await asyncio.gather(*(one(item) for item in items))

        return self._run(run)

    def get_many(self, keys: list[str]) -> Iterator[tuple[str, bytes | BaseException]]:
        yield from zip(keys, self._gather(self._aget, keys), strict=True)

    def put_many(
        self, items: list[tuple[str, bytes]], options: WriteOptions
    ) -> Iterator[tuple[str, str | BaseException | None]]:
        async def one(item: tuple[str, bytes]) -> str:
            return await self._aput(item[0], item[1], options)

        yield from zip((key for key, _ in items), self._gather(one, items), strict=True)

    def delete_many(self, keys: list[str]) -> Iterator[tuple[str, BaseException | None]]:
        yield from zip(keys, self._gather(self._adelete, keys), strict=True)

    def copy_many(self, pairs: list[tuple[str, str]]) -> Iterator[tuple[str, str | BaseException | None]]:
        async def one(pair: tuple[str, str]) -> str:
            return await self._acopy(pair[0], pair[1])

        yield from zip((dst for _, dst in pairs), self._gather(one, pairs), strict=True)


class GCSStorage(GCSResumeMixin, _GCSBatches, GCSClassifier, StorageDriver):
    """A GCS bucket (optionally a prefix in it) through a retry-free gcsfs client."""

    scheme = "gs"
    #: headers a client must send with a signed PUT (none: the content type is not signed by default)
    signed_put_headers: Mapping[str, str] = {}

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        project: str | None = None,
        endpoint_url: str | None = None,
        token: str | None = None,
        signing_key_file: str | None = None,
        timeout: float = 60.0,
        concurrency: int = 16,
    ) -> None:
        self.bucket = check_bucket_name(bucket)
        prefix = prefix.strip("/")
        if prefix:
            check_key(prefix)
        self.prefix = f"{prefix}/" if prefix else ""
        self.endpoint, custom_endpoint = gcs_endpoint(endpoint_url, os.environ.get("STORAGE_EMULATOR_HOST"))
        if token is None:
            token = "anon" if custom_endpoint else "google_default"
        kwargs: dict[str, Any] = {}
        if project or os.environ.get("GOOGLE_CLOUD_PROJECT"):
            kwargs["project"] = project or os.environ["GOOGLE_CLOUD_PROJECT"]
        try:
            self._fs = _SingleShotGCSFileSystem(
                token=token,
                endpoint_url=self.endpoint,
                requests_timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout),
                skip_instance_cache=True,
                use_listings_cache=False,
                # bodies as stored: aiohttp would gunzip a Content-Encoding: gzip object (it asks
                # for gzip, so GCS sends the stored bytes rather than transcoding them)
                session_kwargs={"auto_decompress": False},
                **kwargs,
            )
        except google.auth.exceptions.DefaultCredentialsError as exc:
            from ._google import no_credentials

            raise no_credentials("gs", "endpoint_url") from exc
        self._loop = self._fs.loop
        self._signer = self._signing_credentials(signing_key_file)
        self.batch_concurrency = concurrency
        self._bucket_q = quote(self.bucket, safe="")
        self.capabilities = resumable(gcs_capabilities(prefix, signed_urls=self._signer is not None, min_part_bytes=CHUNK_UNIT))

    @classmethod
    def from_url(cls, url: ParsedURL) -> GCSStorage:
        where = parse_gcs_url(url)
        url.done()
        try:
            return cls(
                where.bucket,
                where.prefix,
                project=where.project,
                endpoint_url=where.endpoint_url,
                token=where.token,
                signing_key_file=where.signing_key_file,
                timeout=where.timeout,
                concurrency=where.concurrency,
            )
        except InvalidKey as exc:
            raise InvalidURL(f"the prefix of {url} is not a valid key prefix: {exc.message}") from None

    def _signing_credentials(self, key_file: str | None) -> Any:
        if key_file:
            from google.oauth2 import service_account

            try:
                return service_account.Credentials.from_service_account_file(key_file)  # type: ignore[no-untyped-call]
            except (OSError, ValueError, KeyError) as exc:
                raise InvalidURL(
                    f"signing_key_file {key_file!r} is not a readable service-account JSON key: "
                    f"{type(exc).__name__}"
                ) from None
        creds = getattr(self._fs.credentials, "credentials", None)
        if isinstance(creds, google.auth.credentials.Signing) and getattr(creds, "service_account_email", None):
            return creds
        return None

    def __repr__(self) -> str:
        return f"GCSStorage(gs://{self.bucket}/{self.prefix}, endpoint={self.endpoint!r})"

    # -- plumbing ------------------------------------------------------------
    def _run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run a coroutine on gcsfs's IO loop, bounded by the portable deadline if one is set."""
        left = attempt_timeout()
        if left is None:
            return fsspec.asyn.sync(self._loop, fn, *args)  # type: ignore[no-any-return]
        return fsspec.asyn.sync(self._loop, asyncio.wait_for, fn(*args), left)  # type: ignore[no-any-return]

    def _name(self, key: str) -> str:
        return self.prefix + key

    def _object_path(self, name: str) -> str:
        return f"b/{self._bucket_q}/o/{quote(name, safe='')}"

    def _media_url(self, name: str) -> str:
        return f"{self.endpoint}/download/storage/v1/b/{self._bucket_q}/o/{quote(name, safe='')}?alt=media"

    async def _request(self, method: str, path: str, **kwargs: Any) -> tuple[int, Mapping[str, str], bytes]:
        status, headers, _info, body = await self._fs._request(method, path, **kwargs)
        return status, headers, body

    async def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        _status, headers, body = await self._request(method, path, **kwargs)
        if body and (headers.get("Content-Encoding") or "").lower() == "gzip":
            body = gzip.decompress(body)  # the session does not decompress (media bodies stay as stored)
        return json.loads(body) if body else {}

    @staticmethod
    def _conditions(options: WriteOptions, key: str) -> dict[str, str]:
        """The query parameters of a write's condition (a generation match)."""
        generation = generation_precondition(options, key=key)
        return {} if generation is None else {"ifGenerationMatch": generation}

    @staticmethod
    def _refused(exc: FileExistsError, options: WriteOptions, key: str) -> PortableError:
        """The portable error for a 412 (gcsfs raises FileExistsError for every 412)."""
        if options.if_none_match:
            return AlreadyExists(f"put {key}: the object exists (create-only write)", provider="gs")
        return PreconditionFailed(
            f"put {key}: the object's generation is not {options.if_match} (or it does not exist)",
            provider="gs",
        )

    def _conditional(self, options: WriteOptions, key: str, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        try:
            return self._run(fn, *args)
        except FileExistsError as exc:
            raise self._refused(exc, options, key) from exc

    # -- whole objects -------------------------------------------------------
    async def _aget(self, key: str) -> bytes:
        _status, _headers, body = await self._request("GET", self._media_url(self._name(key)))
        return body

    def get(self, key: str) -> bytes:
        return self._run(self._aget, key)

    async def _aget_range(self, key: str, start: int, end: int | None) -> bytes:
        try:
            _status, _headers, body = await self._request(
                "GET", self._media_url(self._name(key)), headers={"Range": range_header(start, end)}
            )
        except gcsfs.retry.HttpError as exc:
            if _http_status(exc.code) == 416:  # start at or past the end of an existing object
                return b""
            raise
        return body

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        return self._run(self._aget_range, key, start, end)

    async def _ahead(self, key: str) -> ObjectInfo:
        return _info(key, await self._json("GET", self._object_path(self._name(key))), True)

    def head(self, key: str) -> ObjectInfo:
        return self._run(self._ahead, key)

    async def _simple_upload(self, name: str, data: bytes, options: WriteOptions, conditions: Mapping[str, str]) -> str:
        boundary = uuid.uuid4().hex
        resource = _resource(name, options)
        content_type = resource["contentType"]
        body = b"".join(
            (
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                json.dumps(resource).encode(),
                f"\r\n--{boundary}\r\nContent-Type: {content_type}\r\n\r\n".encode(),
                data,
                f"\r\n--{boundary}--\r\n".encode(),
            )
        )
        out = await self._json(
            "POST",
            f"{self.endpoint}/upload/storage/v1/b/{self._bucket_q}/o",
            headers={"Content-Type": f'multipart/related; boundary="{boundary}"'},
            data=body,
            uploadType="multipart",
            **conditions,
        )
        return str(out["generation"])

    async def _aput(self, key: str, data: bytes, options: WriteOptions) -> str:
        conditions = self._conditions(options, key)
        if len(data) <= SIMPLE_UPLOAD_LIMIT:
            return await self._simple_upload(self._name(key), data, options, conditions)
        upload = _ResumableUpload(self, key, options, PUT_CHUNK)
        try:
            upload.append(data)
            await upload.flush()
            return await upload.finish()
        except BaseException:
            await upload.cancel()
            raise

    def put(self, key: str, data: bytes, options: WriteOptions) -> str:
        return self._conditional(options, key, self._aput, key, data, options)

    async def _adelete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            await self._request("DELETE", self._object_path(self._name(key)))

    def delete(self, key: str) -> None:
        self._run(self._adelete, key)

    async def _acopy(self, src: str, dst: str) -> str:
        path = f"{self._object_path(self._name(src))}/rewriteTo/{self._object_path(self._name(dst))}"
        out = await self._json("POST", path, headers={"Content-Type": "application/json"})
        while not out.get("done"):
            out = await self._json(
                "POST", path, headers={"Content-Type": "application/json"}, rewriteToken=out["rewriteToken"]
            )
        return str(out["resource"]["generation"])

    def copy(self, src: str, dst: str) -> str:
        return self._run(self._acopy, src, dst)

    # -- streams ---------------------------------------------------------------
    def open_read(self, key: str) -> IO[bytes]:
        return self._fs.open(  # type: ignore[no-any-return]
            f"{self.bucket}/{self._name(key)}", "rb", block_size=4 * 1024 * 1024, cache_type="readahead"
        )

    def open_write(self, key: str, options: WriteOptions, part_size: int) -> WriteStream:
        self._conditions(options, key)  # a non-generation etag fails now, not at close
        return _GCSWriteStream(self, key, options, part_size)

    # -- listing ---------------------------------------------------------------
    async def _alist(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        start = self._name(start_after) if start_after else None
        out = await self._json(
            "GET",
            f"b/{self._bucket_q}/o",
            prefix=self._name(prefix),
            delimiter=delimiter,
            maxResults=str(page_size),
            pageToken=token,
            startOffset=start,
        )
        cut = len(self.prefix)
        objects = [
            _info(item["name"][cut:], item, False)
            for item in out.get("items", ())
            if item["name"] != start and not item["name"].endswith("/")
        ]
        prefixes = [p[cut:] for p in out.get("prefixes", ()) if p != start]
        return ListPage(objects, sorted(prefixes), out.get("nextPageToken") or None)

    def list_page(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        return self._run(self._alist, prefix, delimiter, start_after, page_size, token)

    def abort_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        """Cancel the sessions of ``resume=True`` writes recorded on this machine (see
        :mod:`portable_gcp._gcs_resume`); return their keys.

        Other sessions (a killed plain streamed write's) cannot be listed: GCS has
        no call for it, bills nothing visible, and expires each a week after it began.
        """
        return self._abort_recorded(prefix, older_than)

    # -- signed URLs, escape hatches ---------------------------------------------
    def signed_url(
        self, key: str, method: Literal["GET", "PUT"], expires: dt.timedelta, content_type: str | None
    ) -> str:
        from google.cloud import storage  # type: ignore[attr-defined, import-untyped, unused-ignore]

        if self._signer is None:  # the Bucket checks the capability first; this is a safety net
            from portable.errors import Unsupported

            raise Unsupported("gs:// has no signing credentials; set signing_key_file", provider="gs")
        client = storage.Client.create_anonymous_client()
        blob = client.bucket(self.bucket).blob(self._name(key))
        return blob.generate_signed_url(  # type: ignore[no-any-return]
            version="v4",
            expiration=expires,
            method=method,
            content_type=content_type,
            credentials=self._signer,
            api_access_endpoint=self.endpoint,
        )

    def async_driver(self) -> Any:  # gcsfs's coroutines on its loop: portable_gcp._gcs_aio
        from ._gcs_aio import GCSAsyncStorage
        return GCSAsyncStorage(self)

    def as_(self, kind: type[Any]) -> Any:
        if isinstance(self._fs, kind):
            return self._fs
        if self._signer is not None and isinstance(self._signer, kind):
            return self._signer
        return None

    def close(self) -> None:
        session = getattr(self._fs, "_session", None)
        self._fs._session = None
        if session is not None and not session.closed:
            with contextlib.suppress(Exception):  # closing is best effort; the loop may be gone
                fsspec.asyn.sync(self._loop, session.close, timeout=5)


def _http_status(code: Any) -> int | None:
    try:
        return int(code)
    except (TypeError, ValueError):
        return None


def _http_code(code: Any) -> ErrorCode:
    status = _http_status(code)
    if status is None:
        return ErrorCode.UNKNOWN
    return code_of_status(status, _HTTP_CODES, other_client_error=ErrorCode.UNKNOWN)


class _ResumableUpload:
    """One resumable upload session: bytes go up in chunks; nothing is visible before ``finish``.

    ``buffer`` holds the bytes from ``offset`` (what the server confirmed) on.
    At least one byte is always kept back for the final request, which
    carries the total size.
    """

    def __init__(self, driver: GCSStorage, key: str, options: WriteOptions, part_size: int) -> None:
        self.driver = driver
        self.key = key
        self.name = driver._name(key)
        self.options = options
        self.chunk = max(CHUNK_UNIT, part_size - part_size % CHUNK_UNIT)
        self.buffer = bytearray()
        self.offset = 0
        self.session: str | None = None
        self.uncertain = False  # a chunk request failed: ask the session what it kept first

    def append(self, data: bytes) -> None:
        self.buffer += data

    async def _start(self) -> str:
        resource = _resource(self.name, self.options)
        content_type = resource["contentType"]
        _status, headers, _body = await self.driver._request(
            "POST",
            f"{self.driver.endpoint}/upload/storage/v1/b/{self.driver._bucket_q}/o",
            json=resource,
            headers={"X-Upload-Content-Type": content_type},
            uploadType="resumable",
            **self.driver._conditions(self.options, self.key),
        )
        location = headers.get("Location") or headers.get("location")
        if not location:
            raise gcsfs.retry.HttpError({"code": 500, "message": "no Location for the resumable upload"})
        return location

    async def _recover(self) -> dict[str, Any] | None:
        """Ask the session how many bytes it holds; drop those from the buffer."""
        assert self.session is not None
        status, headers, body = await self.driver._request(
            "PUT", self.session, headers={"Content-Range": "bytes */*"}
        )
        self.uncertain = False
        if status in (200, 201):
            return dict(json.loads(body))
        kept = _confirmed_bytes(headers)
        if kept > self.offset:
            del self.buffer[: kept - self.offset]
            self.offset = kept
        return None

    async def _send(self, size: int, final: bool) -> dict[str, Any] | None:
        if self.session is None:
            self.session = await self._start()
        chunk = bytes(self.buffer[:size])
        last = self.offset + len(chunk) - 1
        total = str(self.offset + len(chunk)) if final else "*"
        span = f"bytes {self.offset}-{last}/{total}" if chunk else f"bytes */{total}"
        self.uncertain = True
        # GCS takes the type from the session's resource; fake-gcs-server from each chunk.
        content_type = self.options.content_type or "application/octet-stream"
        status, headers, body = await self.driver._request(
            "PUT", self.session, headers={"Content-Range": span, "Content-Type": content_type}, data=chunk
        )
        self.uncertain = False
        if status in (200, 201):
            return dict(json.loads(body))
        kept = _confirmed_bytes(headers)
        if kept <= self.offset:  # a session that keeps nothing would make us loop forever
            raise gcsfs.retry.HttpError({"code": 503, "message": "the upload session kept none of the chunk"})
        del self.buffer[: kept - self.offset]
        self.offset = kept
        return None

    async def flush(self) -> None:
        """Send every whole chunk but keep at least one byte back."""
        if self.uncertain and self.session is not None:
            await self._recover()
        while len(self.buffer) > self.chunk:
            await self._send(self.chunk, final=False)

    async def finish(self) -> str:
        """Send the rest with the total size; return the new object's generation."""
        result = None
        if self.uncertain and self.session is not None:
            result = await self._recover()
        while result is None:
            if len(self.buffer) > self.chunk:
                await self._send(self.chunk, final=False)
            else:
                result = await self._send(len(self.buffer), final=True)
        return str(result["generation"])

    async def cancel(self) -> None:
        """Cancel the session (GCS answers 499); nothing becomes visible either way."""
        self.buffer.clear()
        if self.session is not None:
            session, self.session = self.session, None
            with contextlib.suppress(Exception):
                await self.driver._request("DELETE", session)


class _GCSWriteStream(WriteStream):
    """``open(key, "wb")``: a simple upload if it never fills a part, else a resumable session."""

    def __init__(self, driver: GCSStorage, key: str, options: WriteOptions, part_size: int) -> None:
        self._driver = driver
        self._upload = _ResumableUpload(driver, key, options, part_size)
        self._failed: bytes | None = None

    def write(self, data: bytes) -> None:
        # portable retries a failed write() with the very same bytes object:
        # append it once, then only resend what the session has not confirmed.
        if data is not self._failed:
            self._upload.append(data)
        self._failed = data
        self._driver._conditional(self._upload.options, self._upload.key, self._upload.flush)
        self._failed = None

    def commit(self) -> str:
        upload = self._upload
        if upload.session is None and len(upload.buffer) <= upload.chunk:
            conditions = self._driver._conditions(upload.options, upload.key)
            return self._driver._conditional(
                upload.options,
                upload.key,
                self._driver._simple_upload,
                upload.name,
                bytes(upload.buffer),
                upload.options,
                conditions,
            )
        return self._driver._conditional(upload.options, upload.key, upload.finish)

    def abort(self) -> None:
        self._driver._run(self._upload.cancel)
