"""Partitions coming to and leaving this group member: the rebalance listener and its bookkeeping.

When partitions are revoked the member commits what is safe for them (awaited
on kafka-python's network loop, so heartbeats go on) and forgets their
in-flight state: buffered records, leases and key locks. Their unsettled
messages go to the new owner from the last commit. A partition that comes
straight back (an eager rebalance revokes everything) is read again from its
first unsettled offset.
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

    Both methods run on kafka-python's network thread (from the listener) and
    take only ``_state`` for the bookkeeping.
    """

    def __init__(self, driver: KafkaMessaging) -> None:
        super().__init__(driver)
        self._rewind: dict[Any, int] = {}  # revoked tp -> offset to read again from if it comes back
        self._resume_on_return: set[Any] = set()  # revoked tps that were paused here
        self._epochs = itertools.count(1)

    def _track_assigned(self, assigned: Iterable[Any]) -> None:
        """Start fresh bookkeeping for new partitions.

        kafka-python keeps the fetch position (and pause flag) of a partition that
        an eager rebalance revoked and gave straight back to this member; its
        unsettled messages were dropped with the revocation, so read them again
        from the resume point that was noted then.
        """
        with self._state:
            rewind, self._rewind = self._rewind, {}
            unpause, self._resume_on_return = self._resume_on_return, set()
            for tp in assigned:
                if tp not in self._progress:
                    self._progress[tp] = PartitionProgress(next(self._epochs))
                self._paused.discard(tp)
        for tp in assigned:
            if tp in rewind:
                self.consumer.seek(tp, rewind[tp])
            if tp in unpause:
                self.consumer.resume(tp)

    def _forget_partitions(self, revoked: Iterable[Any], *, lost: bool = False) -> None:
        """Forget revoked partitions: their unsettled messages will be delivered again from the commit."""
        gone = set(revoked)
        with self._state:
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
        sub._forget_partitions(revoked)

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
