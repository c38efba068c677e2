"""Resumable streamed writes on the obstore S3 engine: a multipart upload a later process continues.

obstore 0.12.1 cannot resume: its multipart writer (``obstore.put`` /
``open_writer``) keeps the upload id to itself and has no ListParts, no
ListMultipartUploads and no way to complete an upload it did not start. So a
resumable write is a multipart upload made of requests this engine signs
itself (:class:`portable_obstore._s3_signed._SignedS3`, SigV4 with the store's
credentials): CreateMultipartUpload, UploadPart, CompleteMultipartUpload, and
to resume, ListMultipartUploads (the newest upload of the exact key) and
ListParts. A part's ETag is its MD5 (except under SSE-KMS / SSE-C, where it is
not: there a source check finds every part different and sends it again).
"""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from portable.driver.http import listed_parts, md5_of_etag, normal_etag
from portable.driver.storage import PersistedPart, ResumableWriteStream, WriteOptions

if TYPE_CHECKING:
    from ._s3_signed import _SignedS3

__all__ = ["CompleteFailed", "S3ResumableWrite"]

_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class CompleteFailed(Exception):
    """CompleteMultipartUpload answered 200 with an ``<Error>`` body (S3 does, after a long assembly)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"CompleteMultipartUpload failed: {code}: {message}")
        self.status = 500 if code in ("InternalError", "SlowDown") else 400
        self.code = code


def _text(node: ET.Element, name: str) -> str:
    return node.findtext(f"{_NS}{name}") or node.findtext(name) or ""


class S3ResumableWrite(ResumableWriteStream):
    """``open(key, "wb", resume=True)`` on S3: every part is uploaded as it comes, none held back.

    On open, the newest multipart upload of the exact key (ListMultipartUploads)
    and its parts (ListParts, every page) are found; parts are reported from
    number 1 up to the first gap, each with its size and the MD5 its ETag is.
    The content type, metadata and headers are the first attempt's (S3 fixes
    them at CreateMultipartUpload). A stream that never uploaded a part
    commits as one PutObject.
    """

    def __init__(self, signer: _SignedS3, full_key: str, options: WriteOptions) -> None:
        self._signer = signer
        self._key = full_key
        self._options = options
        self._upload_id: str | None = None
        self._etags: list[str] = []
        self.persisted = []
        newest: tuple[dt.datetime, str] | None = None
        for key, upload_id, initiated in signer.multipart_uploads(full_key):
            if key == full_key:
                when = initiated or dt.datetime.min.replace(tzinfo=dt.UTC)
                if newest is None or when >= newest[0]:  # S3 lists them oldest first: on a tie, the later
                    newest = (when, upload_id)
        if newest is not None:
            self._upload_id = newest[1]
            self._read_parts()

    def _read_parts(self) -> None:
        assert self._upload_id is not None
        found: dict[int, tuple[int, str]] = {}
        marker = ""
        while True:
            query = [("uploadId", self._upload_id)] + ([("part-number-marker", marker)] if marker else [])
            _, body = self._signer.send(f"ListParts {self._key!r}", "GET", self._key, query)
            root = ET.fromstring(body)
            for part in root.iter(f"{_NS}Part"):
                found[int(_text(part, "PartNumber"))] = (int(_text(part, "Size")), _text(part, "ETag"))
            following = _text(root, "NextPartNumberMarker")
            if _text(root, "IsTruncated") != "true" or not following or following == marker:
                break
            marker = following
        for offset, size, md5, etag in listed_parts(found):
            self.persisted.append(PersistedPart(offset, size, md5))
            self._etags.append(etag)

    def keep(self, count: int) -> None:
        # Parts after ``count`` are overwritten by number, or left out of the Complete (S3 drops them).
        del self.persisted[count:]
        del self._etags[count:]

    def write(self, data: bytes) -> None:
        if self._upload_id is None:
            headers = self._create_headers()
            _, body = self._signer.send(f"CreateMultipartUpload {self._key!r}", "POST", self._key, [("uploads", "")], headers)
            self._upload_id = _text(ET.fromstring(body), "UploadId")
        number = len(self._etags) + 1
        answer, _ = self._signer.send(
            f"UploadPart {self._key!r} #{number}",
            "PUT",
            self._key,
            [("partNumber", str(number)), ("uploadId", self._upload_id)],
            {},
            data,
        )
        etag = normal_etag(answer.get("etag")) or ""
        offset = sum(part.size for part in self.persisted)
        self.persisted.append(PersistedPart(offset, len(data), md5_of_etag(etag)))
        self._etags.append(etag)

    def _create_headers(self) -> dict[str, str]:
        from ._common import header_attributes

        headers = header_attributes(self._options)
        for name, value in self._options.metadata.items():
            headers[f"x-amz-meta-{name}"] = value
        return headers

    def commit(self) -> str | None:
        if self._upload_id is None or not self._etags:
            etag = self._signer.put_object(self._key, b"", self._options)
            self.abort()  # an upload found but every part of it dropped
            return etag
        parts = "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>" for n, etag in enumerate(self._etags, 1)
        )
        body = f"<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>".encode()
        _, answer = self._signer.send(
            f"CompleteMultipartUpload {self._key!r}", "POST", self._key, [("uploadId", self._upload_id)],
            {"Content-Type": "application/xml"}, body,
        )
        root = ET.fromstring(answer)
        if root.tag.endswith("Error"):
            raise CompleteFailed(_text(root, "Code"), _text(root, "Message"))
        self._upload_id = None
        return normal_etag(_text(root, "ETag"))

    def abort(self) -> None:
        upload_id, self._upload_id = self._upload_id, None
        self._etags.clear()
        self.persisted.clear()
        if upload_id is not None:
            self._signer.abort_upload(self._key, upload_id)
