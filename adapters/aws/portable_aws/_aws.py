"""What the AWS drivers share: URL options, botocore configuration, error classification.

Every driver turns botocore's own retries off (``total_max_attempts=1``: in
botocore's terms ``max_attempts`` counts *retries*, so ``max_attempts=1``
would still retry once) and lets :mod:`portable.resilience` own the retry
budget. Errors stay native (``botocore.exceptions.ClientError`` and friends);
:class:`AWSClassifier` maps them to stable codes.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass
from typing import Any

from portable.driver import Classifier
from portable.driver.conditions import refused_condition_code
from portable.driver.naming import take_aws_options
from portable.errors import ErrorCode
from portable.urls import ParsedURL

__all__ = [
    "AWSClassifier",
    "AWSOptions",
    "BotoClientOwner",
    "aws_error_code",
    "boto_config",
    "boto_config_kwargs",
    "client_error_of",
    "new_client",
]

#: botocore configuration that turns the SDK's own retries off.
NO_RETRIES: dict[str, Any] = {"total_max_attempts": 1, "mode": "standard"}


@dataclass(frozen=True, slots=True)
class AWSOptions:
    """The URL options every AWS driver takes.

    Attributes:
        region: the AWS region (``region=eu-west-1``); None uses the SDK's
            chain (``AWS_REGION``, ``AWS_DEFAULT_REGION``, the profile).
        endpoint_url: another endpoint (moto, LocalStack, MinIO, a VPC endpoint).
        profile: a named profile of ``~/.aws/config``.
        timeout: per-request connect and read timeout in seconds. Defaults to 30.
    """

    region: str | None = None
    endpoint_url: str | None = None
    profile: str | None = None
    timeout: float = 30.0

    @classmethod
    def take(cls, url: ParsedURL) -> AWSOptions:
        """Read ``region``, ``endpoint_url``, ``profile`` and ``timeout`` from ``url``."""
        return cls(*take_aws_options(url))

    def describe(self, service: str) -> str:
        """The endpoint for breaker keys and messages (never a secret)."""
        if self.endpoint_url:
            return self.endpoint_url
        return f"https://{service}.{self.region or 'default-region'}.amazonaws.com"

    def session_kwargs(self) -> dict[str, Any]:
        return {"profile_name": self.profile} if self.profile else {}

    def client_kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.region:
            out["region_name"] = self.region
        if self.endpoint_url:
            out["endpoint_url"] = self.endpoint_url
        return out


_SESSIONS: dict[str | None, Any] = {}
_SESSIONS_LOCK = threading.Lock()


def new_client(service: str, options: AWSOptions, config: Any) -> Any:
    """A boto3 client for ``service``, made from a boto3 session shared per profile.

    Creating a session loads the service models (about 0.2 s); a shared one
    makes each further client cost a few milliseconds. Sessions are not
    thread-safe, clients are: creation holds a lock.
    """
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(options.profile)
        if session is None:
            import boto3

            session = _SESSIONS[options.profile] = boto3.session.Session(**options.session_kwargs())
        return session.client(service, config=config, **options.client_kwargs())


def boto_config_kwargs(options: AWSOptions, *, pool: int = 10, **extra: Any) -> dict[str, Any]:
    """The arguments of a ``botocore.config.Config`` with retries off and the given timeouts and pool.

    s3fs takes them as ``config_kwargs`` and builds the Config itself.
    """
    return {
        "retries": dict(NO_RETRIES),
        "connect_timeout": options.timeout,
        "read_timeout": options.timeout,
        "max_pool_connections": pool,
        **extra,
    }


def boto_config(options: AWSOptions, *, pool: int = 10, **extra: Any) -> Any:
    """A ``botocore.config.Config`` with retries off and the given timeouts and pool."""
    from botocore.config import Config

    return Config(**boto_config_kwargs(options, pool=pool, **extra))


def client_error_of(exc: BaseException) -> Any:
    """The botocore ``ClientError`` in ``exc``'s cause chain, or None."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 8:
        response = getattr(current, "response", None)
        if isinstance(response, dict) and "Error" in response:
            return current
        current = current.__cause__ or current.__context__
        seen += 1
    return None


