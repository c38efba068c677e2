"""What the Blob and Queue drivers share: credentials, name rules and error classification.

Credentials never come from the URL itself. A URL names *where* a secret is
(an environment variable) or *which kind* of credential to use; the secret is
read from the environment when the driver opens, kept out of every repr, and
every error text passes through :func:`portable.driver.redaction.redact`.

Resolution (``auth=auto``, the default), first match wins:

1. ``connection_string_env=VAR``, ``account_key_env=VAR`` or
   ``sas_token_env=VAR`` named in the URL (the variable must be set);
2. ``AZURE_STORAGE_CONNECTION_STRING`` (used only if its AccountName matches
   ``account`` when the URL gives one);
3. ``AZURE_STORAGE_ACCOUNT_KEY``, then ``AZURE_STORAGE_SAS_TOKEN``;
4. azure-identity's ``DefaultAzureCredential`` (environment service principal,
   workload identity, managed identity, Azure CLI, ...).

``auth=connection_string|key|sas|identity|anonymous`` forces one kind.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from portable.driver import Classifier
from portable.driver.naming import (
    check_azure_account_name,
    check_azure_container_or_queue_name,
    reject_azure_inline_secrets,
)
from portable.driver.redaction import redact
from portable.errors import ConfigError, ErrorCode, InvalidURL, PortableError
from portable.urls import ParsedURL

__all__ = [
    "AUTH_KINDS",
    "AzureAuth",
    "AzureClassifier",
    "check_account_name",
    "check_container_or_queue_name",
    "error_code",
    "reject_inline_secrets",
    "resolve_auth",
]

Service = Literal["blob", "queue"]
AuthKind = Literal["connection_string", "key", "sas", "identity", "anonymous"]
AUTH_KINDS: tuple[str, ...] = ("auto", "connection_string", "key", "sas", "identity", "anonymous")

CONNECTION_STRING_ENV = "AZURE_STORAGE_CONNECTION_STRING"
ACCOUNT_KEY_ENV = "AZURE_STORAGE_ACCOUNT_KEY"
SAS_TOKEN_ENV = "AZURE_STORAGE_SAS_TOKEN"
ACCOUNT_NAME_ENV = "AZURE_STORAGE_ACCOUNT_NAME"


check_account_name = check_azure_account_name
check_container_or_queue_name = check_azure_container_or_queue_name


reject_inline_secrets = reject_azure_inline_secrets


def parse_connection_string(text: str) -> dict[str, str]:
    """Split ``Key=value;Key=value`` into a dict with lower-case keys (values keep their '=')."""
    pairs: dict[str, str] = {}
    for part in text.strip().split(";"):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        if not sep:
            raise ConfigError("the Azure connection string is malformed: every part must be Name=value")
        pairs[name.strip().lower()] = value.strip()
    return pairs


@dataclass(frozen=True, slots=True)
class AzureAuth:
    """Where a storage account is and how to sign requests to it.

    Build one with :func:`resolve_auth` (from a URL and the environment) or
    directly for programmatic use. The secrets are kept out of ``repr``.

    Attributes:
        account: the storage account name.
        endpoint: the service URL (``https://acct.blob.core.windows.net`` or
            ``http://127.0.0.1:10000/devstoreaccount1`` for Azurite); never a secret.
        kind: ``connection_string``, ``key``, ``sas``, ``identity`` or ``anonymous``.
        account_key: the shared key (``key`` and key-bearing connection strings).
        sas_token: a SAS query string without the leading ``?`` (``sas``).
        token_credential: a synchronous azure-identity credential to use for
            ``identity`` instead of ``DefaultAzureCredential``.
        async_token_credential: its ``azure.identity.aio`` twin, for the async
            client that Blob batches and adlfs use.
    """

    account: str
    endpoint: str
    kind: AuthKind
    account_key: str | None = field(default=None, repr=False)
    sas_token: str | None = field(default=None, repr=False)
    token_credential: Any = field(default=None, repr=False)
    async_token_credential: Any = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"AzureAuth(account={self.account!r}, endpoint={redact(self.endpoint)!r}, kind={self.kind!r})"

    @property
    def can_sign(self) -> bool:
        """Whether SAS URLs can be signed (a shared key is known)."""
        return self.account_key is not None

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


def _env(name: str, option: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise ConfigError(f"{option}={name} names an environment variable that is not set")
    return value


def _default_endpoint(account: str, service: Service, protocol: str = "https", suffix: str = "core.windows.net") -> str:
    return f"{protocol}://{account}.{service}.{suffix}"


def _path_style(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost" or "." not in host
    return True


def account_from_endpoint(endpoint: str) -> str | None:
    """The account an endpoint names: the first host label, or the first path segment (Azurite)."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if _path_style(host):
        segment = parts.path.strip("/").split("/", 1)[0]
        return segment or None
    return host.split(".", 1)[0] or None


def check_endpoint(endpoint: str, option: str) -> str:
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidURL(f"{option}={redact(endpoint)!r} must be an http(s) URL such as https://acct.blob.core.windows.net")
    if parts.query or parts.username or parts.password:
        raise InvalidURL(f"{option} must not carry a query or credentials (a SAS goes in sas_token_env=VAR)")
    return endpoint.rstrip("/")


def _from_connection_string(text: str, service: Service, account: str | None, endpoint: str | None) -> AzureAuth:
    pairs = parse_connection_string(text)
    if pairs.get("usedevelopmentstorage", "").lower() == "true":
        raise ConfigError(
            "UseDevelopmentStorage=true is not supported: give Azurite's full connection string "
            "(AccountName, AccountKey, BlobEndpoint, QueueEndpoint)"
        )
    cs_account = pairs.get("accountname")
    found_endpoint = endpoint or pairs.get(f"{service}endpoint")
    if found_endpoint is None:
        name = account or cs_account
        if not name:
            raise ConfigError("the Azure connection string names neither AccountName nor the service endpoint")
        found_endpoint = _default_endpoint(
            name, service, pairs.get("defaultendpointsprotocol", "https"), pairs.get("endpointsuffix", "core.windows.net")
        )
    name = account or cs_account or account_from_endpoint(found_endpoint)
    if not name:
        raise ConfigError("cannot tell the storage account from the connection string; add ?account=NAME")
    if account and cs_account and account != cs_account:
        raise ConfigError(
            f"the connection string is for account {cs_account!r}, but the URL names {account!r}"
        )
    sas = pairs.get("sharedaccesssignature")
    key = pairs.get("accountkey")
    if not key and not sas:
        raise ConfigError("the Azure connection string holds neither AccountKey nor SharedAccessSignature")
    return AzureAuth(
        account=name,
        endpoint=found_endpoint.rstrip("/"),
        kind="connection_string",
        account_key=key or None,
        sas_token=None if key else (sas or "").lstrip("?"),
    )


def resolve_auth(
    url: ParsedURL,
    service: Service,
    *,
    account: str | None,
    endpoint: str | None,
) -> AzureAuth:
    """Read the credential options of ``url`` (and the environment) into an :class:`AzureAuth`.

    Options read: ``auth``, ``connection_string_env``, ``account_key_env``,
    ``sas_token_env``. ``account`` and ``endpoint`` come from the caller,
    which read them from the URL already.

    Raises:
        InvalidURL: an unknown ``auth`` kind.
        ConfigError: a named variable is unset, a connection string is malformed,
            or no account name can be found.
    """
    kind = (url.take_str("auth", "auto") or "auto").lower()
    if kind not in AUTH_KINDS:
        raise InvalidURL(f"auth={kind!r} in {url}: use one of {', '.join(AUTH_KINDS)}")
    cs_env = url.take_str("connection_string_env")
    key_env = url.take_str("account_key_env")
    sas_env = url.take_str("sas_token_env")
    if endpoint is not None:
        endpoint = check_endpoint(endpoint, f"{service}_endpoint")
        in_path = account_from_endpoint(endpoint) if _path_style(urlsplit(endpoint).hostname or "") else None
        if account and in_path and in_path != account:
            raise ConfigError(f"{url}: the endpoint is for account {in_path!r}, but the URL names {account!r}")

    def need_account() -> str:
        name = account or (account_from_endpoint(endpoint) if endpoint else None) or os.environ.get(ACCOUNT_NAME_ENV)
        if not name:
            raise ConfigError(f"{url}: name the storage account with ?account=NAME (or {ACCOUNT_NAME_ENV})")
        return check_account_name(name) if endpoint is None else name

    def keyed(key: str) -> AzureAuth:
        name = need_account()
        return AzureAuth(name, endpoint or _default_endpoint(name, service), "key", account_key=key)

    def sas(token: str) -> AzureAuth:
        name = need_account()
        return AzureAuth(name, endpoint or _default_endpoint(name, service), "sas", sas_token=token.lstrip("?"))

    if kind == "auto":
        if cs_env:
            return _from_connection_string(_env(cs_env, "connection_string_env"), service, account, endpoint)
        if key_env:
            return keyed(_env(key_env, "account_key_env"))
        if sas_env:
            return sas(_env(sas_env, "sas_token_env"))
        text = os.environ.get(CONNECTION_STRING_ENV)
        if text:
            cs_account = parse_connection_string(text).get("accountname")
            if account is None or cs_account == account:
                return _from_connection_string(text, service, account, endpoint)
        if os.environ.get(ACCOUNT_KEY_ENV):
            return keyed(os.environ[ACCOUNT_KEY_ENV])
        if os.environ.get(SAS_TOKEN_ENV):
            return sas(os.environ[SAS_TOKEN_ENV])
        kind = "identity"
    if kind == "connection_string":
        return _from_connection_string(
            _env(cs_env or CONNECTION_STRING_ENV, "connection_string_env"), service, account, endpoint
        )
    if kind == "key":
        return keyed(_env(key_env or ACCOUNT_KEY_ENV, "account_key_env"))
    if kind == "sas":
        return sas(_env(sas_env or SAS_TOKEN_ENV, "sas_token_env"))
    name = need_account()
    return AzureAuth(name, endpoint or _default_endpoint(name, service), kind)  # type: ignore[arg-type]


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
