"""Provider URLs and the scheme registry.

A provider is named by a URL: ``s3://bucket/prefix?region=eu-west-1``,
``sqlite://./queue.db?name=events``, ``local://?workers=4``. The scheme picks a
driver from a lazy table of ``"module:attribute"`` strings (nothing is
imported until a URL of that scheme is opened) and from the entry-point groups
``portable.storage``, ``portable.messaging``, ``portable.compute`` and
``portable.idempotency``, which third-party distributions use to add schemes.

A wrapper scheme ``NAME+inner://...`` (``chaos+s3://bucket?error_rate=0.2``)
hands the URL to the wrapper registered as ``NAME``, which opens the inner URL
itself.

An idempotency URL of a scheme that no idempotency store registers is a
storage URL: it names the bucket that keeps the records
(:class:`portable.idempotency.BucketStore`); :func:`serving_domain` says which.

Errors:
    UnknownScheme: no driver provides the scheme; the message lists the known
        schemes and the closest match.
    MissingDependency: a built-in scheme whose distribution is not installed;
        the message names the pip extra.
    InvalidURL: an option the driver does not know, or a value of the wrong type;
        a credential in the URL (see below).

Credentials never go in a URL (URLs end up in logs, shell histories, process
lists and configuration files). :func:`parse_url` refuses, for every scheme,
a URL whose user info holds a password (``s3://AKIA:SECRET@bucket``,
``redis://:pw@host``) and an option whose value is itself a URL with user
info (``endpoint_url=http://user:pw@host``); :func:`open_driver` also refuses
options that can only be a secret (``password``, ``aws_secret_access_key``,
``account_key``, ``connection_string``, ``sas_token``, ``client_secret``, ...).
The InvalidURL says where the scheme's credentials go instead (the
environment, a profile, a credential option naming an environment
variable); the secret itself is never in it. Opening a driver also installs
:func:`portable._logging.install_secret_masking`, which masks secrets in the
log records of the SDKs the drivers use, and masks, in place, every error
(with its whole cause chain) that a driver raises while it opens.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from ._logging import install_secret_masking
from .driver.redaction import MASK, is_secret_option, redact, scrub_exception_chain
from .errors import InvalidURL, MissingDependency, UnknownScheme

__all__ = [
    "Domain",
    "ParsedURL",
    "driver_class",
    "known_schemes",
    "load_driver_factory",
    "open_driver",
    "parse_url",
    "refuse_inline_secrets",
    "serving_domain",
    "where_credentials_go",
    "with_default_engine",
]

Domain = Literal["storage", "messaging", "compute", "idempotency"]
T = TypeVar("T")

#: scheme -> ("module:attribute", pip extra or None for the core)
_BUILTIN: dict[str, dict[str, tuple[str, str | None]]] = {
    "storage": {
        "abfs": ("portable_azure.blob:BlobStorage", "azure"),
        "az": ("portable_azure.blob:BlobStorage", "azure"),
        "file": ("portable.embedded.file:FileStorage", None),
        "gcs": ("portable_gcp.gcs:GCSStorage", "gcp"),
        "gs": ("portable_gcp.gcs:GCSStorage", "gcp"),
        "mem": ("portable.embedded.memory:MemoryStorage", None),
        "s3": ("portable_aws.s3:S3Storage", "aws"),
    },
    "messaging": {
        "azqueue": ("portable_azure.queue:StorageQueueMessaging", "azure"),
        "kafka": ("portable_kafka.kafka:KafkaMessaging", "kafka"),
        "mem": ("portable.embedded.memqueue:MemoryMessaging", None),
        "pubsub": ("portable_gcp.pubsub:PubSubMessaging", "gcp"),
        "pulsar": ("portable_pulsar.pulsar:PulsarMessaging", "pulsar"),
        "sqlite": ("portable.embedded.sqlitequeue:SqliteMessaging", None),
        "sqs": ("portable_aws.sqs:SQSMessaging", "aws"),
    },
    "compute": {
        "batch": ("portable_aws.batch:BatchLauncher", "aws"),
        "dask": ("portable_dask.launcher:DaskLauncher", "dask"),
        "dask+local": ("portable_dask.launcher:DaskLauncher", "dask"),
        "k8s": ("portable_k8s.jobs:K8sLauncher", "k8s"),
        "local": ("portable.embedded.localjobs:LocalLauncher", None),
    },
    "idempotency": {
        "dynamodb": ("portable_aws.dynamodb:DynamoDBStore", "aws"),
        "firestore": ("portable_gcp.firestore:FirestoreIdempotencyStore", "gcp"),
        "mem": ("portable.idempotency:MemoryStore", None),
        "redis": ("portable_redis.store:RedisStore", "redis"),
        "rediss": ("portable_redis.store:RedisStore", "redis"),
        "sqlite": ("portable.idempotency:SqliteStore", None),
        "unix": ("portable_redis.store:RedisStore", "redis"),
    },
}

#: Storage schemes served by more than one engine: scheme -> {engine: (target, extra)}.
#: Without ``?engine=``, the first engine whose distribution is installed is used,
#: so the fast obstore engine is the default for S3 and Azure wherever
#: ``portable-cloud[obstore]`` is installed.
_STORAGE_ENGINES: dict[str, dict[str, tuple[str, str]]] = {
    "abfs": {
        "obstore": ("portable_obstore.azure:ObstoreAzureStorage", "obstore"),
        "fsspec": ("portable_azure.blob:BlobStorage", "azure"),
    },
    "az": {
        "obstore": ("portable_obstore.azure:ObstoreAzureStorage", "obstore"),
        "fsspec": ("portable_azure.blob:BlobStorage", "azure"),
    },
    # fsspec first on GCS: obstore speaks GCS's XML API, whose writes no local
    # emulator implements, so its GCS writes are unverified here (opt in with ?engine=obstore).
    "gcs": {
        "fsspec": ("portable_gcp.gcs:GCSStorage", "gcp"),
        "obstore": ("portable_obstore.gcs:ObstoreGCSStorage", "obstore"),
    },
    "gs": {
        "fsspec": ("portable_gcp.gcs:GCSStorage", "gcp"),
        "obstore": ("portable_obstore.gcs:ObstoreGCSStorage", "obstore"),
    },
    "s3": {
        "obstore": ("portable_obstore.s3:ObstoreS3Storage", "obstore"),
        "fsspec": ("portable_aws.s3:S3Storage", "aws"),
        # never the default (it is last): whole-object reads on OpenDAL, the rest on obstore
        "opendal": ("portable_opendal.s3:OpenDALS3Storage", "opendal"),
    },
}

#: wrapper name -> "module:attribute" of ``open(domain, url) -> driver``
_WRAPPERS: dict[str, str] = {"chaos": "portable.testing.chaos:open_chaos"}
#: the domains whose URLs may name a wrapper (an idempotency ``chaos+mem://`` is a chaos bucket)
_WRAPPED_DOMAINS: frozenset[str] = frozenset(("storage", "messaging", "compute"))

_GROUPS: dict[str, str] = {
    "storage": "portable.storage",
    "messaging": "portable.messaging",
    "compute": "portable.compute",
    "idempotency": "portable.idempotency",
}

#: what a domain calls the thing a scheme opens, for error messages
_NOUNS: dict[str, str] = {
    "storage": "storage driver",
    "messaging": "messaging driver",
    "compute": "compute driver",
    "idempotency": "idempotency store",
}

#: A domain whose other URLs are another domain's: an idempotency URL of any
#: storage scheme names the bucket that keeps the records.
_FALLBACK: dict[str, Domain] = {"idempotency": "storage"}


@dataclass(frozen=True)
class ParsedURL:
    """A provider URL split into parts, with its query options.

    ``options`` keeps the query string's values as strings; a driver reads
    them with :meth:`take` and calls :meth:`done` so that an option it does
    not know is reported instead of ignored.
    """

    raw: str
    scheme: str
    netloc: str
    path: str
    options: Mapping[str, str]
    _taken: set[str] = field(default_factory=set, repr=False, compare=False)

    def __repr__(self) -> str:
        return f"ParsedURL({redact(self.raw)!r})"

    def __str__(self) -> str:
        return redact(self.raw)

    @property
    def host(self) -> str:
        """The netloc without credentials."""
        return self.netloc.rpartition("@")[2]

    def take(self, name: str, kind: type[T], default: T) -> T:
        """Read option ``name`` converted to ``kind``, or ``default`` when absent."""
        self._taken.add(name)
        value = self.options.get(name)
        if value is None:
            return default
        if kind is bool:
            lowered = value.lower()
            if lowered in ("1", "true", "yes", "on"):
                return True  # type: ignore[return-value]
            if lowered in ("0", "false", "no", "off"):
                return False  # type: ignore[return-value]
        else:
            try:
                return kind(value)  # type: ignore[call-arg]
            except (TypeError, ValueError):
                pass  # raised below, outside this block: the ValueError (which quotes the value) is no __context__
        shown = MASK if is_secret_option(name) else repr(value)
        raise InvalidURL(f"option {name}={shown} in {self} must be a {kind.__name__}")

    def take_str(self, name: str, default: str | None = None) -> str | None:
        """Read string option ``name``, or ``default``."""
        self._taken.add(name)
        return self.options.get(name, default)

    def done(self, allowed_extra: Iterable[str] = ()) -> None:
        """Raise InvalidURL for any option that no :meth:`take` call read."""
        unknown = set(self.options) - self._taken - set(allowed_extra)
        if unknown:
            known = sorted(self._taken | set(allowed_extra))
            raise InvalidURL(
                f"unknown option(s) {', '.join(sorted(unknown))} in {self}; "
                f"{self.scheme}:// takes: {', '.join(known) or 'no options'}"
            )

    def with_scheme(self, scheme: str) -> ParsedURL:
        """The same URL with another scheme (used by wrapper schemes)."""
        rest = self.raw.split("://", 1)[1]
        return parse_url(f"{scheme}://{rest}")

    def without(self, *names: str) -> ParsedURL:
        """The same URL without the given options."""
        options = {k: v for k, v in self.options.items() if k not in names}
        query = urlencode(options, quote_via=quote, safe="/:,@")
        base = self.raw.split("?", 1)[0]
        return parse_url(f"{base}?{query}" if query else base)


#: Where each family of schemes takes its credentials from, for the error that refuses them in a URL.
_AWS_CREDENTIALS = (
    "AWS credentials come from the SDK's chain: the environment variables AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), a profile of ~/.aws/credentials (?profile=NAME "
    "or AWS_PROFILE), or the instance's or task's role"
)
_AZURE_CREDENTIALS = (
    "put the secret in an environment variable and name the variable with account_key_env=, "
    "connection_string_env= or sas_token_env= (by default AZURE_STORAGE_ACCOUNT_KEY, "
    "AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_SAS_TOKEN are read), or use auth=identity"
)
_GOOGLE_CREDENTIALS = (
    "Google credentials come from Application Default Credentials: the environment variable "
    "GOOGLE_APPLICATION_CREDENTIALS (the path of a key file), `gcloud auth application-default login`, "
    "or the metadata server"
)
_CREDENTIAL_HINTS: dict[str, str] = {
    "s3": _AWS_CREDENTIALS,
    "sqs": _AWS_CREDENTIALS,
    "dynamodb": _AWS_CREDENTIALS,
    "batch": _AWS_CREDENTIALS,
    "az": _AZURE_CREDENTIALS,
    "abfs": _AZURE_CREDENTIALS,
    "azqueue": _AZURE_CREDENTIALS,
    "gs": _GOOGLE_CREDENTIALS + "; gs:// also takes token=PATH-OF-KEY-FILE",
    "gcs": _GOOGLE_CREDENTIALS + "; gcs:// also takes token=PATH-OF-KEY-FILE",
    "pubsub": _GOOGLE_CREDENTIALS,
    "firestore": _GOOGLE_CREDENTIALS,
    "kafka": (
        "name the user with sasl_username= (or the environment variable KAFKA_SASL_USERNAME) and put "
        "the password in the environment variable named by sasl_password_env= (default KAFKA_SASL_PASSWORD)"
    ),
    "pulsar": "put a JWT in the environment variable named by token_env= (default PULSAR_AUTH_TOKEN)",
    "redis": (
        "build a redis.Redis with the password (read from an environment variable) in code and pass it "
        "to portable_redis.RedisStore(client)"
    ),
}
for _alias in ("rediss", "unix"):
    _CREDENTIAL_HINTS[_alias] = _CREDENTIAL_HINTS["redis"]
_DEFAULT_CREDENTIAL_HINT = (
    "put credentials in the environment or in the provider's own configuration (a profile, a key "
    "file), as the scheme's driver documents"
)

#: Option names that can only hold a secret: refused by :func:`open_driver` whatever the scheme.
_INLINE_SECRET_OPTIONS = frozenset(
    {
        "access_token",
        "account_key",
        "accountkey",
        "api_key",
        "apikey",
        "aws_secret_access_key",
        "aws_session_token",
        "client_secret",
        "connection_string",
        "passwd",
        "password",
        "private_key",
        "pwd",
        "refresh_token",
        "sas_token",
        "sasl_password",
        "sasl_plain_password",
        "secret",
        "secret_access_key",
        "secret_key",
        "session_token",
    }
)
_URL_VALUE = re.compile(r"^\s*[A-Za-z][A-Za-z0-9+.\-]*://")


def where_credentials_go(scheme: str) -> str:
    """Where the driver of ``scheme`` takes credentials from, in a sentence (for error messages)."""
    inner = scheme.lower().rpartition("+")[2]
    return _CREDENTIAL_HINTS.get(inner, _DEFAULT_CREDENTIAL_HINT)


def _refuse_credentials(url: str, scheme: str, password: str | None, options: Mapping[str, str]) -> None:
    """InvalidURL for a password in the user info, or an option whose value is a URL with user info."""
    if password is not None:
        raise InvalidURL(
            f"{redact(url)}: a password in a {scheme}:// URL is not accepted (URLs end up in logs, "
            f"shell histories and configuration files); {where_credentials_go(scheme)}"
        )
    for name, value in options.items():
        if not _URL_VALUE.match(value):
            continue
        try:
            netloc = urlsplit(value.strip()).netloc
        except ValueError:
            continue  # not a URL after all: the driver reports the option
        if "@" in netloc:
            raise InvalidURL(
                f"{redact(url)}: option {name} holds a URL with user info (credentials); write it as "
                f"scheme://host[:port]/... without them: {where_credentials_go(scheme)}"
            )


def refuse_inline_secrets(url: ParsedURL) -> None:
    """InvalidURL for an option of ``url`` that can only hold a secret (``password=``, ``account_key=``, ...).

    :func:`open_driver` calls it before any driver sees the URL.
    """
    for name in url.options:
        if name.strip().lower().replace("-", "_").replace(".", "_") in _INLINE_SECRET_OPTIONS:
            raise InvalidURL(
                f"{url}: option {name} would put a secret in the URL, which gets logged; "
                f"{where_credentials_go(url.scheme)}"
            )


def parse_url(url: str | ParsedURL) -> ParsedURL:
    """Split a provider URL; raise InvalidURL if it is not ``scheme://...``.

    Raises:
        InvalidURL: not ``scheme://...``; an option given twice; a password in
            the user info, or an option whose value is a URL with user info
            (the message says where the scheme's credentials go instead).
    """
    if isinstance(url, ParsedURL):
        return url
    if not isinstance(url, str):
        raise InvalidURL(f"a provider URL must be a str, got {type(url).__name__}")
    if "://" not in url:
        raise InvalidURL(
            f"{redact(url)!r} is not a provider URL: write it as scheme://..., "
            "for example file://./data or s3://bucket/prefix"
        )
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError as exc:  # an unbalanced [ in the host, ...
        raise InvalidURL(f"{redact(url)!r} is not a valid URL: {redact(str(exc))}") from None
    scheme = url.split("://", 1)[0].lower()
    options: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in options:
            raise InvalidURL(f"option {name} is given twice in {redact(url)}")
        options[name] = value
    _refuse_credentials(url, scheme, password, options)
    return ParsedURL(
        raw=url,
        scheme=scheme,
        netloc=unquote(parts.netloc),
        path=unquote(parts.path),
        options=options,
    )


#: The entry points of each group, with the state of the import path they were read from.
_EP_CACHE: dict[str, tuple[tuple[object, ...], dict[str, Any]]] = {}


def _path_state() -> tuple[object, ...]:
    """What decides which distributions are installed: the path, and when each folder on it changed."""
    import importlib.metadata

    state: list[object] = [id(importlib.metadata.entry_points)]
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            state.append((entry, None))
    return tuple(state)


def _entry_point_table(domain: str) -> dict[str, Any]:
    """The installed entry points of ``domain``'s group, by name.

    Reading them scans every distribution's metadata (~7-25 ms), which every
    ``open_*`` of an adapter's scheme used to pay; they are read again only
    when the import path changes (a folder added, or a package installed or
    removed in one of its folders).
    """
    import importlib.metadata

    state = _path_state()
    cached = _EP_CACHE.get(domain)
    if cached is not None and cached[0] == state:
        return cached[1]
    table = {ep.name: ep for ep in importlib.metadata.entry_points(group=_GROUPS[domain])}
    _EP_CACHE[domain] = (state, table)
    return table


def known_schemes(domain: Domain) -> list[str]:
    """Every scheme of ``domain``, sorted: built-in and installed through entry points."""
    names = set(_BUILTIN[domain]) | set(_entry_point_table(domain))
    return sorted(names)


def _import(target: str, scheme: str, extra: str | None) -> Any:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if extra is None or not (exc.name or "").split(".")[0] == module_name.split(".")[0]:
            raise
        raise MissingDependency(
            f"{scheme}:// needs the {extra} adapter: pip install 'portable-cloud[{extra}]'"
        ) from exc
    return getattr(module, attr)


def _wrapper(domain: str, scheme: str) -> str | None:
    """The wrapper's ``"module:attribute"`` when ``scheme`` is ``NAME+inner`` in a domain that has wrappers."""
    head, plus, _inner = scheme.partition("+")
    if plus and head in _WRAPPERS and domain in _WRAPPED_DOMAINS and scheme not in _BUILTIN[domain]:
        return _WRAPPERS[head]
    return None


def _provides(domain: Domain, scheme: str) -> bool:
    return scheme in _BUILTIN[domain] or scheme in _entry_point_table(domain) or _wrapper(domain, scheme) is not None


def _unknown(domain: Domain, scheme: str) -> UnknownScheme:
    """No driver of ``domain`` (or of the domain it falls back to) provides ``scheme``."""
    known = known_schemes(domain)
    listed = ", ".join(f"{s}://" for s in known)
    candidates = list(known)
    fallback = _FALLBACK.get(domain)
    if fallback is not None:
        also = known_schemes(fallback)
        candidates += also
        listed += f"; or any {fallback} URL: " + ", ".join(f"{s}://" for s in also)
    close = difflib.get_close_matches(scheme, candidates, n=1, cutoff=0.5)
    hint = f" Did you mean {close[0]}://?" if close else ""
    return UnknownScheme(f"no {_NOUNS[domain]} for {scheme}://.{hint} Known: {listed}")


def serving_domain(domain: Domain, scheme: str) -> Domain:
    """The domain whose registry serves ``scheme`` in a URL of ``domain``.

    That is ``domain`` itself when one of its drivers (built-in, entry point
    or wrapper) has the scheme; else the domain it falls back to, when that
    one has it: an idempotency URL of a storage scheme (``file://``, ``s3://``,
    ``chaos+mem://``) names the bucket that keeps the records.

    Raises:
        UnknownScheme: no driver of either has the scheme; the message lists
            the known schemes and the closest match.
    """
    scheme = scheme.lower()
    if _provides(domain, scheme):
        return domain
    fallback = _FALLBACK.get(domain)
    if fallback is not None and _provides(fallback, scheme):
        return fallback
    raise _unknown(domain, scheme)


def load_driver_factory(domain: Domain, scheme: str) -> Any:
    """Return the object registered for ``scheme`` in ``domain``.

    Entry points win over the built-in table, so a distribution can replace a
    built-in driver. A wrapper scheme (``chaos+s3``) returns the wrapper's
    ``open(domain, url)`` function.

    Raises:
        UnknownScheme: no driver of ``domain`` has the scheme; the message
            lists the known schemes and the closest match.
        MissingDependency: a built-in scheme whose distribution is not
            installed; the message names the pip extra.
    """
    scheme = scheme.lower()
    eps = _entry_point_table(domain)
    if scheme in eps:
        return eps[scheme].load()
    if scheme in _BUILTIN[domain]:
        target, extra = _BUILTIN[domain][scheme]
        return _import(target, scheme, extra)
    wrapper = _wrapper(domain, scheme)
    if wrapper is not None:
        return _import(wrapper, scheme.partition("+")[0], None)
    raise _unknown(domain, scheme)


def _installed(target: str) -> bool:
    return importlib.util.find_spec(target.split(".", 1)[0]) is not None


def storage_engine(parsed: ParsedURL) -> tuple[str | None, ParsedURL]:
    """Pick the storage engine for ``parsed``: ``?engine=`` or the first installed one.

    Returns the engine's name (None for single-engine schemes) and the URL
    without the ``engine`` option.
    """
    engines = _STORAGE_ENGINES.get(parsed.scheme)
    named = parsed.options.get("engine")
    if engines is None:
        if named is not None:
            raise InvalidURL(f"{parsed.scheme}:// has a single engine; drop ?engine={named}")
        return None, parsed
    rest = parsed.without("engine") if named is not None else parsed
    if named is not None:
        if named not in engines:
            raise InvalidURL(
                f"unknown engine {named!r} for {parsed.scheme}://; choose one of {', '.join(sorted(engines))}"
            )
        return named, rest
    for name, (target, _extra) in engines.items():
        if _installed(target):
            return name, rest
    # Nothing installed: the documented default (the first engine), so the hint names its distribution.
    return next(iter(engines)), rest


def open_driver(domain: Domain, url: str | ParsedURL) -> Any:
    """Parse ``url`` and open its driver: ``Factory.from_url(parsed)``.

    A wrapper scheme (``chaos+s3://``) is handed to the wrapper's
    ``open(domain, parsed)``, which opens the inner URL itself. A storage
    scheme with several engines (``s3://...?engine=obstore|fsspec``) opens the
    named engine, or the first one installed.

    The first call installs the masking of secrets in the SDKs' log records
    (:func:`portable._logging.install_secret_masking`). An error raised while
    opening has its secrets masked in place, with its whole cause chain.

    Raises:
        InvalidURL: a credential in the URL (see the module's docstring), or
            what the driver reports.
    """
    install_secret_masking()
    try:
        parsed = parse_url(url)
        refuse_inline_secrets(parsed)
        return _open(domain, parsed)
    except Exception as exc:
        scrub_exception_chain(exc)
        raise


def _open(domain: Domain, parsed: ParsedURL) -> Any:
    scheme = parsed.scheme
    wrapper = _wrapper(domain, scheme)
    if wrapper is not None:
        return _import(wrapper, scheme.partition("+")[0], None)(domain, parsed)
    if domain == "storage" and scheme in _STORAGE_ENGINES:
        engine, parsed = storage_engine(parsed)
        assert engine is not None
        target, extra = _STORAGE_ENGINES[scheme][engine]
        return _import(target, scheme, extra).from_url(parsed)
    return load_driver_factory(domain, scheme).from_url(parsed)


def driver_class(domain: Domain, url: str | ParsedURL) -> Any:
    """The driver class that :func:`open_driver` would use for ``url``, without opening it.

    Returns None for wrapper schemes, whose class depends on the inner URL.
    """
    parsed = parse_url(url)
    if _wrapper(domain, parsed.scheme) is not None:
        return None
    if domain == "storage" and parsed.scheme in _STORAGE_ENGINES:
        engine, _rest = storage_engine(parsed)
        assert engine is not None
        target, extra = _STORAGE_ENGINES[parsed.scheme][engine]
        return _import(target, parsed.scheme, extra)
    return load_driver_factory(domain, parsed.scheme)


def with_default_engine(url: str, engine: str) -> str:
    """``url`` with ``engine=ENGINE`` added when its scheme has engines and it names none."""
    parsed = parse_url(url)
    if parsed.scheme not in _STORAGE_ENGINES or "engine" in parsed.options:
        return url
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}engine={engine}"
