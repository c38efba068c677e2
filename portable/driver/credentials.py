"""Where a storage account's credentials come from, read the same way by every engine.

A URL never carries a secret: it names *where* one is (an environment
variable) or *which kind* of credential to use, and the secret is read from
the environment when the driver opens. Both ``az://`` engines (adlfs and
obstore) and ``azqueue://`` resolve Azure credentials through
:func:`resolve_azure_credentials`, so one URL means the same account, endpoint
and credential whichever engine opens it. Only strings are handled here: the
SDK credential objects are built by the adapters.

Resolution (``auth=auto``, the default), first match wins:

1. ``connection_string_env=VAR``, ``account_key_env=VAR`` or
   ``sas_token_env=VAR`` named in the URL (the variable must be set);
2. ``AZURE_STORAGE_CONNECTION_STRING`` (used only if its AccountName matches
   ``account`` when the URL gives one);
3. ``AZURE_STORAGE_ACCOUNT_KEY``, then ``AZURE_STORAGE_SAS_TOKEN``;
4. ``identity``: the engine's token chain (environment service principal,
   workload identity, managed identity, Azure CLI, ...).

``auth=connection_string|key|sas|identity|anonymous`` forces one kind.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from ..errors import ConfigError, InvalidURL
from .naming import check_azure_account_name
from .redaction import redact

if TYPE_CHECKING:
    from ..urls import ParsedURL

__all__ = [
    "AZURE_AUTH_KINDS",
    "AzureCredentials",
    "azure_account_from_endpoint",
    "parse_azure_connection_string",
    "resolve_azure_credentials",
]

AzureService = Literal["blob", "queue"]
AzureAuthKind = Literal["connection_string", "key", "sas", "identity", "anonymous"]
#: The values ``auth=`` takes.
AZURE_AUTH_KINDS: tuple[str, ...] = ("auto", "connection_string", "key", "sas", "identity", "anonymous")

CONNECTION_STRING_ENV = "AZURE_STORAGE_CONNECTION_STRING"
ACCOUNT_KEY_ENV = "AZURE_STORAGE_ACCOUNT_KEY"
SAS_TOKEN_ENV = "AZURE_STORAGE_SAS_TOKEN"
ACCOUNT_NAME_ENV = "AZURE_STORAGE_ACCOUNT_NAME"


@dataclass(frozen=True, slots=True)
class AzureCredentials:
    """Where a storage account is and which credential signs requests to it.

    The secrets are kept out of ``repr``.

    Attributes:
        account: the storage account name.
        endpoint: the service URL (``https://acct.blob.core.windows.net`` or
            ``http://127.0.0.1:10000/devstoreaccount1`` for Azurite); never a secret.
        kind: ``connection_string``, ``key``, ``sas``, ``identity`` or ``anonymous``.
        account_key: the shared key (``key`` and key-bearing connection strings).
        sas_token: a SAS query string without the leading ``?`` (``sas``, and
            connection strings that carry a SharedAccessSignature but no key).
    """

    account: str
    endpoint: str
    kind: AzureAuthKind
    account_key: str | None = field(default=None, repr=False)
    sas_token: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(account={self.account!r}, endpoint={redact(self.endpoint)!r}, kind={self.kind!r})"

    @property
    def can_sign(self) -> bool:
        """Whether SAS URLs can be signed (a shared key is known)."""
        return self.account_key is not None


def parse_azure_connection_string(text: str) -> dict[str, str]:
    """Split ``Key=value;Key=value`` into a dict with lower-case keys (values keep their '=').

    Raises:
        ConfigError: a part is not ``Name=value``.
    """
    pairs: dict[str, str] = {}
    for part in text.strip().split(";"):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        if not sep:
            raise ConfigError("the Azure connection string is malformed: every part must be Name=value")
        pairs[name.strip().lower()] = value.strip()
    return pairs


def _path_style(host: str) -> bool:
    """Whether an endpoint names its account in the path (Azurite: an IP, localhost or a bare host)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost" or "." not in host
    return True


def azure_account_from_endpoint(endpoint: str) -> str | None:
    """The account an endpoint names: the first host label, or the first path segment (Azurite)."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if _path_style(host):
        segment = parts.path.strip("/").split("/", 1)[0]
        return segment or None
    return host.split(".", 1)[0] or None


def _check_endpoint(endpoint: str, option: str) -> str:
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidURL(f"{option}={redact(endpoint)!r} must be an http(s) URL such as https://acct.blob.core.windows.net")
    if parts.query or parts.username or parts.password:
        raise InvalidURL(f"{option} must not carry a query or credentials (a SAS goes in sas_token_env=VAR)")
    return endpoint.rstrip("/")


def _default_endpoint(
    account: str, service: AzureService, protocol: str = "https", suffix: str = "core.windows.net"
) -> str:
    return f"{protocol}://{account}.{service}.{suffix}"


def _env(name: str, option: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise ConfigError(f"{option}={name} names an environment variable that is not set")
    return value


def _from_connection_string(
    text: str, service: AzureService, account: str | None, endpoint: str | None
) -> AzureCredentials:
    pairs = parse_azure_connection_string(text)
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
    name = account or cs_account or azure_account_from_endpoint(found_endpoint)
    if not name:
        raise ConfigError("cannot tell the storage account from the connection string; add ?account=NAME")
    if account and cs_account and account != cs_account:
        raise ConfigError(f"the connection string is for account {cs_account!r}, but the URL names {account!r}")
    sas = pairs.get("sharedaccesssignature")
    key = pairs.get("accountkey")
    if not key and not sas:
        raise ConfigError("the Azure connection string holds neither AccountKey nor SharedAccessSignature")
    return AzureCredentials(
        account=name,
        endpoint=found_endpoint.rstrip("/"),
        kind="connection_string",
        account_key=key or None,
        sas_token=None if key else (sas or "").lstrip("?"),
    )


def resolve_azure_credentials(
    url: ParsedURL,
    service: AzureService,
    *,
    account: str | None,
    endpoint: str | None,
) -> AzureCredentials:
    """Read the credential options of ``url`` (and the environment) into :class:`AzureCredentials`.

    Options read: ``auth``, ``connection_string_env``, ``account_key_env``,
    ``sas_token_env``. ``account`` and ``endpoint`` come from the caller,
    which read them from the URL already; an ``endpoint`` is checked here.

    Raises:
        InvalidURL: an unknown ``auth`` kind, or an endpoint that is not a
            plain http(s) URL.
        ConfigError: a named variable is unset, a connection string is malformed
            or names another account, or no account name can be found.
    """
    kind = (url.take_str("auth", "auto") or "auto").lower()
    if kind not in AZURE_AUTH_KINDS:
        raise InvalidURL(f"auth={kind!r} in {url}: use one of {', '.join(AZURE_AUTH_KINDS)}")
    cs_env = url.take_str("connection_string_env")
    key_env = url.take_str("account_key_env")
    sas_env = url.take_str("sas_token_env")
    if endpoint is not None:
        endpoint = _check_endpoint(endpoint, f"{service}_endpoint")
        in_path = azure_account_from_endpoint(endpoint) if _path_style(urlsplit(endpoint).hostname or "") else None
        if account and in_path and in_path != account:
            raise ConfigError(f"{url}: the endpoint is for account {in_path!r}, but the URL names {account!r}")

    def need_account() -> str:
        name = account or (azure_account_from_endpoint(endpoint) if endpoint else None) or os.environ.get(ACCOUNT_NAME_ENV)
        if not name:
            raise ConfigError(f"{url}: name the storage account with ?account=NAME (or {ACCOUNT_NAME_ENV})")
        return check_azure_account_name(name) if endpoint is None else name

    def keyed(key: str) -> AzureCredentials:
        name = need_account()
        return AzureCredentials(name, endpoint or _default_endpoint(name, service), "key", account_key=key)

    def sas(token: str) -> AzureCredentials:
        name = need_account()
        return AzureCredentials(name, endpoint or _default_endpoint(name, service), "sas", sas_token=token.lstrip("?"))

    if kind == "auto":
        if cs_env:
            return _from_connection_string(_env(cs_env, "connection_string_env"), service, account, endpoint)
        if key_env:
            return keyed(_env(key_env, "account_key_env"))
        if sas_env:
            return sas(_env(sas_env, "sas_token_env"))
        text = os.environ.get(CONNECTION_STRING_ENV)
        if text:
            cs_account = parse_azure_connection_string(text).get("accountname")
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
    return AzureCredentials(name, endpoint or _default_endpoint(name, service), kind)  # type: ignore[arg-type]
