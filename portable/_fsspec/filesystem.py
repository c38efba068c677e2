"""The file system of :mod:`portable.fsspec`: :class:`BucketFileSystem` (see that module's docs)."""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from glob import has_magic
from typing import Any, TypeVar

from fsspec.caching import caches  # type: ignore[import-untyped]
from fsspec.spec import AbstractFileSystem  # type: ignore[import-untyped]

from ..driver.storage import ObjectInfo
from ..errors import InvalidArgument, NotFound, PortableError
from ..storage import Bucket, open_bucket
from .files import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_CACHE_TYPE,
    DEFAULT_MAX_CONCURRENCY,
    PROTOCOL,
    READ_OPTIONS,
    WRITE_OPTIONS,
    BucketFile,
    os_errors,
)

T = TypeVar("T")

_FS_OPTIONS = (
    "bucket", "bucket_url", "default_block_size", "default_cache_type", "listings_expiry_time",
    "max_concurrency", "max_paths", "profile", "url", "use_listings_cache",
)

#: Seconds a listing's entries answer ``info``/``isfile``/``open`` without a head, unless
#: ``listings_expiry_time`` says otherwise. s3fs keeps them until invalidated; a short default
#: serves a reader's discovery-then-read (pyarrow asks ``isfile`` and opens every file that
#: ``find`` just listed) while another process's writes show within seconds.
DEFAULT_LISTINGS_EXPIRY = 10.0

#: Environment variables that change which bucket a profile (or no profile) resolves to.
_CONFIG_ENV = (
    "PORTABLE_CONFIG", "PORTABLE_PROFILE", "PORTABLE_STORAGE_URL", "PORTABLE_STORAGE_ENGINE",
)


def _split_url(path: str) -> tuple[str | None, str]:
    """``portable://PROFILE/key`` -> (PROFILE or None, key); any other path -> (None, path)."""
    head = f"{PROTOCOL}://"
    if not path.startswith(head):
        return None, path
    rest = path[len(head) :]
    profile, _, key = rest.partition("/")
    return (profile or None), key


def _config_token() -> tuple[object, ...]:
    """What a profile resolves by, for fsspec's instance cache: a changed config file or
    environment must not hand back a file system opened on another bucket."""
    from ..config import config_path

    try:
        path = config_path()
        stamp: object = None if path is None else (str(path.resolve()), path.stat().st_mtime_ns)
    except Exception as err:  # the constructor reports a bad config properly
        stamp = repr(err)
    return (os.getcwd(), stamp, *(os.environ.get(name) for name in _CONFIG_ENV))


