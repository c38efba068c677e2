"""Listing a ``file://`` folder tree in key order, page by page, without re-sorting it per page.

A directory is read in the order the file system keeps (a hash order on
ext4), so the first page of a sorted listing must read a whole folder. What
this module saves is the rest: each folder read is kept as a *snapshot*, its
names in key order, and a later page (the token is the last key returned)
finds its place in the snapshot by binary search and reads on from there, so
a page costs time in proportion to the keys it returns.

Snapshots:
    A folder of up to :data:`RUN_NAMES` names is kept in memory. A larger one
    is sorted in runs of that many names, each spilled to an unnamed temporary
    file (gone when the snapshot is dropped or the process exits), and the runs
    merged into one file of names plus a file of their offsets; pages read it
    with ``pread``. Memory stays bounded by the run size whatever the folder
    holds; disk holds about the names' bytes plus 8 bytes per name.

Validity:
    A snapshot is reused while the folder's inode, modification and change
    times are those seen when it was read. Folder times tick coarsely (one
    kernel tick), so a snapshot of a folder changed less than
    :data:`RACY_NS` before the read began is never reused: a change in the
    same tick would not move the times. A folder written to while it is
    listed is therefore read again for each page: correct, at the cost of one
    folder read per page.

Sort order:
    Names sort as Python strings (code points, which is UTF-8 byte order);
    a folder sorts as ``name/``, so the keys beneath it (which all start so)
    fall in their place among its siblings: ``a-b`` < ``a/x`` < ``a0``.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import os
import struct
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Generator, Iterable, Iterator
from typing import IO

__all__ = ["FolderSnapshot", "RACY_NS", "RUN_NAMES", "snapshot_of", "walk"]

#: names sorted in memory at once; a folder with more is spilled to disk in runs of this many
RUN_NAMES = 50_000
#: runs merged at once (each holds a read buffer); more are first merged into one run
FAN_IN = 32
#: a folder changed less than this before it was read is read again next time (its times tick coarsely)
RACY_NS = 100_000_000
#: what the snapshot cache keeps: names held in memory (all snapshots), and spilled snapshots
_CACHE_MEMORY_NAMES = 200_000
_CACHE_SPILLED = 8
_READ_BLOCK = 1024  # names read from a spilled snapshot per pread
_OFFSET = struct.Struct("<Q")
_RESERVED_NAME_PREFIX = ".portable"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _encode(name: str) -> bytes:
    return name.encode("utf-8", "surrogateescape")


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


class FolderSnapshot:
    """The entries of one folder in key order: file names, and folder names with a ``/`` appended."""

    def __len__(self) -> int:
        raise NotImplementedError

    def names_from(self, lower: str, inclusive: bool) -> Iterator[str]:
        """Yield the names from the first one ``>= lower`` (``inclusive``) or ``> lower``, in order."""
        raise NotImplementedError


class _MemorySnapshot(FolderSnapshot):
    def __init__(self, names: list[str]) -> None:
        self._names = names

    def __len__(self) -> int:
        return len(self._names)

    def names_from(self, lower: str, inclusive: bool) -> Iterator[str]:
        names = self._names
        at = (bisect.bisect_left if inclusive else bisect.bisect_right)(names, lower)
        while at < len(names):
            yield names[at]
            at += 1


class _SpilledSnapshot(FolderSnapshot):
    """Names in one unnamed file, their start offsets (``count + 1`` of them) in another."""

    def __init__(self, names: IO[bytes], offsets: IO[bytes], count: int) -> None:
        self._names = names  # kept open: the files have no name, and vanish when closed
        self._offsets = offsets
        self._count = count

    def __len__(self) -> int:
        return self._count

    def _bounds(self, first: int, count: int) -> list[int]:
        raw = os.pread(self._offsets.fileno(), _OFFSET.size * (count + 1), _OFFSET.size * first)
        return [v for (v,) in _OFFSET.iter_unpack(raw)]

    def _name(self, index: int) -> str:
        start, end = self._bounds(index, 1)
        return _decode(os.pread(self._names.fileno(), end - start, start))

    def names_from(self, lower: str, inclusive: bool) -> Iterator[str]:
        lo, hi = 0, self._count
        while lo < hi:  # bisect_left / bisect_right over the file, one record per probe
            mid = (lo + hi) // 2
            name = self._name(mid)
            if name < lower or (not inclusive and name == lower):
                lo = mid + 1
            else:
                hi = mid
        while lo < self._count:
            count = min(_READ_BLOCK, self._count - lo)
            bounds = self._bounds(lo, count)
            block = os.pread(self._names.fileno(), bounds[-1] - bounds[0], bounds[0])
            base = bounds[0]
            for i in range(count):
                yield _decode(block[bounds[i] - base : bounds[i + 1] - base])
            lo += count


def _read_names(dir_fd: int) -> Iterator[str]:
    """The folder's objects and subfolders, unordered: reserved names, links and other kinds left out."""
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            name = entry.name
            if name.startswith(_RESERVED_NAME_PREFIX):
                continue
            try:
                if entry.is_symlink():
                    continue  # a link is not an object, and is never descended into
                if entry.is_dir(follow_symlinks=False):
                    yield name + "/"
                elif entry.is_file(follow_symlinks=False):
                    yield name
            except OSError:
                continue  # removed since the directory was read


