"""``file://`` — a bucket in a local folder.

URLs:
    ``file:///abs/path`` or ``file://./relative/path`` (relative to the
    working directory). The folder is created on first write.

Options:
    ``fsync`` (bool): fsync each object and its folder before the write
    returns. Defaults to false (atomic, but not durable across a power cut).

Keys:
    A key is a path under the folder: ``a/b.json`` is the file
    ``<root>/a/b.json``, so existing files can be read and listed. Names that
    start with ``.portable`` are reserved (temporary files and metadata
    sidecars live beside each object under such names) and never listed.

Known differences:
    * Each ``/``-separated segment of a key is a file name, limited to 255
      bytes (the whole key may still be 1,024 bytes).
    * A file system path cannot be both a file and a folder, so the object
      ``a`` and the object ``a/b`` cannot both exist; the second write
      raises InvalidKey. Every cloud store allows it.
    * Content type and user metadata live in a sidecar file
      ``.portable-meta.<name>`` beside the object; a file written by another
      program has none.

Guarantees:
    Writes are atomic (a temporary file renamed into place): readers see the
    old object or the new one, and a crashed or failed write leaves nothing
    visible. Conditional writes hold across processes on one machine: every
    mutation takes an ``fcntl`` lock on the object's folder. Because nothing
    lives in a shared system folder, a bucket nested in another
    (``file://./data`` and ``file://./data/tenant``) sees the same objects
    under the same locks. The etag is derived from
    the file's inode, size and nanosecond modification time, which each write
    sets afresh.

As:
    ``pathlib.Path``: the root folder.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ..driver.storage import (
    ListPage,
    ObjectInfo,
    StorageCapabilities,
    StorageDriver,
    WriteOptions,
    WriteStream,
    page_of_sorted_keys,
)
from ..errors import AlreadyExists, ErrorCode, InvalidKey, NotFound, PreconditionFailed
from ..urls import ParsedURL

__all__ = ["FileStorage"]

_RESERVED = ".portable"
_TMP = ".portable-tmp-"
_META = ".portable-meta."
_MAX_SEGMENT = 255 - len(_META)


def _etag(st: os.stat_result) -> str:
    return f'"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"'


class FileStorage(StorageDriver):
    """Objects as files under a root folder."""

    scheme = "file"
    capabilities = StorageCapabilities(signed_urls=False, min_part_bytes=1, max_metadata_bytes=8192)
    known_differences = {
        "test_key_and_prefix_coexist": "a file system path cannot be both a file and a folder",
    }

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.root = Path(root).absolute()
        self.endpoint = f"file://{self.root}"
        self._fsync = fsync

    @classmethod
    def from_url(cls, url: ParsedURL) -> FileStorage:
        fsync = url.take("fsync", bool, False)
        url.done()
        path = url.netloc + url.path
        if not path:
            raise InvalidKey(f"{url} names no folder; write file:///abs/path or file://./relative")
        return cls(os.path.expanduser(path), fsync=fsync)

    # -- paths ------------------------------------------------------------
    def _path(self, key: str) -> Path:
        if _RESERVED in key and any(seg.startswith(_RESERVED) for seg in key.split("/")):
            raise InvalidKey(f"key {key!r}: names starting with {_RESERVED} are reserved by file://")
        if len(key) > 63 and any(len(seg.encode()) > _MAX_SEGMENT for seg in key.split("/")):
            raise InvalidKey(
                f"key {key[:60]!r}...: file:// stores each '/'-separated segment as a file name, "
                f"which is limited here to {_MAX_SEGMENT} bytes; split the key with '/'"
            )
        return self.root / key

    @staticmethod
    def _meta_path(path: Path) -> Path:
        return path.with_name(_META + path.name)

    @contextlib.contextmanager
    def _locked(self, folder: Path) -> Iterator[None]:
        """Hold an exclusive lock on ``folder`` (which must exist)."""
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def as_(self, kind: type) -> object:
        return self.root if kind is Path else None

    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, IsADirectoryError | NotADirectoryError):
            return ErrorCode.NOT_FOUND
        return super().code_of(exc)

    # -- reads --------------------------------------------------------------
    def get(self, key: str) -> bytes:
        with open(self._path(key), "rb") as fh:
            return fh.read()

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        with open(self._path(key), "rb") as fh:
            fh.seek(start)
            return fh.read() if end is None else fh.read(end - start)

    def head(self, key: str) -> ObjectInfo:
        path = self._path(key)
        st = path.stat()
        if not path.is_file():
            raise NotFound(f"no object {key!r} (it is a folder)", provider=self.scheme)
        etag = _etag(st)
        content_type, metadata = None, {}
        try:
            side = json.loads(self._meta_path(path).read_bytes())
            if side.get("etag") == etag:
                content_type, metadata = side.get("content_type"), side.get("metadata", {})
        except (OSError, ValueError):
            pass  # no sidecar, or one that belongs to an earlier version: no metadata
        modified = dt.datetime.fromtimestamp(st.st_mtime_ns / 1e9, dt.UTC)
        return ObjectInfo(key, st.st_size, etag, modified, content_type, metadata)

    def open_read(self, key: str) -> IO[bytes]:
        path = self._path(key)
        if path.is_dir():
            raise NotFound(f"no object {key!r} (it is a folder)", provider=self.scheme)
        return open(path, "rb")

    # -- writes ---------------------------------------------------------------
    def _temp(self, path: Path) -> tuple[int, str]:
        """Create a temporary file beside ``path`` (same file system, so rename is atomic)."""
        try:
            return tempfile.mkstemp(dir=path.parent, prefix=_TMP)
        except (FileNotFoundError, NotADirectoryError):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise self._conflict(path.relative_to(self.root).as_posix()) from None
            return tempfile.mkstemp(dir=path.parent, prefix=_TMP)

    def put(self, key: str, data: bytes, options: WriteOptions) -> str:
        path = self._path(key)
        fd, tmp = self._temp(path)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                if self._fsync:
                    fh.flush()
                    os.fsync(fh.fileno())
            return self._install(key, path, tmp, options)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            self._prune(path.parent)
            raise

    def _install(self, key: str, path: Path, tmp: str, options: WriteOptions) -> str:
        """Move a finished temporary file into place, honouring the conditions."""
        now = time.time_ns()
        os.utime(tmp, ns=(now, now))
        etag = _etag(os.stat(tmp))
        side = None
        if options.content_type or options.metadata:
            side = json.dumps(
                {"etag": etag, "content_type": options.content_type, "metadata": dict(options.metadata)}
            ).encode()
        with self._locked(path.parent):
            if options.if_none_match or options.if_match is not None:
                try:
                    current = _etag(path.stat()) if path.is_file() else None
                except FileNotFoundError:
                    current = None
                if options.if_none_match and current is not None:
                    raise AlreadyExists(f"{key!r} exists", provider=self.scheme)
                if options.if_match is not None and current != options.if_match:
                    raise PreconditionFailed(f"{key!r} does not have etag {options.if_match}", provider=self.scheme)
            meta = self._meta_path(path)
            if side is not None:
                meta_tmp = tmp + ".meta"
                with open(meta_tmp, "wb") as fh:
                    fh.write(side)
                os.replace(meta_tmp, meta)
            else:
                with contextlib.suppress(FileNotFoundError):
                    meta.unlink()
            try:
                os.replace(tmp, path)
            except IsADirectoryError:
                raise self._conflict(key) from None
            except OSError as exc:
                if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise self._conflict(key) from None
                raise
            if self._fsync:
                dir_fd = os.open(path.parent, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
        return etag

    def _conflict(self, key: str) -> InvalidKey:
        return InvalidKey(
            f"file:// cannot store {key!r}: a file system path cannot be both an object and a "
            "folder of objects (another key is a prefix of it, or it is a prefix of another key)",
            provider=self.scheme,
        )

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            lock = self._locked(path.parent)
            lock.__enter__()
        except (FileNotFoundError, NotADirectoryError):
            return
        try:
            if path.is_dir():
                return
            try:
                path.unlink()
            except (FileNotFoundError, NotADirectoryError):
                return
            with contextlib.suppress(FileNotFoundError):
                self._meta_path(path).unlink()
        finally:
            lock.__exit__(None, None, None)
        self._prune(path.parent)

    def _prune(self, folder: Path) -> None:
        """Remove folders left empty by a delete, up to the root."""
        while folder != self.root and self.root in folder.parents:
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent

    def copy(self, src: str, dst: str) -> str:
        info = self.head(src)
        path = self._path(dst)
        fd, tmp = self._temp(path)
        try:
            with os.fdopen(fd, "wb") as out, open(self._path(src), "rb") as inp:
                while chunk := inp.read(1 << 20):
                    out.write(chunk)
            return self._install(dst, path, tmp, WriteOptions(info.content_type, info.metadata))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            self._prune(path.parent)
            raise

    def open_write(self, key: str, options: WriteOptions, part_size: int) -> WriteStream:
        path = self._path(key)
        fd, tmp = self._temp(path)
        return _FileWrite(self, key, options, fd, tmp)

    # -- listing ------------------------------------------------------------
    def list_page(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        after = max(filter(None, (start_after, token)), default="")
        base, _, _ = prefix.rpartition("/")
        start_dir = self.root / base if base else self.root
        rel = base + "/" if base else ""

        def info(key: str) -> ObjectInfo | None:
            try:
                st = os.stat(self.root / key)
            except OSError:
                return None
            modified = dt.datetime.fromtimestamp(st.st_mtime_ns / 1e9, dt.UTC)
            return ObjectInfo(key, st.st_size, _etag(st), modified)

        keys = self._walk(start_dir, rel, prefix, after, delimiter is not None)
        return page_of_sorted_keys(keys, info, prefix, delimiter, start_after, page_size, token)

    def _walk(self, folder: Path, rel: str, prefix: str, after: str, shallow: bool) -> Iterator[str]:
        """Yield keys under ``folder`` in lexical order (folders sort as ``name/``)."""
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return
        named: list[tuple[str, os.DirEntry[str]]] = []
        for entry in entries:
            if entry.name.startswith(_RESERVED):
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            named.append((rel + entry.name + ("/" if is_dir else ""), entry))
        named.sort(key=lambda pair: pair[0])
        for name, entry in named:
            if name.endswith("/"):
                # skip folders outside the prefix, or wholly before `after`
                if not (name.startswith(prefix) or prefix.startswith(name)):
                    continue
                if name < after and not after.startswith(name):
                    continue
                below = self._walk(Path(entry.path), name, prefix, after, shallow)
                if shallow and len(name) > len(prefix):
                    first = next(below, None)  # one key stands for the folded prefix
                    if first is not None:
                        yield first
                    continue
                yield from below
            elif name.startswith(prefix) and name > after and entry.is_file():
                yield name


class _FileWrite(WriteStream):
    def __init__(self, driver: FileStorage, key: str, options: WriteOptions, fd: int, tmp: str) -> None:
        self._driver = driver
        self._key = key
        self._options = options
        self._tmp = tmp
        self._fh = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        self._fh.write(data)

    def commit(self) -> str:
        try:
            self._fh.flush()
            if self._driver._fsync:
                os.fsync(self._fh.fileno())
            self._fh.close()
            return self._driver._install(self._key, self._driver._path(self._key), self._tmp, self._options)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        self._fh.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._tmp)
        self._driver._prune(Path(self._tmp).parent)
