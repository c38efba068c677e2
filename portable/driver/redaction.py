"""Keep secrets out of reprs, logs and error messages (public: adapters use it too).

Every string that may carry a URL or a provider's error text passes through
:func:`redact` before portable shows it. It masks, with ``***``:

* URL passwords (``scheme://user:***@host``) and the user part of an
  ``http(s)://user@host`` URL (a token written as a user name);
* the values of options and fields that name a secret (``key``, ``secret``,
  ``token``, ``sig``, ``password``, ``connection_string``, ``*_secret``,
  ``*_password``, ``*_token``, ``*_key``, ...), written as ``name=value``
  (URL queries, ``kwargs`` reprs, config dumps), ``'name': 'value'`` (dict
  reprs, JSON), ``Name: value`` at the start of a line (HTTP headers, signed
  canonical requests) or ``Name=value;`` (Azure connection strings), whatever
  quotes, brackets or other characters the value holds up to the next
  ``&``, ``;`` or white space; a quoted value is masked up to its closing quote;
* ``Bearer``/``Basic``/``SharedKey`` credentials and PEM private keys;
* the same in %-encoded text: names and values are matched after decoding
  (``aws%5Fsecret%5Faccess%5Fkey=...``, an encoded URL inside an option), and
  text that held an encoded secret is returned decoded, with the secret masked.

Option names are compared case-insensitively, with ``-`` and ``.`` read as
``_`` (``x-amz-security-token``, ``sasl.password``). A few names end like a
secret but are not one (``idempotency_key``, ``partition_key``, ...,
:data:`PUBLIC_OPTION_NAMES`); their values stay readable.

:func:`scrub_exception_chain` applies :func:`redact` to an exception and every
exception chained to it, in place, so that a printed traceback shows no secret.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

__all__ = [
    "MASK",
    "PUBLIC_OPTION_NAMES",
    "SECRET_OPTION_NAMES",
    "is_secret_option",
    "redact",
    "redact_value",
    "scrub_exception_chain",
]

MASK = "***"

#: Option names whose values are secrets, wherever they appear.
SECRET_OPTION_NAMES = frozenset(
    {
        "access_key",
        "access_token",
        "account_key",
        "accountkey",
        "api_key",
        "apikey",
        "authorization",
        "aws_secret_access_key",
        "aws_session_token",
        "client_secret",
        "connection_string",
        "credential",
        "credentials",
        "key",
        "passwd",
        "password",
        "private_key",
        "proxy_authorization",
        "pwd",
        "refresh_token",
        "sas_token",
        "sasl_password",
        "sasl_plain_password",
        "secret",
        "secret_access_key",
        "secret_key",
        "session_token",
        "sharedaccesskey",
        "sharedaccesssignature",
        "sig",
        "signature",
        "token",
        "x-amz-credential",
        "x-amz-security-token",
        "x-amz-signature",
        "x-goog-credential",
        "x-goog-signature",
    }
)

#: Names that end like a secret (``*_key``) but name something public; their values are shown.
PUBLIC_OPTION_NAMES = frozenset(
    {"dedup_key", "idempotency_key", "ordering_key", "partition_key", "routing_key", "sort_key"}
)

_SECRET_SUFFIXES = ("_secret", "_password", "_passwd", "_token", "_key", "_credential", "_credentials", "_signature")


def _normal(name: str) -> str:
    return name.strip().lower().replace("-", "_").replace(".", "_")


_SECRET_NORMAL = frozenset(_normal(n) for n in SECRET_OPTION_NAMES)


def is_secret_option(name: str) -> bool:
    """Whether a URL option, config key or field called ``name`` holds a secret.

    ``name`` is compared case-insensitively with ``-`` and ``.`` read as ``_``;
    pass it %-decoded (``parse_qsl`` does).
    """
    lowered = _normal(name)
    if lowered in PUBLIC_OPTION_NAMES:
        return False
    return lowered in _SECRET_NORMAL or lowered.endswith(_SECRET_SUFFIXES)


# A quoted value: up to its closing quote (escapes honoured), and only when a delimiter follows,
# so that ``token='abc'SECRET'`` is not cut at the second quote.
_QUOTED = r"b?'(?:\\.|[^'\\\n])*'(?=[\s&;,)\]}>]|$)|b?\"(?:\\.|[^\"\\\n])*\"(?=[\s&;,)\]}>]|$)"
_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]*"

_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)", re.DOTALL)
_USERINFO = re.compile(r"(?P<scheme>(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^:/?#@\s]*):(?P<pw>[^/?#\s]+)@")
_HTTP_USER = re.compile(r"(?P<scheme>(?<![A-Za-z0-9+.\-])(?:https?|wss?)://)(?P<user>[^:/?#@\s]+)@")
#: ``user:password@host`` without a scheme (a URL whose ``scheme://`` was forgotten)
_BARE_USERINFO = re.compile(r"(?<![A-Za-z0-9._%+\-:/])(?P<user>[A-Za-z0-9._%+\-]+):(?P<pw>[^\s@/'\"]+)@(?=[A-Za-z0-9\[])")
# Each pair is a head (the name and its separator) and a value, matched apart: the value is
# read only after a secret name, so text of many non-secret pairs is scanned once.
#: ``'name': value`` / ``"name"=value``: dict reprs, JSON
_QUOTED_PAIR = (re.compile(rf"(?P<kq>['\"])(?P<name>{_NAME})(?P=kq)\s*[:=]\s*"), re.compile(rf"{_QUOTED}|[^,}}\]\s]+"))
#: ``name=value``: URL queries, kwargs reprs, config dumps
_PAIR = (re.compile(rf"(?<![A-Za-z0-9_.\-])(?P<name>{_NAME})[ \t]*=[ \t]*"), re.compile(rf"{_QUOTED}|[^&;\s]*"))
#: ``Name: value`` at the start of a line: HTTP headers, botocore's canonical requests
_HEADER_LINE = (re.compile(r"(?m)^(?P<name>[A-Za-z][A-Za-z0-9_.\-]*):[ \t]*"), re.compile(r"[^\r\n]*"))
_CONN_PAIR = re.compile(
    r"(?P<name>AccountKey|SharedAccessKey|SharedAccessSignature|Password|SecretKey)=(?P<value>[^;\s\"']+)",
    re.IGNORECASE,
)
_SCHEME_CREDENTIAL = re.compile(r"\b(?P<kind>Bearer|Basic|SharedKey|SharedKeyLite|SharedAccessSignature)\s+[A-Za-z0-9._~+/=:%\-]+")
#: trailing characters of an unquoted value that belong to the text around it, kept for readability
_CLOSERS = "\"'`)]}>,"


def _mask_value(value: str) -> str:
    if not value or (value.startswith(MASK) and not value[len(MASK) :].strip(_CLOSERS + ":.")):
        return value  # masked already (redact is idempotent)
    prefix = "b" if value[:1] == "b" and value[1:2] in ("'", '"') else ""
    quote = value[len(prefix) : len(prefix) + 1]
    if quote in ("'", '"') and len(value) >= len(prefix) + 2 and value.endswith(quote):
        return f"{prefix}{quote}{MASK}{quote}"
    core = value.rstrip(_CLOSERS)
    return MASK + value[len(core) :] if core else value


def _sub_pairs(pair: tuple[re.Pattern[str], re.Pattern[str]], text: str) -> str:
    """Mask the value of every secret pair in ``text``; ``pair`` is (head, value) patterns.

    A pair that is not a secret is skipped only up to its ``=`` or ``:``, so a
    secret nested in its value (``config={'password': ...}``) is still found.
    """
    head, value_pattern = pair
    out: list[str] = []
    pos = 0
    while (match := head.search(text, pos)) is not None:
        out.append(text[pos : match.end()])
        pos = match.end()
        if is_secret_option(match["name"]):
            found = value_pattern.match(text, pos)
            value = found.group(0) if found else ""
            out.append(_mask_value(value))
            pos += len(value)
    out.append(text[pos:])
    return "".join(out)


def _redact_plain(text: str) -> str:
    text = _PEM.sub(MASK, text)
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    text = _HTTP_USER.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    text = _BARE_USERINFO.sub(lambda m: f"{m['user']}:{MASK}@", text)
    text = _sub_pairs(_QUOTED_PAIR, text)
    text = _sub_pairs(_PAIR, text)
    text = _sub_pairs(_HEADER_LINE, text)
    text = _CONN_PAIR.sub(lambda m: f"{m['name']}={MASK}", text)
    return _SCHEME_CREDENTIAL.sub(lambda m: f"{m['kind']} {MASK}", text)


def redact(text: str) -> str:
    """Return ``text`` with every secret it carries replaced by ``***``.

    Text that carries a secret only in %-encoded form is returned decoded, with
    the secret masked.
    """
    if not text or not isinstance(text, str):
        return text
    masked = _redact_plain(text)
    for _ in range(3):  # an encoded URL in an option, encoded once more in a URL, ...
        if "%" not in masked:
            break
        decoded = unquote(masked)
        if decoded == masked:
            break
        again = _redact_plain(decoded)
        if again == decoded:
            break
        masked = again
    return masked


def redact_value(value: Any, name: str | None = None, _depth: int = 0) -> Any:
    """``value`` with secrets masked: a str through :func:`redact`, bytes likewise (as UTF-8),
    lists, tuples and dicts element by element (a dict value whose key names a secret is
    ``***`` outright); any other object is returned as it is. Returns ``value`` itself when
    nothing changed."""
    if isinstance(value, str):
        if name is not None and value and is_secret_option(name):
            return MASK
        return redact(value)
    if isinstance(value, bytes):
        if name is not None and value and is_secret_option(name):
            return MASK.encode()
        text = value.decode("utf-8", "surrogateescape")
        masked = redact(text)
        return value if masked == text else masked.encode("utf-8", "surrogateescape")
    if _depth >= 6:
        return value
    if isinstance(value, dict):
        changed = False
        out: dict[Any, Any] = {}
        for k, v in value.items():
            new = redact_value(v, k if isinstance(k, str) else None, _depth + 1)
            changed = changed or new is not v
            out[k] = new
        return out if changed else value
    if isinstance(value, (list, tuple)):
        items = [redact_value(v, None, _depth + 1) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        if isinstance(value, list):
            return items
        try:
            return type(value)(items) if type(value) is not tuple else tuple(items)
        except TypeError:  # a namedtuple: positional fields
            return type(value)(*items)
    return value


# ---------------------------------------------------------------- exceptions
_OS_ERROR_FIELDS = ("strerror", "filename", "filename2")
_MASKED_CLASSES: dict[type[BaseException], type[BaseException]] = {}


def _text_of(exc: BaseException, show: Callable[[BaseException], str]) -> str | None:
    try:
        return show(exc)
    except Exception:
        return None


def _masked_class(cls: type[BaseException]) -> type[BaseException] | None:
    """A subclass of ``cls`` that shows its instances' str and repr masked, under ``cls``'s name."""
    found = _MASKED_CLASSES.get(cls)
    if found is not None or cls in _MASKED_CLASSES:
        return found

    def __str__(self: BaseException) -> str:
        return redact(cls.__str__(self))

    def __repr__(self: BaseException) -> str:
        return redact(cls.__repr__(self))

    def __reduce__(self: BaseException) -> Any:
        reduced = cls.__reduce__(self)
        if isinstance(reduced, tuple) and reduced and reduced[0] is masked:
            return (cls, *reduced[1:])
        return reduced

    try:
        masked: type[BaseException] = type(
            cls.__name__,
            (cls,),
            {
                "__str__": __str__,
                "__repr__": __repr__,
                "__reduce__": __reduce__,
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "__doc__": cls.__doc__,
            },
        )
    except Exception:  # a class that refuses subclasses: nothing more can be done
        _MASKED_CLASSES[cls] = None  # type: ignore[assignment]
        return None
    _MASKED_CLASSES[cls] = masked
    return masked


def _scrub_one(exc: BaseException) -> None:
    new_args = redact_value(exc.args)
    if new_args is not exc.args:
        try:
            exc.args = new_args
        except Exception:  # read-only args
            pass
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list):
        notes[:] = [redact(n) if isinstance(n, str) else n for n in notes]
    if isinstance(exc, OSError):
        for name in _OS_ERROR_FIELDS:
            value = getattr(exc, name, None)
            if isinstance(value, (str, bytes)) and redact_value(value) is not value:
                setattr(exc, name, redact_value(value))
    attributes = getattr(exc, "__dict__", None)
    if isinstance(attributes, dict):
        for name, value in list(attributes.items()):
            new = redact_value(value, None)
            if new is not value:
                try:
                    setattr(exc, name, new)
                except Exception:  # a read-only attribute
                    pass
    # What str() or repr() show may come from elsewhere (a response body, a gRPC state):
    # if either still holds a secret, the instance shows both through redact().
    for show in (str, repr):
        text = _text_of(exc, show)
        if text is not None and redact(text) != text:
            masked = _masked_class(type(exc))
            if masked is not None:
                try:
                    exc.__class__ = masked
                except TypeError:  # a built-in exception type
                    pass
            return


def scrub_exception_chain(exc: BaseException) -> None:
    """Mask, in place, the secrets of ``exc`` and of every exception chained to it.

    Follows ``__cause__``, ``__context__`` and the members of exception groups.
    Each exception's ``args``, ``__notes__``, OSError file names and the str,
    bytes, list, tuple and dict values of its instance attributes go through
    :func:`redact_value` (so botocore's ``kwargs``/``response``, azure-core's
    and google-api-core's ``message`` are masked too). An exception whose
    ``str()`` or ``repr()`` still shows a secret (azure-core appends the
    response body, gRPC errors read their state) is given a subclass of its own
    class, with the same name, module and pickling, that shows both masked:
    ``isinstance`` and every attribute are unchanged. A built-in exception type
    whose text does not come from its args cannot be changed that way.

    The portable layer calls it on each native error before chaining it as
    ``__cause__``, and on any error raised while a driver opens.
    """
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        try:
            _scrub_one(current)
        except Exception:  # never let masking replace the error being raised
            pass
        stack.append(current.__cause__)
        stack.append(current.__context__)
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
