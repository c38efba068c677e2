"""Resumable streamed writes on GCS (``gs://``, fsspec engine): a resumable session that outlives its process.

A GCS resumable upload session is a URI that only its starter knows (GCS has
no call that lists sessions), so it is persisted locally: one small JSON file
per (endpoint, bucket, object) under :func:`state_dir`, holding the session
URI, when it began, and each chunk GCS confirmed with its MD5. A later
``open(key, "wb", resume=True)`` reads the file and reports the recorded
chunks (with their MD5s, so a source check is exact). The session is not
asked what it holds (``Content-Range: bytes */*``): fake-gcs-server answers
that query by finishing the upload, which would make a partial object
visible; a chunk that overlaps bytes GCS holds already is answered with what
it holds, and the overlap is dropped (a kill between GCS confirming a chunk
and the record being written leaves such an overlap; fake-gcs-server stores
an overlapping chunk twice, so there that instant gives a wrong object). A session that is gone fails the first
write with NotFound, and its record is removed, so the next attempt starts afresh. A local file, not an object in
the bucket: it must not be listed, must not cost a request per chunk, and a
session URI is a bearer credential for the upload, which belongs with the
writer, not with every reader of the bucket.

``abort_incomplete`` cancels (DELETE) the recorded sessions older than the
age and removes their files; sessions started on other machines are not
known here (GCS expires each a week after it began, and bills nothing for it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from portable.driver.storage import (
    PersistedPart,
    ResumableWriteStream,
    StorageCapabilities,
    WriteOptions,
)
from portable.errors import NotFound

if TYPE_CHECKING:
    from .gcs import GCSStorage, _ResumableUpload

__all__ = ["GCSResumeMixin", "resumable", "state_dir"]


def resumable(capabilities: StorageCapabilities) -> StorageCapabilities:
    """``capabilities`` with ``resumable_writes`` on."""
    return dataclasses.replace(capabilities, resumable_writes=True)


def state_dir() -> Path:
    """Where session records live: ``PORTABLE_RESUME_DIR``, else ``$XDG_STATE_HOME/portable/uploads``
    (``~/.local/state/portable/uploads``)."""
    given = os.environ.get("PORTABLE_RESUME_DIR")
    if given:
        return Path(given)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "portable" / "uploads"


class _Record:
    """The local record of one session (``<sha256 of endpoint, bucket, object>.json``)."""

    def __init__(self, driver: GCSStorage, name: str) -> None:
        ident = hashlib.sha256(f"{driver.endpoint}\n{driver.bucket}\n{name}".encode()).hexdigest()
        self.path = state_dir() / f"gs-{ident}.json"
        self.fields: dict[str, Any] = {}

    def load(self) -> bool:
        try:
            self.fields = json.loads(self.path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            self.fields = {}
            return False
        return bool(self.fields.get("session"))

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temp = self.path.with_suffix(f".tmp{os.getpid()}")
        temp.write_text(json.dumps(self.fields), encoding="utf-8")
        os.replace(temp, self.path)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class GCSResumableWrite(ResumableWriteStream):
    """``open(key, "wb", resume=True)`` on GCS: a resumable session recorded in a local file.

    Chunks go up as parts fill; as for every GCS session, the last bytes are
    held back for the request that carries the total size, so a killed
    writer loses at most the part it held.
    """

    def __init__(self, driver: GCSStorage, key: str, options: WriteOptions, part_size: int) -> None:
        from .gcs import _ResumableUpload

        self._driver = driver
        self._key = key
        self._options = options
        self._part_size = part_size
        self._upload: _ResumableUpload = _ResumableUpload(driver, key, options, part_size)
        self._record = _Record(driver, self._upload.name)
        self._failed: bytes | None = None
        self.persisted = []
        self._reattached = self._record.load()
        if self._reattached:
            self._reattach()

    def _reattach(self) -> None:
        # The record says what the session confirmed; the session itself is not asked
        # (``Content-Range: bytes */*``): fake-gcs-server takes that query for the final request
        # and makes the partial object visible. A chunk that overlaps bytes the session holds
        # already is answered with what it holds, and the overlap is dropped (``_send``).
        end = 0
        for offset, size, md5 in self._record.fields.get("chunks", []):
            if offset != end:
                break
            self.persisted.append(PersistedPart(offset, size, None if md5 is None else bytes.fromhex(md5)))
            end += size
        self._upload.session = str(self._record.fields["session"])
        self._upload.offset = end

    def keep(self, count: int) -> None:
        if count >= len(self.persisted):
            return
        # A session cannot be rewound: cancel it, and start a fresh one.
        self._driver._run(self._upload.cancel)
        self._record.remove()
        from .gcs import _ResumableUpload

        self._upload = _ResumableUpload(self._driver, self._key, self._options, self._part_size)
        self.persisted = []

    def write(self, data: bytes) -> None:
        if data is not self._failed:  # a retried write() brings the very same bytes object
            self._upload.append(data)
        self._failed = data
        try:
            self._driver._run(self._flush)
        except FileNotFoundError as exc:
            if not self._reattached:
                raise
            self._record.remove()
            raise NotFound(
                f"the resumable session of {self._key} recorded in {self._record.path} is gone (cancelled, "
                "finished, or expired a week after it began); the record is removed: upload it again from the start",
                provider="gs",
            ) from exc
        self._failed = None
        self._reattached = False

    async def _flush(self) -> None:
        upload = self._upload
        if upload.uncertain and upload.session is not None:
            await upload._recover()
        while len(upload.buffer) > upload.chunk:
            before = upload.offset
            chunk_md5 = hashlib.md5(upload.buffer[: upload.chunk], usedforsecurity=False)
            fresh = upload.session is None
            await upload._send(upload.chunk, final=False)
            if fresh:
                self._record.fields = {
                    "session": upload.session,
                    "started": dt.datetime.now(dt.UTC).isoformat(),
                    "key": self._key,
                    "chunks": [],
                }
            kept = upload.offset - before
            whole = kept == upload.chunk  # else the session kept part of it: its size is all we know
            self._record.fields["chunks"].append([before, kept, chunk_md5.hexdigest() if whole else None])
            self._record.save()

    def commit(self) -> str:
        upload = self._upload
        if upload.session is None:
            etag = self._driver._conditional(
                self._options, self._key, self._driver._simple_upload, upload.name, bytes(upload.buffer), self._options, {}
            )
        else:
            etag = self._driver._conditional(self._options, self._key, upload.finish)
        self._record.remove()
        return etag

    def abort(self) -> None:
        self._driver._run(self._upload.cancel)
        self._record.remove()
        self.persisted = []


class GCSResumeMixin:
    """The resumable half of :class:`~portable_gcp.gcs.GCSStorage` (see this module's docstring)."""

    def open_resumable(self, key: str, options: WriteOptions, part_size: int) -> ResumableWriteStream:
        return GCSResumableWrite(self, key, options, part_size)  # type: ignore[arg-type]

    def _recorded_sessions(self, prefix: str, older_than: dt.timedelta) -> list[tuple[Path, str, str]]:
        """``(record file, key, session)`` of this bucket's recorded sessions under ``prefix``, old enough."""
        driver: GCSStorage = self  # type: ignore[assignment]
        cutoff = dt.datetime.now(dt.UTC) - older_than
        found: list[tuple[Path, str, str]] = []
        for path in sorted(state_dir().glob("gs-*.json")):
            record = _Record(driver, "")
            record.path = path
            if not record.load():
                continue
            key = str(record.fields.get("key", ""))
            if _Record(driver, driver._name(key)).path != path or not key.startswith(prefix):
                continue  # another bucket's (or endpoint's) session
            started = dt.datetime.fromisoformat(str(record.fields.get("started")))
            if started <= cutoff:
                found.append((path, key, str(record.fields["session"])))
        return found

    def list_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        """The keys of the sessions recorded here that :meth:`abort_incomplete` would cancel now."""
        return sorted(key for _, key, _ in self._recorded_sessions(prefix, older_than))

    def _abort_recorded(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        driver: GCSStorage = self  # type: ignore[assignment]
        removed: list[str] = []
        for path, key, session in self._recorded_sessions(prefix, older_than):

            async def cancel(session: str = session) -> None:
                with contextlib.suppress(FileNotFoundError):
                    await driver._request("DELETE", session)

            with contextlib.suppress(Exception):  # 499 (cancelled) and 404/410 (gone) alike
                driver._run(cancel)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            removed.append(key)
        return sorted(removed)
