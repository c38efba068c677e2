"""How the ``portable`` command reports an error: one line on stderr, the native detail behind ``--debug``.

A credentials error (no credentials found, or credentials the provider refuses)
gets one line naming the fix for its provider: where each SDK looks for
credentials, and ``?endpoint_url=`` for a local server. The provider's own
detail (a botocore message, an object_store debug dump) is printed only with
``--debug``, after the line and with the traceback. Messages have their
secrets masked already (the portable layer scrubs every error's chain).
"""

from __future__ import annotations

import re
import traceback

from ..driver.redaction import redact
from ..errors import PortableError

__all__ = ["credentials_fix", "credentials_problem", "error_line", "first_line", "is_credentials_error"]

#: What a provider says, anywhere in the error's chain, when it finds no credentials to send.
_MISSING_SIGNS = re.compile(
    "|".join(
        (
            r"unable to locate credentials",  # botocore NoCredentialsError
            r"partial credentials",
            r"no aws credentials",
            r"/latest/api/token",  # object_store asking EC2's metadata service, there being no other credentials
            r"169\.254\.169\.254",
            r"/metadata/identity/oauth2",  # Azure managed identity
            r"defaultazurecredential",
            r"credentialunavailable",
            r"defaultcredentialserror",
            r"could not automatically determine credentials",
            r"token request",
        )
    ),
    re.IGNORECASE,
)
#: ... and when it refuses the credentials it was sent.
_REFUSED_SIGNS = re.compile(
    "|".join(
        (
            r"invalidaccesskeyid",
            r"signaturedoesnotmatch",
            r"the aws access key id",
            r"expiredtoken",
            r"clientauthenticationerror",
            r"authorizationfailure",
            r"authenticationfailed",
            r"server failed to authenticate",
            r"refresherror",
            r"invalid_grant",
            r"anonymous caller",
        )
    ),
    re.IGNORECASE,
)

_AWS_FIX = (
    "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE=NAME (a profile of ~/.aws/credentials, "
    "or ?profile=NAME in the URL); for a local S3 server (moto, MinIO) add ?endpoint_url=http://HOST:PORT"
)
_GOOGLE_FIX = (
    "export GOOGLE_APPLICATION_CREDENTIALS=/path/of/key.json or run `gcloud auth application-default login`; "
    "for a local server add ?endpoint_url=http://HOST:PORT"
)
_AZURE_FIX = (
    "export AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY "
    "(or ?account_key_env=VAR), or run `az login` for auth=identity; for Azurite use its connection string"
)
_FIXES: dict[str, str] = {
    "s3": _AWS_FIX,
    "gs": _GOOGLE_FIX,
    "gcs": _GOOGLE_FIX,
    "az": _AZURE_FIX,
    "abfs": _AZURE_FIX,
}


def first_line(text: str, limit: int = 300) -> str:
    """The first line of ``text`` (an object_store error carries a debug dump after it), at most ``limit`` chars."""
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _scheme_of(exc: PortableError, fallback: str) -> str:
    provider = (exc.provider or fallback or "").lower()
    return provider.rpartition("+")[2]


def credentials_problem(exc: PortableError) -> str | None:
    """``"missing"`` or ``"refused"`` when ``exc`` says the provider has or accepts no credentials, else None."""
    texts = [f"{type(link).__name__}: {link}" for link in _chain(exc)]
    if any(_MISSING_SIGNS.search(text) for text in texts):
        return "missing"
    if any(_REFUSED_SIGNS.search(text) for text in texts):
        return "refused"
    return None


def is_credentials_error(exc: PortableError) -> bool:
    """Whether ``exc`` says the provider has, or accepts, no credentials."""
    return credentials_problem(exc) is not None


def credentials_fix(scheme: str) -> str | None:
    """The one-sentence fix for missing or refused credentials on ``scheme``, or None if it takes none."""
    return _FIXES.get(scheme.lower().rpartition("+")[2])


def error_line(exc: BaseException, *, scheme: str = "", debug: bool = False) -> str:
    """What ``portable`` prints for ``exc``: one line, or with ``debug`` the full message and traceback.

    ``scheme`` is the scheme of the URL the command was working on, used when the
    error does not name its provider.
    """
    if isinstance(exc, PortableError):
        name = type(exc).__name__
        where = _scheme_of(exc, scheme)
        problem = credentials_problem(exc)
        fix = credentials_fix(where) if problem is not None else None
        if fix is not None:
            kind = "found no credentials" if problem == "missing" else "refused the credentials it was sent"
            line = f"portable: {name}: {where}:// {kind}; fix: {fix}"
        else:
            line = f"portable: {name}: {first_line(str(exc))}"
        if not debug:
            return line + (" (--debug shows the provider's detail)" if fix is not None else "")
    else:
        line = f"portable: {type(exc).__name__}: {first_line(redact(str(exc)))}"
        if not debug:
            return line
    detail = "".join(traceback.format_exception(exc))
    return f"{line}\n{detail.rstrip()}"