class _BucketFileSystemType(type(AbstractFileSystem)):  # type: ignore[misc]
    """fsspec's caching metaclass, keyed also on the configuration; a ``bucket=`` file system is
    never shared (two Bucket objects with one URL may differ in policy, or one be closed)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("bucket") is not None:
            kwargs["skip_instance_cache"] = True
        return super().__call__(*args, **kwargs)

    @property
    def _portable_config(cls) -> tuple[object, ...]:
        return _config_token()


class BucketFileSystem(AbstractFileSystem, metaclass=_BucketFileSystemType):  # type: ignore[misc]
    """An fsspec file system over one portable Bucket; paths are the Bucket's keys.

    Args:
        bucket: the Bucket to serve. Defaults to opening one from ``url``/``profile``.
        profile: a profile name of portable's configuration. Defaults to the active profile.
        url: a bucket URL (``s3://b/prefix?...``). Defaults to the profile's ``storage``.
        bucket_url: the same as ``url``, spelled so that it passes through
            ``fsspec.core.url_to_fs(url, **storage_options)`` (whose own first parameter is
            named ``url``), which pandas' ``read_parquet`` and Dask call.
        default_block_size: bytes per ranged read of files opened "rb", and per write
            flush. Defaults to :data:`DEFAULT_BLOCK_SIZE` (8 MiB).
        default_cache_type: fsspec's cache for files opened "rb". Defaults to
            :data:`DEFAULT_CACHE_TYPE` ("readahead").
        max_concurrency: ranged gets in flight at once in ``cat_ranges``. Defaults to 16.
        use_listings_cache: keep what ``ls`` and ``find`` listed, so that ``info``, ``isfile``,
            ``isdir``, ``exists`` and ``open(..., "rb")`` of a listed path send no request.
            Defaults to True. This file system's own writes and deletes drop the entries they
            touch; another writer's changes show once the entries expire (or after
            ``invalidate_cache()``).
        listings_expiry_time: seconds a listing is kept. Defaults to
            :data:`DEFAULT_LISTINGS_EXPIRY` (10); None keeps it until invalidated, as s3fs does.
        max_paths: the most directory listings kept (least recently used dropped). Defaults to no limit.

    Raises:
        InvalidArgument: an unknown option, or ``bucket`` with ``profile``/``url``.
        ConfigError: an unknown profile.
        UnknownScheme / MissingDependency / InvalidURL: as :func:`portable.storage.open_bucket`.
    """

    protocol = PROTOCOL
    root_marker = ""
    cachable = True
    _extra_tokenize_attributes = ("_portable_config",)

    def __init__(self, *args: Any, **options: Any) -> None:
        if self._cached:
            return
        if args:
            raise InvalidArgument(
                f"BucketFileSystem takes keyword options only ({', '.join(_FS_OPTIONS)}), got {args!r}"
            )
        unknown = sorted(set(options) - set(_FS_OPTIONS))
        if unknown:
            raise InvalidArgument(
                f"BucketFileSystem: unknown option(s) {', '.join(map(repr, unknown))}; "
                f"the options are {', '.join(_FS_OPTIONS)}"
            )
        bucket = options.get("bucket")
        profile = options.get("profile")
        url = options.get("url")
        if options.get("bucket_url") is not None:
            if url is not None:
                raise InvalidArgument("pass url= or bucket_url= (the same option), not both")
            url = options["bucket_url"]
        if profile is not None and (type(profile) is not str or not profile):
            raise InvalidArgument(f"profile must be a non-empty str, got {profile!r}")
        if bucket is not None:
            if not isinstance(bucket, Bucket):
                raise InvalidArgument(f"bucket must be a portable Bucket, got {type(bucket).__name__}")
            if profile is not None or url is not None:
                raise InvalidArgument("pass bucket= alone, or profile=/url= to open one, not both")
        block_size = options.get("default_block_size", DEFAULT_BLOCK_SIZE)
        if type(block_size) is not int or block_size < 1:
            raise InvalidArgument(f"default_block_size must be an int >= 1, got {block_size!r}")
        cache_type = options.get("default_cache_type", DEFAULT_CACHE_TYPE)
        if cache_type not in caches or cache_type is None:
            raise InvalidArgument(
                f"default_cache_type must be one of {', '.join(sorted(k for k in caches if k))}, "
                f"got {cache_type!r}"
            )
        concurrency = options.get("max_concurrency", DEFAULT_MAX_CONCURRENCY)
        if type(concurrency) is not int or concurrency < 1:
            raise InvalidArgument(f"max_concurrency must be an int >= 1, got {concurrency!r}")
        use_cache = options.get("use_listings_cache", True)
        if type(use_cache) is not bool:
            raise InvalidArgument(f"use_listings_cache must be True or False, got {use_cache!r}")
        expiry = options.get("listings_expiry_time", DEFAULT_LISTINGS_EXPIRY)
        if expiry is not None and (type(expiry) not in (int, float) or expiry <= 0):
            raise InvalidArgument(f"listings_expiry_time must be seconds > 0 or None, got {expiry!r}")
        max_paths = options.get("max_paths")
        if max_paths is not None and (type(max_paths) is not int or max_paths < 1):
            raise InvalidArgument(f"max_paths must be an int >= 1 or None, got {max_paths!r}")
        if bucket is None:
            bucket = open_bucket(url, profile=profile)
        super().__init__(use_listings_cache=use_cache, listings_expiry_time=expiry, max_paths=max_paths)
        self.bucket: Bucket = bucket
        self.profile: str | None = profile
        self.default_block_size = block_size
        self.default_cache_type = cache_type
        self.max_concurrency = concurrency

    def __repr__(self) -> str:
        return f"BucketFileSystem({self.bucket!r})"

    # -- paths ----------------------------------------------------------
    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        """``portable://PROFILE/a/b/`` -> ``a/b``: the key (or directory) inside the bucket."""
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = os.fspath(path)
        if not isinstance(path, str):
            raise InvalidArgument(f"a path must be a str, got {type(path).__name__}")
        _, key = _split_url(path)
        return key.strip("/")

    @staticmethod
    def _get_kwargs_from_urls(path: str) -> dict[str, Any]:
        profile, _ = _split_url(path)
        return {} if profile is None else {"profile": profile}

    def unstrip_protocol(self, name: str) -> str:
        """The ``portable://PROFILE/key`` URL of a path (``portable:///key`` for the active profile
        or a file system made from a Bucket)."""
        return f"{PROTOCOL}://{self.profile or ''}/{self._strip_protocol(name)}"

    def _key(self, path: Any) -> str:
        """The object key of ``path``; the bucket's root is a directory, never an object."""
        key: str = self._strip_protocol(path)
        if not key:
            raise IsADirectoryError(errno.EISDIR, "the bucket's root is a directory, not an object", "")
        return key

    @staticmethod
    def _prefix(key: str) -> str:
        return f"{key}/" if key else ""

    # -- entries --------------------------------------------------------
    @staticmethod
    def _file_entry(info: ObjectInfo) -> dict[str, Any]:
        return {
            "name": info.key,
            "size": info.size,
            "type": "file",
            "etag": info.etag,
            "last_modified": info.modified,
            "mtime": info.modified,
            "content_type": info.content_type,
            "metadata": dict(info.metadata),
        }

    @staticmethod
    def _dir_entry(name: str) -> dict[str, Any]:
        return {"name": name, "size": 0, "type": "directory"}

    def _has_children(self, key: str) -> bool:
        page = self.bucket.list_page(self._prefix(key), page_size=1)
        return bool(page.objects or page.prefixes)

    # -- the listings cache ---------------------------------------------
    def _from_listing(self, key: str) -> dict[str, Any] | None:
        """``key``'s entry from a kept listing, None when none covers it.

        Raises:
            FileNotFoundError: the listing of ``key``'s folder is kept and has no such entry.
        """
        if not key:
            return None
        if key in self.dircache:  # a listed folder
            return self._dir_entry(key)
        try:
            siblings = self.dircache[self._parent(key)]
        except KeyError:
            return None
        for entry in siblings:
            if entry["name"] == key:
                return dict(entry)
        raise FileNotFoundError(errno.ENOENT, "not in its folder's listing", key)

    def _keep_find(self, prefix: str, entries: Mapping[str, dict[str, Any]]) -> None:
        """Keep every folder listing that a complete undelimited listing under ``prefix`` implies."""
        folders: dict[str, dict[str, dict[str, Any]]] = {prefix.rstrip("/"): {}}
        for name, entry in entries.items():
            if entry["type"] != "file":
                continue
            child, parent = name, self._parent(name)
            folders.setdefault(parent, {})[child] = entry
            while parent and parent != prefix.rstrip("/") and len(parent) > len(prefix.rstrip("/")):
                child, parent = parent, self._parent(parent)
                known = folders.setdefault(parent, {})
                if child in known:
                    break
                known[child] = self._dir_entry(child)
        for folder, children in folders.items():
            if children:
                self.dircache[folder] = [children[n] for n in sorted(children)]

    def invalidate_cache(self, path: str | None = None) -> None:
        """Forget kept listings: all of them, or those that ``path`` is in (its folder and each
        folder above it)."""
        if path is None:
            self.dircache.clear()
            return
        key = self._strip_protocol(path)
        while True:
            self.dircache.pop(key, None)
            if not key:
                break
            key = self._parent(key)

    # -- listing and metadata -------------------------------------------
    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        """The files and directories right under ``path`` (one delimited listing); a file's own
        entry when ``path`` is a file.

        Raises:
            FileNotFoundError: nothing is stored at or under ``path``.
        """
        key = self._strip_protocol(path)
        prefix = self._prefix(key)
        if kwargs.get("refresh"):
            self.invalidate_cache(key)
        elif key in self.dircache or not key:
            kept = self.dircache.get(key)
            if kept is not None:
                return [dict(e) for e in kept] if detail else [e["name"] for e in kept]
        entries: list[dict[str, Any]] = []
        with os_errors(key):
            for info in self.bucket.list(prefix, delimiter="/"):
                if info.is_prefix:
                    entries.append(self._dir_entry(info.key.rstrip("/")))
                elif info.key != prefix:
                    entries.append(self._file_entry(info))
            if not entries and key:
                return [self._file_entry(self.bucket.head(key))] if detail else [key]
        if entries:
            self.dircache[key] = [dict(e) for e in entries]
        return entries if detail else [e["name"] for e in entries]

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        """A file's size, etag, modification time, content type and metadata (one head), else a
        directory's entry if objects are stored under it (one listing of one key). A path that
        ends in ``/`` names a directory only: no head is sent.

        A head that fails otherwise than NotFound (after its retries) is answered by the listing
        when objects are stored under the path: some S3 servers (s3s-fs) refuse a head on a
        key that is a folder of theirs with a 500.

        Raises:
            FileNotFoundError: nothing is stored at or under ``path``.
        """
        key = self._strip_protocol(path)
        if not key:
            return self._dir_entry("")
        kept = self._from_listing(key)
        if kept is not None:
            if isinstance(path, str) and path.endswith("/") and kept["type"] != "directory":
                raise FileNotFoundError(errno.ENOENT, "no object under this directory", path)
            return kept
        with os_errors(key):
            if isinstance(path, str) and path.endswith("/"):
                if self._has_children(key):
                    return self._dir_entry(key)
                raise FileNotFoundError(errno.ENOENT, "no object under this directory", path)
            try:
                return self._file_entry(self.bucket.head(key))
            except NotFound:
                if self._has_children(key):
                    return self._dir_entry(key)
                raise
            except PortableError as err:
                if isinstance(err, InvalidArgument) or not self._has_children(key):
                    raise
                return self._dir_entry(key)
        raise AssertionError("unreachable")  # pragma: no cover

    def isdir(self, path: str) -> bool:
        """Whether objects are stored under ``path/`` (one listing of one key)."""
        key = self._strip_protocol(path)
        try:
            kept = self._from_listing(key)
        except FileNotFoundError:
            return False
        if kept is not None:
            return bool(kept["type"] == "directory")
        return not key or self._has_children(key)

    def isfile(self, path: str) -> bool:
        """Whether an object is stored under ``path`` (one head)."""
        key = self._strip_protocol(path)
        try:
            kept = self._from_listing(key)
        except FileNotFoundError:
            return False
        if kept is not None:
            return bool(kept["type"] == "file")
        return bool(key) and self.bucket.exists(key)

    def find(
        self, path: str, maxdepth: int | None = None, withdirs: bool = False, detail: bool = False, **kwargs: Any
    ) -> Any:
        """Every file under ``path`` (and with ``withdirs`` every implied directory) from one
        undelimited listing, sorted; ``[path]`` itself when it is a file with nothing under it."""
        if maxdepth is not None and maxdepth < 1:
            raise ValueError("maxdepth must be at least 1")
        key = self._strip_protocol(path)
        prefix = self._prefix(key)
        out: dict[str, dict[str, Any]] = {}
        with os_errors(key):
            for info in self.bucket.list(prefix):
                rel = info.key[len(prefix) :]
                parts = rel.split("/")
                if maxdepth is None or len(parts) <= maxdepth:
                    out[info.key] = self._file_entry(info)
                if withdirs:
                    for depth in range(1, len(parts)):
                        if maxdepth is not None and depth > maxdepth:
                            break
                        name = prefix + "/".join(parts[:depth])
                        out.setdefault(name, self._dir_entry(name))
            if maxdepth is None and out:
                self._keep_find(prefix, out)
            if withdirs and key and out:
                out[key] = self._dir_entry(key)
            if not out and key:
                try:
                    out[key] = self._file_entry(self.bucket.head(key))
                except NotFound:
                    pass
        names = sorted(out)
        return {n: out[n] for n in names} if detail else names

    def modified(self, path: str) -> Any:
        """The object's last modification time (a timezone-aware datetime)."""
        when = self.info(path).get("last_modified")
        if when is None:
            raise NotImplementedError(f"{self.bucket.provider}:// keeps no modification time for {path!r}")
        return when

    def created(self, path: str) -> Any:
        """Object stores keep no creation time apart from the last write: always NotImplementedError."""
        raise NotImplementedError("object storage keeps no creation time; use modified()")

    def ukey(self, path: str) -> str:
        """A key that changes whenever the object does: its etag (else size and time)."""
        info = self.info(path)
        if info["type"] != "file":
            raise IsADirectoryError(errno.EISDIR, "a directory has no ukey", path)
        etag = info.get("etag")
        return str(etag) if etag else f"{info['size']}-{info.get('last_modified')}"

    def checksum(self, path: str) -> int:
        """An int from the object's :meth:`ukey` (its etag), as fsspec's caches expect."""
        return int(hashlib.md5(self.ukey(path).encode(), usedforsecurity=False).hexdigest(), 16)

    def sign(self, path: str, expiration: int = 100, **kwargs: Any) -> str:
        """A GET URL for the object, valid ``expiration`` seconds (``Bucket.signed_url``).

        Raises:
            Unsupported: the provider cannot sign URLs.
        """
        if kwargs:
            raise InvalidArgument(f"sign: unknown option(s) {sorted(kwargs)}; only expiration is taken")
        return self.bucket.signed_url(self._key(path), expires=expiration)

    # -- directories ----------------------------------------------------
    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """Nothing: directories on object storage exist while objects are stored under them."""

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Nothing, as :meth:`mkdir`."""

    def rmdir(self, path: str) -> None:
        """Nothing when nothing is stored under ``path``.

        Raises:
            OSError: ENOTEMPTY, objects are stored under ``path``.
        """
        key = self._strip_protocol(path)
        if self._has_children(key):
            raise OSError(errno.ENOTEMPTY, "directory not empty", path)

    # -- whole objects --------------------------------------------------
    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        """The object's bytes, or ``[start, end)`` of them (negative: from the end) by one ranged get."""
        key = self._key(path)
        if kwargs:
            raise InvalidArgument(f"cat_file: unknown option(s) {sorted(kwargs)}")
        with os_errors(key):
            if start is None and end is None:
                return self.bucket.get(key)
            if (start is not None and start < 0) or (end is not None and end < 0):
                size = self.bucket.head(key).size
                start = None if start is None else (max(size + start, 0) if start < 0 else start)
                end = None if end is None else (max(size + end, 0) if end < 0 else end)
            begin = start or 0
            if end is not None and end <= begin:
                self.bucket.head(key)  # an empty range still reports a missing object
                return b""
            return self.bucket.get_range(key, begin, end)

    def cat_ranges(
        self,
        paths: list[str],
        starts: int | list[int] | None,
        ends: int | list[int] | None,
        max_gap: int | None = None,
        on_error: str = "return",
        **kwargs: Any,
    ) -> list[Any]:
        """Many ranged gets, up to ``max_concurrency`` at once; results in the order asked.

        ``on_error="return"`` puts a failed range's exception in its place; anything else raises
        the first. ``max_gap`` (merging near ranges) is not supported.
        """
        if max_gap is not None:
            raise NotImplementedError("cat_ranges: max_gap is not supported")
        if not isinstance(paths, list):
            raise TypeError("cat_ranges: paths must be a list")
        starts_l = starts if isinstance(starts, list) else [starts] * len(paths)
        ends_l = ends if isinstance(ends, list) else [ends] * len(paths)
        if len(starts_l) != len(paths) or len(ends_l) != len(paths):
            raise ValueError("cat_ranges: paths, starts and ends must have one length")

        def one(item: tuple[str, int | None, int | None]) -> Any:
            try:
                return self.cat_file(item[0], item[1], item[2], **kwargs)
            except Exception as err:
                if on_error == "return":
                    return err
                raise

        return self._map(one, list(zip(paths, starts_l, ends_l, strict=True)))

    def _map(self, fn: Callable[[Any], T], items: list[Any]) -> list[T]:
        """``[fn(i) for i in items]``, at most ``max_concurrency`` at once, in order."""
        if len(items) <= 1:
            return [fn(i) for i in items]
        with ThreadPoolExecutor(max_workers=min(len(items), self.max_concurrency)) as pool:
            return list(pool.map(fn, items))

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        """Store ``value`` as one atomic put; ``mode="create"`` only where nothing is stored.

        Keywords: those of ``Bucket.put`` (``content_type``, ``metadata``, ...).

        Raises:
            FileExistsError: ``mode="create"`` and the object exists.
        """
        key = self._key(path)
        if mode not in ("overwrite", "create"):
            raise InvalidArgument(f"pipe_file: mode must be 'overwrite' or 'create', got {mode!r}")
        self.invalidate_cache(key)
        with os_errors(key):
            self.bucket.put(key, value, if_none_match="*" if mode == "create" else None, **kwargs)

    def pipe(self, path: Any, value: bytes | None = None, **kwargs: Any) -> None:
        """Store one object, or a ``{path: bytes}`` mapping concurrently (``Bucket.put_many``)."""
        if isinstance(path, Mapping) and value is None and not kwargs:
            items = {self._key(p): v for p, v in path.items()}
            for key in items:
                self.invalidate_cache(key)
            with os_errors(""):
                self.bucket.put_many(items)
            return
        super().pipe(path, value, **kwargs)

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        """Store an empty object (one put); without ``truncate``, only if none is stored."""
        key = self._key(path)
        self.invalidate_cache(key)
        if truncate or not self.bucket.exists(key):
            with os_errors(key):
                self.bucket.put(key, b"", **kwargs)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        """Copy one object (``Bucket.copy``, server-side where the provider can); copying a
        directory does nothing, as its objects are copied one by one."""
        src, dst = self._key(path1), self._key(path2)
        if kwargs:
            raise InvalidArgument(f"cp_file: unknown option(s) {sorted(kwargs)}")
        self.invalidate_cache(dst)
        with os_errors(src):
            try:
                self.bucket.copy(src, dst)
            except NotFound:
                if self._has_children(src):
                    return
                raise

    def rm_file(self, path: str) -> None:
        """Delete one object; a missing object is FileNotFoundError, as fsspec expects."""
        key = self._key(path)
        self.invalidate_cache(key)
        with os_errors(key):
            self.bucket.head(key)
            self.bucket.delete(key)

    def _rm(self, path: str) -> None:
        self.rm_file(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        """Delete what ``path`` names (with ``recursive``, everything under it) by one
        ``Bucket.delete_many``. A list of paths is deleted as given: a missing one is no error,
        as deleting a missing key is none on object storage.

        Raises:
            FileNotFoundError: ``path`` is one path (no list, no glob) and nothing is stored there.
            IsADirectoryError: ``path`` is one directory and ``recursive`` is not set.
        """
        names = self.expand_path(path, recursive=recursive, maxdepth=maxdepth)
        keys = [n for n in names if n]
        single = isinstance(path, str) and not has_magic(path) and keys == [self._strip_protocol(path)]
        if single and self.info(path)["type"] == "directory":
            raise IsADirectoryError(errno.EISDIR, "a directory: pass recursive=True", path)
        for key in keys:
            self.invalidate_cache(key)
        with os_errors(str(path)):
            self.bucket.delete_many(keys)

    # -- streams --------------------------------------------------------
    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | str | None = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> BucketFile:
        key = self._key(path)
        allowed = READ_OPTIONS if mode == "rb" else WRITE_OPTIONS
        unknown = sorted(set(kwargs) - allowed)
        if unknown:
            raise InvalidArgument(
                f"open({path!r}, {mode!r}): unknown option(s) {', '.join(map(repr, unknown))}; "
                f"mode {mode!r} takes {', '.join(sorted(allowed)) or 'none'}"
            )
        if mode not in ("rb", "wb", "xb"):
            raise InvalidArgument(
                f"open({path!r}, {mode!r}): object storage opens 'rb', 'wb' or 'xb' (no append, no update)"
            )
        if block_size in (None, "default"):
            block_size = self.default_block_size
        if type(block_size) is not int or block_size < 1:
            raise InvalidArgument(f"open: block_size must be an int >= 1 or 'default', got {block_size!r}")
        return BucketFile(
            self, key, mode,
            block_size=block_size,
            autocommit=autocommit, cache_options=cache_options, **kwargs,
        )


