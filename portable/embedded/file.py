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

Symbolic links:
    No operation touches a path outside the root, and none follows a symbolic
    link below it, wherever the link points (outside the root, or to another
    key inside it: such an alias would share one file between two keys that
    lock different folders). Every path is opened one segment at a time,
    relative to the folder opened before it and with ``O_NOFOLLOW``, so a
    link swapped in mid-operation is refused too (no check-then-open race).
    A key whose path meets a link (``link/x`` where ``link`` is one, or a key
    that is itself a link) raises PermissionDenied naming the link, for every
    operation: ``get``, ``get_range``, ``head``, ``open``, ``put``,
    ``copy`` (either side), ``delete`` (the link is not removed either) and
    ``list`` of a prefix under a link. A listing that meets a link leaves it
    out: a link is not an object of the bucket. The root's own path (the
    URL) may pass through links: it is configuration, resolved once when the
    folder is opened.

Known differences:
    * Each ``/``-separated segment of a key is a file name, limited to 255
      bytes (the whole key may still be 1,024 bytes).
    * A file system path cannot be both a file and a folder, so the object
      ``a`` and the object ``a/b`` cannot both exist; the second write
      raises InvalidKey. Every cloud store allows it.
    * Content type, the ``cache_control``, ``content_encoding`` and
      ``content_disposition`` headers and user metadata live in a sidecar
      file ``.portable-meta.<name>`` beside the object; a file written by
      another program has none. Nothing interprets the headers here: they
      are stored and returned by ``head``.

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

Listing:
    Keys come in key order (a folder sorts as ``name/``, so ``a-b`` < ``a/x``
    < ``a0``). A directory has no order, so the first page reads whole each
    folder it needs (only those: a page of ``a/`` does not read ``b/``); each
    folder read is kept as a sorted snapshot while its times are unchanged,
    and later pages find their place in it by binary search, costing time in
    proportion to their keys. A folder of more than 50,000 names is sorted in
    runs spilled to unnamed temporary files (``TMPDIR``; about the names'
    bytes plus 8 per name, freed with the snapshot), so memory stays flat as
    folders grow. A folder written to while it is listed is read again for
    each page: correct, but a page then costs the folder's size.

Leftovers:
    A writer killed mid-write leaves its temporary file
    (``.portable-tmp-<random>-<name>`` beside the object, the name cut to
    fit 255 bytes, then marked ``~`` instead of ``-``): invisible, but taking
    space. :meth:`FileStorage.abort_incomplete` removes those older than a
    given age (``Bucket.abort_incomplete``, ``portable abort-incomplete``);
    it never removes an object, and a temporary file is older than the age
    only if its writer wrote nothing to it for that long.

Resumable writes:
    ``open(key, "wb", resume=True)`` writes a temporary file whose name is
    fixed by the key (``.portable-tmp-R<7 hex of its SHA-256>-<name>``), each
    part flushed as it is written; a later writer of the key reopens it and
    continues after its last whole byte. Parts are reported in ``part_size``
    slices of that file with their MD5 (read back here). Two resumable
    writers of one key at once share the file: do not. ``abort_incomplete``
    removes it like any temporary file.

As:
    ``pathlib.Path``: the root folder.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO

from ..driver.storage import (
    ListPage,
    ObjectInfo,
    PersistedPart,
    ResumableWriteStream,
    StorageCapabilities,
    StorageDriver,
    WriteOptions,
    WriteStream,
    page_of_sorted_keys,
)
from ..errors import (
    AlreadyExists,
    Cancelled,
    ErrorCode,
    InvalidKey,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
)
from ..urls import ParsedURL
from ._filelist import walk

__all__ = ["FileStorage"]

