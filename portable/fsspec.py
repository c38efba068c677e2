"""``portable://`` for fsspec: :class:`BucketFileSystem`, any portable Bucket as an fsspec file system.

pandas, pyarrow, Dask, Polars and xarray reach object storage through fsspec.
A ``BucketFileSystem`` gives them a portable :class:`~portable.storage.Bucket`,
so every read, write and listing they make runs through the Bucket: key
validation, retries, circuit breakers, deadlines and metrics, the same on
every provider::

    >>> import portable.storage
    >>> fs = portable.storage.open_bucket("mem://fsspec-doc").fs()
    >>> fs.pipe_file("tables/a.csv", b"x,y\\n1,2\\n")
    >>> fs.cat_file("tables/a.csv", start=0, end=3)
    b'x,y'
    >>> fs.ls("tables", detail=False)
    ['tables/a.csv']

URLs: ``portable://PROFILE/KEY``. The part after ``portable://`` and before the
next ``/`` is always a profile name from portable's configuration (see
:mod:`portable.config`), never the start of a key; ``portable:///KEY`` (three
slashes: an empty profile) is the active profile (``PORTABLE_PROFILE``, else
``default``). An unknown profile is a ConfigError, never a fallback. Nothing
after the profile is parsed: ``?`` and ``#`` are part of the key.

``storage_options`` (and constructor keywords): ``profile``, ``url`` (a
bucket URL such as ``s3://b/prefix?endpoint_url=...``; with ``profile``, that
profile's resilience policy and engine apply to it; spell it ``bucket_url``
for pandas' ``read_parquet`` and Dask, which pass storage_options through
``fsspec.core.url_to_fs(url, ...)`` where ``url`` is taken), ``bucket`` (a Bucket
object; not through storage_options of other processes, which cannot be
pickled), ``default_block_size``, ``default_cache_type``, ``max_concurrency``,
and the listings cache's ``use_listings_cache``, ``listings_expiry_time`` and
``max_paths``. Any other option is an InvalidArgument.

Where object storage differs from a POSIX file system (and fsspec's local one):
directories are implied by keys (``a/b`` makes ``a`` a directory), so an empty
directory cannot exist, ``mkdir``/``makedirs`` do nothing and a directory
disappears with its last object; a path may be a file and a directory at once
(``a`` and ``a/b``), where ``info`` reports the file; there is no append, no
rename (``mv`` copies then deletes) and no creation time; and a file written
with ``open(..., "wb")`` is visible only once closed, never partly.
What ``ls`` and ``find`` list is kept for ``listings_expiry_time`` seconds (10
by default), so ``info``/``isfile``/``open`` of a listed path sends no head;
this file system's own writes and deletes drop what they touch.

Errors: a missing object is FileNotFoundError, an existing one under
``"xb"``/``mode="create"`` FileExistsError, refused credentials
PermissionError, each with the portable error as ``__cause__``. Everything
else is the portable error itself (:mod:`portable.errors`): InvalidKey for a
path portable refuses (before any request), Unavailable/Throttled/
DeadlineExceeded once the retries are spent.
"""

from __future__ import annotations

from .errors import MissingDependency

try:
    import fsspec  # type: ignore[import-untyped]
except ImportError as exc:
    raise MissingDependency(
        "portable.fsspec needs fsspec: pip install 'portable-cloud[fsspec]'"
    ) from exc

from ._fsspec.files import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_CACHE_TYPE,
    DEFAULT_MAX_CONCURRENCY,
    PROTOCOL,
    BucketFile,
)
from ._fsspec.filesystem import BucketFileSystem

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_CACHE_TYPE",
    "DEFAULT_MAX_CONCURRENCY",
    "PROTOCOL",
    "BucketFile",
    "BucketFileSystem",
]

# fsspec knows "portable" through the package's entry point; registering here too makes it work
# from a source checkout that was never installed (an installed entry point wins either way).
if PROTOCOL not in fsspec.registry:
    fsspec.register_implementation(PROTOCOL, BucketFileSystem, clobber=False)
