"""``gs://`` and ``gcs://`` on the obstore engine — Google Cloud Storage through Rust object_store.

This is the default engine for ``gs://`` wherever ``portable-cloud[obstore]`` is
installed; ``?engine=fsspec`` picks the gcsfs driver (:mod:`portable_gcp.gcs`),
which takes the same URL options.

URLs:
    ``gs://BUCKET`` or ``gs://BUCKET/PREFIX``; keys are relative to PREFIX.

Options (the same as the fsspec engine's):
    ``project`` (str): accepted for compatibility; object operations need none.
    ``endpoint_url`` (str): where requests go (an emulator). Defaults to
        ``$STORAGE_EMULATOR_HOST``, else ``https://storage.googleapis.com``.
    ``token`` (str): ``anon`` (no credentials: object_store's test mode,
        ``disable_oauth``), ``google_default`` (application default
        credentials: ``GOOGLE_APPLICATION_CREDENTIALS`` or gcloud's file, else
        the metadata server), ``cloud`` (the metadata server) or the path of a
        service-account JSON key. Defaults to ``anon`` with an endpoint, else
        ``google_default``.
    ``signing_key_file`` (str): a service-account JSON key that signs URLs;
        object_store then also authenticates with it. Defaults to ``token``
        when that is a key file; otherwise ``signed_urls`` is off.
    ``timeout`` (float): seconds per request. Defaults to 60.
    ``concurrency`` (int): objects in flight in the batch methods. Defaults to 16.

Names and keys:
    Bucket names follow GCS's rules (InvalidURL otherwise). A key with the
    URL's prefix is at most 1,024 UTF-8 bytes.

Metadata and headers:
    ``content_type``, ``cache_control``, ``content_encoding`` and
    ``content_disposition`` are the object's real headers, reported by
    ``head``. User metadata goes as ``x-goog-meta-*``; object_store would send
    a metadata name in :data:`~portable.driver.naming.OBSTORE_HEADER_NAMES`
    (``cache-control``, ``contenttype``, ...) as that header instead, so such
    a name raises InvalidArgument before any request (the fsspec engine
    stores it). Reads return the bytes as stored (``Accept-Encoding: gzip``
    is sent, so GCS does not transcode a gzip-encoded object).

Etags and conditions:
    As on the fsspec engine, the portable etag is the object's *generation*:
    ``if_match=etag`` is sent as ``x-goog-if-generation-match`` (obstore's
    ``PutMode`` update with ``version``), ``if_none_match="*"`` as generation
    0 (``PutMode`` create). An etag that is not a generation fails with
    PreconditionFailed without a request.

Retries:
    obstore's retries are off (``max_retries=0``); only
    :mod:`portable.resilience` retries.

As:
    ``obstore.store.GCSStore``.

Capabilities:
    conditional_create, conditional_update, conditional streaming writes
    (spooled, one conditional upload at close), server_side_copy, multipart
    (the XML multipart upload API), signed_urls (V4, with a service-account key).

Known differences:
    * object_store speaks GCS's **XML API**. fake-gcs-server implements the
      JSON API and only GET/HEAD of the XML one (fsouza/fake-gcs-server#331;
      object_store's own CI runs a fork, PR #1164), so on that emulator this
      engine can read objects but not write or list them: test GCS code on
      the emulator with ``?engine=fsspec``.
    * Listings report the object's content etag when object_store's listing
      carries no generation; ``head`` always reports the generation.
    * A delimited ``list`` reads the whole level for each page.
    * Metadata names read lower-cased: the XML API sends them as HTTP headers,
      which fold case, so a native ``Owner`` reads as ``owner`` (and of
      ``Owner`` and ``owner`` one is lost); the fsspec engine reports GCS's case.
    * ``abort_incomplete`` raises Unsupported: large streams are XML multipart
      uploads, which object_store cannot list.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping
from typing import Any, Literal

from portable.driver.conditions import CREATE_ONLY_GENERATION, generation_precondition
from portable.driver.limits import GCS_MAX_OBJECT_BYTES, gcs_capabilities
from portable.driver.naming import (
    GOOGLE_STORAGE_ENDPOINT,
    OBSTORE_HEADER_NAMES,
    check_gcs_bucket_name,
    check_http_endpoint,
    check_prefix_segments,
    gcs_endpoint,
    obstore_write_attributes,
    parse_gcs_url,
)
from portable.driver.storage import WriteOptions
from portable.errors import InvalidArgument, InvalidURL, Unsupported
from portable.urls import ParsedURL

from ._common import NO_RETRIES, ObstoreStorage, client_options

__all__ = ["ObstoreGCSStorage", "check_bucket_name"]

GOOGLE_ENDPOINT = GOOGLE_STORAGE_ENDPOINT
MAX_OBJECT_BYTES = GCS_MAX_OBJECT_BYTES
check_bucket_name = check_gcs_bucket_name


class ObstoreGCSStorage(ObstoreStorage):
    """A GCS bucket (optionally a prefix in it) on obstore's GCSStore."""

    scheme = "gs"
    resume_limitation = (
        "obstore 0.12.1 speaks GCS's XML API and keeps its multipart upload id to itself, so no later "
        "process could find the upload; use ?engine=fsspec (the default), which records its resumable session"
    )
    signed_put_headers: Mapping[str, str] = {}

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        token: str | None = None,
        signing_key_file: str | None = None,
        timeout: float = 60.0,
        concurrency: int = 16,
    ) -> None:
        from obstore.store import GCSStore

        self.bucket = check_bucket_name(bucket)
        prefix = check_prefix_segments(prefix)
        self.endpoint, custom_endpoint = gcs_endpoint(endpoint_url, os.environ.get("STORAGE_EMULATOR_HOST"))
        if token is None:
            token = "anon" if custom_endpoint else "google_default"
        key_file = signing_key_file or (token if token not in ("anon", "google_default", "cloud") else None)
        config: dict[str, Any] = {}
        if key_file is not None:
            if not os.path.isfile(key_file):
                raise InvalidURL(f"the service-account key file {key_file!r} does not exist")
            config["service_account"] = key_file
            if custom_endpoint:
                config["base_url"] = self.endpoint
        elif token == "anon":
            # object_store's test mode: no OAuth, requests go to gcs_base_url unsigned.
            config["service_account_key"] = json.dumps(
                {"gcs_base_url": self.endpoint, "disable_oauth": True, "client_email": "", "private_key": "", "private_key_id": ""}
            )
        elif custom_endpoint:
            config["base_url"] = self.endpoint
        options = client_options(timeout, self.endpoint)
        # GCS gunzips a Content-Encoding: gzip object for a client that does not accept gzip
        # (decompressive transcoding); portable returns the bytes as stored, as on every provider.
        options["default_headers"] = {"Accept-Encoding": "gzip"}
        store = GCSStore(
            self.bucket,
            config=config,  # type: ignore[arg-type]
            client_options=options,  # type: ignore[arg-type]
            retry_config=NO_RETRIES,  # type: ignore[arg-type]
        )
        super().__init__(store, prefix, concurrency=concurrency)
        self.capabilities = gcs_capabilities(prefix, signed_urls=key_file is not None, min_part_bytes=5 * 1024 * 1024)

    @classmethod
    def from_url(cls, url: ParsedURL) -> ObstoreGCSStorage:
        where = parse_gcs_url(url)  # project is taken and not needed: object calls name no project
        url.done()
        if where.endpoint_url is not None:
            check_http_endpoint(where.endpoint_url, url)
        return cls(
            where.bucket,
            where.prefix,
            endpoint_url=where.endpoint_url,
            token=where.token,
            signing_key_file=where.signing_key_file,
            timeout=where.timeout,
            concurrency=where.concurrency,
        )

    def __repr__(self) -> str:
        return f"ObstoreGCSStorage(gs://{self.bucket}/{self.prefix}, endpoint={self.endpoint!r})"

    # -- hooks: headers apart from metadata; the generation is the etag ---
    def attributes(self, options: WriteOptions) -> dict[str, str] | None:
        """obstore attributes of a write: the four headers, and metadata under its own names.

        Raises:
            InvalidArgument: a metadata name that obstore would send as a header
                (:data:`~portable.driver.naming.OBSTORE_HEADER_NAMES`), before any request.
        """
        clash = sorted(name for name in options.metadata if name.lower() in OBSTORE_HEADER_NAMES)
        if clash:
            raise InvalidArgument(
                f"metadata name(s) {', '.join(clash)} would become HTTP headers on the obstore engine of gs:// "
                "(object_store sends them so); use the named arguments content_type=, cache_control=, "
                "content_encoding=, content_disposition=, another metadata name, or ?engine=fsspec, which "
                "stores them as metadata"
            )
        return obstore_write_attributes(options)

    def put_mode(self, options: WriteOptions) -> Any:
        generation = generation_precondition(options)
        if generation is None:
            return None
        return "create" if generation == CREATE_ONLY_GENERATION else {"version": generation}

    def etag_of(self, result: Mapping[str, Any]) -> str | None:
        version = result.get("version")
        if version is not None:
            return str(version)
        return super().etag_of(result)

    def abort_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        """Refuse: this engine's large streams are XML API multipart uploads, which object_store cannot list.

        Raises:
            Unsupported: always, naming what lists and removes them instead.
        """
        raise Unsupported(
            "the obstore engine of gs:// writes large streams as XML API multipart uploads, whose "
            "leftovers object_store cannot list; remove them with `gcloud storage` (List/Abort "
            "multipart uploads) or a bucket lifecycle rule, or write with ?engine=fsspec, whose "
            "resumable sessions leave nothing to remove",
            provider=self.scheme,
        )

    def signed_url(
        self, key: str, method: Literal["GET", "PUT"], expires: dt.timedelta, content_type: str | None
    ) -> str:
        import obstore

        return obstore.sign(self.store, method, self._root + key, expires)