_RESERVED_NAME_PREFIX = ".portable"
_TEMP_FILE_PREFIX = ".portable-tmp-"
_SIDECAR_PREFIX = ".portable-meta."
_MAX_SEGMENT_BYTES = 255 - len(_SIDECAR_PREFIX)
_COPY_BUFFER_BYTES = 1 << 20
#: ``.portable-tmp-`` + 8 random hex digits + ``-`` (the whole name follows) or ``~`` (a cut name)
_TEMP_RANDOM_CHARS = 8
_TEMP_HEAD = len(_TEMP_FILE_PREFIX) + _TEMP_RANDOM_CHARS
_TEMP_NAME_BUDGET = 255 - _TEMP_HEAD - 1
_SIDECAR_FIELDS = ("content_type", "cache_control", "content_encoding", "content_disposition")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO must not hang us
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: errors of ``open(..., O_NOFOLLOW)`` on a symbolic link: ELOOP, or ENOTDIR with O_DIRECTORY
_LINK_ERRNOS = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)


def _etag_of(st: os.stat_result) -> str:
    return f'"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"'


def _sidecar_record(dir_fd: int, name: str, etag: str) -> dict[str, Any] | None:
    """The sidecar record of version ``etag`` of the object file ``name``, or None.

    A sidecar holds its own version's record and, under ``previous``, the
    record of the version it replaces: a write killed after installing its
    sidecar and before installing its body leaves the new sidecar beside the
    old body, which still finds its metadata there.
    """
    try:
        fd = os.open(_SIDECAR_PREFIX + name, _READ_FLAGS, dir_fd=dir_fd)
        with os.fdopen(fd, "rb") as fh:
            found = json.loads(fh.read())
    except (OSError, ValueError):
        return None  # no sidecar, or not one of ours
    if not isinstance(found, dict):
        return None
    if found.get("etag") != etag:
        found = found.get("previous")
        if not isinstance(found, dict) or found.get("etag") != etag:
            return None
    found.pop("previous", None)
    return found


def _modified_of(st: os.stat_result) -> dt.datetime:
    return dt.datetime.fromtimestamp(st.st_mtime_ns / 1e9, dt.UTC)


def _temp_name(name: str) -> str:
    """A fresh temporary file name for the object file ``name``: the name is kept (cut to fit) for
    :meth:`FileStorage.abort_incomplete`, which reports the key it belonged to."""
    raw = name.encode("utf-8", "surrogateescape")
    mark = "-"
    if len(raw) > _TEMP_NAME_BUDGET:
        raw = raw[:_TEMP_NAME_BUDGET]
        while raw and (raw[-1] & 0xC0) == 0x80:  # never cut a UTF-8 sequence in two
            raw = raw[:-1]
        raw = raw[:-1] if raw and raw[-1] >= 0xC0 else raw
        mark = "~"
    return f"{_TEMP_FILE_PREFIX}{secrets.token_hex(_TEMP_RANDOM_CHARS // 2)}{mark}{raw.decode('utf-8', 'surrogateescape')}"


def _resume_name(name: str) -> str:
    """The temporary file of a resumable write of the object file ``name``: the same for every writer
    of it, and never one of :func:`_temp_name`'s (``R`` is not a hex digit)."""
    tag = "R" + hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[: _TEMP_RANDOM_CHARS - 1]
    return _TEMP_FILE_PREFIX + tag + _temp_name(name)[_TEMP_HEAD:]


def _name_in_temp(temp: str) -> tuple[str, bool]:
    """The object name a temporary file was for, and whether it is whole (False: cut, or unknown)."""
    rest = temp[_TEMP_HEAD:]
    if rest.startswith("-"):
        return rest[1:], True
    if rest.startswith("~"):
        return rest[1:], False
    return "", False  # a sidecar's temporary file, or one of an older version of this driver


