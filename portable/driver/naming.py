"""Naming rules and URL grammar of the cloud providers, shared by every engine of a scheme.

Pure string checks with no SDK behind them, so that the fsspec and obstore
engines of ``s3://``, ``gs://`` and ``az://`` accept exactly the same names
and URLs, and store metadata in exactly the same form (each engine reads the
other's objects). Metadata names follow one rule where native tools share a
bucket: a name portable encoded (Azure's ``pt__`` form) reads back as written,
and every other native name reads as the provider stores it, never decoded
(the table is in docs/providers.md). The obstore helpers keep the four HTTP
headers apart from user metadata in both directions. Each check returns the name or raises
:class:`~portable.errors.InvalidURL` saying what a valid name looks like,
before any request is sent. The ``parse_*_url`` functions read a scheme's
location and common options; the caller takes its engine's own options,
then calls ``url.done()``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal, NamedTuple

from ..errors import InvalidURL

if TYPE_CHECKING:
    from ..urls import ParsedURL
    from .storage import WriteOptions

__all__ = [
    "AWSURLOptions",
    "AZURE_ENCODED_MARKER",
    "AzureBlobURL",
    "GCSURL",
    "GOOGLE_STORAGE_ENDPOINT",
    "OBSTORE_HEADER_FIELDS",
    "OBSTORE_HEADER_NAMES",
    "S3URL",
    "check_azure_account_name",
    "check_azure_container_or_queue_name",
    "check_gcs_bucket_name",
    "check_http_endpoint",
    "check_prefix_segments",
    "check_s3_bucket_name",
    "decode_azure_metadata_name",
    "encode_azure_metadata_name",
    "gcs_endpoint",
    "obstore_write_attributes",
    "parse_azure_blob_url",
    "parse_gcs_url",
    "parse_s3_url",
    "reject_azure_inline_secrets",
    "split_obstore_attributes",
    "take_aws_options",
]

_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_GCS_BUCKET_CHARS = re.compile(r"^[a-z0-9][a-z0-9._-]*[a-z0-9]$")
_AZURE_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")
_AZURE_CONTAINER = re.compile(r"^(?=.{3,63}$)[a-z0-9](?:[a-z0-9]|-(?!-))*[a-z0-9]$")
_CS_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PORTABLE_METADATA_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,127}$")
_AWS_REGION = re.compile(r"^[a-z]{2}(-[a-z0-9]+){1,3}-\d{1,2}$")
_HTTP_ENDPOINT = re.compile(r"^https?://[^/?#\s]+")


def check_s3_bucket_name(name: str) -> str:
    """Return ``name`` if S3 accepts it as a bucket name, else raise InvalidURL saying why."""
    if not _S3_BUCKET.match(name):
        raise InvalidURL(
            f"{name!r} is not an S3 bucket name: use 3-63 characters of a-z, 0-9, '.' and '-', "
            "starting and ending with a letter or digit"
        )
    if ".." in name or ".-" in name or "-." in name:
        raise InvalidURL(f"S3 bucket name {name!r} must not hold '..', '.-' or '-.'")
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return name
    raise InvalidURL(f"S3 bucket name {name!r} must not be an IP address")


def check_gcs_bucket_name(name: str) -> str:
    """Return ``name`` if GCS accepts it as a bucket name, else raise InvalidURL saying why."""
    rule = (
        "GCS bucket names are 3-63 characters (up to 222 with dots, 63 between dots) of "
        "a-z, 0-9, '-', '_' and '.', starting and ending with a letter or digit"
    )
    if not name:
        raise InvalidURL("a gs:// URL needs a bucket: gs://BUCKET or gs://BUCKET/PREFIX")
    if not _GCS_BUCKET_CHARS.match(name):
        raise InvalidURL(f"bucket name {name[:80]!r} is invalid: {rule}")
    parts = name.split(".")
    if not 3 <= len(name) <= (222 if len(parts) > 1 else 63) or any(len(p) > 63 or not p for p in parts):
        raise InvalidURL(f"bucket name {name[:80]!r} is too short, too long or has an empty part: {rule}")
    try:
        ipaddress.ip_address(name)
    except ValueError:
        pass
    else:
        raise InvalidURL(f"bucket name {name!r} is an IP address, which GCS refuses")
    if name.startswith("goog") or "google" in name:
        raise InvalidURL(f"bucket name {name!r} may not start with 'goog' or contain 'google'")
    return name


def check_azure_account_name(name: str) -> str:
    """Return ``name`` if it is a valid storage account name, else raise InvalidURL."""
    if not _AZURE_ACCOUNT.match(name):
        raise InvalidURL(f"storage account name {name!r} must be 3-24 lower-case letters and digits")
    return name


def check_azure_container_or_queue_name(name: str, what: str) -> str:
    """Return ``name`` if Azure accepts it as a container or queue name, else raise InvalidURL.

    Both are 3-63 characters of lower-case letters, digits and single hyphens,
    starting and ending with a letter or digit.
    """
    if name in ("$root", "$web", "$logs") and what == "container":
        return name
    if not _AZURE_CONTAINER.match(name):
        raise InvalidURL(
            f"{what} name {name!r} is not valid on Azure: use 3-63 lower-case letters, digits and "
            "single hyphens, starting and ending with a letter or digit (for example 'my-data-1')"
        )
    return name


# ---------------------------------------------------------------- metadata names
#: The marker of an Azure metadata name that portable encoded: no native writer starts a name
#: with it by accident, and a name that carries it is decoded only when it is exactly what
#: :func:`encode_azure_metadata_name` writes (so ``pt__nosuch`` or ``pt_raw`` read as written).
AZURE_ENCODED_MARKER = "pt__"
#: Names that obstore's attribute mapping sends as HTTP headers (any letter case), never as user
#: metadata: on Azure both engines store them encoded; obstore's GCS engine refuses them.
OBSTORE_HEADER_NAMES = frozenset(
    {
        "cache-control",
        "cachecontrol",
        "content-disposition",
        "contentdisposition",
        "content-encoding",
        "contentencoding",
        "content-language",
        "contentlanguage",
        "content-type",
        "contenttype",
    }
)
_AZURE_ESCAPES = {"_": "_5f", "-": "_2d"}
_AZURE_ENCODED = re.compile(r"^pt__(?:[a-z0-9]|_5f|_2d)+$")
_AZURE_ESCAPE = re.compile(r"_(5f|2d)")


def encode_azure_metadata_name(name: str) -> str:
    """The name under which Azure stores the portable metadata name ``name`` (lower case, as the Bucket passes it).

    Azure takes only C# identifiers (``[A-Za-z_][A-Za-z0-9_]*``). A name that
    is one is stored as it is, unless it starts with :data:`AZURE_ENCODED_MARKER`
    or is in :data:`OBSTORE_HEADER_NAMES`; every other name is stored as the
    marker followed by the name with ``_`` written ``_5f`` and ``-`` written
    ``_2d`` (its hex code, ``_`` as the escape): ``x-trace`` is ``pt__x_2dtrace``,
    ``1st`` is ``pt__1st``, ``contenttype`` is ``pt__contenttype``.
    """
    lowered = name.lower()
    if (
        _CS_IDENTIFIER.match(name)
        and not lowered.startswith(AZURE_ENCODED_MARKER)
        and lowered not in OBSTORE_HEADER_NAMES
    ):
        return name
    return AZURE_ENCODED_MARKER + "".join(_AZURE_ESCAPES.get(c, c) for c in name)


def decode_azure_metadata_name(stored: str) -> str:
    """The portable name of the Azure metadata name ``stored``: lower case, decoded only if portable encoded it.

    Azure compares metadata names without regard to case, so a name reads in
    lower case (a native ``Owner`` is ``owner``, as on S3). A name is decoded
    only when it is exactly what :func:`encode_azure_metadata_name` writes for
    some portable name; every other native name (``pt_raw``, ``pt__x_y``,
    ``pt__owner``) is passed through as it is, lower-cased.
    """
    lowered = stored.lower()
    if not _AZURE_ENCODED.match(lowered):
        return lowered
    body = lowered[len(AZURE_ENCODED_MARKER) :]
    name = _AZURE_ESCAPE.sub(lambda m: "_" if m[1] == "5f" else "-", body)
    if _PORTABLE_METADATA_NAME.match(name) and encode_azure_metadata_name(name) == lowered:
        return name
    return lowered


#: The header attributes obstore reports, by the exact names it gives them (user metadata comes
#: under the name it was stored with, lower case from an HTTP header), and the ObjectInfo field of each.
OBSTORE_HEADER_FIELDS: Mapping[str, str] = {
    "Content-Type": "content_type",
    "Cache-Control": "cache_control",
    "Content-Encoding": "content_encoding",
    "Content-Disposition": "content_disposition",
}
#: Headers obstore may report that no ObjectInfo field holds: dropped, never taken as metadata.
_OBSTORE_OTHER_HEADERS = frozenset({"Content-Language", "Storage-Class"})


def obstore_write_attributes(
    options: WriteOptions, metadata_name: Callable[[str], str] = str
) -> dict[str, str] | None:
    """The obstore ``attributes`` of a write: the four headers under obstore's names, then the
    metadata under ``metadata_name(name)`` (the caller makes sure none is a header name)."""
    attrs = {metadata_name(k): v for k, v in options.metadata.items()}
    for header, field_name in OBSTORE_HEADER_FIELDS.items():
        value = getattr(options, field_name)
        if value is not None:
            attrs[header] = value
    return attrs or None


def split_obstore_attributes(
    attributes: Mapping[str, str] | None, metadata_name: Callable[[str], str] = str
) -> tuple[dict[str, str], dict[str, str]]:
    """Split the attributes obstore read into (ObjectInfo header fields, user metadata).

    obstore names a header attribute exactly as :data:`OBSTORE_HEADER_FIELDS`
    does and a metadata entry by its stored name, so a user metadata entry
    named ``content-type`` stays metadata.
    """
    headers: dict[str, str] = {}
    metadata: dict[str, str] = {}
    for name, value in (attributes or {}).items():
        field_name = OBSTORE_HEADER_FIELDS.get(name)
        if field_name is not None:
            headers[field_name] = value
        elif name not in _OBSTORE_OTHER_HEADERS:
            metadata[metadata_name(name)] = value
    return headers, metadata


def check_prefix_segments(prefix: str) -> str:
    """Return ``prefix`` (without slashes at its ends) if no segment is empty, ``.`` or ``..``.

    Raises:
        InvalidURL: a segment is empty, ``.`` or ``..``.
    """
    prefix = prefix.strip("/")
    if prefix and any(seg in ("", ".", "..") for seg in prefix.split("/")):
        raise InvalidURL(f"the prefix {prefix!r} must not hold empty, '.' or '..' segments")
    return prefix


def check_http_endpoint(endpoint: str, url: ParsedURL, option: str = "endpoint_url") -> str:
    """Return ``endpoint`` if it is ``http(s)://host[:port]...``, else raise InvalidURL."""
    if not _HTTP_ENDPOINT.match(endpoint):
        raise InvalidURL(f"{option} in {url} must be http(s)://host[:port], got {endpoint!r}")
    return endpoint


