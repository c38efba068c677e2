"""What each provider's object storage accepts, as every engine of its scheme declares it.

The fsspec and obstore engines of ``s3://``, ``gs://`` and ``az://`` talk to
the same service, so they declare the same limits: a key's length (less the
URL's prefix), an object's size, user metadata, parts. Each function here
builds a scheme's :class:`~portable.driver.storage.StorageCapabilities` from
the things an engine decides for itself (whether it can sign URLs, the part
size its uploader needs), and refuses a prefix that leaves no room for keys.
"""

from __future__ import annotations

from ..errors import InvalidURL
from .storage import StorageCapabilities

__all__ = [
    "AZURE_MAX_BLOB_NAME",
    "GCS_MAX_METADATA_BYTES",
    "GCS_MAX_NAME_BYTES",
    "GCS_MAX_OBJECT_BYTES",
    "S3_MAX_KEY_BYTES",
    "S3_MAX_PUT_BYTES",
    "azure_blob_capabilities",
    "gcs_capabilities",
    "s3_capabilities",
]

#: S3's key limit in UTF-8 bytes, prefix included.
S3_MAX_KEY_BYTES = 1024
#: The largest object one PutObject sends.
S3_MAX_PUT_BYTES = 5 * 1024**3
#: GCS's object name limit in UTF-8 bytes, prefix included.
GCS_MAX_NAME_BYTES = 1024
#: The largest GCS object.
GCS_MAX_OBJECT_BYTES = 5 * 1024**4
#: GCS's limit on an object's custom metadata.
GCS_MAX_METADATA_BYTES = 8 * 1024
#: Azure's blob name limit, prefix included.
AZURE_MAX_BLOB_NAME = 1024


def _all_flags(
    *, signed_urls: bool, max_key_bytes: int, max_object_bytes: int | None, max_metadata_bytes: int, min_part_bytes: int
) -> StorageCapabilities:
    """A record with every condition, server-side copy and multipart on: S3, GCS and Azure have them all."""
    return StorageCapabilities(
        conditional_create=True,
        conditional_update=True,
        conditional_streaming_write=True,
        signed_urls=signed_urls,
        server_side_copy=True,
        multipart=True,
        max_key_bytes=max_key_bytes,
        max_object_bytes=max_object_bytes,
        max_metadata_bytes=max_metadata_bytes,
        min_part_bytes=min_part_bytes,
    )


def _root_bytes(prefix: str) -> int:
    """The bytes a prefix takes of every key: itself and its slash."""
    return len(prefix.encode("utf-8")) + 1 if prefix else 0


def s3_capabilities(bucket: str, prefix: str) -> StorageCapabilities:
    """What S3 accepts in ``bucket`` under ``prefix`` (without slashes at its ends).

    Raises:
        InvalidURL: the prefix leaves less than 16 bytes for keys.
    """
    root = _root_bytes(prefix)
    if root >= S3_MAX_KEY_BYTES - 16:
        raise InvalidURL(f"the prefix of s3://{bucket}/{prefix[:40]}... leaves no room for keys")
    return _all_flags(
        signed_urls=True,
        max_key_bytes=S3_MAX_KEY_BYTES - root,
        max_object_bytes=S3_MAX_PUT_BYTES,
        max_metadata_bytes=2048,
        min_part_bytes=5 * 1024 * 1024,
    )


def gcs_capabilities(prefix: str, *, signed_urls: bool, min_part_bytes: int) -> StorageCapabilities:
    """What GCS accepts under ``prefix`` (without slashes at its ends).

    Args:
        prefix: the URL's prefix.
        signed_urls: whether the engine has credentials that sign URLs.
        min_part_bytes: the smallest part the engine's uploader sends
            (resumable chunks are multiples of 256 KiB; XML multipart parts
            at least 5 MiB).
    """
    return _all_flags(
        signed_urls=signed_urls,
        max_key_bytes=GCS_MAX_NAME_BYTES - _root_bytes(prefix),
        max_object_bytes=GCS_MAX_OBJECT_BYTES,
        max_metadata_bytes=GCS_MAX_METADATA_BYTES,
        min_part_bytes=min_part_bytes,
    )


def azure_blob_capabilities(prefix: str, *, signed_urls: bool, max_object_bytes: int | None) -> StorageCapabilities:
    """What Azure Blob Storage accepts under ``prefix`` (without slashes at its ends).

    Args:
        prefix: the URL's prefix.
        signed_urls: whether a shared key is known to sign SAS URLs.
        max_object_bytes: the largest object the engine writes (one Put Blob
            when it cannot stage blocks with a condition), or None.

    Raises:
        InvalidURL: the prefix leaves no room for keys.
    """
    room = AZURE_MAX_BLOB_NAME - _root_bytes(prefix)
    if room < 1:
        raise InvalidURL(
            f"the prefix is {_root_bytes(prefix)} bytes with its slash; Azure blob names are at most {AZURE_MAX_BLOB_NAME}"
        )
    return _all_flags(
        signed_urls=signed_urls,
        max_key_bytes=room,
        max_object_bytes=max_object_bytes,
        max_metadata_bytes=2048,
        min_part_bytes=64 * 1024,
    )