class FileStorage(StorageDriver):
    """Objects as files under a root folder."""

    scheme = "file"
    capabilities = StorageCapabilities(
        signed_urls=False, min_part_bytes=1, max_metadata_bytes=8192, resumable_writes=True
    )
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

    def as_(self, kind: type) -> object:
        return self.root if kind is Path else None

    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, IsADirectoryError | NotADirectoryError):
            return ErrorCode.NOT_FOUND
        return super().code_of(exc)

    # -- paths: one segment at a time, never through a link ---------------
    @staticmethod
    def _split(key: str) -> tuple[list[str], str]:
        """Check ``key``'s segments as file names; return its folders and its file name."""
        if _RESERVED_NAME_PREFIX in key and any(seg.startswith(_RESERVED_NAME_PREFIX) for seg in key.split("/")):
            raise InvalidKey(f"key {key!r}: names starting with {_RESERVED_NAME_PREFIX} are reserved by file://")
        if len(key) > 63 and any(len(seg.encode()) > _MAX_SEGMENT_BYTES for seg in key.split("/")):
            raise InvalidKey(
                f"key {key[:60]!r}...: file:// stores each '/'-separated segment as a file name, "
                f"which is limited here to {_MAX_SEGMENT_BYTES} bytes; split the key with '/'"
            )
        *folders, name = key.split("/")
        return folders, name

    def _link_refused(self, rel: str) -> PermissionDenied:
        return PermissionDenied(
            f"file:// does not follow symbolic links, and {rel!r} under {self.root} is one; "
            "replace it with a real folder or file, or open the bucket at the link's target",
            provider=self.scheme,
        )

    def _is_link(self, dir_fd: int, name: str) -> bool:
        try:
            return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except OSError:
            return False

    def _open_root(self, create: bool) -> int:
        try:
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if not create:
                raise
        os.makedirs(self.root, exist_ok=True)
        return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def _open_folder(self, folders: list[str], create: bool, key: str = "") -> int:
        """Open the folder ``root/folders...`` without following a link; return its descriptor.

        ``create`` makes missing folders (for writes; a file in the way is
        then the file/folder clash). Raises FileNotFoundError or
        NotADirectoryError where a folder is missing (reads), and
        PermissionDenied where a segment is a symbolic link.
        """
        fd = self._open_root(create)
        try:
            for depth, seg in enumerate(folders):
                try:
                    below = os.open(seg, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(seg, 0o777, dir_fd=fd)
                    below = self._open_segment(fd, seg, folders, depth, create, key)
                except OSError as exc:
                    if exc.errno not in _LINK_ERRNOS:
                        raise
                    below = self._open_segment(fd, seg, folders, depth, create, key)
                os.close(fd)
                fd = below
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_segment(self, fd: int, seg: str, folders: list[str], depth: int, create: bool, key: str) -> int:
        """Open one folder segment after a first try failed: say why it cannot be opened."""
        try:
            return os.open(seg, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno not in _LINK_ERRNOS:
                raise
            if self._is_link(fd, seg):
                raise self._link_refused("/".join(folders[: depth + 1])) from None
            if create:
                raise self._file_folder_clash(key) from None
            raise NotADirectoryError(errno.ENOTDIR, "not a folder", "/".join(folders[: depth + 1])) from None

    @contextlib.contextmanager
    def _folder(self, folders: list[str], create: bool = False, key: str = "") -> Iterator[int]:
        fd = self._open_folder(folders, create, key)
        try:
            yield fd
        finally:
            os.close(fd)

    def _open_object(self, key: str) -> BinaryIO:
        """Open the object file for reading: a regular file, never a link; NotFound otherwise."""
        folders, name = self._split(key)
        with self._folder(folders) as dir_fd:
            try:
                fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in _LINK_ERRNOS and self._is_link(dir_fd, name):
                    raise self._link_refused(key) from None
                raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise NotFound(f"no object {key!r} (it is a folder or not a regular file)", provider=self.scheme)
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    @staticmethod
    @contextlib.contextmanager
    def _locked(dir_fd: int) -> Iterator[None]:
        """Hold an exclusive lock on the open folder ``dir_fd``."""
        fcntl.flock(dir_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(dir_fd, fcntl.LOCK_UN)

    # -- reads --------------------------------------------------------------
    def get(self, key: str) -> bytes:
        with self._open_object(key) as fh:
            return fh.read()

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        with self._open_object(key) as fh:
            fh.seek(start)
            return fh.read() if end is None else fh.read(end - start)

    def head(self, key: str) -> ObjectInfo:
        folders, name = self._split(key)
        with self._folder(folders) as dir_fd:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise self._link_refused(key)
            if not stat.S_ISREG(st.st_mode):
                raise NotFound(f"no object {key!r} (it is a folder or not a regular file)", provider=self.scheme)
            etag = _etag_of(st)
            headers, metadata = self._read_sidecar(dir_fd, name, etag)
        return ObjectInfo(
            key, st.st_size, etag, _modified_of(st), headers.get("content_type"), metadata,
            cache_control=headers.get("cache_control"), content_encoding=headers.get("content_encoding"),
            content_disposition=headers.get("content_disposition"),
        )

    @staticmethod
    def _read_sidecar(dir_fd: int, name: str, etag: str) -> tuple[dict[str, str], dict[str, str]]:
        """The headers and metadata in the sidecar of the object file ``name``, if it belongs to
        this version of it (``etag``); else none."""
        found = _sidecar_record(dir_fd, name, etag)
        if found is None:
            return {}, {}  # no sidecar, or one of another version: no metadata
        headers = {f: v for f in _SIDECAR_FIELDS if isinstance(v := found.get(f), str)}
        meta = found.get("metadata")
        metadata = {k: v for k, v in meta.items() if isinstance(v, str)} if isinstance(meta, dict) else {}
        return headers, metadata

    def open_read(self, key: str) -> IO[bytes]:
        return self._open_object(key)

    # -- writes ---------------------------------------------------------------
    def _temp_file(self, key: str) -> tuple[int, str, int]:
        """Create a temporary file in ``key``'s folder (same file system, so rename is atomic).

        Returns the folder's descriptor, the temporary file's name in it and its descriptor.
        """
        folders, name = self._split(key)
        for _ in range(8):
            dir_fd = self._open_folder(folders, True, key)
            try:
                temp = _temp_name(name)
                return dir_fd, temp, os.open(temp, _CREATE_FLAGS, 0o600, dir_fd=dir_fd)
            except (FileNotFoundError, FileExistsError):
                os.close(dir_fd)  # a delete removed the empty folder meanwhile (or a name clash): again
            except BaseException:
                os.close(dir_fd)
                raise
        raise FileExistsError(errno.EEXIST, "could not create a temporary file", key)

    def put(self, key: str, data: bytes, options: WriteOptions) -> str:
        return self._write_whole(key, options, lambda fh: fh.write(data))

    def _write_whole(self, key: str, options: WriteOptions, fill: Callable[[BinaryIO], object]) -> str:
        """Write a temporary file with ``fill`` and install it under ``key``; on failure leave nothing."""
        dir_fd, temp, fd = self._temp_file(key)
        try:
            with os.fdopen(fd, "wb") as fh:
                fill(fh)
                st = self._finish_temp_file(fh)
            return self._install_temp_file(key, dir_fd, temp, st, options)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp, dir_fd=dir_fd)
            self._remove_empty_folders(key.split("/")[:-1])
            raise
        finally:
            os.close(dir_fd)

    def _finish_temp_file(self, fh: BinaryIO) -> os.stat_result:
        """Flush (and fsync) a written temporary file and stamp it now; return its stat (the etag's source)."""
        fh.flush()
        if self._fsync:
            os.fsync(fh.fileno())
        now = time.time_ns()
        os.utime(fh.fileno(), ns=(now, now))
        return os.fstat(fh.fileno())

    def _install_temp_file(self, key: str, dir_fd: int, temp: str, st: os.stat_result, options: WriteOptions) -> str:
        """Move a finished temporary file into place, honouring the conditions."""
        name = key.rpartition("/")[2]
        etag = _etag_of(st)
        record: dict[str, object] | None = None
        fields = {f: getattr(options, f) for f in _SIDECAR_FIELDS if getattr(options, f) is not None}
        if fields or options.metadata:
            record = {"etag": etag, **fields, "metadata": dict(options.metadata)}
        with self._locked(dir_fd):
            try:
                current = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                current = None
            if current is not None and stat.S_ISLNK(current.st_mode):
                raise self._link_refused(key)
            if current is not None and stat.S_ISDIR(current.st_mode):
                raise self._file_folder_clash(key)
            current_etag = _etag_of(current) if current is not None and stat.S_ISREG(current.st_mode) else None
            if options.if_none_match and current_etag is not None:
                raise AlreadyExists(f"{key!r} exists", provider=self.scheme)
            if options.if_match is not None and current_etag != options.if_match:
                raise PreconditionFailed(f"{key!r} does not have etag {options.if_match}", provider=self.scheme)
            sidecar_name = _SIDECAR_PREFIX + name
            if record is not None:
                # The sidecar goes in before the body, so a reader never sees the
                # new body without its metadata; it keeps the current version's
                # record, so a write killed between the two renames leaves the old
                # object with its own metadata (not a torn pair).
                old = _sidecar_record(dir_fd, name, current_etag) if current_etag is not None else None
                if old is not None:
                    record["previous"] = old
                sidecar_temp = temp[:_TEMP_HEAD] + ".meta"
                fd = os.open(sidecar_temp, _CREATE_FLAGS | os.O_TRUNC, 0o600, dir_fd=dir_fd)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(json.dumps(record).encode())
                os.replace(sidecar_temp, sidecar_name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            try:
                os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except FileNotFoundError:
                raise Cancelled(
                    f"the write of {key!r} was cancelled: its temporary file {temp} was removed before "
                    "commit (by abort_incomplete, or by hand); nothing was written",
                    provider=self.scheme,
                ) from None
            except IsADirectoryError:
                raise self._file_folder_clash(key) from None
            except OSError as exc:
                if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise self._file_folder_clash(key) from None
                raise
            if record is None:
                # After the body, so a kill in between leaves the old object its metadata;
                # a stale sidecar names another etag and is ignored until then.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(sidecar_name, dir_fd=dir_fd)
            if self._fsync:
                os.fsync(dir_fd)
        return etag

    def _file_folder_clash(self, key: str) -> InvalidKey:
        return InvalidKey(
            f"file:// cannot store {key!r}: a file system path cannot be both an object and a "
            "folder of objects (another key is a prefix of it, or it is a prefix of another key)",
            provider=self.scheme,
        )

    def delete(self, key: str) -> None:
        folders, name = self._split(key)
        try:
            dir_fd = self._open_folder(folders, False)
        except (FileNotFoundError, NotADirectoryError):
            return
        try:
            with self._locked(dir_fd):
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except (FileNotFoundError, NotADirectoryError):
                    return
                if stat.S_ISLNK(st.st_mode):
                    raise self._link_refused(key)
                if stat.S_ISDIR(st.st_mode):
                    return
                try:
                    os.unlink(name, dir_fd=dir_fd)
                except (FileNotFoundError, NotADirectoryError):
                    return
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(_SIDECAR_PREFIX + name, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        self._remove_empty_folders(key.split("/")[:-1])

    def _remove_empty_folders(self, folders: list[str]) -> None:
        """Remove the folders ``root/folders...`` that a delete left empty, deepest first, up to the root."""
        folders = list(folders)
        while folders:
            last = folders.pop()
            try:
                with self._folder(folders) as parent:
                    os.rmdir(last, dir_fd=parent)
            except OSError:
                return

    def copy(self, src: str, dst: str) -> str:
        info = self.head(src)
        options = WriteOptions(
            info.content_type, info.metadata, cache_control=info.cache_control,
            content_encoding=info.content_encoding, content_disposition=info.content_disposition,
        )
        with self._open_object(src) as inp:
            return self._write_whole(dst, options, lambda out: shutil.copyfileobj(inp, out, _COPY_BUFFER_BYTES))

    def open_write(self, key: str, options: WriteOptions, part_size: int) -> WriteStream:
        dir_fd, temp, fd = self._temp_file(key)
        return _FileWrite(self, key, options, dir_fd, temp, fd)

    def open_resumable(self, key: str, options: WriteOptions, part_size: int) -> ResumableWriteStream:
        folders, name = self._split(key)
        dir_fd = self._open_folder(folders, True, key)
        temp = _resume_name(name)
        try:
            fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        except BaseException:
            os.close(dir_fd)
            raise
        return _ResumableFileWrite(self, key, options, dir_fd, temp, fd, part_size)

    # -- listing ------------------------------------------------------------
    def list_page(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        """One page in key order; each folder read is kept (see ``portable.embedded._filelist``), so a
        page costs time in proportion to its keys, not to the folder's, while the folder is unchanged."""
        after = max(filter(None, (start_after, token)), default="")
        base, _, _ = prefix.rpartition("/")
        try:
            start_fd = self._open_folder(base.split("/") if base else [], False)
        except (FileNotFoundError, NotADirectoryError):
            return ListPage([], [], None)
        where: dict[str, tuple[int, str]] = {}

        def info(key: str) -> ObjectInfo | None:
            dir_fd, name = where.pop(key)
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                return None  # removed since its folder was read
            if not stat.S_ISREG(st.st_mode):
                return None  # replaced by a folder or a link meanwhile
            return ObjectInfo(key, st.st_size, _etag_of(st), _modified_of(st))

        def keys() -> Generator[str, None, None]:
            found = walk(start_fd, base + "/" if base else "", prefix, after, delimiter == "/")
            try:
                for key, dir_fd, name in found:
                    where.clear()  # only the key being looked at is kept (its folder is still open)
                    where[key] = (dir_fd, name)
                    yield key
            finally:
                found.close()

        listed = keys()
        try:
            return page_of_sorted_keys(listed, info, prefix, delimiter, start_after, page_size, token)
        finally:
            listed.close()
            os.close(start_fd)

    # -- leftovers ------------------------------------------------------------
    def abort_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        """Remove temporary files of writes that never committed, untouched for longer than ``older_than``.

        Only ``.portable-tmp-*`` files are removed, never an object or a sidecar.
        Each entry returned is ``key#temp-name``; where the key is not known
        whole (a cut name, a sidecar's temporary file, or one an older version
        left), it is the folder (``reports/``, or ``""`` at the root). A
        temporary file whose key may or may not match ``prefix`` (a cut name
        shorter than the prefix) is left alone.
        """
        return self._leftovers(prefix, older_than, remove=True)

    def list_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        """What :meth:`abort_incomplete` would remove now, removing nothing."""
        return self._leftovers(prefix, older_than, remove=False)

    def _leftovers(self, prefix: str, older_than: dt.timedelta, remove: bool) -> list[str]:
        cutoff = time.time_ns() - int(older_than.total_seconds() * 1e9)
        found: list[str] = []
        emptied: list[str] = []
        try:
            root_fd = self._open_root(False)
        except FileNotFoundError:
            return found
        try:
            self._scan_leftovers(root_fd, "", prefix, cutoff, remove, found, emptied)
        finally:
            os.close(root_fd)
        for folder in emptied:
            self._remove_empty_folders(folder.rstrip("/").split("/"))
        return sorted(found)

    def _scan_leftovers(
        self, dir_fd: int, rel: str, prefix: str, cutoff: int, remove: bool, found: list[str], emptied: list[str]
    ) -> None:
        try:
            entries = list(os.scandir(dir_fd))
        except OSError:
            return
        removed_here = False
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                sub = rel + entry.name + "/"
                if entry.name.startswith(_RESERVED_NAME_PREFIX) or not (sub.startswith(prefix) or prefix.startswith(sub)):
                    continue
                try:
                    sub_fd = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
                except OSError:
                    continue
                try:
                    self._scan_leftovers(sub_fd, sub, prefix, cutoff, remove, found, emptied)
                finally:
                    os.close(sub_fd)
                continue
            if not entry.name.startswith(_TEMP_FILE_PREFIX):
                continue
            name, whole = _name_in_temp(entry.name)
            known = rel + name
            if not known.startswith(prefix):
                continue  # its key does not match the prefix, or (a cut name) may not: leave it
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_mtime_ns > cutoff:
                continue
            if remove:
                try:
                    os.unlink(entry.name, dir_fd=dir_fd)
                except FileNotFoundError:
                    continue  # its writer committed or aborted meanwhile
                removed_here = True
            found.append(f"{known if whole else rel}#{entry.name}")
        if removed_here and rel:
            emptied.append(rel)


class _FileWrite(WriteStream):
    """A streamed write into a temporary file beside the object, renamed into place at commit.

    A commit that succeeded returns the same etag if called again (it never
    writes twice); after an abort or a failed commit the stream is spent.
    """

    def __init__(self, driver: FileStorage, key: str, options: WriteOptions, dir_fd: int, temp: str, fd: int) -> None:
        self._driver = driver
        self._key = key
        self._options = options
        self._dir_fd = dir_fd
        self._temp = temp
        self._fh = os.fdopen(fd, "wb")
        self._etag: str | None = None
        self._spent = False

    def write(self, data: bytes) -> None:
        if self._spent:
            raise _StreamSpent(f"write to {self._key!r}: this stream was committed or aborted")
        self._fh.write(data)

    def commit(self) -> str:
        if self._etag is not None:
            return self._etag
        if self._spent:
            raise _StreamSpent(f"commit of {self._key!r}: this stream was aborted (or its commit failed)")
        try:
            st = self._driver._finish_temp_file(self._fh)
            self._fh.close()
            self._etag = self._driver._install_temp_file(self._key, self._dir_fd, self._temp, st, self._options)
        except BaseException:
            self.abort()
            raise
        self._spent = True
        os.close(self._dir_fd)
        return self._etag

    def abort(self) -> None:
        if self._spent:
            return
        self._spent = True
        self._fh.close()
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._temp, dir_fd=self._dir_fd)
        finally:
            os.close(self._dir_fd)
        self._driver._remove_empty_folders(self._key.split("/")[:-1])

    def __del__(self) -> None:
        if not self._spent:
            with contextlib.suppress(Exception):
                self.abort()


class _ResumableFileWrite(_FileWrite, ResumableWriteStream):
    """A streamed write into the key's own temporary file (:func:`_resume_name`), which outlives the
    writer: a later one reopens it, keeps the head the Bucket checked, and appends after it."""

    def __init__(
        self, driver: FileStorage, key: str, options: WriteOptions, dir_fd: int, temp: str, fd: int, part_size: int
    ) -> None:
        super().__init__(driver, key, options, dir_fd, temp, fd)
        self._fh.seek(0, os.SEEK_END)
        size = self._fh.tell()
        self.persisted = []
        for offset in range(0, size, part_size):
            data = os.pread(fd, min(part_size, size - offset), offset)
            self.persisted.append(PersistedPart(offset, len(data), hashlib.md5(data, usedforsecurity=False).digest()))

    def keep(self, count: int) -> None:
        del self.persisted[count:]
        end = sum(part.size for part in self.persisted)
        self._fh.truncate(end)
        self._fh.seek(end)

    def write(self, data: bytes) -> None:
        super().write(data)
        self._fh.flush()  # in the file before write() returns: a killed process loses none of it

    def suspend(self) -> None:
        if self._spent:
            return
        self._spent = True
        self._fh.close()
        os.close(self._dir_fd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.suspend()


class _StreamSpent(RuntimeError):
    """A write or commit on a stream that was already committed or aborted (a caller's bug)."""