# ---------------------------------------------------------------- AWS and S3 URLs
class AWSURLOptions(NamedTuple):
    """The URL options every AWS driver takes (``s3://``, ``sqs://``, ``batch://``, ``dynamodb://``)."""

    region: str | None  #: ``region=``, else None (the SDK's chain)
    endpoint_url: str | None  #: ``endpoint_url=`` without a trailing slash, else None (AWS)
    profile: str | None  #: ``profile=``, a profile of ``~/.aws/config``
    timeout: float  #: ``timeout=``, seconds per request; 30 by default


def take_aws_options(url: ParsedURL) -> AWSURLOptions:
    """Read ``region``, ``endpoint_url``, ``profile`` and ``timeout`` from ``url``.

    Raises:
        InvalidURL: a region that is not of AWS's form, an endpoint that is
            not http(s), or a timeout outside (0, 3600] seconds.
    """
    region = url.take_str("region")
    if region is not None and not _AWS_REGION.match(region):
        raise InvalidURL(f"region={region!r} in {url} is not an AWS region such as 'eu-west-1'")
    endpoint = url.take_str("endpoint_url")
    if endpoint is not None:
        endpoint = check_http_endpoint(endpoint, url).rstrip("/")
    timeout = url.take("timeout", float, 30.0)
    if not 0 < timeout <= 3600:
        raise InvalidURL(f"timeout in {url} must be between 0 and 3600 seconds, got {timeout}")
    return AWSURLOptions(region, endpoint or None, url.take_str("profile"), timeout)


