"""What the Blob and Queue drivers share: credentials, name rules, timeouts and error classification.

Credentials never come from the URL itself: :func:`resolve_auth` reads them
exactly as :func:`portable.driver.credentials.resolve_azure_credentials`
describes (the order ``auth=auto`` tries), the same resolution the obstore
engine of ``az://`` uses, and adds the azure-identity credential objects. The
secrets are kept out of every repr, and every error text passes through
:func:`portable.driver.redaction.redact`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from portable.driver import Classifier
from portable.driver.credentials import (
    AZURE_AUTH_KINDS,
    AzureCredentials,
    AzureService,
    resolve_azure_credentials,
)
from portable.driver.naming import (
    check_azure_account_name,
    check_azure_container_or_queue_name,
    reject_azure_inline_secrets,
)
from portable.errors import ErrorCode, PortableError
from portable.resilience import attempt_timeout
from portable.urls import ParsedURL

__all__ = [
    "AUTH_KINDS",
    "AzureAuth",
    "AzureClassifier",
    "check_account_name",
    "check_container_or_queue_name",
    "error_code",
    "reject_inline_secrets",
    "request_timeouts",
    "resolve_auth",
]


AUTH_KINDS = AZURE_AUTH_KINDS
check_account_name = check_azure_account_name
check_container_or_queue_name = check_azure_container_or_queue_name
reject_inline_secrets = reject_azure_inline_secrets


@dataclass(frozen=True, slots=True, repr=False)
class AzureAuth(AzureCredentials):
    """:class:`~portable.driver.credentials.AzureCredentials` with the azure-identity objects to sign with.

    Build one with :func:`resolve_auth` (from a URL and the environment) or
    directly for programmatic use. The secrets are kept out of ``repr``.

    Attributes:
        token_credential: a synchronous azure-identity credential to use for
            ``identity`` instead of ``DefaultAzureCredential``.
        async_token_credential: its ``azure.identity.aio`` twin, for the async
            client that Blob batches and adlfs use.
    """

    token_credential: Any = field(default=None, repr=False)
    async_token_credential: Any = field(default=None, repr=False)

    def sdk_credential(self, asynchronous: bool) -> Any:
        """The ``credential=`` argument for an azure-storage client."""
        if self.kind in ("key", "connection_string") and self.account_key is not None:
            from azure.core.credentials import AzureNamedKeyCredential

            return AzureNamedKeyCredential(self.account, self.account_key)
        if self.sas_token is not None:
            from azure.core.credentials import AzureSasCredential

            return AzureSasCredential(self.sas_token)
        if self.kind == "identity":
            if asynchronous and self.async_token_credential is not None:
                return self.async_token_credential
            if not asynchronous and self.token_credential is not None:
                return self.token_credential
            if asynchronous:
                from azure.identity.aio import DefaultAzureCredential as AioDefaultAzureCredential

                return AioDefaultAzureCredential()
            from azure.identity import DefaultAzureCredential

            return DefaultAzureCredential()
        return None


def resolve_auth(url: ParsedURL, service: AzureService, *, account: str | None, endpoint: str | None) -> AzureAuth:
    """:func:`~portable.driver.credentials.resolve_azure_credentials` (same options, same errors), as an AzureAuth."""
    found = resolve_azure_credentials(url, service, account=account, endpoint=endpoint)
    return AzureAuth(found.account, found.endpoint, found.kind, found.account_key, found.sas_token)


def request_timeouts(read_timeout: float, connection_timeout: float) -> dict[str, Any]:
    """Per-request azure-core timeouts, shortened to the portable deadline in force (none without one)."""
    left = attempt_timeout()
    if left is None:
        return {}
    left = max(0.001, left)
    return {"read_timeout": min(read_timeout, left), "connection_timeout": min(connection_timeout, left)}


# ------------------------------------------------------------------ errors
_ALREADY = frozenset({"BlobAlreadyExists", "ContainerAlreadyExists", "QueueAlreadyExists"})
_LEASE_LOST = frozenset({"PopReceiptMismatch", "MessageNotFound"})
_TOO_LARGE = frozenset({"RequestBodyTooLarge", "MessageTooLarge", "BlockCountExceedsLimit"})


def error_code(exc: BaseException) -> str:
    """The storage error code of an azure error (``"BlobNotFound"``), or ``""``."""
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code) or "")


class AzureClassifier(Classifier):
    """Maps azure-core and azure-storage errors to portable codes."""

    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, PortableError):
            return exc.code
        from azure.core import exceptions as az

        if isinstance(exc, az.ServiceRequestTimeoutError | az.ServiceResponseTimeoutError):
            return ErrorCode.DEADLINE_EXCEEDED
        if isinstance(exc, az.ServiceRequestError | az.ServiceResponseError | az.DecodeError):
            return ErrorCode.UNAVAILABLE
        if isinstance(exc, az.ClientAuthenticationError) and getattr(exc, "status_code", None) is None:
            return ErrorCode.PERMISSION_DENIED  # azure-identity found no credential
        if isinstance(exc, az.HttpResponseError):
            return _http_code(exc.status_code, error_code(exc))
        if isinstance(exc, ValueError | TypeError):
            return ErrorCode.INVALID_ARGUMENT
        return super().code_of(exc)

    def is_retryable(self, exc: BaseException) -> bool:
        if isinstance(exc, PortableError):
            return exc.retryable
        return self.code_of(exc) in (ErrorCode.UNAVAILABLE, ErrorCode.THROTTLED, ErrorCode.DEADLINE_EXCEEDED)

    def retry_after(self, exc: BaseException) -> float | None:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
        if not headers:
            return super().retry_after(exc)
        try:
            if headers.get("x-ms-retry-after-ms"):
                return float(headers["x-ms-retry-after-ms"]) / 1000.0
            if headers.get("Retry-After"):
                return float(headers["Retry-After"])
        except (TypeError, ValueError):
            return None
        return None


def _http_code(status: int | None, code: str) -> ErrorCode:
    if code in _LEASE_LOST:
        return ErrorCode.PRECONDITION_FAILED
    if code in _TOO_LARGE or status == 413:
        return ErrorCode.TOO_LARGE
    if status == 404:
        return ErrorCode.NOT_FOUND
    if status == 409:
        if code in _ALREADY:
            return ErrorCode.ALREADY_EXISTS
        if code.endswith("BeingDeleted"):
            return ErrorCode.UNAVAILABLE
        return ErrorCode.PRECONDITION_FAILED
    if status == 412:
        return ErrorCode.PRECONDITION_FAILED
    if status in (401, 403):
        return ErrorCode.PERMISSION_DENIED
    if status == 408 or code == "OperationTimedOut":
        return ErrorCode.DEADLINE_EXCEEDED
    if status == 429 or code == "ServerBusy":
        return ErrorCode.THROTTLED
    if status is not None and status >= 500:
        return ErrorCode.UNAVAILABLE
    if status is not None and 400 <= status < 500:
        return ErrorCode.INVALID_ARGUMENT
    return ErrorCode.UNKNOWN


# ------------------------------------------------------------------ async clients
