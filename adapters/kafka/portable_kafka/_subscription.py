"""The receiving side of ``kafka://``: one consumer-group member per Subscription.

:class:`KafkaSubscription` is built in layers, each a module:
:class:`~._receive.LocalLeases` (fetched records, local leases, key order),
:class:`~._commits.Settlement` (ack, nack, dead letters, offset commits) and
:class:`~._rebalance.Rebalancing` (partitions coming and going); this module
adds the consumer and the receive loop that drives them.
"""

# mypy: disable-error-code="import-untyped"
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ._rebalance import Rebalancing, rebalance_listener

if TYPE_CHECKING:
    from .kafka import KafkaMessaging

__all__ = ["KafkaSubscription"]

log = logging.getLogger("portable.kafka")

#: How long close() waits for LeaveGroup. A member whose JoinGroup is still parked at the
#: coordinator gets no answer before that join completes (requests on a connection are
#: answered in order), so waiting request_timeout would stall close for 30 s; the group
#: drops a member that left without a word after session_timeout_ms anyway.
_CLOSE_TIMEOUT_MS = 3000


def _keep_join_alive(consumer: Any) -> None:
    """Work around a lost join in kafka-python 3.0.12: a rejoin that its metadata asked for
    (a topic's partitions appeared after a join that found none: a topic created moments before)
    is left in flight when ``poll`` times out, and the next ``poll`` awaits it only while a rejoin
    is still needed; as group leader the member has meanwhile taken the new metadata as assigned,
    so none is, the join's answer is never applied, and the member holds no partition until the
    next rebalance (minutes, or never). A join task still held while no rejoin is needed is that
    state: asking for a rejoin makes the next ``poll`` take the join up again, and
    :func:`_apply_finished_joins` applies it if it has finished (else kafka-python awaits it)."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or getattr(coordinator, "_join_task", None) is None:
        return
    if not coordinator.need_rejoin():
        log.info("kafka-python left a group join unapplied; asking it to rejoin")
        coordinator.request_rejoin()


def _apply_finished_joins(consumer: Any) -> None:
    """Work around a dropped group join in kafka-python 3.0.12: a ``poll`` that times out while
    the member joins leaves the join in flight, and the next ``poll`` starts a new JoinGroup when it
    finds that join finished (``join_group_async`` replaces a done join task instead of taking its
    answer), so the finished join's assignment is never applied and the new JoinGroup starts another
    rebalance. Where each join takes longer than a poll's wait (a loaded machine, a group whose other
    members rejoin on their next heartbeat), the member rejoins over and over and holds no partition
    (beside three busy processes on 2 cores: 40 generations in 120 s). This applies a join that
    finished successfully as kafka-python's own success path does, then lets kafka-python go on; a
    failed join is left to it."""
    coordinator = getattr(consumer, "_coordinator", None)
    original = getattr(coordinator, "join_group_async", None)
    if original is None or not hasattr(coordinator, "_join_task"):
        return
    from kafka.coordinator.base import MemberState

    async def join_group_async(timeout_ms: float | None = None) -> bool:
        task = coordinator._join_task
        if task is not None and task.is_done and task.exception is None:
            # what kafka-python 3.0.12's join_group_async does with a join it awaited to the end
            log.info("kafka-python finished a group join between two polls; applying it")
            coordinator._join_task = None
            with coordinator._lock:
                coordinator.rejoining = False
                coordinator.rejoin_needed = False
                coordinator.state = MemberState.STABLE
                coordinator._enable_heartbeat()
            generation = coordinator._generation
            await coordinator._on_join_complete_async(
                generation.generation_id, generation.member_id, generation.protocol, task.value
            )
            return True
        result: bool = await original(timeout_ms=timeout_ms)
        return result

    coordinator.join_group_async = join_group_async


class KafkaSubscription(Rebalancing):
    """A consumer-group member: poll-based receive, contiguous-ack commits, retry and DLQ topics.

    Threads: ``receive`` holds ``_poll_lock`` while it touches the consumer (which
    is not thread-safe); ``ack``/``nack`` from handler threads touch only the
    bookkeeping under ``_state`` and send commits when the consumer is free.
    kafka-python's network thread runs the rebalance listener, which also takes
    only ``_state``.
    """

    def __init__(self, driver: KafkaMessaging) -> None:
        from kafka import KafkaConsumer

        super().__init__(driver)
        self.consumer = driver._connect(KafkaConsumer, driver.consumer_config(), "consumer")
        _apply_finished_joins(self.consumer)
        topics = [self.topic] + ([self.retry_topic] if self.retry_topic else [])
        self.consumer.subscribe(topics, listener=rebalance_listener(self))

    def _fetch(self, max_messages: int, timeout: float) -> None:
        """One poll of kafka-python's consumer, its records tracked (caller holds _poll_lock)."""
        _keep_join_alive(self.consumer)
        records = self.consumer.poll(timeout_ms=int(timeout * 1000), max_records=max(max_messages, 10))
        if records:
            self._track_fetched(records)

    def _lag(self, partitions: list[Any]) -> int:
        """Records of ``partitions`` past this member's position (kafka-python's cached highwater)."""
        lag = 0
        for tp in partitions:
            high = self.consumer.highwater(tp)
            if high is None:
                continue
            try:
                position = self.consumer.position(tp, timeout_ms=1000)
            except Exception:
                continue
            lag += max(0, high - position)
        return lag

    def _commit_now(self, offsets: dict[Any, Any]) -> None:
        self.consumer.commit(offsets, timeout_ms=self._commit_timeout_ms)

    def _close_clients(self) -> None:
        try:
            self.consumer.close(autocommit=False, timeout_ms=_CLOSE_TIMEOUT_MS)
        finally:
            if self._producer is not None:
                self._producer.close(timeout=self.settings.request_timeout)