class S3URL(NamedTuple):
    """Where an ``s3://`` URL points, as both S3 engines read it."""

    bucket: str  #: the URL's host (checked by the engine: a constructor call checks it too)
    prefix: str  #: the URL's path without slashes at its ends
    aws: AWSURLOptions
    addressing_style: Literal["auto", "path", "virtual"] | None
    concurrency: int  #: objects in flight in the batch methods


def parse_s3_url(url: ParsedURL, *, default_concurrency: int) -> S3URL:
    """Take the location and common options of ``s3://BUCKET[/PREFIX]``.

    Args:
        url: the parsed URL; its options are taken, not checked for leftovers.
        default_concurrency: the engine's ``concurrency`` when the URL has none.

    Raises:
        InvalidURL: no bucket, a bad option, or a prefix with an empty or
            ``..`` segment.
    """
    if not url.host:
        raise InvalidURL(f"{url} names no bucket: write s3://BUCKET[/PREFIX]")
    aws = take_aws_options(url)
    style = url.take_str("addressing_style")
    if style not in (None, "auto", "path", "virtual"):
        raise InvalidURL(f"addressing_style in {url} must be auto, path or virtual, got {style!r}")
    concurrency = url.take("concurrency", int, default_concurrency)
    if not 1 <= concurrency <= 512:
        raise InvalidURL(f"concurrency in {url} must be from 1 to 512, got {concurrency}")
    prefix = url.path.strip("/")
    if prefix and (".." in prefix.split("/") or "//" in prefix):
        raise InvalidURL(f"the prefix of {url} has an empty or '..' segment")
    return S3URL(url.host, prefix, aws, style, concurrency)  # type: ignore[arg-type]


