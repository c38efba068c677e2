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

Retries:
    obstore's retries are off (``retry_config={"max_retries": 0}``); only
    :mod:`portable.resilience` retries.

As:
    ``obstore.store.S3Store`` (the store this driver uses, without the prefix).

Capabilities:
    conditional_create (``If-None-Match: *``, obstore ``PutMode`` create),
    conditional_update (``If-Match``, ``PutMode`` update), conditional
    streaming writes (see below), signed_urls (SigV4 via ``obstore.sign``),
    server_side_copy (CopyObject), multipart (obstore's multipart writer).

Known differences from the fsspec engine:
    * A streamed write *with a condition* is spooled (memory up to one part,
      then a temporary file) and sent as one conditional PutObject at close,
      because obstore's multipart writer cannot carry conditions; it is
      therefore limited to 5 GiB. Unconditional streams are multipart.
    * ``copy`` returns None (CopyObject's etag is not reported by obstore);
      ``head`` gives it.
    * ``put(..., if_match=...)`` on a missing key raises PreconditionFailed.
    * ``delete_many`` sends DeleteObjects requests of up to 1,000 keys (object_store batches them).
    * A delimited ``list`` reads the whole level (obstore's
      ``list_with_delimiter``) for each page; flat listings page natively
      with ``start-after``.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from portable.driver.limits import S3_MAX_KEY_BYTES, S3_MAX_PUT_BYTES, s3_capabilities
from portable.driver.naming import check_s3_bucket_name, parse_s3_url
from portable.errors import MissingDependency
from portable.resilience import remaining
from portable.urls import ParsedURL

from ._common import NO_RETRIES, ObstoreStorage, client_options, run_on_loop

__all__ = ["ObstoreS3Storage", "check_bucket_name"]

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
        self.endpoint = endpoint.rstrip("/") if endpoint else f"https://s3.{region or 'us-east-1'}.amazonaws.com"
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
        self.capabilities = capabilities

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
