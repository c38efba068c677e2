"""What the Blob and Queue drivers share: credentials, name rules, timeouts and error classification.

Credentials never come from the URL itself: :func:`resolve_auth` reads them
exactly as :func:`portable.driver.credentials.resolve_azure_credentials`
describes (the order ``auth=auto`` tries), the same resolution the obstore
engine of ``az://`` uses, and adds the azure-identity credential objects. The
secrets are kept out of every repr, and every error text passes through
:func:`portable.driver.redaction.redact`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

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
from portable.errors import ErrorCode, PortableError, Unavailable
from portable.resilience import attempt_timeout
from portable.urls import ParsedURL

__all__ = [
    "AUTH_KINDS",
    "AzureAuth",
    "AzureClassifier",
    "PerLoop",
    "check_account_name",
    "check_container_or_queue_name",
    "error_code",
    "reject_inline_secrets",
    "request_timeouts",
    "resolve_auth",
]

C = TypeVar("C")

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
class PerLoop(Generic[C]):
    """One client per running event loop, made on first use by ``make()`` and closed by ``close(client)``.

    An aiohttp session or a grpc.aio channel belongs to the loop it was made
    on, and a driver may be awaited from several loops (``portable.testing.faces``
    runs each on a private loop thread). Concurrent first calls on one loop
    share one making. :meth:`aclose` closes the calling loop's client and those
    of other loops still running (a stopped loop's cannot be); after it, a call
    raises Unavailable: a closed driver never opens a client again.
    """

    def __init__(self, make: Callable[[], Awaitable[C]], close: Callable[[C], Awaitable[object]]) -> None:
        self._make = make
        self._close = close
        self._tasks: dict[asyncio.AbstractEventLoop, asyncio.Task[C]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, loop: object) -> bool:
        return loop in self._tasks

    async def get(self) -> C:
        """The running loop's client."""
        loop = asyncio.get_running_loop()
        with self._lock:
            task = self._tasks.get(loop)
            if task is None:
                if self._closed:
                    raise Unavailable("this async driver is closed (aclose was called)")
                task = self._tasks[loop] = loop.create_task(self._new())
        if task.done() and not task.cancelled() and task.exception() is None:
            return task.result()  # the common case: no shield, no new future
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            raise
        except BaseException:
            with self._lock:
                if self._tasks.get(loop) is task:
                    del self._tasks[loop]  # the next call tries again
            raise

    async def _new(self) -> C:
        return await self._make()

    async def aclose(self) -> None:
        """Close the calling loop's client and those of other loops still running."""
        with self._lock:
            tasks, self._tasks = self._tasks, {}
            self._closed = True
        here = asyncio.get_running_loop()
        for loop, task in tasks.items():
            if loop is here:
                await self._close_one(task)
            elif loop.is_running():
                with contextlib.suppress(Exception):
                    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._close_one(task), loop))

    async def _close_one(self, task: asyncio.Task[C]) -> None:
        if not task.done():
            task.cancel()  # still connecting: nothing to close yet
            return
        if task.cancelled() or task.exception() is not None:
            return
        await self._close(task.result())
