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
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, BinaryIO

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

_RESERVED_NAME_PREFIX = ".portable"
_TEMP_FILE_PREFIX = ".portable-tmp-"
_SIDECAR_PREFIX = ".portable-meta."
_MAX_SEGMENT_BYTES = 255 - len(_SIDECAR_PREFIX)
_COPY_BUFFER_BYTES = 1 << 20


def _etag_of(st: os.stat_result) -> str:
    return f'"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"'


def _modified_of(st: os.stat_result) -> dt.datetime:
    return dt.datetime.fromtimestamp(st.st_mtime_ns / 1e9, dt.UTC)


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
    def _path_of(self, key: str) -> Path:
        if _RESERVED_NAME_PREFIX in key and any(seg.startswith(_RESERVED_NAME_PREFIX) for seg in key.split("/")):
            raise InvalidKey(f"key {key!r}: names starting with {_RESERVED_NAME_PREFIX} are reserved by file://")
        if len(key) > 63 and any(len(seg.encode()) > _MAX_SEGMENT_BYTES for seg in key.split("/")):
            raise InvalidKey(
                f"key {key[:60]!r}...: file:// stores each '/'-separated segment as a file name, "
                f"which is limited here to {_MAX_SEGMENT_BYTES} bytes; split the key with '/'"
            )
        return self.root / key

    @staticmethod
    def _sidecar_path(path: Path) -> Path:
        return path.with_name(_SIDECAR_PREFIX + path.name)

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
        with open(self._path_of(key), "rb") as fh:
            return fh.read()

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        with open(self._path_of(key), "rb") as fh:
            fh.seek(start)
            return fh.read() if end is None else fh.read(end - start)

    def head(self, key: str) -> ObjectInfo:
        path = self._path_of(key)
        st = path.stat()
        if not path.is_file():
            raise NotFound(f"no object {key!r} (it is a folder)", provider=self.scheme)
        etag = _etag_of(st)
        content_type, metadata = None, {}
        try:
            sidecar = json.loads(self._sidecar_path(path).read_bytes())
            if sidecar.get("etag") == etag:
                content_type, metadata = sidecar.get("content_type"), sidecar.get("metadata", {})
        except (OSError, ValueError):
            pass  # no sidecar, or one that belongs to an earlier version: no metadata
        return ObjectInfo(key, st.st_size, etag, _modified_of(st), content_type, metadata)

    def open_read(self, key: str) -> IO[bytes]:
        path = self._path_of(key)
        if path.is_dir():
            raise NotFound(f"no object {key!r} (it is a folder)", provider=self.scheme)
        return open(path, "rb")

    # -- writes ---------------------------------------------------------------
    def _temp_file_beside(self, path: Path) -> tuple[int, str]:
        """Create a temporary file beside ``path`` (same file system, so rename is atomic)."""
        try:
            return tempfile.mkstemp(dir=path.parent, prefix=_TEMP_FILE_PREFIX)
        except (FileNotFoundError, NotADirectoryError):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise self._file_folder_clash(path.relative_to(self.root).as_posix()) from None
            return tempfile.mkstemp(dir=path.parent, prefix=_TEMP_FILE_PREFIX)

    def put(self, key: str, data: bytes, options: WriteOptions) -> str:
        return self._write_whole(key, options, lambda fh: fh.write(data))

    def _write_whole(self, key: str, options: WriteOptions, fill: Callable[[BinaryIO], object]) -> str:
        """Write a temporary file with ``fill`` and install it under ``key``; on failure leave nothing."""
        path = self._path_of(key)
        fd, tmp = self._temp_file_beside(path)
        try:
            with os.fdopen(fd, "wb") as fh:
                fill(fh)
                if self._fsync:
                    fh.flush()
                    os.fsync(fh.fileno())
            return self._install_temp_file(key, path, tmp, options)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            self._remove_empty_folders(path.parent)
            raise

    def _install_temp_file(self, key: str, path: Path, tmp: str, options: WriteOptions) -> str:
        """Move a finished temporary file into place, honouring the conditions."""
        now = time.time_ns()
        os.utime(tmp, ns=(now, now))
        etag = _etag_of(os.stat(tmp))
        sidecar = None
        if options.content_type or options.metadata:
            sidecar = json.dumps(
                {"etag": etag, "content_type": options.content_type, "metadata": dict(options.metadata)}
            ).encode()
        with self._locked(path.parent):
            if options.if_none_match or options.if_match is not None:
                try:
                    current = _etag_of(path.stat()) if path.is_file() else None
                except FileNotFoundError:
                    current = None
                if options.if_none_match and current is not None:
                    raise AlreadyExists(f"{key!r} exists", provider=self.scheme)
                if options.if_match is not None and current != options.if_match:
                    raise PreconditionFailed(f"{key!r} does not have etag {options.if_match}", provider=self.scheme)
            sidecar_path = self._sidecar_path(path)
            if sidecar is not None:
                sidecar_tmp = tmp + ".meta"
                with open(sidecar_tmp, "wb") as fh:
                    fh.write(sidecar)
                os.replace(sidecar_tmp, sidecar_path)
            else:
                with contextlib.suppress(FileNotFoundError):
                    sidecar_path.unlink()
            try:
                os.replace(tmp, path)
            except IsADirectoryError:
                raise self._file_folder_clash(key) from None
            except OSError as exc:
                if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise self._file_folder_clash(key) from None
                raise
            if self._fsync:
                dir_fd = os.open(path.parent, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
        return etag

    def _file_folder_clash(self, key: str) -> InvalidKey:
        return InvalidKey(
            f"file:// cannot store {key!r}: a file system path cannot be both an object and a "
            "folder of objects (another key is a prefix of it, or it is a prefix of another key)",
            provider=self.scheme,
        )

    def delete(self, key: str) -> None:
        path = self._path_of(key)
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
                self._sidecar_path(path).unlink()
        finally:
            lock.__exit__(None, None, None)
        self._remove_empty_folders(path.parent)

    def _remove_empty_folders(self, folder: Path) -> None:
        """Remove folders left empty by a delete, up to the root."""
        while folder != self.root and self.root in folder.parents:
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent

    def copy(self, src: str, dst: str) -> str:
        info = self.head(src)
        source = self._path_of(src)

        def fill(out: BinaryIO) -> None:
            with open(source, "rb") as inp:
                shutil.copyfileobj(inp, out, _COPY_BUFFER_BYTES)

        return self._write_whole(dst, WriteOptions(info.content_type, info.metadata), fill)

    def open_write(self, key: str, options: WriteOptions, part_size: int) -> WriteStream:
        path = self._path_of(key)
        fd, tmp = self._temp_file_beside(path)
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
            return ObjectInfo(key, st.st_size, _etag_of(st), _modified_of(st))

        keys = self._sorted_keys(start_dir, rel, prefix, after, delimiter is not None)
        return page_of_sorted_keys(keys, info, prefix, delimiter, start_after, page_size, token)

    def _sorted_keys(self, folder: Path, rel: str, prefix: str, after: str, shallow: bool) -> Iterator[str]:
        """Yield keys under ``folder`` in lexical order (folders sort as ``name/``)."""
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return
        named: list[tuple[str, os.DirEntry[str]]] = []
        for entry in entries:
            if entry.name.startswith(_RESERVED_NAME_PREFIX):
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
                below = self._sorted_keys(Path(entry.path), name, prefix, after, shallow)
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
            return self._driver._install_temp_file(self._key, self._driver._path_of(self._key), self._tmp, self._options)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        self._fh.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._tmp)
        self._driver._remove_empty_folders(Path(self._tmp).parent)