# ---------------------------------------------------------------- GCS URLs
#: Where GCS requests go when neither the URL nor ``STORAGE_EMULATOR_HOST`` says otherwise.
GOOGLE_STORAGE_ENDPOINT = "https://storage.googleapis.com"


class GCSURL(NamedTuple):
    """Where a ``gs://`` URL points, as both GCS engines read it."""

    bucket: str  #: the URL's host (checked by the engine's constructor)
    prefix: str  #: the URL's path, as written
    project: str | None
    endpoint_url: str | None
    token: str | None
    signing_key_file: str | None
    timeout: float  #: seconds per request; 60 by default
    concurrency: int  #: objects in flight in the batch methods; 16 by default


def parse_gcs_url(url: ParsedURL) -> GCSURL:
    """Take the location and common options of ``gs://BUCKET[/PREFIX]``.

    Raises:
        InvalidURL: a timeout that is not positive, or a concurrency outside 1-256.
    """
    fields = GCSURL(
        url.host,
        url.path,
        url.take_str("project"),
        url.take_str("endpoint_url"),
        url.take_str("token"),
        url.take_str("signing_key_file"),
        url.take("timeout", float, 60.0),
        url.take("concurrency", int, 16),
    )
    if not fields.timeout > 0:
        raise InvalidURL(f"timeout in {url} must be > 0 seconds")
    if not 1 <= fields.concurrency <= 256:
        raise InvalidURL(f"concurrency in {url} must be from 1 to 256")
    return fields


