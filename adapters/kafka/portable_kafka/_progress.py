"""Consumer-group bookkeeping: which offsets are settled and how far it is safe to commit.

Kafka commits one offset per partition: "everything below this is done". A
portable subscription settles messages one by one and out of order, so each
partition keeps the offsets it fetched, in order, and the commit point moves
only over a contiguous run of settled ones: it never passes a message that is
still in flight.

These classes hold no lock and do no I/O; the subscription guards them.
"""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["PartitionProgress"]


class PartitionProgress:
    """The fetched-but-unsettled offsets of one partition and its safe commit point.

    ``epoch`` names one assignment of the partition to this member: a handle
    from an earlier assignment no longer settles anything here (its message
    was, or will be, delivered again from the last commit).
    """

    __slots__ = ("_done", "_open", "_order", "committed", "epoch", "safe")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self._order: deque[int] = deque()  # fetched offsets, ascending, not yet below the commit point
        self._open: set[int] = set()  # fetched and not settled
        self._done: set[int] = set()  # settled but above an unsettled one
        #: the next offset to commit (everything below it is settled), or None before any
        self.safe: int | None = None
        #: the last offset committed (or being committed), or None
        self.committed: int | None = None

    def __repr__(self) -> str:
        return (
            f"PartitionProgress(epoch={self.epoch}, safe={self.safe}, committed={self.committed}, "
            f"open={len(self._open)}, done_above={len(self._done)})"
        )

    @property
    def in_flight(self) -> int:
        """How many fetched offsets are not settled."""
        return len(self._open)

    def fetched_many(self, records: list[Any]) -> list[Any]:
        """Record a fetch of one partition (ascending offsets, as Kafka returns them); return the
        records that are new, dropping those at or below the last fetched (a refetch)."""
        order = self._order
        last = order[-1] if order else (-1 if self.safe is None else self.safe - 1)
        if records and records[0].offset <= last:
            records = [r for r in records if r.offset > last]
        offsets = [r.offset for r in records]
        order.extend(offsets)
        self._open.update(offsets)
        return records

    def last_fetched(self) -> int:
        """The highest offset fetched (or -1): a record at or below it is a refetch, not new."""
        order = self._order
        return order[-1] if order else (-1 if self.safe is None else self.safe - 1)

    def add_fetched(self, offsets: list[int]) -> None:
        """Record new fetched offsets, ascending and above :meth:`last_fetched` (the caller checked)."""
        self._order.extend(offsets)
        self._open.update(offsets)

    def is_open(self, offset: int) -> bool:
        return offset in self._open

    def settle(self, offset: int) -> bool:
        """Mark ``offset`` done; False if it was not in flight (settled already, or never fetched)."""
        if offset not in self._open:
            return False
        self._open.remove(offset)
        order = self._order
        if order[0] != offset:
            self._done.add(offset)
            return True
        order.popleft()
        safe = offset + 1
        done = self._done
        while order and order[0] in done:
            top = order.popleft()
            done.remove(top)
            safe = top + 1
        self.safe = safe
        return True

    def resume_point(self) -> int | None:
        """Where to read from to see every unsettled message again: the lowest one, else the commit point."""
        return self._order[0] if self._order else self.safe

    def to_commit(self) -> int | None:
        """The offset to commit now, or None if the commit point has not moved."""
        safe = self.safe
        if safe is None or safe == self.committed:
            return None
        return safe