def aws_error_code(exc: BaseException) -> tuple[str, int]:
    """``(Error.Code, HTTP status)`` of a ClientError in ``exc``'s chain, or ``("", 0)``."""
    found = client_error_of(exc)
    if found is None:
        return "", 0
    response = found.response
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return code, status


_NOT_FOUND = frozenset(
    {
        "404",
        "NoSuchKey",
        "NoSuchBucket",
        "NoSuchUpload",
        "NotFound",
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
        "ResourceNotFoundException",
        "ClientException.NotFound",
    }
)
_THROTTLED = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestRateExceeded",
        "BandwidthLimitExceeded",
        "KMS.ThrottlingException",
    }
)
_UNAVAILABLE = frozenset(
    {
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "ServerException",
        "ConditionalRequestConflict",  # S3: a racing conditional write; AWS says retry it
        "OperationAborted",
        "TransactionConflictException",
        "AWS.SimpleQueueService.ServiceUnavailable",
    }
)
_DENIED = frozenset(
    {
        "403",
        "AccessDenied",
        "AccessDeniedException",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "ExpiredTokenException",
        "UnrecognizedClientException",
        "InvalidToken",
        "AccountProblem",
        "AccessDeniedException.NotAuthorized",
    }
)
_TIMEOUT = frozenset({"RequestTimeout", "RequestTimeoutException"})
_TOO_LARGE = frozenset({"EntityTooLarge", "AWS.SimpleQueueService.BatchRequestTooLong"})
_EXISTS = frozenset(
    {
        "BucketAlreadyOwnedByYou",
        "QueueAlreadyExists",
        "QueueNameExists",
        "ResourceInUseException",
        "ResourceAlreadyExistsException",
        "ConditionalCheckFailedException",
    }
)
_INVALID = frozenset(
    {
        "InvalidArgument",
        "InvalidRequest",
        "KeyTooLongError",
        "InvalidBucketName",
        "MalformedXML",
        "ValidationException",
        "ValidationError",
        "InvalidParameterValue",
        "InvalidParameterCombination",
        "MissingParameter",
        "InvalidAttributeName",
        "InvalidAttributeValue",
        "AWS.SimpleQueueService.InvalidBatchEntryId",
        "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        "ClientException",
        "InvalidParameterException",
        "MessageTooLong",
        "InvalidMessageContents",
    }
)


def _transport_code(exc: BaseException) -> ErrorCode | None:
    """Codes of errors that never reached AWS (or whose answer never came back)."""
    try:
        from botocore import exceptions as bx
    except ImportError:  # pragma: no cover - botocore is a dependency
        return None
    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError | bx.NoAuthTokenError):
        return ErrorCode.PERMISSION_DENIED
    if isinstance(exc, bx.ParamValidationError):
        return ErrorCode.INVALID_ARGUMENT
    if isinstance(exc, bx.ConnectTimeoutError):
        return ErrorCode.UNAVAILABLE
    if isinstance(exc, bx.ReadTimeoutError):
        return ErrorCode.DEADLINE_EXCEEDED
    if isinstance(exc, bx.HTTPClientError | bx.ConnectionError | bx.ResponseStreamingError):
        return ErrorCode.UNAVAILABLE
    from botocore.parsers import ResponseParserError

    if isinstance(exc, bx.IncompleteReadError | ResponseParserError):
        return ErrorCode.UNAVAILABLE
    try:
        import aiohttp
    except ImportError:
        aiohttp = None  # type: ignore[assignment]
    if aiohttp is not None and isinstance(exc, aiohttp.ClientError):
        return ErrorCode.UNAVAILABLE
    if isinstance(exc, asyncio.TimeoutError | socket.timeout):
        return ErrorCode.DEADLINE_EXCEEDED
    if type(exc).__name__ == "FSTimeoutError":
        return ErrorCode.DEADLINE_EXCEEDED
    return None


