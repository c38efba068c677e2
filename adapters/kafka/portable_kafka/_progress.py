"""Consumer-group bookkeeping: which offsets are settled and how far it is safe to commit.

Kafka commits one offset per partition: "everything below this is done". A
portable subscription settles messages one by one and out of order, so each
partition keeps the offsets it fetched, in order, and the commit point moves
only over a contiguous run of settled ones: it never passes a message that is
still in flight.

These classes hold no lock and do no I/O; the subscription guards them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PartitionProgress"]


class PartitionProgress:
    """The fetched-but-unsettled offsets of one partition and its safe commit point.

    ``epoch`` names one assignment of the partition to this member: a handle
    from an earlier assignment no longer settles anything here (its message
    was, or will be, delivered again from the last commit).

    Fetched offsets are a list (ascending) from ``_start`` on, and the unsettled
    ones a set: a settled offset is one of the list not in the set. Settling a
    batch is one C-speed set update, and when nothing is left open (a receive's
    batch acked in full, the common case) the commit point jumps to the end in
    one step; otherwise it moves over the settled run at the front.
    """

    __slots__ = ("_open", "_order", "_start", "committed", "epoch", "safe")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self._order: list[int] = []  # fetched offsets, ascending; those before _start are below the commit point
        self._start = 0
        self._open: set[int] = set()  # fetched and not settled
        #: the next offset to commit (everything below it is settled), or None before any
        self.safe: int | None = None
        #: the last offset committed (or being committed), or None
        self.committed: int | None = None

    def __repr__(self) -> str:
        return (
            f"PartitionProgress(epoch={self.epoch}, safe={self.safe}, committed={self.committed}, "
            f"open={len(self._open)}, done_above={len(self._order) - self._start - len(self._open)})"
        )

    @property
    def in_flight(self) -> int:
        """How many fetched offsets are not settled."""
        return len(self._open)

    def fetched_many(self, records: list[Any]) -> list[Any]:
        """Record a fetch of one partition (ascending offsets, as Kafka returns them); return the
        records that are new, dropping those at or below the last fetched (a refetch)."""
        last = self.last_fetched()
        if records and records[0].offset <= last:
            records = [r for r in records if r.offset > last]
        self.add_fetched([r.offset for r in records])
        return records

    def last_fetched(self) -> int:
        """The highest offset fetched (or -1): a record at or below it is a refetch, not new."""
        order = self._order
        if len(order) > self._start:
            return order[-1]
        return -1 if self.safe is None else self.safe - 1

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
        if self._order[self._start] == offset:
            self._advance()
        return True

    def settle_many(self, offsets: list[int]) -> None:
        """Mark ``offsets`` done (each in flight: the caller took them from its leases)."""
        self._open.difference_update(offsets)
        self._advance()

    def _advance(self) -> None:
        """Move the commit point over the settled run at the front."""
        order = self._order
        start = self._start
        if start >= len(order):
            return
        if not self._open:  # everything fetched is settled
            self.safe = order[-1] + 1
            order.clear()
            self._start = 0
            return
        is_open = self._open.__contains__
        end = len(order)
        i = start
        while i < end and not is_open(order[i]):
            i += 1
        if i == start:
            return
        self.safe = order[i - 1] + 1
        if i > 4096 and i * 2 > end:  # drop the settled front now and then, not on every move
            del order[:i]
            i = 0
        self._start = i

    def resume_point(self) -> int | None:
        """Where to read from to see every unsettled message again: the lowest one, else the commit point."""
        return self._order[self._start] if len(self._order) > self._start else self.safe

    def to_commit(self) -> int | None:
        """The offset to commit now, or None if the commit point has not moved."""
        safe = self.safe
        if safe is None or safe == self.committed:
            return None
        return safe