def _write_run(names: Iterable[str]) -> IO[bytes]:
    run = tempfile.TemporaryFile()  # noqa: SIM115 - returned open: the merge reads it
    names = iter(names)
    while block := list(itertools.islice(names, 1024)):
        run.write(b"".join(_encode(n) + b"\0" for n in block))
    run.seek(0)
    return run


def _read_run(run: IO[bytes]) -> Iterator[str]:
    run.seek(0)  # from the start: a merge that failed may have read some of it
    rest = b""
    while chunk := run.read(1 << 13):  # small: every run has a chunk in memory during the merge
        parts = (rest + chunk).split(b"\0")
        rest = parts.pop()
        for raw in parts:
            yield _decode(raw)


def read_sorted(dir_fd: int) -> FolderSnapshot:
    """Read the open folder ``dir_fd`` into a snapshot in key order, holding at most a run of names.

    Where no temporary file can be made (``TMPDIR`` full or read-only), the
    folder is sorted in memory instead: the listing works, at the memory cost
    of the folder's names.
    """
    names: list[str] = []
    runs: list[IO[bytes]] = []
    spill = True
    try:
        for name in _read_names(dir_fd):
            names.append(name)
            if spill and len(names) >= RUN_NAMES:
                names.sort()
                try:
                    runs.append(_write_run(names))
                    if len(runs) >= FAN_IN:  # each run has a read buffer in the merge: merge these into one
                        runs = [_write_run(heapq.merge(*(_read_run(run) for run in runs)))]
                except OSError:
                    spill = False
                    continue
                names = []
        names.sort()
        if not runs:
            return _MemorySnapshot(names)
        if spill:
            try:
                runs.append(_write_run(names))
                names = []
                return _merge(runs)
            except OSError:
                pass
        return _MemorySnapshot(list(heapq.merge(*(_read_run(run) for run in runs), names)))
    finally:
        for run in runs:
            run.close()


def _merge(runs: list[IO[bytes]]) -> _SpilledSnapshot:
    names_file = tempfile.TemporaryFile()  # noqa: SIM115 - kept open by the snapshot (it has no name)
    offsets_file = tempfile.TemporaryFile()  # noqa: SIM115 - likewise
    try:
        offset = 0
        count = 0
        out: list[bytes] = []
        marks: list[bytes] = []
        for name in heapq.merge(*(_read_run(run) for run in runs)):
            raw = _encode(name)
            marks.append(_OFFSET.pack(offset))
            out.append(raw)
            offset += len(raw)
            count += 1
            if len(out) >= 1024:
                names_file.write(b"".join(out))
                offsets_file.write(b"".join(marks))
                out.clear()
                marks.clear()
        marks.append(_OFFSET.pack(offset))
        names_file.write(b"".join(out))
        offsets_file.write(b"".join(marks))
        names_file.flush()
        offsets_file.flush()
    except BaseException:
        names_file.close()
        offsets_file.close()
        raise
    return _SpilledSnapshot(names_file, offsets_file, count)


