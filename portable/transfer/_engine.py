"""The transfer engine: compare, stream, verify, report; a bounded pool of worker threads.

One object is copied by streaming it (``Bucket.open(key, "rb")`` into
``Bucket.open(key, "wb")``), so memory per worker is one part plus one read
chunk whatever the object's size; ``concurrency`` workers run at once and at
most twice that many objects are queued, so a listing of any length is held a
page at a time.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from ..driver.storage import ObjectInfo
from ..errors import InvalidArgument, NotFound, PortableError, PreconditionFailed
from ..storage import Bucket
from ._digest import StreamDigest, same_md5_etag
from ._report import ChecksumMismatch, ObjectResult, Progress, ProgressCallback, TransferReport

R = TypeVar("R")

#: How ``copy`` and ``sync`` decide that the destination already holds an object (see docs/transfer.md).
Checksum = Literal["auto", "size", "full"]

CHECKSUMS: tuple[str, ...] = ("auto", "size", "full")

#: Bytes read from the source at once (a read-back, a full comparison).
READ_CHUNK = 1 << 20

#: Bytes fetched by one ranged GET of a streamed copy's source (at most ``part_size``).
AHEAD_CHUNK = 8 << 20

#: Bytes fetched by one ranged GET of a copy sent as one PUT (nothing waits for a part to fill there:
#: smaller ranges hold less; 4 MiB and 2 MiB ranges went as fast as 8 MiB ones on the bench server,
#: 8 x 64 MiB at concurrency 8: peak RSS 256-273 MiB, 216-224 with 2 MiB and 4 ahead, 385 with 8 MiB).
ONE_PUT_CHUNK = 4 << 20

#: Ranged GETs of one streamed copy's source in flight at once (chunks held ahead of the upload).
AHEAD_DEPTH = 2

#: Times S3, GCS and Azure report are cut to the second: a destination written in the same
#: second as its source may read as up to a second older.
MODIFIED_SLACK = dt.timedelta(seconds=1)

#: Times a failed step of one object (compare, copy, check) is run again when its error is retryable.
RETRIES = 2

#: Seconds before the first such retry (doubled for the next).
RETRY_PAUSE = 0.5

#: The default number of objects copied at once.
DEFAULT_CONCURRENCY = 8


def is_s3(bucket: Bucket) -> bool:
    """Whether ``bucket`` is on S3 (or S3 under a wrapper such as ``chaos+``), whose etags are MD5s."""
    return "s3" in bucket.provider.split("+")


@dataclass(frozen=True, slots=True)
class Plan:
    """The checked arguments of one transfer."""

    checksum: Checksum
    verify: bool
    dry_run: bool
    part_size: int
    concurrency: int


def check_plan(
    checksum: object, verify: object, dry_run: object, part_size: object, concurrency: object, dst: Bucket
) -> Plan:
    """The :class:`Plan` of these arguments, or InvalidArgument saying what to fix (before any request)."""
    if checksum not in CHECKSUMS:
        raise InvalidArgument(f"checksum must be one of {', '.join(map(repr, CHECKSUMS))}, got {checksum!r}")
    for name, value in (("verify", verify), ("dry_run", dry_run)):
        if type(value) is not bool:
            raise InvalidArgument(f"{name} must be True or False, got {value!r}")
    if type(concurrency) is not int or not 1 <= concurrency <= 256:
        raise InvalidArgument(f"concurrency must be an int from 1 to 256, got {concurrency!r}")
    least = dst.capabilities.min_part_bytes
    if type(part_size) is not int or part_size < least:
        raise InvalidArgument(
            f"part_size must be an int of at least {least} bytes ({dst.provider}:// parts), got {part_size!r}"
        )
    return Plan(checksum, verify, dry_run, part_size, concurrency)  # type: ignore[arg-type]


class Tally:
    """The running totals and the report, fed from worker threads; calls ``progress`` one tick at a time."""

    def __init__(self, report: TransferReport, progress: ProgressCallback | None) -> None:
        self._lock = threading.Lock()
        self._report = report
        self._progress = progress
        self.bytes_done = 0

    def tick(self, key: str, delta: int) -> None:
        with self._lock:
            self.bytes_done += delta
            if self._progress is not None:
                self._progress(Progress(key, delta, self.bytes_done, len(self._report.results)))

    def finish(self, result: ObjectResult) -> None:
        with self._lock:
            self._report.results.append(result)
            if self._progress is not None:
                self._progress(Progress(result.key, 0, self.bytes_done, len(self._report.results), result))


def stored_sha256(bucket: Bucket, key: str) -> tuple[int, bytes]:
    """Size and SHA-256 of what ``bucket`` holds under ``key``, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with bucket.open(key, "rb") as reader:
        while chunk := reader.read(READ_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.digest()


def same_object(src: Bucket, dst: Bucket, s: ObjectInfo, d: ObjectInfo | None, checksum: Checksum) -> tuple[bool, str]:
    """Whether the destination's ``d`` already holds the source's ``s``, and why (the result's reason).

    ``size``: sizes equal. ``full``: sizes and SHA-256 (both read) equal.
    ``auto``: sizes equal and, where both sides are S3 (MD5 etags), the etags
    say the same content; where they cannot tell, the destination is not older
    than the source (it was written after the source was: by an earlier run),
    within :data:`MODIFIED_SLACK` for the providers' whole-second times.
    """
    if d is None:
        return False, "missing"
    if d.size != s.size:
        return False, "size differs"
    if checksum == "size":
        return True, "same size"
    if checksum == "auto":
        if is_s3(src) and is_s3(dst):
            same = same_md5_etag(s.etag, d.etag)
            if same is not None:
                return same, "md5 etag equal" if same else "md5 etag differs"
        if s.modified is not None and d.modified is not None:
            if d.modified + MODIFIED_SLACK > s.modified:
                return True, "same size, destination not older"
            return False, "source newer"
    if stored_sha256(src, s.key) == stored_sha256(dst, s.key):
        return True, "sha256 equal"
    return False, "sha256 differs"


def ranges_ahead(src: Bucket, key: str, size: int, chunk: int, depth: int) -> Iterator[bytes]:
    """Bytes ``[0, size)`` of ``key``, in order, ``chunk`` at a time, ``depth`` ranged GETs in flight.

    Ranged GETs run on their own threads while the caller hashes and uploads,
    so downloading overlaps uploading; ``depth`` chunks are held at most.
    Each GET is one request under the bucket's retry policy. The ranges may
    come from different versions if the object is rewritten meanwhile: the
    caller compares the etag before and after.
    """
    starts = iter(range(0, size, chunk))
    with ThreadPoolExecutor(depth, thread_name_prefix="portable-transfer-read") as pool:
        pending: list[Future[bytes]] = []
        try:
            for start in starts:
                pending.append(pool.submit(src.get_range, key, start, min(size, start + chunk)))
                if len(pending) == depth:
                    break
            while pending:
                data = pending.pop(0).result()
                for start in starts:  # one more in flight for each one taken
                    pending.append(pool.submit(src.get_range, key, start, min(size, start + chunk)))
                    break
                yield data
        finally:
            for f in pending:
                f.cancel()
            wait(pending)


def stream_object(src: Bucket, dst: Bucket, key: str, plan: Plan, tally: Tally,
                  info: ObjectInfo | None = None) -> tuple[StreamDigest, int, str | None]:
    """Stream one object across, headers and metadata kept; return what was streamed, its size and the new etag.

    The destination becomes visible only when every byte is in: an error (or
    a kill) before that leaves no object (the streamed writer's rule).

    Raises:
        PreconditionFailed: the source changed size while it was read (retryable).
    """
    if info is None:
        info = src.head(key)
    ticked = 0
    try:
        with dst.open(
            key,
            "wb",
            content_type=info.content_type,
            metadata=dict(info.metadata) or None,
            cache_control=info.cache_control,
            content_encoding=info.content_encoding,
            content_disposition=info.content_disposition,
            part_size=plan.part_size,
            size=info.size,
        ) as writer:
            # sent as one request (S3 under its cutoff): the writer hashes it with MD5 (its etag
            # then), for recognising its own object as well: one hash pass, taken from the writer
            one = bool(getattr(writer, "one_request", False))
            digest = StreamDigest(plan.part_size)
            ahead = ONE_PUT_CHUNK if one else min(plan.part_size, AHEAD_CHUNK)
            for chunk in ranges_ahead(src, key, info.size, ahead, AHEAD_DEPTH):
                if not one:
                    digest.update(chunk)
                writer.write(chunk)
                tally.tick(key, len(chunk))
                ticked += len(chunk)
            md5 = getattr(writer, "md5", None) if one else None
            if isinstance(md5, bytes):
                digest = StreamDigest.of_one_part(ticked, md5)
            elif one:  # a writer without its MD5 (not a portable one): the bytes were not hashed
                raise PreconditionFailed(f"{key!r}: the streamed writer kept no MD5 to verify the copy by")
            after = src.head(key)  # the ranges are one version only if the object did not change meanwhile
            if ticked != info.size or after.size != info.size or after.etag != info.etag:
                raise PreconditionFailed(
                    f"{key!r} changed while it was copied (head said {info.size} bytes, etag {info.etag}; "
                    f"{ticked} were read; now {after.size} bytes, etag {after.etag}); run the transfer "
                    "again",
                    retryable=True,
                )
    except BaseException:
        if ticked:
            tally.tick(key, -ticked)  # nothing was committed: progress must not count these bytes
        raise
    etag = getattr(writer, "etag", None)
    return digest, info.size, etag if isinstance(etag, str) else None


def put_small(src: Bucket, dst: Bucket, key: str, plan: Plan, tally: Tally) -> tuple[StreamDigest, int, str | None]:
    """Copy one object of at most one part as a single ``get`` and an atomic ``put``; as :func:`stream_object`.

    One part is what the streamed writer would have held anyway, so memory
    stays within the same bound; it saves the stream's setup and, on engines
    whose streamed commit returns no etag, the ``head`` verifying it.

    Raises:
        PreconditionFailed: the source changed size between its ``head`` and its ``get`` (retryable).
    """
    info = src.head(key)
    if info.size > plan.part_size:  # it grew since it was listed: stream it
        return stream_object(src, dst, key, plan, tally, info)
    data = src.get(key)
    if len(data) != info.size:
        raise PreconditionFailed(
            f"{key!r} changed while it was copied (head said {info.size} bytes, {len(data)} were read); "
            "run the transfer again",
            retryable=True,
        )
    digest = StreamDigest(plan.part_size)
    digest.update(data)
    etag = dst.put(
        key, data, content_type=info.content_type, metadata=dict(info.metadata) or None,
        cache_control=info.cache_control, content_encoding=info.content_encoding,
        content_disposition=info.content_disposition,
    )
    tally.tick(key, len(data))
    return digest, info.size, etag


def verify_copy(dst: Bucket, key: str, digest: StreamDigest, etag: str | None) -> str:
    """Check the stored copy against the streamed digest; return how (``md5 etag`` or ``read-back``).

    ``etag`` is what the commit returned: on S3, the MD5 the store computed of
    the bytes it stored (per part for a multipart upload), so a match needs no
    further request. Otherwise the object is looked at (``head``) and read back.

    Raises:
        ChecksumMismatch: the destination holds other bytes.
    """
    if is_s3(dst) and digest.matches_etag(etag):
        return "md5 etag"
    info = dst.head(key)
    if info.size != digest.size:
        raise ChecksumMismatch(
            f"{key!r}: the destination holds {info.size} bytes, {digest.size} were copied", provider=dst.provider
        )
    if is_s3(dst) and digest.matches_etag(info.etag):
        return "md5 etag"
    stored = StreamDigest(digest.part_size)
    with dst.open(key, "rb") as reader:
        while chunk := reader.read(READ_CHUNK):
            stored.update(chunk)
    if stored.size != digest.size or stored.part_md5s() != digest.part_md5s():
        bad = next((i for i, (a, b) in enumerate(zip(stored.part_md5s(), digest.part_md5s(), strict=False))
                    if a != b), None)
        where = f"part {bad + 1} of {digest.part_size} bytes differs" if bad is not None else "sizes differ"
        raise ChecksumMismatch(
            f"{key!r}: the bytes read back from the destination differ from those copied (md5 of {where})",
            provider=dst.provider,
        )
    return "read-back"


def retried(fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)``, run again (up to :data:`RETRIES` times, backing off) after a retryable PortableError.

    The calls inside already run under the buckets' retry policies; this
    retries a whole step: a streamed read cut part-way (which a stream cannot
    resume), a copy whose upload failed (nothing was committed: the writer
    aborts), a check whose read-back failed. A ChecksumMismatch is not retried
    here (the bad copy is deleted and reported).
    """
    for attempt in range(RETRIES + 1):
        try:
            return fn(*args)
        except ChecksumMismatch:
            raise
        except PortableError as exc:
            if not exc.retryable or attempt == RETRIES:
                raise
            time.sleep(RETRY_PAUSE * 2**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def transfer_one(src: Bucket, dst: Bucket, key: str, s: ObjectInfo | None, d: ObjectInfo | None,
                 looked_up: bool, plan: Plan, tally: Tally) -> ObjectResult:
    """Compare, then copy and verify one key; every PortableError becomes a failed result."""
    size = s.size if s is not None else 0
    try:
        if not looked_up:
            s = src.head(key)
            size = s.size
            try:
                d = dst.head(key)
            except NotFound:
                d = None
        assert s is not None
        same, reason = retried(same_object, src, dst, s, d, plan.checksum)
        if same:
            return ObjectResult(key, "skipped", size, reason)
        if plan.dry_run:
            return ObjectResult(key, "copied", size, reason)
        copy_one = put_small if s.size <= plan.part_size else stream_object
        digest, size, etag = retried(copy_one, src, dst, key, plan, tally)
        if not plan.verify:
            return ObjectResult(key, "copied", size, reason)
        try:
            how = retried(verify_copy, dst, key, digest, etag)
        except ChecksumMismatch as bad:
            try:
                dst.delete(key)  # a rerun must not take the bad copy for a good one
            except PortableError as exc:
                raise ChecksumMismatch(
                    f"{bad.message}; deleting the bad copy failed too ({exc.message}): delete it, or rerun "
                    'with checksum="full"', provider=bad.provider,
                ) from exc
            raise
        return ObjectResult(key, "copied", size, reason, how)
    except PortableError as exc:
        return ObjectResult(key, "failed", size, exc.message, error=exc)


def merged(src: Bucket, dst: Bucket, prefix: str) -> Iterator[tuple[str, ObjectInfo | None, ObjectInfo | None]]:
    """Both listings under ``prefix``, joined by key in lexical order: ``(key, in src, in dst)``."""
    left, right = src.list(prefix), dst.list(prefix)
    a, b = next(left, None), next(right, None)
    while a is not None or b is not None:
        if b is None or (a is not None and a.key < b.key):
            assert a is not None
            yield a.key, a, None
            a = next(left, None)
        elif a is None or b.key < a.key:
            yield b.key, None, b
            b = next(right, None)
        else:
            yield a.key, a, b
            a, b = next(left, None), next(right, None)


def run_transfer(
    src: Bucket,
    dst: Bucket,
    items: Iterable[tuple[str, ObjectInfo | None, ObjectInfo | None]],
    *,
    looked_up: bool,
    delete: bool,
    plan: Plan,
    progress: ProgressCallback | None,
) -> TransferReport:
    """Run every item on a bounded pool; with ``delete``, remove the keys only the destination has."""
    started = time.monotonic()
    report = TransferReport(dry_run=plan.dry_run)
    tally = Tally(report, progress)
    extras: list[ObjectInfo] = []
    slots = threading.BoundedSemaphore(plan.concurrency * 2)
    futures: list[Future[None]] = []

    def work(key: str, s: ObjectInfo | None, d: ObjectInfo | None) -> None:
        try:
            tally.finish(transfer_one(src, dst, key, s, d, looked_up, plan, tally))
        finally:
            slots.release()

    with ThreadPoolExecutor(plan.concurrency, thread_name_prefix="portable-transfer") as pool:
        try:
            for key, s, d in items:
                if s is None and looked_up:
                    if delete and d is not None:
                        extras.append(d)
                    continue
                slots.acquire()
                futures.append(pool.submit(work, key, s, d))
                futures = [f for f in futures if not f.done() or f.exception() is not None]
            for f in futures:
                f.result()  # a bug (not a PortableError) surfaces here
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        if extras:
            delete_extras(dst, extras, report, tally, plan, pool)
    report.seconds = time.monotonic() - started
    return report


def delete_extras(dst: Bucket, extras: list[ObjectInfo], report: TransferReport, tally: Tally,
                  plan: Plan, pool: ThreadPoolExecutor) -> None:
    """``sync(delete=True)``: remove what only the destination has, unless a copy failed."""
    failed = report.failed
    if failed:
        for info in extras:
            tally.finish(ObjectResult(info.key, "skipped", info.size,
                                      f"kept: not deleted because {failed} objects failed"))
        return

    def remove(info: ObjectInfo) -> None:
        try:
            if not plan.dry_run:
                dst.delete(info.key)
            tally.finish(ObjectResult(info.key, "deleted", info.size, "not in the source"))
        except PortableError as exc:
            tally.finish(ObjectResult(info.key, "failed", info.size, exc.message, error=exc))

    for f in [pool.submit(remove, info) for info in extras]:
        f.result()
