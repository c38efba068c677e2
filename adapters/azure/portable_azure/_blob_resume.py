"""Resumable streamed writes on Azure Blob (``az://``, fsspec engine): staged blocks a later process finds.

Each part is staged as a block whose id carries its index and MD5
(``r<index:05d><md5 hex>``, 38 characters like the ids of ordinary streamed
writes, since Azure wants every block id of a blob the same length). A later
writer of the key reads Get Block List (``uncommitted``), keeps the blocks
``r00000``, ``r00001``, ... up to the first gap (the latest staged under an id
wins), and reports their sizes and MD5s; the commit is Put Block List with the
write's content settings and metadata. Azure drops uncommitted blocks a week
after the last was staged.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import re
from typing import TYPE_CHECKING, Any

from portable.driver.storage import PersistedPart, ResumableWriteStream, WriteOptions
from portable.errors import TooLarge

if TYPE_CHECKING:
    from .blob import BlobStorage

__all__ = ["BlobResumableWrite"]

#: the text of a resumable write's block id (before base64): ``r``, the index, the part's MD5
_BLOCK_ID = re.compile(r"r(\d{5})([0-9a-f]{32})")
_MAX_BLOCKS = 50_000


def block_id(index: int, md5: bytes) -> str:
    """The (base64) id of the resumable write's block ``index`` holding bytes of MD5 ``md5``."""
    return base64.b64encode(f"r{index:05d}{md5.hex()}".encode()).decode()


class BlobResumableWrite(ResumableWriteStream):
    """``open(key, "wb", resume=True)`` on Azure Blob: every part is staged as it comes, none held back.

    ``abort`` deletes a blob that holds only uncommitted blocks (which discards
    them); on a blob that has committed content the staged blocks stay until
    Azure drops them, and a later resume finds them: give it the source
    (``Bucket.upload`` does) so that their MD5s are checked.
    """

    def __init__(self, driver: BlobStorage, key: str, options: WriteOptions) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        self._driver = driver
        self._key = key
        self._name = driver._name(key)
        self._options = options
        self._ids: list[str] = []
        self.persisted = []
        try:
            _committed, staged = driver._blob(self._name).get_block_list("uncommitted", **driver._kw())
        except ResourceNotFoundError:
            staged = []
        found: dict[int, tuple[str, int, bytes]] = {}
        block: Any
        for block in staged:
            try:
                text = base64.b64decode(block.id).decode()
            except ValueError:
                continue
            match = _BLOCK_ID.fullmatch(text)
            if match:
                found[int(match.group(1))] = (block.id, int(block.size), bytes.fromhex(match.group(2)))
        offset = 0
        while len(self._ids) in found:
            ident, size, md5 = found[len(self._ids)]
            self.persisted.append(PersistedPart(offset, size, md5))
            self._ids.append(ident)
            offset += size

    def keep(self, count: int) -> None:
        del self.persisted[count:]
        del self._ids[count:]  # the later blocks are left out of the commit: Azure discards them then

    def write(self, data: bytes) -> None:
        index = len(self._ids)
        if index >= _MAX_BLOCKS:
            raise TooLarge(
                f"a streamed write to {self._key} exceeds Azure's {_MAX_BLOCKS} blocks; use a larger part_size",
                provider=self._driver.scheme,
            )
        md5 = hashlib.md5(data, usedforsecurity=False).digest()
        ident = block_id(index, md5)
        self._driver._blob(self._name).stage_block(ident, data, length=len(data), **self._driver._kw())
        offset = sum(part.size for part in self.persisted)
        self.persisted.append(PersistedPart(offset, len(data), md5))
        self._ids.append(ident)

    def commit(self) -> str | None:
        from azure.storage.blob import BlobBlock

        if not self._ids:
            return self._driver.put(self._key, b"", self._options)
        kw = self._driver._write_kwargs(self._options)
        blocks = [BlobBlock(ident) for ident in self._ids]
        result = self._driver._blob(self._name).commit_block_list(blocks, **kw, **self._driver._kw())
        etag = result.get("etag")
        return etag if isinstance(etag, str) else None

    def abort(self) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        self._ids.clear()
        self.persisted.clear()
        try:
            self._driver._blob(self._name).get_blob_properties(**self._driver._kw())
        except ResourceNotFoundError:  # only uncommitted blocks: clearing the blob discards them
            self._driver._discard_uncommitted(self._name, dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1))
