"""Keep secrets out of reprs, logs and error messages (public: adapters use it too).

Every string that may carry a URL or a provider's error text passes through
:func:`redact` before portable shows it. It masks URL passwords, query
options that name a secret (``key``, ``secret``, ``token``, ``sig``,
``password``, ``connection_string``, ...) and ``Key=value`` pairs of Azure
connection strings.
"""

from __future__ import annotations

import re

__all__ = ["SECRET_OPTION_NAMES", "is_secret_option", "redact", "scrub_exception_chain"]

MASK = "***"

#: Option names whose values are secrets, wherever they appear.
SECRET_OPTION_NAMES = frozenset(
    {
        "access_key",
        "account_key",
        "accountkey",
        "aws_secret_access_key",
        "aws_session_token",
        "client_secret",
        "connection_string",
        "credential",
        "credentials",
        "key",
        "password",
        "sas_token",
        "sasl_password",
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

_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]+)@")
_QUERY_PAIR = re.compile(r"(?P<sep>[?&;\s])(?P<name>[A-Za-z0-9_.-]+)=(?P<value>[^&;\s\"']*)")
_CONN_PAIR = re.compile(
    r"(?P<name>AccountKey|SharedAccessKey|SharedAccessSignature|Password|SecretKey)=(?P<value>[^;\s\"']+)",
    re.IGNORECASE,
)


def is_secret_option(name: str) -> bool:
    """Whether a URL option or config key called ``name`` holds a secret."""
    lowered = name.lower()
    return lowered in SECRET_OPTION_NAMES or lowered.endswith(("_secret", "_password", "_token", "_key"))


def redact(text: str) -> str:
    """Return ``text`` with every secret it carries replaced by ``***``."""
    if not text:
        return text
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    text = _QUERY_PAIR.sub(
        lambda m: f"{m['sep']}{m['name']}={MASK}" if is_secret_option(m["name"]) else m[0], text
    )
    return _CONN_PAIR.sub(lambda m: f"{m['name']}={MASK}", text)


def scrub_exception_chain(exc: BaseException) -> None:
    """Redact, in place, the string arguments of ``exc`` and of every exception in its
    cause/context chain, so that a printed traceback shows no secret.

    The portable layer calls it on each native error before chaining it as ``__cause__``.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        try:
            current.args = tuple(redact(a) if isinstance(a, str) else a for a in current.args)
        except Exception:  # an exception type with read-only args: leave it
            pass
        current = current.__cause__ or current.__context__
