"""``az://`` and ``abfs://`` on the obstore engine — Azure Blob Storage through Rust object_store.

This is the default engine for ``az://`` and ``abfs://`` wherever
``portable-cloud[obstore]`` is installed; ``?engine=fsspec`` picks the adlfs driver
(:mod:`portable_azure.blob`), which takes the same URL options.

URLs:
    ``az://CONTAINER/PREFIX?account=ACCOUNT`` or
    ``abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX``. Every key lives
    under ``PREFIX/``. The container must exist.

Options (the same as the fsspec engine's):
    ``account`` (str): the storage account. Defaults to the ``@ACCOUNT.``
        host, the connection string's AccountName, the endpoint's account, or
        ``AZURE_STORAGE_ACCOUNT_NAME``.
    ``blob_endpoint`` (alias ``endpoint_url``) (str): the Blob service URL,
        for Azurite ``http://127.0.0.1:10000/devstoreaccount1``. Defaults to
        ``https://ACCOUNT.blob.core.windows.net`` or the connection string's
        BlobEndpoint.
    ``auth`` (str): ``auto`` (default), ``connection_string``, ``key``,
        ``sas``, ``identity`` (object_store's chain: service principal or
        workload identity from the environment, managed identity, Azure CLI)
        or ``anonymous``.
    ``connection_string_env`` / ``account_key_env`` / ``sas_token_env`` (str):
        the *name* of the environment variable holding the secret. Defaults to
        ``AZURE_STORAGE_CONNECTION_STRING`` / ``AZURE_STORAGE_ACCOUNT_KEY`` /
        ``AZURE_STORAGE_SAS_TOKEN``; ``auth=auto`` tries them in that order
        (a named variable first), then ``identity``: the fsspec engine's
        resolution, :func:`portable.driver.credentials.resolve_azure_credentials`.
    ``max_concurrency`` (int): objects in flight in the batch methods.
        Defaults to 8.
    ``timeout`` (float): seconds per request. Defaults to 60.
    ``connection_timeout`` (float): seconds to connect. Defaults to 10.

    A secret is never accepted in the URL (``account_key=``, ``sas_token=``,
    ``sig=``, ... raise InvalidURL naming the ``*_env`` option to use).

Keys and names:
    A blob name (``PREFIX/`` + key) is at most 1,024 characters. Container
    names are 3-63 lower-case letters, digits and single hyphens. Metadata
    names that are not C# identifiers (and ``contenttype``-like names that
    object_store would send as headers) are stored encoded exactly as the
    fsspec engine stores them (``content-hash`` -> ``pt__content_2dhash``),
    and native names are read by the same rule, so both engines read each
    other's objects (:mod:`portable_azure.blob` describes the rule). The four
    headers (``content_type``, ``cache_control``, ``content_encoding``,
    ``content_disposition``) are the blob's real headers, reported by ``head``;
    reads return the bytes as stored.

Retries:
    obstore's retries are off (``max_retries=0``); only
    :mod:`portable.resilience` retries.

As:
    ``obstore.store.AzureStore``.

Capabilities:
    conditional_create, conditional_update (``If-None-Match: *`` /
    ``If-Match`` through obstore's PutMode), conditional streaming writes
    (spooled, one conditional Put Blob at close), signed_urls (a service SAS
    signed here with the shared key; a PUT must send ``x-ms-blob-type:
    BlockBlob``, see ``signed_put_headers``), server_side_copy (Copy Blob),
    multipart (Put Block / Put Block List through obstore's writer).

Known differences from the fsspec engine:
    * ``copy`` does not wait for a pending (asynchronous) Copy Blob; within
      one account Azure copies synchronously up to 256 MiB.
    * ``delete_many`` deletes blob by blob (object_store's batch delete
      reports a missing blob as an error).
    * A streamed write with a condition is limited to one Put Blob (5,000 MiB).
    * With ``auth=identity`` or ``sas`` there is no shared key: ``signed_url``
      raises Unsupported.
    * ``abort_incomplete`` raises Unsupported (object_store cannot list
      uncommitted blobs): use ``?engine=fsspec`` for it.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import quote

from portable.driver.credentials import AzureCredentials, resolve_azure_credentials
from portable.driver.limits import AZURE_MAX_BLOB_NAME, azure_blob_capabilities
from portable.driver.naming import (
    check_azure_container_or_queue_name,
    check_prefix_segments,
    decode_azure_metadata_name,
    encode_azure_metadata_name,
    obstore_write_attributes,
    parse_azure_blob_url,
)
from portable.driver.redaction import redact
from portable.driver.storage import WriteOptions
from portable.errors import Unsupported
from portable.urls import ParsedURL

from ._common import NO_RETRIES, ObstoreStorage, client_options

__all__ = ["ObstoreAzureStorage", "decode_metadata_name", "encode_metadata_name"]

MAX_BLOB_NAME = AZURE_MAX_BLOB_NAME
SAS_VERSION = "2022-11-02"
encode_metadata_name = encode_azure_metadata_name
decode_metadata_name = decode_azure_metadata_name


class ObstoreAzureStorage(ObstoreStorage):
    """A container (or a prefix in one) of an Azure storage account, on obstore's AzureStore."""

    scheme = "az"
    resume_limitation = (
        "obstore 0.12.1's Azure writer names its blocks itself and cannot list or commit blocks it did not "
        "stage; use ?engine=fsspec (portable-cloud[azure]), which resumes from the uncommitted block list"
    )
    #: headers a client must send with a PUT through a signed URL
    signed_put_headers: Mapping[str, str] = {"x-ms-blob-type": "BlockBlob"}

    def __init__(
        self,
        container: str,
        prefix: str = "",
        *,
        auth: AzureCredentials,
        scheme: str = "az",
        max_concurrency: int = 8,
        timeout: float = 60.0,
        connection_timeout: float = 10.0,
    ) -> None:
        from obstore.store import AzureStore

        check_azure_container_or_queue_name(container, "container")
        prefix = check_prefix_segments(prefix)
        # put() and a conditional stream are one Put Blob each (obstore's writer cannot carry conditions).
        capabilities = azure_blob_capabilities(prefix, signed_urls=auth.can_sign, max_object_bytes=5000 * 1024 * 1024)
        self.scheme = scheme
        self.container = container
        self.auth = auth
        self.endpoint = f"{auth.endpoint}/{container}"
        config: dict[str, Any] = {"account_name": auth.account, "endpoint": auth.endpoint}
        if auth.account_key is not None:
            config["account_key"] = auth.account_key
        elif auth.sas_token is not None:
            config["sas_key"] = auth.sas_token
        elif auth.kind == "anonymous":
            config["skip_signature"] = True
        options = client_options(timeout, auth.endpoint)
        options["connect_timeout"] = dt.timedelta(seconds=connection_timeout)
        store = AzureStore(
            container,
            config=config,  # type: ignore[arg-type]
            client_options=options,  # type: ignore[arg-type]
            retry_config=NO_RETRIES,  # type: ignore[arg-type]
        )
        super().__init__(store, prefix, concurrency=max_concurrency)
        self.capabilities = capabilities

    @classmethod
    def from_url(cls, url: ParsedURL) -> ObstoreAzureStorage:
        where = parse_azure_blob_url(url)
        auth = resolve_azure_credentials(url, "blob", account=where.account, endpoint=where.endpoint)
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
        return f"ObstoreAzureStorage({self.scheme}://{self.container}/{self.prefix}, endpoint={redact(self.endpoint)!r})"

    # -- hooks ----------------------------------------------------------
    def attributes(self, options: WriteOptions) -> dict[str, str] | None:
        # an encoded name is never one obstore sends as a header (contenttype is pt__contenttype)
        return obstore_write_attributes(options, encode_metadata_name)

    def metadata_name(self, stored: str) -> str:
        return decode_metadata_name(stored)

    def abort_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        """Refuse: object_store cannot list uncommitted blobs.

        Raises:
            Unsupported: always, naming the engine that can (``?engine=fsspec``).
        """
        raise Unsupported(
            f"the obstore engine of {self.scheme}:// cannot list blobs that hold only uncommitted blocks "
            "(object_store has no such listing); open the same URL with ?engine=fsspec for "
            "abort_incomplete, or let Azure drop them (a week after the last block)",
            provider=self.scheme,
        )

    def list_etag(self, meta: Mapping[str, Any]) -> str | None:
        etag = meta.get("e_tag")
        if etag is None:
            return None
        etag = str(etag)
        return etag if etag.startswith('"') else f'"{etag}"'  # listings report etags bare

    # -- signed URLs ----------------------------------------------------
    def signed_url(
        self, key: str, method: Literal["GET", "PUT"], expires: dt.timedelta, content_type: str | None
    ) -> str:
        """A service SAS for one blob, signed with the account key (HMAC-SHA256)."""
        key_b64 = self.auth.account_key
        if key_b64 is None:
            raise Unsupported(f"{self.scheme}:// without a shared key cannot sign URLs", provider=self.scheme)
        name = self._root + key
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        start = (now - dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
        expiry = (now + expires).strftime("%Y-%m-%dT%H:%M:%SZ")
        permissions = "r" if method == "GET" else "cw"
        resource = f"/blob/{self.auth.account}/{self.container}/{name}"
        fields = [permissions, start, expiry, resource, "", "", "", SAS_VERSION, "b", "", "", "", "", "", "", ""]
        if content_type and method == "GET":
            fields[-1] = content_type  # rsct: the Content-Type the response will carry
        digest = hmac.new(base64.b64decode(key_b64), "\n".join(fields).encode("utf-8"), hashlib.sha256).digest()
        query = {"sv": SAS_VERSION, "st": start, "se": expiry, "sr": "b", "sp": permissions}
        if fields[-1]:
            query["rsct"] = fields[-1]
        query["sig"] = base64.b64encode(digest).decode()
        text = "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
        return f"{self.auth.endpoint}/{self.container}/{quote(name, safe='/')}?{text}"
