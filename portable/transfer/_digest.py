"""Checksums computed while an object streams, and what each provider's stored etag can tell.

Of the built-in providers only S3 keeps a checksum that ``head`` and ``list``
expose: its etag is the MD5 of the bytes for a single-part upload, and
``md5(md5(part 1) + ... + md5(part n))-n`` for a multipart one (unless the
object is encrypted with SSE-KMS/SSE-C, where it is opaque). GCS reports its
generation as the etag, Azure and ``file://`` an opaque version tag, ``mem://``
a counter: for those a copy is checked by reading it back.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["StreamDigest", "md5_etag", "same_md5_etag"]

_MD5_ETAG = re.compile(r'^"?([0-9a-f]{32})(-[0-9]+)?"?$')


def md5_etag(etag: str | None) -> tuple[str, int] | None:
    """``(hex, parts)`` of an S3-form etag (``parts`` 0 for a single-part upload), else None."""
    if etag is None:
        return None
    found = _MD5_ETAG.match(etag.lower())
    if found is None:
        return None
    parts = found.group(2)
    return found.group(1), int(parts[1:]) if parts else 0


def same_md5_etag(a: str | None, b: str | None) -> bool | None:
    """Whether two S3-form etags say the same content: True, False, or None when they cannot tell.

    Two single-part MD5s are comparable; two multipart etags only when equal
    (different part sizes give different etags for the same bytes).
    """
    ma, mb = md5_etag(a), md5_etag(b)
    if ma is None or mb is None:
        return None
    if ma == mb:
        return True
    if ma[1] == 0 and mb[1] == 0:
        return False
    return None


class StreamDigest:
    """The MD5 of every part of a stream (``part_size`` bytes each, the last shorter), fed chunk by chunk.

    One hash pass per byte: the per-part MD5s are all S3's etag needs (a
    single-part object's etag is its one part's MD5, a multipart one's
    ``md5(part md5s)-n``), and a read-back is compared part by part.
    ``part_size`` must be the part size the writer uploads with, so that
    :meth:`s3_etags` predicts the multipart etag.
    """

    __slots__ = ("_part", "_part_fill", "_part_md5s", "part_size", "size")

    def __init__(self, part_size: int) -> None:
        self.part_size = part_size
        self._part = hashlib.md5(usedforsecurity=False)
        self._part_fill = 0
        self._part_md5s: list[bytes] = []
        self.size = 0

    def update(self, chunk: bytes | memoryview) -> None:
        """Take the next bytes of the stream."""
        self.size += len(chunk)
        view = memoryview(chunk)
        while view:
            take = min(len(view), self.part_size - self._part_fill)
            self._part.update(view[:take] if take < len(view) else view)
            self._part_fill += take
            view = view[take:]
            if self._part_fill == self.part_size:
                self._part_md5s.append(self._part.digest())
                self._part = hashlib.md5(usedforsecurity=False)
                self._part_fill = 0

    @classmethod
    def of_one_part(cls, size: int, md5: bytes) -> StreamDigest:
        """The digest of ``size`` bytes taken as one part whose MD5 is ``md5`` (hashed elsewhere:
        by a writer that sends the object as one request)."""
        digest = cls(max(1, size))
        digest.size = size
        if size:
            digest._part_md5s = [md5]
        return digest

    def part_md5s(self) -> list[bytes]:
        """The MD5 of each part taken (an empty stream is one empty part)."""
        parts = list(self._part_md5s)
        if self._part_fill or not parts:
            parts.append(self._part.digest())
        return parts

    def s3_etags(self) -> set[str]:
        """The etags S3 may store for these bytes: the multipart form, and the plain MD5 of a single part."""
        parts = self.part_md5s()
        multipart = hashlib.md5(b"".join(parts), usedforsecurity=False).hexdigest()
        out = {f"{multipart}-{len(parts)}"}
        if len(parts) == 1:
            out.add(parts[0].hex())
        return out

    def matches_etag(self, etag: str | None) -> bool:
        """Whether ``etag`` is an S3-form etag of exactly these bytes."""
        found = md5_etag(etag)
        if found is None:
            return False
        text = found[0] if found[1] == 0 else f"{found[0]}-{found[1]}"
        return text in self.s3_etags()
