"""Resumable streamed writes on the fsspec S3 engine: a multipart upload a later process continues.

The upload is found again with ListMultipartUploads (the newest upload of the
exact key; S3 lists a key's uploads oldest first) and ListParts (every page).
A part's ETag is its MD5 (except under SSE-KMS / SSE-C, where a source check
then finds every part different and sends it again). Requests go through the
driver's aiobotocore client on s3fs's loop, like every other call of the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from portable.driver.http import listed_parts, md5_of_etag, normal_etag
from portable.driver.storage import PersistedPart, ResumableWriteStream, WriteOptions

if TYPE_CHECKING:
    from .s3 import S3Storage

__all__ = ["S3ResumableWrite"]


class S3ResumableWrite(ResumableWriteStream):
    """``open(key, "wb", resume=True)`` on S3: every part is uploaded as it comes, none held back.

    Parts are reported from number 1 up to the first gap, each with its size
    and the MD5 its ETag is. The content type, metadata and headers are the
    first attempt's (S3 fixes them at CreateMultipartUpload). A stream that
    never uploaded a part commits as one PutObject.
    """

    def __init__(self, driver: S3Storage, full_key: str, options: WriteOptions, write_kwargs: dict[str, Any]) -> None:
        self._driver = driver
        self._key = full_key
        self._options = options
        self._create_kwargs = write_kwargs
        self._upload_id: str | None = None
        self._etags: list[str] = []
        self.persisted = []
        driver._run(self._find)

    async def _find(self) -> None:
        s3 = await self._driver._s3()
        bucket = self._driver.bucket
        kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": self._key}
        newest: str | None = None
        while True:
            resp = await s3.list_multipart_uploads(**kwargs)
            for upload in resp.get("Uploads", ()):
                if upload["Key"] == self._key:
                    newest = upload["UploadId"]  # oldest first: the last one listed is the newest
            marker = (resp.get("NextKeyMarker"), resp.get("NextUploadIdMarker"))
            if not resp.get("IsTruncated") or marker == (kwargs.get("KeyMarker"), kwargs.get("UploadIdMarker")):
                break
            kwargs["KeyMarker"], kwargs["UploadIdMarker"] = marker
        if newest is None:
            return
        self._upload_id = newest
        found: dict[int, tuple[int, str]] = {}
        parts_kwargs: dict[str, Any] = {"Bucket": bucket, "Key": self._key, "UploadId": newest}
        while True:
            resp = await s3.list_parts(**parts_kwargs)
            for part in resp.get("Parts", ()):
                found[int(part["PartNumber"])] = (int(part["Size"]), str(part["ETag"]))
            following = resp.get("NextPartNumberMarker")
            if not resp.get("IsTruncated") or not following or following == parts_kwargs.get("PartNumberMarker"):
                break
            parts_kwargs["PartNumberMarker"] = following
        for offset, size, md5, etag in listed_parts(found):
            self.persisted.append(PersistedPart(offset, size, md5))
            self._etags.append(etag)

    def keep(self, count: int) -> None:
        # Parts after ``count`` are overwritten by number, or left out of the Complete (S3 drops them).
        del self.persisted[count:]
        del self._etags[count:]

    def write(self, data: bytes) -> None:
        self._driver._run(self._upload_part, data)

    async def _upload_part(self, data: bytes) -> None:
        s3 = await self._driver._s3()
        if self._upload_id is None:
            resp = await s3.create_multipart_upload(Bucket=self._driver.bucket, Key=self._key, **self._create_kwargs)
            self._upload_id = resp["UploadId"]
        number = len(self._etags) + 1
        resp = await s3.upload_part(
            Bucket=self._driver.bucket, Key=self._key, UploadId=self._upload_id, PartNumber=number, Body=data
        )
        etag = normal_etag(resp.get("ETag")) or ""
        offset = sum(part.size for part in self.persisted)
        self.persisted.append(PersistedPart(offset, len(data), md5_of_etag(etag)))
        self._etags.append(etag)

    def commit(self) -> str | None:
        return self._driver._run(self._commit)

    async def _commit(self) -> str | None:
        if self._upload_id is None or not self._etags:
            etag = await self._driver._put(self._key[len(self._driver._root) :], b"", self._options)
            await self._abort()  # an upload found, but every part of it dropped
            return etag
        s3 = await self._driver._s3()
        parts = [{"PartNumber": n, "ETag": etag} for n, etag in enumerate(self._etags, 1)]
        resp = await s3.complete_multipart_upload(
            Bucket=self._driver.bucket, Key=self._key, UploadId=self._upload_id, MultipartUpload={"Parts": parts}
        )
        self._upload_id = None
        return normal_etag(resp.get("ETag"))

    def abort(self) -> None:
        self._driver._run(self._abort)

    async def _abort(self) -> None:
        upload_id, self._upload_id = self._upload_id, None
        self._etags.clear()
        self.persisted.clear()
        if upload_id is None:
            return
        s3 = await self._driver._s3()
        try:
            await s3.abort_multipart_upload(Bucket=self._driver.bucket, Key=self._key, UploadId=upload_id)
        except Exception as exc:
            from ._aws import aws_error_code

            if aws_error_code(exc)[0] != "NoSuchUpload":
                raise
