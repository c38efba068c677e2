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
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Mapping
from typing import Any, Literal

from portable.driver.naming import check_gcs_bucket_name
from portable.driver.storage import StorageCapabilities, WriteOptions
from portable.errors import InvalidURL, PreconditionFailed
from portable.urls import ParsedURL

from ._common import NO_RETRIES, ObstoreStorage, client_options

__all__ = ["ObstoreGCSStorage", "check_bucket_name"]

GOOGLE_ENDPOINT = "https://storage.googleapis.com"
MAX_OBJECT_BYTES = 5 * 1024**4
check_bucket_name = check_gcs_bucket_name
_GENERATION = re.compile(r"^[0-9]{1,20}$")




class ObstoreGCSStorage(ObstoreStorage):
    """A GCS bucket (optionally a prefix in it) on obstore's GCSStore."""

    scheme = "gs"
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
        prefix = prefix.strip("/")
        if prefix and any(seg in ("", ".", "..") for seg in prefix.split("/")):
            raise InvalidURL(f"the prefix {prefix!r} must not hold empty, '.' or '..' segments")
        endpoint = (endpoint_url or os.environ.get("STORAGE_EMULATOR_HOST") or "").rstrip("/")
        if endpoint and not endpoint.startswith(("http://", "https://")):
            endpoint = f"http://{endpoint}"
        self.endpoint = endpoint or GOOGLE_ENDPOINT
        if token is None:
            token = "anon" if endpoint else "google_default"
        key_file = signing_key_file or (token if token not in ("anon", "google_default", "cloud") else None)
        config: dict[str, Any] = {}
        if key_file is not None:
            if not os.path.isfile(key_file):
                raise InvalidURL(f"the service-account key file {key_file!r} does not exist")
            config["service_account"] = key_file
            if endpoint:
                config["base_url"] = endpoint
        elif token == "anon":
            # object_store's test mode: no OAuth, requests go to gcs_base_url unsigned.
            config["service_account_key"] = json.dumps(
                {"gcs_base_url": self.endpoint, "disable_oauth": True, "client_email": "", "private_key": "", "private_key_id": ""}
            )
        elif endpoint:
            config["base_url"] = endpoint
        store = GCSStore(
            self.bucket,
            config=config,  # type: ignore[arg-type]
            client_options=client_options(timeout, self.endpoint),  # type: ignore[arg-type]
            retry_config=NO_RETRIES,  # type: ignore[arg-type]
        )
        super().__init__(store, prefix, concurrency=concurrency)
        self.capabilities = StorageCapabilities(
            conditional_create=True,
            conditional_update=True,
            conditional_streaming_write=True,
            signed_urls=key_file is not None,
            server_side_copy=True,
            multipart=True,
            max_key_bytes=1024 - len(self._root.encode("utf-8")),
            max_object_bytes=MAX_OBJECT_BYTES,
            max_metadata_bytes=8 * 1024,
            min_part_bytes=5 * 1024 * 1024,
        )

    @classmethod
    def from_url(cls, url: ParsedURL) -> ObstoreGCSStorage:
        url.take_str("project")
        endpoint_url = url.take_str("endpoint_url")
        token = url.take_str("token")
        signing_key_file = url.take_str("signing_key_file")
        timeout = url.take("timeout", float, 60.0)
        concurrency = url.take("concurrency", int, 16)
        url.done()
        if not timeout > 0:
            raise InvalidURL(f"timeout in {url} must be > 0 seconds")
        if not 1 <= concurrency <= 256:
            raise InvalidURL(f"concurrency in {url} must be from 1 to 256")
        if endpoint_url is not None and not re.match(r"^https?://[^/?#\s]+", endpoint_url):
            raise InvalidURL(f"endpoint_url in {url} must be http(s)://host[:port], got {endpoint_url!r}")
        return cls(
            url.host,
            url.path,
            endpoint_url=endpoint_url,
            token=token,
            signing_key_file=signing_key_file,
            timeout=timeout,
            concurrency=concurrency,
        )

    def __repr__(self) -> str:
        return f"ObstoreGCSStorage(gs://{self.bucket}/{self.prefix}, endpoint={self.endpoint!r})"

    # -- hooks: the generation is the etag --------------------------------
    def put_mode(self, options: WriteOptions) -> Any:
        if options.if_none_match:
            return "create"
        if options.if_match is not None:
            if not _GENERATION.match(options.if_match):
                raise PreconditionFailed(
                    f"{options.if_match!r} is not a GCS generation, so it cannot be current", provider="gs"
                )
            return {"version": options.if_match}
        return None

    def etag_of(self, result: Mapping[str, Any]) -> str | None:
        version = result.get("version")
        if version is not None:
            return str(version)
        return super().etag_of(result)

    def signed_url(
        self, key: str, method: Literal["GET", "PUT"], expires: dt.timedelta, content_type: str | None
    ) -> str:
        import obstore

        return obstore.sign(self.store, method, self._root + key, expires)
