"""``az://`` and ``abfs://`` — Azure Blob Storage and ADLS Gen2, on adlfs.

URLs:
    ``az://CONTAINER/PREFIX?account=ACCOUNT`` or, in the ADLS Gen2 form that
    Spark and adlfs use, ``abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX``.
    Every key lives under ``PREFIX/`` (no prefix: the whole container). The
    container must exist; portable never creates it. ``abfs://`` is the same
    driver: an ADLS Gen2 (hierarchical namespace) account is reached through
    its Blob endpoint, which multi-protocol access serves.

Options:
    ``account`` (str): the storage account. Defaults to the ``@ACCOUNT.`` host,
        the connection string's AccountName, the endpoint's account, or
        ``AZURE_STORAGE_ACCOUNT_NAME``.
    ``blob_endpoint`` (alias ``endpoint_url``) (str): the Blob service URL, for
        Azurite ``http://127.0.0.1:10000/devstoreaccount1`` (path-style).
        Defaults to ``https://ACCOUNT.blob.core.windows.net``, or the
        connection string's BlobEndpoint.
    ``auth`` (str): ``auto`` (default), ``connection_string``, ``key``, ``sas``,
        ``identity`` (azure-identity ``DefaultAzureCredential``) or ``anonymous``.
    ``connection_string_env`` / ``account_key_env`` / ``sas_token_env`` (str):
        the *name* of the environment variable that holds the secret. Defaults
        to ``AZURE_STORAGE_CONNECTION_STRING`` / ``AZURE_STORAGE_ACCOUNT_KEY`` /
        ``AZURE_STORAGE_SAS_TOKEN``. See :mod:`portable.driver.credentials`
        for the order in which ``auth=auto`` looks (the obstore engine's too).
    ``max_concurrency`` (int): parallel requests of one large get/put and of
        the batch methods. Defaults to 8.
    ``timeout`` (float): seconds to wait for a response (per request).
        Defaults to 60. Inside :func:`portable.resilience.deadline` the
        remaining time is used when shorter.
    ``connection_timeout`` (float): seconds to connect. Defaults to 10.

    A secret is never accepted in the URL: ``account_key=``, ``connection_string=``,
    ``sas_token=``, ``sig=`` and a password in the netloc raise InvalidURL
    saying which ``*_env`` option to use instead.

Keys and names:
    A blob name is ``PREFIX/`` + key and may be at most 1,024 characters, so
    ``capabilities.max_key_bytes`` is 1,024 minus the prefix and its slash; a
    longer key raises InvalidKey before any request. Container names are 3-63
    lower-case letters, digits and single hyphens (InvalidURL otherwise).
    Metadata names must be C# identifiers on Azure. A portable name that is
    one is stored as it is; any other (``x-trace``, ``1st``), one that starts
    with ``pt__`` and the header names obstore would send as headers
    (``contenttype``, ...) are stored as ``pt__`` + the name with ``_`` as
    ``_5f`` and ``-`` as ``_2d`` (``x-trace`` is ``pt__x_2dtrace``). Reading,
    a name is decoded only when it is exactly that form of some portable
    name; every other native name reads as it is, lower-cased (Azure compares
    names without case): ``Owner`` is ``owner``, ``pt_raw`` is ``pt_raw``.
    :func:`portable.driver.naming.decode_azure_metadata_name` has the rule;
    docs/providers.md the table. Azure trims leading and trailing spaces of
    metadata values.

Headers:
    ``content_type``, ``cache_control``, ``content_encoding`` and
    ``content_disposition`` are the blob's ContentSettings (``x-ms-blob-*``),
    reported by ``head``; metadata never becomes one. Reads return the bytes
    as stored (``decompress=False``: azure-storage-blob would gunzip a
    ``Content-Encoding: gzip`` blob).

Leftovers:
    ``abort_incomplete`` deletes blobs that hold only uncommitted blocks
    (what a killed streamed write leaves), never a committed blob.

Clients:
    Single-object calls (get, put, head, delete, copy, ranges, streams,
    listing) use the synchronous azure-storage-blob client, with a cache of
    per-blob clients (building one costs more CPU than a small GET). The batch
    methods run on adlfs's async client on fsspec's event loop, many requests
    in flight (``max_concurrency``). adlfs's ``AzureBlobFileSystem`` is built
    around that same async client.

Retries:
    Both clients are built with ``retry_total=0`` and
    ``retry_to_secondary=False``: azure-storage's ``ExponentialRetry`` policy
    then makes one attempt and raises, so the portable layer's Guard owns
    every retry (a 503 with ``max_attempts=3`` is exactly 3 requests).

As:
    ``adlfs.AzureBlobFileSystem`` (sharing the async client and fsspec's
    loop: use its sync methods, or its coroutines through ``fsspec.asyn.sync``),
    ``azure.storage.blob.ContainerClient`` and ``BlobServiceClient`` (the
    synchronous clients), and ``azure.storage.blob.aio.ContainerClient`` and
    ``BlobServiceClient`` (the async ones, on fsspec's loop).

Capabilities:
    Create-only writes (``If-None-Match: *``), etag compare-and-swap
    (``If-Match``), both also on streamed writes: ``open(key, "wb")`` stages
    blocks and passes the conditions to Put Block List, so a large conditional
    write is refused at commit with nothing visible. Streams smaller than one
    part are sent as a single Put Blob. Signed URLs (service SAS) when a
    shared key is known (connection string with AccountKey, or ``auth=key``);
    a PUT through one must send ``x-ms-blob-type: BlockBlob``
    (``driver.signed_put_headers``). Server-side copy (Copy Blob; a pending
    copy is polled until it ends). Parts of at least 64 KiB, at most 50,000
    per stream. Resumable writes (:mod:`portable_azure._blob_resume`).

Known differences:
    * A streamed write that another writer overtakes (its commit discards our
      uncommitted blocks) fails at commit with PreconditionFailed; Azure
      garbage-collects uncommitted blocks of an aborted stream after 7 days
      (they are never visible).
    * ``list(start_after=)`` is applied here: the listing reads and skips the
      keys up to ``start_after`` (Azure has no start-after for flat namespaces).
    * Azurite lists in UTF-16 code unit order, which differs from UTF-8 byte
      order only for characters above U+FFFF against U+E000-U+FFFF.
    * With ``auth=identity`` or ``sas`` there is no shared key, so
      ``signed_url`` raises Unsupported (user-delegation SAS needs Entra ID,
      which no emulator provides).
    * On an HNS (ADLS Gen2) account, folders are real: the object ``a`` and
      the object ``a/b`` cannot both exist, and listings show folder entries.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime as dt
import io
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import IO, Any, Literal, TypeVar

import fsspec.asyn  # type: ignore[import-untyped]

from portable.driver.limits import AZURE_MAX_BLOB_NAME, azure_blob_capabilities
from portable.driver.naming import (
    check_prefix_segments,
    decode_azure_metadata_name,
    encode_azure_metadata_name,
    parse_azure_blob_url,
)
from portable.driver.storage import (
    ListPage,
    ObjectInfo,
    ResumableWriteStream,
    StorageDriver,
    WriteOptions,
    WriteStream,
)
from portable.errors import (
    AlreadyExists,
    ConfigError,
    ErrorCode,
    PreconditionFailed,
    TooLarge,
)
from portable.urls import ParsedURL

from ._blob_aio import blob_info, listed_info
from ._common import (
    AzureAuth,
    AzureClassifier,
    check_container_or_queue_name,
    error_code,
    request_timeouts,
    resolve_auth,
)

__all__ = ["BlobStorage", "decode_metadata_name", "encode_metadata_name"]

T = TypeVar("T")

MAX_BLOB_NAME = AZURE_MAX_BLOB_NAME
MAX_BLOCKS = 50_000
_BLOB_CLIENT_CACHE = 128  # about 32 KiB each
encode_metadata_name = encode_azure_metadata_name
decode_metadata_name = decode_azure_metadata_name


# ------------------------------------------------------------------ metadata names
def _decode_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    return {decode_metadata_name(k): v for k, v in (metadata or {}).items()}


def _etag_of(response: Mapping[str, Any]) -> str | None:
    etag = response.get("etag")
    return etag if isinstance(etag, str) else None


def _quoted(etag: str | None) -> str | None:
    """Listings report etags bare; every other response quotes them."""
    if etag is None or etag.startswith('"'):
        return etag
    return f'"{etag}"'


class BlobChangedWhileReading(Exception):
    """The blob was overwritten between the chunks of one read; reading again succeeds."""


class _BlobBatches:
    """The batch methods: many requests in flight on adlfs's async client, on fsspec's loop.

    Mixed into :class:`BlobStorage`, which holds the clients; single-object calls use the synchronous client.
    """

    _container: Any
    _max_concurrency: int
    batch_concurrency: int

    def _gather(self, fn: Callable[..., Awaitable[Any]], args: list[tuple[Any, ...]]) -> list[Any]:
        async def all_of() -> list[Any]:
            gate = asyncio.Semaphore(self.batch_concurrency)

            async def one(arg: tuple[Any, ...]) -> Any:
                async with gate:
                    return await fn(*arg)

            return await asyncio.gather(*(one(a) for a in args), return_exceptions=True)

        return self._run(all_of)

    async def _aget(self, name: str) -> bytes:
        from azure.core.exceptions import ResourceModifiedError

        try:
            stream = await self._container.download_blob(
                name, max_concurrency=self._max_concurrency, decompress=False, **self._kw()
            )
            data: bytes = await stream.readall()
        except ResourceModifiedError as exc:
            raise BlobChangedWhileReading(f"{name} changed while it was read") from exc
        return data

    async def _aput(self, name: str, data: bytes, options: WriteOptions) -> str | None:
        result = await self._container.get_blob_client(name).upload_blob(
            data,
            overwrite=not options.if_none_match,
            length=len(data),
            max_concurrency=self._max_concurrency,
            **self._write_kwargs(options),
            **self._kw(),
        )
        return _etag_of(result)

    async def _adelete(self, name: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            await self._container.delete_blob(name, delete_snapshots="include", **self._kw())
        except ResourceNotFoundError as exc:
            if error_code(exc) == "ContainerNotFound":
                raise

    def get_many(self, keys: list[str]) -> Iterator[tuple[str, bytes | BaseException]]:
        yield from zip(keys, self._gather(self._aget, [(self._name(k),) for k in keys]), strict=True)

    def put_many(
        self, items: list[tuple[str, bytes]], options: WriteOptions
    ) -> Iterator[tuple[str, str | BaseException | None]]:
        results = self._gather(self._aput, [(self._name(k), d, options) for k, d in items])
        yield from zip((k for k, _ in items), results, strict=True)

    def delete_many(self, keys: list[str]) -> Iterator[tuple[str, BaseException | None]]:
        yield from zip(keys, self._gather(self._adelete, [(self._name(k),) for k in keys]), strict=True)


class BlobStorage(_BlobBatches, AzureClassifier, StorageDriver):
    """A container (or a prefix in one) of an Azure storage account."""

    scheme = "az"
    #: headers a client must send with a PUT through a signed URL
    signed_put_headers: Mapping[str, str] = {"x-ms-blob-type": "BlockBlob"}

    def __init__(
        self,
        container: str,
        prefix: str = "",
        *,
        auth: AzureAuth,
        scheme: str = "az",
        max_concurrency: int = 8,
        timeout: float = 60.0,
        connection_timeout: float = 10.0,
    ) -> None:
        """Open ``container`` (under ``prefix``) with the credentials of ``auth``.

        No request is sent until the first operation.

        Raises:
            InvalidURL: a bad container name or prefix.
        """
        from adlfs import AzureBlobFileSystem  # type: ignore[import-untyped]
        from azure.storage.blob import BlobServiceClient as SyncBlobServiceClient
        from azure.storage.blob.aio import BlobServiceClient

        check_container_or_queue_name(container, "container")
        prefix = check_prefix_segments(prefix)
        self.capabilities = dataclasses.replace(
            azure_blob_capabilities(prefix, signed_urls=auth.can_sign, max_object_bytes=None), resumable_writes=True
        )
        self.scheme = scheme
        self.container = container
        self.prefix = prefix
        self._prefix = f"{prefix}/" if prefix else ""
        self.auth = auth
        self.endpoint = f"{auth.endpoint}/{container}"
        self.batch_concurrency = max(1, max_concurrency)
        self._max_concurrency = max(1, max_concurrency)
        self._timeout = timeout
        self._connection_timeout = connection_timeout
        client_options: dict[str, Any] = {
            "retry_total": 0,  # one attempt per call: the portable Guard owns retries
            "retry_to_secondary": False,
            "connection_timeout": connection_timeout,
            "read_timeout": timeout,
            "user_agent": "portable-azure",
        }
        # Single-object calls use the synchronous client: no hop to an event loop thread.
        self._sync_credential = auth.sdk_credential(asynchronous=False)
        self._sync_service = SyncBlobServiceClient(auth.endpoint, credential=self._sync_credential, **client_options)
        self._sync_container = self._sync_service.get_container_client(container)
        self._blobs: dict[str, Any] = {}
        # Batches and as_() use adlfs's async client on fsspec's loop: many requests in flight.
        self._loop = fsspec.asyn.get_loop()
        self._credential = (
            self._sync_credential if auth.kind != "identity" else auth.sdk_credential(asynchronous=True)
        )
        self._service = BlobServiceClient(auth.endpoint, credential=self._credential, **client_options)
        self._container = self._service.get_container_client(container)
        try:
            fs = AzureBlobFileSystem(
                account_name=auth.account,
                anon=True,
                skip_instance_cache=True,
                loop=self._loop,
                max_concurrency=self._max_concurrency,
            )
        except ValueError as exc:  # adlfs read a malformed AZURE_STORAGE_* variable
            raise ConfigError(f"adlfs refused the Azure environment: {type(exc).__name__}") from None
        fs.service_client = self._service  # one client, with the SDK's retries turned off
        self._fs = fs
        self._closed = False

    @classmethod
    def from_url(cls, url: ParsedURL) -> BlobStorage:
        """Open ``az://container/prefix?...`` or ``abfs://container@account.dfs.core.windows.net/prefix``."""
        where = parse_azure_blob_url(url)
        auth = resolve_auth(url, "blob", account=where.account, endpoint=where.endpoint)
        url.done()
        return cls(
            where.container,
            url.path,
            auth=auth,
            scheme=url.scheme,
            max_concurrency=where.max_concurrency,
            timeout=where.timeout,
            connection_timeout=where.connection_timeout,
        )

    def __repr__(self) -> str:
        return f"BlobStorage({self.scheme}://{self.container}/{self.prefix}, {self.auth!r})"

    # -- plumbing ------------------------------------------------------------
    def _run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run coroutine function ``fn(*args)`` on fsspec's IO loop and wait for it."""
        return fsspec.asyn.sync(self._loop, fn, *args)  # type: ignore[no-any-return]

    def _name(self, key: str) -> str:
        return self._prefix + key

    def _blob(self, name: str) -> Any:
        """The synchronous BlobClient of ``name``, cached: building one costs more CPU than a small GET."""
        client = self._blobs.get(name)
        if client is None:
            if len(self._blobs) >= _BLOB_CLIENT_CACHE:
                self._blobs.clear()
            client = self._blobs[name] = self._sync_container.get_blob_client(name)
        return client

    def _kw(self) -> dict[str, Any]:
        return request_timeouts(self._timeout, self._connection_timeout)

    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, BlobChangedWhileReading):
            return ErrorCode.UNAVAILABLE
        return super().code_of(exc)

    @staticmethod
    def _write_kwargs(options: WriteOptions) -> dict[str, Any]:
        from azure.core import MatchConditions
        from azure.storage.blob import ContentSettings

        kw: dict[str, Any] = {}
        headers = {
            "content_type": options.content_type,
            "cache_control": options.cache_control,
            "content_encoding": options.content_encoding,
            "content_disposition": options.content_disposition,
        }
        if any(value is not None for value in headers.values()):
            kw["content_settings"] = ContentSettings(**headers)  # the blob's real headers
        if options.metadata:
            kw["metadata"] = {encode_metadata_name(k): v for k, v in options.metadata.items()}
        if options.if_match is not None:
            kw["etag"] = options.if_match
            kw["match_condition"] = MatchConditions.IfNotModified
        elif options.if_none_match:
            # Not etag="*": the SDK rejects that pair; IfMissing alone sends If-None-Match: *.
            kw["match_condition"] = MatchConditions.IfMissing
        return kw

    # -- whole objects -----------------------------------------------------
    def get(self, key: str) -> bytes:
        from azure.core.exceptions import ResourceModifiedError

        name = self._prefix + key
        try:
            data: bytes = (
                self._blob(name)
                .download_blob(max_concurrency=self._max_concurrency, decompress=False, **self._kw())
                .readall()
            )
        except ResourceModifiedError as exc:
            raise BlobChangedWhileReading(f"{name} changed while it was read") from exc
        return data

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        return self._get_range(self._name(key), start, end)

    def _get_range(self, name: str, start: int, end: int | None, etag: str | None = None) -> bytes:
        from azure.core import MatchConditions
        from azure.core.exceptions import HttpResponseError

        kw = self._kw()
        if etag is not None:
            kw.update(etag=etag, match_condition=MatchConditions.IfNotModified)
        try:
            stream = self._blob(name).download_blob(
                offset=start,
                length=None if end is None else end - start,
                max_concurrency=self._max_concurrency,
                decompress=False,
                **kw,
            )
            data: bytes = stream.readall()
        except HttpResponseError as exc:
            if exc.status_code == 416:  # start at or past the end: a slice is empty
                return b""
            raise
        return data

    def head(self, key: str) -> ObjectInfo:
        return blob_info(key, self._blob(self._name(key)).get_blob_properties(**self._kw()))

    def put(self, key: str, data: bytes, options: WriteOptions) -> str | None:
        # overwrite=False makes the SDK send If-None-Match: * (and turn a 412 into 409).
        result = self._blob(self._prefix + key).upload_blob(
            data,
            overwrite=not options.if_none_match,
            length=len(data),
            max_concurrency=self._max_concurrency,
            **self._write_kwargs(options),
            **self._kw(),
        )
        return _etag_of(result)

    def delete(self, key: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            self._blob(self._name(key)).delete_blob(delete_snapshots="include", **self._kw())
        except ResourceNotFoundError as exc:
            if error_code(exc) == "ContainerNotFound":
                raise

    def copy(self, src: str, dst: str) -> str | None:
        source = self._blob(self._name(src)).url
        if self.auth.sas_token:
            source = f"{source}?{self.auth.sas_token}"
        target = self._blob(self._name(dst))
        result = target.start_copy_from_url(source, **self._kw())
        status, etag = result.get("copy_status"), result.get("etag")
        wait = 0.05
        while status == "pending":  # a large or cross-account copy runs in the background
            time.sleep(wait)
            wait = min(wait * 2, 2.0)
            props = target.get_blob_properties(**self._kw())
            status, etag = props.copy.status, props.etag
        if status != "success":
            raise PreconditionFailed(f"server-side copy of {src} ended as {status}", provider=self.scheme)
        return etag if isinstance(etag, str) else None

    # -- streams -------------------------------------------------------------
    def open_read(self, key: str) -> IO[bytes]:
        info = self.head(key)
        raw = _BlobReader(self, self._name(key), info.size, info.etag)
        return io.BufferedReader(raw, buffer_size=4 * 1024 * 1024)

    def open_write(self, key: str, options: WriteOptions, part_size: int) -> WriteStream:
        return _BlockWrite(self, key, options)

    def open_resumable(self, key: str, options: WriteOptions, part_size: int) -> ResumableWriteStream:
        """Staged blocks whose ids carry index and MD5, found again by Get Block List
        (:mod:`portable_azure._blob_resume`)."""
        from ._blob_resume import BlobResumableWrite

        return BlobResumableWrite(self, key, options)

    # -- listing -------------------------------------------------------------
    def list_page(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        full = self._prefix + prefix
        cut = len(self._prefix)
        pager: Any
        if delimiter:
            pager = self._sync_container.walk_blobs(
                name_starts_with=full, delimiter=delimiter, results_per_page=page_size, **self._kw()
            )
        else:
            pager = self._sync_container.list_blobs(name_starts_with=full, results_per_page=page_size, **self._kw())
        pages: Any = pager.by_page(continuation_token=token)
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        next_token: str | None = None
        for page in pages:
            item: Any
            for item in page:
                key = item.name[cut:]
                if start_after is not None and key <= start_after:
                    continue
                if delimiter and not hasattr(item, "size"):  # a BlobPrefix
                    prefixes.append(key)
                else:
                    objects.append(listed_info(key, item))
            next_token = pages.continuation_token or None
            if objects or prefixes or next_token is None:
                break  # a page filtered empty by start_after is skipped, not returned
        return ListPage(objects, prefixes, next_token)

    # -- leftovers ---------------------------------------------------------
    def abort_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        """Remove blobs that hold only uncommitted blocks (a killed stream's), last written over ``older_than`` ago.

        Such a blob is in the ``include=["uncommittedblobs"]`` listing and not in
        the plain one. Each is deleted on ``If-Unmodified-Since`` its listed time
        (a blob committed since is kept); where Delete Blob does not see it (404),
        a create-only empty Put Blob discards the blocks and that empty blob is
        deleted on its etag. Blocks of a blob with committed content are left to
        Azure (a week after the last block). Returns the keys cleared.
        """
        full = self._prefix + prefix
        cutoff = dt.datetime.now(dt.UTC) - older_than
        kw = self._kw()
        committed = iter(self._sync_container.list_blobs(name_starts_with=full, **kw))
        current = next(committed, None)
        removed: list[str] = []
        item: Any
        for item in self._sync_container.list_blobs(name_starts_with=full, include=["uncommittedblobs"], **kw):
            while current is not None and current.name < item.name:
                current = next(committed, None)
            if current is not None and current.name == item.name:
                continue  # it has committed content
            written = item.last_modified or item.creation_time
            if written is None or written > cutoff:
                continue
            if self._discard_uncommitted(item.name, written):
                removed.append(item.name[len(self._prefix) :])
        return removed

    def _discard_uncommitted(self, name: str, written: dt.datetime) -> bool:
        """Clear blob ``name``, uncommitted-only as listed at ``written``; False if a writer committed it since."""
        from azure.core import MatchConditions
        from azure.core.exceptions import (
            ResourceExistsError,
            ResourceModifiedError,
            ResourceNotFoundError,
        )

        blob = self._blob(name)
        try:
            blob.delete_blob(if_unmodified_since=written, **self._kw())
            return True
        except ResourceModifiedError:
            return False  # committed (or written again) since the listing
        except ResourceNotFoundError as exc:
            if error_code(exc) == "ContainerNotFound":
                raise
        try:
            result = blob.upload_blob(b"", overwrite=False, **self._kw())  # If-None-Match: *
        except (ResourceExistsError, ResourceModifiedError):
            return False  # a writer committed it since the listing
        try:
            blob.delete_blob(etag=result["etag"], match_condition=MatchConditions.IfNotModified, **self._kw())
        except ResourceModifiedError:
            return False  # a writer replaced the empty blob: it is theirs now
        except ResourceNotFoundError:
            pass
        return True

    # -- signed URLs -------------------------------------------------------
    def signed_url(
        self, key: str, method: Literal["GET", "PUT"], expires: dt.timedelta, content_type: str | None
    ) -> str:
        """A service SAS for one blob; PUT also needs ``x-ms-blob-type: BlockBlob``.

        ``content_type`` is not enforced on PUT (a SAS cannot bind it).
        """
        from azure.storage.blob import BlobSasPermissions, generate_blob_sas

        name = self._name(key)
        now = dt.datetime.now(dt.UTC)
        if method == "GET":
            permission = BlobSasPermissions(read=True)
        else:
            permission = BlobSasPermissions(create=True, write=True)
        sas = generate_blob_sas(
            account_name=self.auth.account,
            container_name=self.container,
            blob_name=name,
            account_key=self.auth.account_key,
            permission=permission,
            expiry=now + expires,
            start=now - dt.timedelta(minutes=5),  # tolerate clock skew
        )
        return f"{self._blob(name).url}?{sas}"

    # -- escape hatches ----------------------------------------------------
    def async_driver(self) -> Any:  # the aio client on fsspec's loop: portable_azure._blob_aio
        from ._blob_aio import BlobAsyncStorage
        return BlobAsyncStorage(self)

    def as_(self, kind: type[Any]) -> Any:
        from adlfs import AzureBlobFileSystem
        from azure.storage.blob import BlobServiceClient as SyncBlobServiceClient
        from azure.storage.blob import ContainerClient as SyncContainerClient
        from azure.storage.blob.aio import BlobServiceClient, ContainerClient

        natives: dict[type[Any], Any] = {
            AzureBlobFileSystem: self._fs,
            ContainerClient: self._container,
            BlobServiceClient: self._service,
            SyncContainerClient: self._sync_container,
            SyncBlobServiceClient: self._sync_service,
        }
        return natives.get(kind)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._blobs.clear()
        self._sync_service.close()
        close = getattr(self._sync_credential, "close", None)
        if callable(close) and self._sync_credential is not self._credential:
            close()

        async def shut() -> None:
            await self._service.close()
            aclose = getattr(self._credential, "close", None)
            if aclose is not None and asyncio.iscoroutinefunction(aclose):
                await aclose()

        if not self._loop.is_closed():
            self._run(shut)


class _BlobReader(io.RawIOBase):
    """A seekable reader of one blob version: ranged GETs pinned to its etag."""

    def __init__(self, driver: BlobStorage, name: str, size: int, etag: str | None) -> None:
        super().__init__()
        self._driver = driver
        self._name = name
        self._size = size
        self._etag = etag
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._size + offset
        else:
            raise ValueError(f"whence must be 0, 1 or 2, got {whence}")
        if pos < 0:
            raise ValueError("negative seek position")
        self._pos = pos
        return pos

    def _fetch(self, end: int) -> bytes:
        data = self._driver._get_range(self._name, self._pos, end, self._etag)
        self._pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._size - self._pos)
        if want <= 0:
            return 0
        data = self._fetch(self._pos + want)
        view[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        if self._pos >= self._size:
            return b""
        return self._fetch(self._size)


class _BlockWrite(WriteStream):
    """A streamed write as staged blocks, committed with the write's conditions.

    The latest part is held back, so a stream of one part becomes one Put Blob.
    Each method changes state only after its request succeeded, so the Guard
    may repeat a failed call: a block is staged again under the same id.
    """

    def __init__(self, driver: BlobStorage, key: str, options: WriteOptions) -> None:
        self._driver = driver
        self._key = key
        self._name = driver._name(key)
        self._options = options
        self._writer = uuid.uuid4().hex  # block ids of concurrent writers never collide
        self._blocks: list[str] = []
        self._pending: bytes | None = None

    def _stage(self, data: bytes) -> None:
        if len(self._blocks) >= MAX_BLOCKS:
            raise TooLarge(
                f"a streamed write to {self._key} exceeds Azure's {MAX_BLOCKS} blocks; use a larger part_size",
                provider=self._driver.scheme,
            )
        block_id = base64.b64encode(f"{self._writer}{len(self._blocks):06d}".encode()).decode()
        self._driver._blob(self._name).stage_block(block_id, data, length=len(data), **self._driver._kw())
        self._blocks.append(block_id)

    def write(self, data: bytes) -> None:
        if self._pending is not None:
            self._stage(self._pending)
        self._pending = data

    def commit(self) -> str | None:
        if not self._blocks:
            return self._driver.put(self._key, self._pending or b"", self._options)
        if self._pending is not None:
            self._stage(self._pending)
            self._pending = None
        return self._commit()

    def _commit(self) -> str | None:
        from azure.core.exceptions import (
            HttpResponseError,
            ResourceExistsError,
            ResourceModifiedError,
        )
        from azure.storage.blob import BlobBlock

        kw = self._driver._write_kwargs(self._options)
        try:
            blocks = [BlobBlock(block_id) for block_id in self._blocks]
            result = self._driver._blob(self._name).commit_block_list(blocks, **kw, **self._driver._kw())
        except ResourceModifiedError as exc:
            if self._options.if_none_match:
                raise AlreadyExists(f"{self._key} exists", provider=self._driver.scheme) from exc
            raise
        except ResourceExistsError:
            raise
        except HttpResponseError as exc:
            if error_code(exc) != "InvalidBlockList":
                raise
            if self._options.if_none_match:
                raise AlreadyExists(f"{self._key} was created by another writer", provider=self._driver.scheme) from exc
            raise PreconditionFailed(
                f"another writer replaced {self._key} while this stream was open (Azure discarded its blocks); "
                "write it again",
                provider=self._driver.scheme,
            ) from exc
        return _etag_of(result)

    def abort(self) -> None:
        # Uncommitted blocks are never visible; Azure drops them after 7 days.
        self._blocks.clear()
        self._pending = None
