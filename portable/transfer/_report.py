"""What a transfer reports: one :class:`ObjectResult` per object, totals in :class:`TransferReport`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ..errors import Internal, PortableError

__all__ = ["ChecksumMismatch", "ObjectResult", "Progress", "ProgressCallback", "Status", "TransferReport"]

#: What happened to one object. With ``dry_run``, ``copied`` and ``deleted`` say what would be done.
Status = Literal["copied", "skipped", "failed", "deleted"]


class ChecksumMismatch(Internal):
    """The destination does not hold the bytes that were read from the source.

    Raised (reported) after a copy whose end-to-end check failed: the stored
    checksum, or the bytes read back, differ from what was streamed. The bad
    copy is deleted, so a rerun copies the object again. Retryable.
    """

    default_retryable = True


@dataclass(frozen=True, slots=True)
class ObjectResult:
    """The outcome for one key.

    Attributes:
        key: the key (the same on both sides).
        status: ``copied``, ``skipped`` (the destination already holds it),
            ``failed`` or ``deleted`` (``sync(delete=True)``).
        size: the source object's size in bytes (the destination's for ``deleted``).
        reason: why it was copied or skipped (``missing``, ``size differs``,
            ``md5 etag equal``, ...), or what failed.
        verified: how a copy was checked: ``md5 etag`` (the destination's stored
            MD5, S3), ``read-back`` (the destination read again and hashed),
            or ``""`` (not checked: ``verify=False``, or not a copy).
        error: the typed error of a failure, else None.
    """

    key: str
    status: Status
    size: int = 0
    reason: str = ""
    verified: str = ""
    error: PortableError | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    """One tick of progress, given to the ``progress`` callback.

    ``bytes_delta`` bytes of ``key`` were just copied (``result`` is None), or
    ``key`` is finished (``result`` is its :class:`ObjectResult`, ``bytes_delta`` 0).
    ``bytes_done`` and ``objects_done`` are the running totals of the whole transfer.
    """

    key: str
    bytes_delta: int
    bytes_done: int
    objects_done: int
    result: ObjectResult | None = None


#: Called with every :class:`Progress` tick, one at a time (never concurrently), from worker threads.
ProgressCallback = Callable[[Progress], None]


@dataclass(slots=True)
class TransferReport:
    """Per-object results and totals of one ``copy`` or ``sync``.

    Attributes:
        results: one :class:`ObjectResult` per key met, in completion order.
        dry_run: True when nothing was written (``copied``/``deleted`` say what would be).
        seconds: wall time of the whole transfer.
    """

    results: list[ObjectResult] = field(default_factory=list)
    dry_run: bool = False
    seconds: float = 0.0

    def _count(self, status: Status) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def copied(self) -> int:
        """How many objects were (or, with ``dry_run``, would be) copied."""
        return self._count("copied")

    @property
    def skipped(self) -> int:
        """How many objects the destination already held."""
        return self._count("skipped")

    @property
    def failed(self) -> int:
        """How many objects failed (each result carries its typed error)."""
        return self._count("failed")

    @property
    def deleted(self) -> int:
        """How many destination objects were (or would be) deleted by ``sync(delete=True)``."""
        return self._count("deleted")

    @property
    def bytes_copied(self) -> int:
        """Bytes of the objects copied."""
        return sum(r.size for r in self.results if r.status == "copied")

    @property
    def ok(self) -> bool:
        """True when nothing failed."""
        return self.failed == 0

    def failures(self) -> list[ObjectResult]:
        """The failed results, each with its error."""
        return [r for r in self.results if r.status == "failed"]

    def by_key(self) -> dict[str, ObjectResult]:
        """The results keyed by key (a deleted key and a copied key never coincide)."""
        return {r.key: r for r in self.results}

    def summary(self) -> str:
        """One line: counts, bytes, seconds and rate."""
        rate = self.copied / self.seconds if self.seconds > 0 else 0.0
        verb = "would copy" if self.dry_run else "copied"
        text = (
            f"{verb} {self.copied} ({self.bytes_copied} bytes), skipped {self.skipped}, "
            f"failed {self.failed}"
        )
        if self.deleted:
            text += f", {'would delete' if self.dry_run else 'deleted'} {self.deleted}"
        return text + f" in {self.seconds:.2f} s ({rate:.1f} objects/s)"
