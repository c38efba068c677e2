"""``s3://...?engine=opendal`` — S3 whose whole-object reads run on OpenDAL, the rest on obstore.

An engine for read-heavy small-object work. On the bench's S3 server
OpenDAL's blocking ``Operator.read`` costs less client CPU per object than
obstore's blocking ``get`` (97 us against 129 for 1 KiB, bench/results/
small_objects.md), so ``get`` and ``get_many`` read through OpenDAL here.
Everything else is the obstore engine's (:class:`portable_obstore.s3.ObstoreS3Storage`,
which this driver extends): OpenDAL's Python ``write`` returns nothing, so a
put through it could not return the etag that ``put`` promises without a
second request, and OpenDAL's ranged read fails ("reader got too little
data") where S3 clips a range to the object, as ``get_range`` promises.

URLs and options:
    Those of the obstore engine (``region``, ``endpoint_url``, ``profile``,
    ``addressing_style``, ``timeout``, ``concurrency``, ``sign_payload``);
    ``?engine=opendal`` picks this engine (it is never the default).

What goes where:
    * OpenDAL: ``get``, and each object of ``get_many`` whose batch reads
      small bodies (up to 64 KiB on average; larger batches read through
      obstore's coroutines, as on the obstore engine), each a plain GET.
    * obstore: everything else (``get_range``, ``head``, ``list``, writes,
      copies, deletes, signed URLs, the async face of :mod:`portable.aio`),
      and ``get`` / ``get_many`` under a deadline (:func:`portable.resilience.deadline`),
      because a blocking OpenDAL call cannot be cancelled and obstore's
      coroutine can.

Credentials:
    Never in the URL. For OpenDAL's reads: ``AWS_ACCESS_KEY_ID`` /
    ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN`` from the environment
    when set; else ``profile=`` (or ``AWS_PROFILE``) read by OpenDAL's own
    loader from ``~/.aws``; else OpenDAL's chain (web identity, container and
    EC2 instance metadata). The obstore side reads them as the obstore engine
    does. **Known difference:** a profile that only boto3 can read (AWS SSO,
    ``credential_process``) serves obstore but not OpenDAL: reads then fail
    with PermissionDenied; use the obstore engine there.

Retries and timeouts:
    No OpenDAL ``RetryLayer``: only :mod:`portable.resilience` retries. A
    ``TimeoutLayer`` bounds each read by ``timeout`` (30 s by default), as
    obstore's client options do.

As:
    ``opendal.Operator`` (the blocking operator reads use, rooted at the
    bucket; keys carry the URL's prefix) and, as on the obstore engine,
    ``obstore.store.S3Store``.

Errors:
    OpenDAL's types (NotFound, PermissionDenied, ConditionNotMatch,
    RateLimited), else the HTTP status its message reports, else a timeout or
    a transient failure by its words; obstore's as on the obstore engine.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

import opendal
import opendal.exceptions as ode
from opendal.layers import TimeoutLayer
from portable_obstore.s3 import ObstoreS3Storage

from portable.driver.http import HTTP_STATUS_CODES, code_of_status
from portable.errors import ErrorCode
from portable.resilience import attempt_timeout

__all__ = ["OpenDALS3Storage"]

#: The HTTP status in an OpenDAL error's context (``response: Parts { status: 503, ...``).
_STATUS = re.compile(r"status: (\d{3})\b")
#: As on the obstore engine: S3's 409 (ConditionalRequestConflict) is retried, 503 is SlowDown.
_HTTP_CODES = {**HTTP_STATUS_CODES, 409: ErrorCode.UNAVAILABLE, 503: ErrorCode.THROTTLED}


def operator_config(
    bucket: str,
    *,
    region: str | None,
    endpoint: str | None,
    virtual: bool,
    profile: str | None,
) -> dict[str, str]:
    """The keyword arguments of ``opendal.Operator("s3", ...)`` for this bucket (no secrets unless
    the environment holds static keys, which are passed as OpenDAL reads them anyway)."""
    config: dict[str, str] = {"bucket": bucket, "root": "/", "region": region or "us-east-1"}
    config["endpoint"] = endpoint or f"https://s3.{config['region']}.amazonaws.com"
    if virtual:
        config["enable_virtual_host_style"] = "true"
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if key and secret and not profile:
        config["access_key_id"], config["secret_access_key"] = key, secret
        token = os.environ.get("AWS_SESSION_TOKEN")
        if token:
            config["session_token"] = token
    else:
        chosen = profile or os.environ.get("AWS_PROFILE")
        if chosen:
            config["profile"] = chosen
    return config


class OpenDALS3Storage(ObstoreS3Storage):
    """Objects in one S3 bucket, optionally under a prefix: reads on OpenDAL, the rest on obstore."""

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
        super().__init__(
            bucket,
            prefix,
            region=region,
            endpoint_url=endpoint_url,
            profile=profile,
            addressing_style=addressing_style,
            timeout=timeout,
            concurrency=concurrency,
            sign_payload=sign_payload,
        )
        endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        style = addressing_style or ("path" if endpoint else "virtual")
        #: the region OpenDAL signs for: the obstore side's, which a profile's own region may have set
        self.read_region: str = self._signed.region
        config = operator_config(
            self.bucket,
            region=self.read_region,
            endpoint=endpoint.rstrip("/") if endpoint else None,
            virtual=style == "virtual",
            profile=profile,
        )
        self.operator: Any = opendal.Operator("s3", **config).layer(TimeoutLayer(timeout=timeout, io_timeout=timeout))
        self.fast_reads = None  # this engine's reads are OpenDAL's (blocking_get), not the obstore engine's fast path

    def __repr__(self) -> str:
        return f"OpenDALS3Storage(bucket={self.bucket!r}, prefix={self.prefix!r}, endpoint={self.endpoint!r})"

    # -- reads on OpenDAL --------------------------------------------------
    def get(self, key: str) -> bytes:
        """The whole object: one GET through OpenDAL; through obstore under a deadline (cancellable)."""
        if attempt_timeout() is not None:
            return super().get(key)
        return bytes(self.operator.read(self._root + key))

    def blocking_get(self, key: str) -> bytes:
        """One object of a batch read of small bodies (the batch runs these on worker threads)."""
        return bytes(self.operator.read(self._root + key))

    # -- errors --------------------------------------------------------------
    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, ode.NotFound):
            return ErrorCode.NOT_FOUND
        if isinstance(exc, ode.PermissionDenied):
            return ErrorCode.PERMISSION_DENIED
        if isinstance(exc, ode.ConditionNotMatch):
            return ErrorCode.PRECONDITION_FAILED
        if isinstance(exc, ode.AlreadyExists):
            return ErrorCode.ALREADY_EXISTS
        if isinstance(exc, ode.RateLimited):
            return ErrorCode.THROTTLED
        if isinstance(exc, ode.Unsupported):
            return ErrorCode.UNSUPPORTED
        if isinstance(exc, ode.ConfigInvalid):
            return ErrorCode.INVALID_ARGUMENT
        if isinstance(exc, ode.Error | ode.Unexpected | ode.Conflict | ode.RangeNotSatisfied):
            text = str(exc)
            status = _STATUS.search(text)
            if status is not None:
                return code_of_status(int(status.group(1)), _HTTP_CODES)
            head = text.split("Context:", 1)[0].lower()
            if "timeout" in head or "timed out" in head:
                return ErrorCode.DEADLINE_EXCEEDED
            if "(temporary)" in head or "send http request" in head:
                return ErrorCode.UNAVAILABLE
        return super().code_of(exc)

    def as_(self, kind: type[Any]) -> Any:
        if isinstance(self.operator, kind):
            return self.operator
        return super().as_(kind)