def code_for(code: str, status: int) -> ErrorCode:
    """Map an AWS error code and HTTP status to a stable code."""
    if code in _NOT_FOUND:
        return ErrorCode.NOT_FOUND
    if code == "NotImplemented" or status == 501:
        return ErrorCode.UNSUPPORTED  # an S3-compatible server without this API: not an outage to retry
    if code in _THROTTLED or status == 429:
        return ErrorCode.THROTTLED
    if code in _DENIED:
        return ErrorCode.PERMISSION_DENIED
    if code in _TIMEOUT:
        return ErrorCode.DEADLINE_EXCEEDED
    if code in _TOO_LARGE:
        return ErrorCode.TOO_LARGE
    if code in _EXISTS:
        return ErrorCode.ALREADY_EXISTS
    if code in _UNAVAILABLE:
        return ErrorCode.UNAVAILABLE
    if code == "PreconditionFailed" or status == 412:
        return ErrorCode.PRECONDITION_FAILED
    if code in _INVALID:
        return ErrorCode.INVALID_ARGUMENT
    if status == 503:
        return ErrorCode.THROTTLED  # S3's 503 is SlowDown by another name
    if status >= 500:
        return ErrorCode.UNAVAILABLE
    if status == 404:
        return ErrorCode.NOT_FOUND
    if status == 403:
        return ErrorCode.PERMISSION_DENIED
    if status == 409:
        return ErrorCode.UNAVAILABLE  # a conflicting operation in flight; AWS says retry
    if status == 413:
        return ErrorCode.TOO_LARGE
    if 400 <= status < 500:
        return ErrorCode.INVALID_ARGUMENT
    return ErrorCode.UNKNOWN


class AWSClassifier(Classifier):
    """Classifies botocore, aiobotocore and s3fs errors by AWS error code and HTTP status.

    ``ClientError`` is found anywhere in the cause chain (s3fs re-raises it as
    an ``OSError`` with the ClientError as ``__cause__``).
    """

    def code_of(self, exc: BaseException) -> ErrorCode:
        code, status = aws_error_code(exc)
        if code or status:
            if code == "PreconditionFailed" or (status == 412 and code not in _NOT_FOUND):
                # Decided by the condition the request carried (portable.driver.conditions):
                # only AWS and moto name it in the body's <Condition>, s3s and MinIO do not.
                return refused_condition_code(exc, body_condition=_condition(exc))
            return code_for(code, status)
        transport = _transport_code(exc)
        if transport is not None:
            return transport
        return super().code_of(exc)

    def is_retryable(self, exc: BaseException) -> bool:
        code, _status = aws_error_code(exc)
        if code in ("ConditionalRequestConflict", "OperationAborted"):
            return True
        return super().is_retryable(exc)

    def retry_after(self, exc: BaseException) -> float | None:
        found = client_error_of(exc)
        if found is None:
            return super().retry_after(exc)
        headers = found.response.get("ResponseMetadata", {}).get("HTTPHeaders", {}) or {}
        value = headers.get("retry-after")
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None


def _condition(exc: BaseException) -> str:
    found = client_error_of(exc)
    return str(found.response.get("Error", {}).get("Condition", "")) if found is not None else ""


class BotoClientOwner:
    """``as_()`` and ``close()`` of a driver that holds one boto3 client as ``self.client``.

    Mixed in first, so that its ``as_`` answers before :class:`~portable.driver.Classifier`'s.
    """

    client: Any

    def as_(self, kind: type[Any]) -> Any:
        """The boto3 client for ``botocore.client.BaseClient`` (or its own class), else None."""
        from botocore.client import BaseClient

        if kind is BaseClient or isinstance(self.client, kind):
            return self.client
        return None

    def close(self) -> None:
        """Close the client's connection pool."""
        self.client.close()
