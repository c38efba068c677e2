"""Naming rules of the cloud providers, shared by every engine of a scheme.

Pure string checks with no SDK behind them, so that the fsspec and obstore
engines of ``s3://``, ``gs://`` and ``az://`` accept exactly the same names and
store metadata in exactly the same form (each engine reads the other's
objects). Each check returns the name or raises
:class:`~portable.errors.InvalidURL` saying what a valid name looks like,
before any request is sent.
"""

from __future__ import annotations

import ipaddress
import re

from .errors import InvalidURL

__all__ = [
    "check_azure_account_name",
    "check_azure_container_or_queue_name",
    "check_gcs_bucket_name",
    "check_s3_bucket_name",
    "decode_azure_metadata_name",
    "encode_azure_metadata_name",
]

_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_GCS_BUCKET_CHARS = re.compile(r"^[a-z0-9][a-z0-9._-]*[a-z0-9]$")
_AZURE_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")
_AZURE_CONTAINER = re.compile(r"^(?=.{3,63}$)[a-z0-9](?:[a-z0-9]|-(?!-))*[a-z0-9]$")
_CS_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ESCAPE = "pt_"


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


def encode_azure_metadata_name(name: str) -> str:
    """Store a portable metadata name as a C# identifier (Azure's rule), reversibly."""
    if _CS_IDENTIFIER.match(name) and not name.startswith(_ESCAPE):
        return name
    return _ESCAPE + name.replace("_", "__").replace("-", "_h")


def decode_azure_metadata_name(name: str) -> str:
    """Invert :func:`encode_azure_metadata_name` (other names come back unchanged)."""
    if not name.startswith(_ESCAPE):
        return name
    body, out, i = name[len(_ESCAPE) :], [], 0
    while i < len(body):
        pair = body[i : i + 2]
        if pair in ("__", "_h"):
            out.append("_" if pair == "__" else "-")
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)
