"""The S3 requests the obstore engine signs itself (SigV4) and sends with http.client.

obstore has no call for ListMultipartUploads, for AbortMultipartUpload of an upload it did not
start, or for user metadata named like a header; a resumable upload's requests and a sized
streamed PutObject are signed here too (:mod:`portable_obstore.s3`, :mod:`._s3_resume`).
:func:`sigv4_headers` is the reference signer: the fast read path (:mod:`._s3_reads`) is tested
against it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import http.client
import inspect
import os
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from portable.driver.conditions import note_condition
from portable.driver.http import normal_etag
from portable.driver.storage import WriteOptions
from portable.errors import MissingDependency
from portable.resilience import attempt_timeout, remaining

from ._common import header_attributes, run_on_loop

if TYPE_CHECKING:
    from .s3 import ObstoreS3Storage

__all__ = ["S3RequestFailed", "answer_error", "signing_key", "sigv4_headers", "static_credentials"]


def answer_error(what: str, status: int, answer: bytes) -> S3RequestFailed:
    """The S3RequestFailed of an error answer (its XML body's Code and Message)."""
    code = message = ""
    try:
        root = ET.fromstring(answer)
        code, message = root.findtext("Code") or "", root.findtext("Message") or ""
    except ET.ParseError:
        message = answer[:200].decode("utf-8", "replace")
    return S3RequestFailed(what, status, code, message)


class S3RequestFailed(Exception):
    """An S3 error answer to a request this driver signed itself (see :class:`_SignedS3`).

    Attributes:
        status: the HTTP status.
        code: the S3 error code of the body (``NoSuchUpload``, ``PreconditionFailed``, ...), or "".
    """

    def __init__(self, what: str, status: int, code: str, message: str) -> None:
        super().__init__(f"{what} answered HTTP {status} {code or 'error'}: {message or '(no message)'}")
        self.status = status
        self.code = code


_S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def _quote(text: str, safe: str) -> str:
    return urllib.parse.quote(text, safe=safe)


def static_credentials() -> tuple[str, str, str | None] | None:
    """``(access key, secret, token)`` from ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /
    ``AWS_SESSION_TOKEN``, or None when the first two are not both set."""
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not key or not secret:
        return None
    return key, secret, os.environ.get("AWS_SESSION_TOKEN") or None


def signing_key(secret: str, day: str, region: str) -> bytes:
    """The SigV4 signing key of ``secret`` for one day, region and the s3 service."""
    key = ("AWS4" + secret).encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def sigv4_headers(
    method: str,
    host: str,
    path: str,
    canonical_query: str,
    headers: Mapping[str, str],
    payload: str,
    *,
    credentials: tuple[str, str, str | None],
    region: str,
    now: dt.datetime,
) -> dict[str, str]:
    """The headers of an S3 request signed with AWS Signature Version 4, every header signed.

    Args:
        method: the HTTP method.
        host: the Host header (the URL's netloc).
        path: the request path, already URI-encoded (S3 encodes it once).
        canonical_query: the query string, encoded and sorted.
        headers: the request's own headers; all are signed.
        payload: the body's hex SHA-256, or ``UNSIGNED-PAYLOAD``.
        credentials: access key, secret key and session token (or None).
        region: the signing region.
        now: the request time (UTC).

    Returns:
        ``headers`` with lower-cased names plus ``host``, ``x-amz-date``,
        ``x-amz-content-sha256``, ``x-amz-security-token`` (with a token) and
        ``authorization``.
    """
    access_key, secret, token = credentials
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    signed: dict[str, str] = {
        **{name.lower(): " ".join(value.split()) for name, value in headers.items()},
        "host": host,
        "x-amz-date": stamp,
        "x-amz-content-sha256": payload,
    }
    if token:
        signed["x-amz-security-token"] = token
    names = sorted(signed)
    canonical = "\n".join(
        [method, path, canonical_query, *(f"{n}:{signed[n]}" for n in names), "", ";".join(names), payload]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    signature = hmac.new(signing_key(secret, day, region), to_sign.encode(), hashlib.sha256).hexdigest()
    signed["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return signed


class _SignedS3:
    """The few S3 requests obstore has no call for, signed here with SigV4 and sent with urllib.

    obstore has no ListMultipartUploads or AbortMultipartUpload for an upload
    it did not start, and its attribute parser sends a metadata entry named
    like a header (``cache-control``) as that header: those requests go
    through this class, and so does every request of a resumable upload
    (:mod:`portable_obstore._s3_resume`), which obstore's writer cannot continue. The credentials are the store's: its credential
    provider, else ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /
    ``AWS_SESSION_TOKEN``, else boto3's chain (instance roles, web identity,
    SSO) where boto3 is installed. No retries here either: only
    :mod:`portable.resilience` retries. One connection per request, and no
    proxy: these requests are rare (cleanup, header-named metadata) or large (a resumable
    upload's parts, one request per part).
    """

    def __init__(self, driver: ObstoreS3Storage, base_url: str, region: str, timeout: float, sign_payload: bool) -> None:
        self._driver = driver
        self.base_url = base_url.rstrip("/")
        self.region = region
        self.timeout = timeout
        self.sign_payload = sign_payload

    def _credentials(self) -> tuple[str, str, str | None]:
        provider = self._driver.store.credential_provider
        if provider is not None:
            found = provider()
            if inspect.isawaitable(found):
                found = run_on_loop(found, remaining())  # type: ignore[arg-type]
            return found["access_key_id"], found["secret_access_key"], found.get("token")
        found_static = static_credentials()
        if found_static is not None:
            return found_static
        try:
            import boto3  # type: ignore[import-untyped,unused-ignore]
        except ImportError as exc:
            raise MissingDependency(
                "this S3 request is signed by portable, which reads credentials from AWS_ACCESS_KEY_ID / "
                "AWS_SECRET_ACCESS_KEY or, for instance and web-identity roles, through boto3: pip install boto3"
            ) from exc
        frozen = boto3.Session().get_credentials()
        if frozen is None:
            raise MissingDependency("no AWS credentials found (environment, ~/.aws or boto3's chain)")
        got = frozen.get_frozen_credentials()
        return got.access_key, got.secret_key, got.token

    def send(
        self,
        what: str,
        method: str,
        key: str | None,
        query: list[tuple[str, str]],
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
    ) -> tuple[dict[str, str], bytes]:
        """Send one signed request; return the answer's headers (lower-cased names) and body.

        Raises:
            S3RequestFailed: the answer has an error status.
            OSError: the request did not get an answer (refused, reset, timed out).
        """
        base = urllib.parse.urlsplit(self.base_url)
        path = base.path + ("/" + _quote(key, "/~") if key is not None else "")
        path = path or "/"
        canonical_query = "&".join(f"{_quote(k, '~')}={_quote(v, '~')}" for k, v in sorted(query))
        access_key, secret, token = self._credentials()
        payload = hashlib.sha256(body).hexdigest() if (self.sign_payload or not body) else "UNSIGNED-PAYLOAD"
        signed = sigv4_headers(
            method,
            base.netloc,
            path,
            canonical_query,
            headers or {},
            payload,
            credentials=(access_key, secret, token),
            region=self.region,
            now=dt.datetime.now(dt.UTC),
        )
        if method in ("PUT", "POST"):
            signed["content-length"] = str(len(body))
        limit = attempt_timeout()
        timeout = max(0.001, self.timeout if limit is None else min(limit, self.timeout))
        connection: http.client.HTTPConnection
        if base.scheme == "https":
            connection = http.client.HTTPSConnection(base.hostname or "", base.port, timeout=timeout)
        else:
            connection = http.client.HTTPConnection(base.hostname or "", base.port, timeout=timeout)
        try:
            # http.client adds Accept-Encoding: identity and nothing else (Host is given, as signed)
            target = f"{path}?{canonical_query}" if canonical_query else path
            connection.request(method, target, body=body or None, headers=signed)
            response = connection.getresponse()
            answer = response.read()
            received = {k.lower(): v for k, v in response.getheaders()}
        finally:
            connection.close()
        if response.status >= 300:
            raise answer_error(what, response.status, answer)
        return received, answer

    # -- the requests ------------------------------------------------------
    def put_object(self, full_key: str, data: bytes, options: WriteOptions) -> str | None:
        """PutObject with every metadata entry as ``x-amz-meta-<name>``, headers from the named options."""
        headers = header_attributes(options)
        for name, value in options.metadata.items():
            headers[f"x-amz-meta-{name}"] = value
        if options.if_none_match:
            headers["If-None-Match"] = "*"
        elif options.if_match is not None:
            headers["If-Match"] = options.if_match
        try:
            answer, _ = self.send(f"PUT {full_key!r}", "PUT", full_key, [], headers, bytes(data))
        except S3RequestFailed as exc:
            note_condition(exc, options)  # a 412 is AlreadyExists for If-None-Match, on any server
            raise
        return normal_etag(answer.get("etag"))

    def multipart_uploads(self, prefix: str) -> Iterator[tuple[str, str, dt.datetime | None]]:
        """``(key, upload id, initiated)`` of every multipart upload in flight under ``prefix`` (all pages)."""
        markers: tuple[str, str] = ("", "")
        while True:
            query = [("uploads", ""), ("prefix", prefix)]
            if markers[0]:
                query += [("key-marker", markers[0]), ("upload-id-marker", markers[1])]
            _, body = self.send(f"ListMultipartUploads {prefix!r}", "GET", None, query)
            root = ET.fromstring(body)
            for upload in root.iter(f"{_S3_NS}Upload"):
                initiated = upload.findtext(f"{_S3_NS}Initiated")
                yield (
                    upload.findtext(f"{_S3_NS}Key") or "",
                    upload.findtext(f"{_S3_NS}UploadId") or "",
                    dt.datetime.fromisoformat(initiated) if initiated else None,
                )
            following = (root.findtext(f"{_S3_NS}NextKeyMarker") or "", root.findtext(f"{_S3_NS}NextUploadIdMarker") or "")
            if root.findtext(f"{_S3_NS}IsTruncated") != "true" or following == markers or not following[0]:
                return
            markers = following

    def abort_upload(self, full_key: str, upload_id: str) -> bool:
        """AbortMultipartUpload; False when the upload is gone already (NoSuchUpload)."""
        try:
            self.send(f"AbortMultipartUpload {full_key!r}", "DELETE", full_key, [("uploadId", upload_id)])
        except S3RequestFailed as exc:
            if exc.code == "NoSuchUpload" or exc.status == 404:
                return False
            raise
        return True
