"""Partitions coming to and leaving this group member: the rebalance listener and its bookkeeping.

When partitions are revoked the member commits what is safe for them (awaited
on kafka-python's network loop, so heartbeats go on). Partitions that move
lose their in-flight state here (buffered records, leases and key locks) and
their unsettled messages go to the new owner from the last commit; partitions
that an eager rebalance revokes and gives straight back keep theirs
(:class:`Rebalancing`).
"""

# mypy: disable-error-code="import-untyped"
from __future__ import annotations

import heapq
import itertools
import logging
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ._commits import Settlement
from ._progress import PartitionProgress

if TYPE_CHECKING:
    from .kafka import KafkaMessaging

__all__ = ["Rebalancing", "rebalance_listener"]

log = logging.getLogger("portable.kafka")


class Rebalancing(Settlement):
    """The bookkeeping of partitions assigned to and revoked from this member.

    Both methods run where the client runs its rebalance callbacks (kafka-python's
    network thread, inside librdkafka's ``consume``) and take only ``_state`` for
    the bookkeeping.

    An eager assignor (``range``, ``roundrobin``) revokes every partition of every
    member at each rebalance, and most come straight back: any member joining or
    leaving, even for another topic, and a new group's first seconds (a topic
    appearing in the metadata) bring one. Revoked partitions are therefore
    *suspended* (committed as far as is safe, out of further commits, their
    leases kept) until the assignment that follows: those that come back keep
    their leases and buffered records, the others are forgotten then. Between the
    two, no other member reads them (an eager rebalance assigns nothing before
    every member gave up everything), so a lease kept is still exclusive. With
    ``cooperative-sticky`` a revoked partition is one that moves, and is
    forgotten at once; a lost one (the session ended) always is.
    """

    def __init__(self, driver: KafkaMessaging) -> None:
        super().__init__(driver)
        self._rewind: dict[Any, int] = {}  # forgotten tp -> offset to read again from if it comes back
        self._resume_on_return: set[Any] = set()  # forgotten tps that were paused here
        self._epochs = itertools.count(1)
        #: how many assignments this member got (each rebalance brings one); for tests and stats
        self.assignments = 0

    def _give_up(self, revoked: Iterable[Any]) -> None:
        """Partitions revoked (after their safe commit): suspended until the next assignment
        (eager assignors), or forgotten now (cooperative-sticky)."""
        if self.settings.assignor == "cooperative-sticky":
            self._forget_partitions(revoked)
            return
        with self._state:
            self._suspended.update(tp for tp in revoked if tp in self._progress)

    def _start_assigned(self, assigned: Iterable[Any]) -> tuple[dict[Any, int], set[Any], set[Any]]:
        """The bookkeeping of a new assignment: suspended partitions that came back are kept, the
        others forgotten now, new ones start fresh.

        Returns ``(rewind, kept, unpause)``: where to read again from the returning partitions that
        were forgotten, the partitions kept (with their leases), and the forgotten ones that were
        paused here (the client may still have them paused).
        """
        assigned = list(assigned)
        with self._state:
            self.assignments += 1
            suspended, self._suspended = self._suspended, set()
        gone = suspended.difference(assigned)
        if gone:
            self._forget_partitions(gone)
        with self._state:
            rewind, self._rewind = self._rewind, {}
            unpause, self._resume_on_return = self._resume_on_return, set()
            kept = suspended.intersection(assigned)
            for tp in assigned:
                if tp not in self._progress:
                    self._progress[tp] = PartitionProgress(next(self._epochs))
                if tp in self._paused:  # a kept one: resumed, and paused again by _pace if need be
                    unpause.add(tp)
                    self._paused.discard(tp)
        return {tp: rewind[tp] for tp in assigned if tp in rewind}, kept, unpause & set(assigned)

    def _track_assigned(self, assigned: Iterable[Any]) -> None:
        """kafka-python's side of an assignment. kafka-python keeps the fetch position (and pause
        flag) of a partition that an eager rebalance revoked and gave straight back: a kept one
        reads on from there (a record fetched again is dropped as a refetch), and is resumed if it
        was paused; a forgotten one's unsettled messages were dropped, so it reads them again from
        the resume point noted then."""
        rewind, _kept, unpause = self._start_assigned(assigned)
        for tp, offset in rewind.items():
            self.consumer.seek(tp, offset)
        for tp in unpause:
            self.consumer.resume(tp)

    def _forget_partitions(self, revoked: Iterable[Any], *, lost: bool = False) -> None:
        """Forget partitions: their unsettled messages will be delivered again from the commit."""
        gone = set(revoked)
        with self._state:
            self._suspended.difference_update(gone)
            for tp in gone:
                progress = self._progress.pop(tp, None)
                point = progress.resume_point() if progress is not None else None
                if point is not None and not lost:
                    self._rewind[tp] = point
                if tp in self._paused:
                    self._resume_on_return.add(tp)
                self._paused.discard(tp)
            for delivery in [d for d in self._leased.values() if d.tp in gone]:
                self._withdraw(delivery)  # its lease batch skips it when the lease ends
            self._ready = deque(d for d in self._ready if d.tp not in gone)
            self._held = [h for h in self._held if h[2].tp not in gone]
            heapq.heapify(self._held)
            for key in list(self._key_blocked):
                kept = deque(e for e in self._key_blocked[key] if e.tp not in gone)
                if kept:
                    self._key_blocked[key] = kept
                else:
                    del self._key_blocked[key]


class RebalanceListener:
    """Commits what is safe before partitions leave, and drops their in-flight state.

    Mixed into kafka-python's AsyncConsumerRebalanceListener (see
    :func:`rebalance_listener`): kafka-python awaits it on its network loop, so
    the commit is awaited there instead of blocking the heartbeats.
    """

    def __init__(self, subscription: Rebalancing) -> None:
        self._subscription = subscription

    async def on_partitions_revoked(self, revoked: Any) -> None:
        sub = self._subscription
        offsets = sub._offsets_to_commit(revoked)
        if offsets:
            coordinator = sub.consumer._coordinator
            try:
                await coordinator._commit_offsets_sync_async(offsets, timeout_ms=sub._commit_timeout_ms)
            except Exception as exc:  # the new owner will redeliver: at least once holds
                log.warning("commit before giving up %s failed: %s", sorted(revoked), exc)
        sub._give_up(revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self._subscription._track_assigned(assigned)

    async def on_partitions_lost(self, lost: Any) -> None:
        self._subscription._forget_partitions(lost, lost=True)


def rebalance_listener(subscription: Rebalancing) -> Any:
    """A kafka-python AsyncConsumerRebalanceListener that keeps ``subscription``'s bookkeeping."""
    from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener

    class Listener(RebalanceListener, AsyncConsumerRebalanceListener):  # type: ignore[misc]
        pass

    return Listener(subscription)