def gcs_endpoint(endpoint_url: str | None, emulator_host: str | None) -> tuple[str, bool]:
    """Where GCS requests go, and whether that is not Google's own endpoint.

    Args:
        endpoint_url: the URL's ``endpoint_url``, if any.
        emulator_host: ``$STORAGE_EMULATOR_HOST``, if set; a bare
            ``host:port`` is read as ``http://host:port``.

    Returns:
        ``(endpoint, custom)``: the endpoint without a trailing slash
        (:data:`GOOGLE_STORAGE_ENDPOINT` when neither is given), and whether
        one was given (an emulator: the credentials default to ``anon``).
    """
    endpoint = (endpoint_url or emulator_host or "").rstrip("/")
    if endpoint and not endpoint.startswith(("http://", "https://")):
        endpoint = f"http://{endpoint}"
    return endpoint or GOOGLE_STORAGE_ENDPOINT, bool(endpoint)


# ---------------------------------------------------------------- Azure URLs
_AZURE_HOST = re.compile(r"^(?P<account>[a-z0-9]+)\.(?:dfs|blob)\.(?P<suffix>.+)$")
#: URL options that would put a secret into a URL, and where the secret goes instead.
_AZURE_INLINE_SECRETS = {
    "connection_string": "connection_string_env",
    "account_key": "account_key_env",
    "accountkey": "account_key_env",
    "key": "account_key_env",
    "sas_token": "sas_token_env",
    "sas": "sas_token_env",
    "sig": "sas_token_env",
    "client_secret": "the AZURE_CLIENT_SECRET environment variable (auth=identity)",
    "password": "account_key_env",
}


def reject_azure_inline_secrets(url: ParsedURL) -> None:
    """Refuse an Azure URL that carries a secret: URLs end up in logs and configuration files."""
    for name in url.options:
        hint = _AZURE_INLINE_SECRETS.get(name.lower())
        if hint is not None:
            raise InvalidURL(
                f"{url}: option {name} would put a secret in the URL, which gets logged; "
                f"put it in an environment variable and name the variable with {hint}=VAR"
            )
    if ":" in url.netloc.rpartition("@")[0]:
        raise InvalidURL(f"{url}: a password in the URL is not accepted; use account_key_env=VAR")


class AzureBlobURL(NamedTuple):
    """Where an ``az://`` / ``abfs://`` URL points, as both Azure engines read it."""

    container: str
    account: str | None  #: ``account=``, else the ADLS host's account, else None (from the credentials)
    endpoint: str | None  #: ``blob_endpoint=`` / ``endpoint_url=``, else the ADLS host's blob endpoint
    max_concurrency: int
    timeout: float
    connection_timeout: float


def parse_azure_blob_url(url: ParsedURL) -> AzureBlobURL:
    """Take the location and common options of ``az://CONTAINER/PREFIX?account=ACCOUNT`` or
    ``abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX`` (secrets refused first); the
    caller takes its engine's own options and the credentials, then calls ``url.done()``."""
    reject_azure_inline_secrets(url)
    container, _, host = url.netloc.partition("@")
    host_account = host_endpoint = None
    if host:
        match = _AZURE_HOST.match(host.lower())
        if match is None:
            raise InvalidURL(
                f"{url}: write the ADLS form as {url.scheme}://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX"
            )
        host_account = match["account"]
        host_endpoint = f"https://{host_account}.blob.{match['suffix']}"
    if not container:
        raise InvalidURL(f"{url} names no container: write {url.scheme}://CONTAINER/PREFIX?account=ACCOUNT")
    account = url.take_str("account")
    if account is not None:
        check_azure_account_name(account)
        if host_account is not None and account != host_account:
            raise InvalidURL(f"{url}: account={account} contradicts the host's account {host_account}")
    blob_endpoint = url.take_str("blob_endpoint")
    endpoint_url = url.take_str("endpoint_url")
    if blob_endpoint and endpoint_url:
        raise InvalidURL(f"{url}: give blob_endpoint or endpoint_url, not both")
    max_concurrency = url.take("max_concurrency", int, 8)
    timeout = url.take("timeout", float, 60.0)
    connection_timeout = url.take("connection_timeout", float, 10.0)
    if max_concurrency < 1 or timeout <= 0 or connection_timeout <= 0:
        raise InvalidURL(f"{url}: max_concurrency, timeout and connection_timeout must be positive")
    return AzureBlobURL(
        container,
        account or host_account,
        blob_endpoint or endpoint_url or host_endpoint,
        max_concurrency,
        timeout,
        connection_timeout,
    )
