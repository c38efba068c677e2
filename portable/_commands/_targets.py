"""What a storage command's argument names: a bucket URL and a key (or prefix) in it.

Each argument of ``portable ls|cat|cp|mv|rm|sync|du|stat|put`` is one of:

* a cloud URL, split at the bucket's root: ``s3://BUCKET/KEY``, ``gs://BUCKET/KEY``,
  ``az://CONTAINER/KEY``, ``abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/KEY``,
  ``mem://STORE/KEY``; the query string (``?endpoint_url=...``) stays with the bucket;
* a local path: ``./x``, ``../x``, ``/abs/x``, ``~/x``, ``.``, or ``file://PATH``;
* ``BUCKET-URL::KEY``: the bucket URL as written (``file://./data::k``, any scheme);
* anything else: a bare KEY on ``--bucket`` (default: the active profile's bucket).

A single-object command opens the bucket at the URL's root (a local file's folder)
and names the object by its key; a tree command (``-r``, ``sync``, ``du``) opens the
bucket *at* the prefix, so keys are relative to it on both sides of a copy.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass

__all__ = ["Place", "UsageError", "object_name", "place_of", "under"]

#: Schemes whose URL is SCHEME://BUCKET/KEY (the netloc names the bucket, container or store).
_ROOTED_SCHEMES = frozenset({"s3", "gs", "gcs", "az", "abfs", "mem"})


class UsageError(Exception):
    """A command line that cannot mean anything: exit code 2, the message says what to write."""


@dataclass(frozen=True)
class Place:
    """A bucket (its URL, or None for the active profile's) and a key or prefix in it.

    Attributes:
        text: the argument as given, for messages.
        bucket: the bucket URL at its root, or None for ``--bucket`` / the profile's.
        key: the key (or prefix) inside ``bucket``; ``""`` is the whole bucket.
        local: a local path (``file://``); ``path`` is then its absolute path.
        scheme: the URL's scheme (``file`` for a local path, ``""`` for the profile's bucket).
        path: the absolute local path of a local place, else ``""``.
    """

    text: str
    bucket: str | None
    key: str
    local: bool = False
    scheme: str = ""
    path: str = ""

    @property
    def is_dir_like(self) -> bool:
        """Names a folder rather than an object: empty key, a trailing ``/``, or an existing local folder."""
        return not self.key or self.key.endswith("/") or (self.local and os.path.isdir(self.path))

    def rooted(self) -> str | None:
        """The bucket URL opened *at* this place's key (a prefix), for tree commands."""
        if self.local:
            return f"file://{self.path}"
        return under(self.bucket, self.key)

    def child(self, name: str) -> Place:
        """The place of object ``name`` inside this folder-like place."""
        if self.local:
            path = os.path.join(self.path, name)
            return Place(self.text, f"file://{os.path.dirname(path)}", os.path.basename(path), True, "file", path)
        key = self.key if not self.key or self.key.endswith("/") else self.key + "/"
        return Place(self.text, self.bucket, key + name, False, self.scheme)

    def shown(self) -> str:
        """How messages name this place."""
        return self.path if self.local else self.text


def under(bucket: str | None, prefix: str) -> str | None:
    """``bucket`` URL with ``prefix`` appended to its path (before the query); None stays None."""
    prefix = prefix.strip("/")
    if bucket is None or not prefix:
        return bucket
    base, sep, query = bucket.partition("?")
    return f"{base.rstrip('/')}/{prefix}{sep}{query}"


def _is_local_path(text: str) -> bool:
    return text in (".", "..", "~") or text.startswith(("./", "../", "/", "~/"))


def _local(text: str, path: str) -> Place:
    absolute = os.path.abspath(os.path.expanduser(path))
    if path.endswith("/") or os.path.isdir(absolute):
        return Place(text, f"file://{absolute}", "", True, "file", absolute)
    return Place(text, f"file://{os.path.dirname(absolute)}", os.path.basename(absolute), True, "file", absolute)


def place_of(text: str, default_bucket: str | None) -> Place:
    """Where argument ``text`` points (module docstring); a bare key lands on ``default_bucket``.

    Raises:
        UsageError: an empty argument.
    """
    if not text:
        raise UsageError("an empty argument names nothing: give a URL (s3://bucket/key), a path (./file) or a key")
    if "::" in text:
        bucket, _, key = text.rpartition("::")
        if bucket.startswith("file://") and "?" not in bucket:
            folder = os.path.abspath(os.path.expanduser(bucket[len("file://"):]))
            return Place(text, bucket, key, True, "file", os.path.join(folder, key))
        return Place(text, bucket, key, False, bucket.partition("://")[0].lower())
    if "://" in text:
        scheme, _, rest = text.partition("://")
        lowered = scheme.lower()
        if lowered == "file":
            path, _, query = rest.partition("?")
            if query:
                raise UsageError(
                    f"{text}: a file:// path takes no options here; open it with --bucket "
                    f"'file://...?{query}' and name the key alone"
                )
            return _local(text, path or "/")
        if lowered.rpartition("+")[2] in _ROOTED_SCHEMES:
            location, sep, query = rest.partition("?")
            netloc, _, key = location.partition("/")
            return Place(text, f"{scheme}://{netloc}{sep}{query}", key, False, lowered)
        # another scheme: its driver knows where its bucket ends; the whole URL is the bucket
        return Place(text, text, "", False, lowered)
    if _is_local_path(text):
        return _local(text, text)
    return Place(text, default_bucket, text, False, "")


def object_name(place: Place) -> str:
    """The last segment of the key: the name a copy into a folder keeps."""
    return posixpath.basename(place.key.rstrip("/"))