class _SnapshotCache:
    """Snapshots by folder (device, inode), each with the folder times it was read at; least recent dropped first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[int, int], tuple[tuple[int, int], FolderSnapshot]] = OrderedDict()

    def get(self, dir_fd: int) -> FolderSnapshot:
        st = os.fstat(dir_fd)
        where, version = (st.st_dev, st.st_ino), (st.st_mtime_ns, st.st_ctime_ns)
        with self._lock:
            found = self._entries.get(where)
            if found is not None and found[0] == version:
                self._entries.move_to_end(where)
                return found[1]
        began = time.time_ns()
        snapshot = read_sorted(dir_fd)
        if max(version) + RACY_NS < began:  # else a change in the same tick could hide: do not keep it
            with self._lock:
                self._entries[where] = (version, snapshot)
                self._entries.move_to_end(where)
                self._trim()
        return snapshot

    def _trim(self) -> None:
        spilled = sum(isinstance(s, _SpilledSnapshot) for _, s in self._entries.values())
        in_memory = sum(len(s) for _, s in self._entries.values() if isinstance(s, _MemorySnapshot))
        for where in list(self._entries):
            if spilled <= _CACHE_SPILLED and in_memory <= _CACHE_MEMORY_NAMES:
                return
            _, snapshot = self._entries[where]
            if isinstance(snapshot, _SpilledSnapshot) and spilled > _CACHE_SPILLED:
                spilled -= 1
            elif isinstance(snapshot, _MemorySnapshot) and in_memory > _CACHE_MEMORY_NAMES:
                in_memory -= len(snapshot)
            else:
                continue
            del self._entries[where]  # a reader still iterating it keeps it (and its files) alive

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_CACHE = _SnapshotCache()


def snapshot_of(dir_fd: int) -> FolderSnapshot:
    """The open folder ``dir_fd``'s entries in key order, from the cache if the folder has not changed."""
    return _CACHE.get(dir_fd)


def _lower_bound(rel: str, prefix: str, after: str) -> tuple[str, bool] | None:
    """Where in the folder ``rel`` the names that can hold a key under ``prefix`` and past ``after`` begin.

    Returns ``(name, inclusive)``, or None when every key under ``rel`` is ``<= after``.
    """
    lower, inclusive = "", True
    if prefix.startswith(rel):
        p = prefix[len(rel) :]
        cut = p.find("/")
        lower = p if cut < 0 else p[: cut + 1]
    if after.startswith(rel):
        a = after[len(rel) :]
        cut = a.find("/")
        bound, closed = (a, False) if cut < 0 else (a[: cut + 1], True)  # a folder on after's path is entered
        if bound > lower or (bound == lower and not closed):
            lower, inclusive = bound, closed
    elif after > rel:
        return None
    return lower, inclusive


def walk(dir_fd: int, rel: str, prefix: str, after: str, shallow: bool) -> Generator[tuple[str, int, str], None, None]:
    """Yield ``(key, folder_fd, name)`` for the files under the open folder ``dir_fd`` (whose keys
    start with ``rel``), in key order, from the first key past ``after`` that starts with ``prefix``.

    ``folder_fd`` is the open folder holding the file, valid until the next
    key is asked for. ``shallow`` (a ``/`` delimiter) yields only the first key
    of each folder below the prefix's own, which stands for the folded prefix.
    Folders are opened with ``O_NOFOLLOW``: one swapped for a link since it was
    read is left out, as are links themselves.
    """
    bound = _lower_bound(rel, prefix, after)
    if bound is None:
        return
    p = prefix[len(rel) :] if prefix.startswith(rel) else ""
    only = p[: p.find("/") + 1] if "/" in p else None  # the prefix goes deeper: only that folder matters
    for name in snapshot_of(dir_fd).names_from(*bound):
        if only is not None:
            if name != only:
                return
        elif not name.startswith(p):
            return  # sorted: past the names that start with the prefix
        if not name.endswith("/"):
            yield rel + name, dir_fd, name
            continue
        try:
            sub_fd = os.open(name[:-1], _DIR_FLAGS, dir_fd=dir_fd)
        except OSError:
            continue  # removed, or swapped for a link, since the folder was read
        below = walk(sub_fd, rel + name, prefix, after, shallow)
        try:
            if shallow and len(rel + name) > len(prefix):
                first = next(below, None)  # one key stands for the folded prefix
                if first is not None:
                    yield first
            else:
                yield from below
        finally:
            below.close()
            os.close(sub_fd)
