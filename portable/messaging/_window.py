"""What both faces' batched consumer loops do when a window of messages is settled."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..driver.messaging import ACKED, LEASED, Delivery
from ..errors import PreconditionFailed

if TYPE_CHECKING:
    from ._claims import RunClaims

__all__ = ["acked_in_batch", "hold_settlement", "hold_window", "report_failed_acks"]

log = logging.getLogger("portable.messaging")


def hold_settlement(loop: Any, claims: RunClaims | None, message: Delivery, claimed: bool, result: object) -> None:
    """After a handler returned in a batched loop (both faces): hold ``message``'s completion and ack
    back until its window is settled (completions first, then acks), and count it acked.

    ``loop`` has the window's ``completes`` and ``acks`` lists and the run's ``stats``.
    """
    if claimed:
        assert claims is not None
        held = claims.forget_held(message)
        if held is not None:
            loop.completes.append((message, held, result if isinstance(result, bytes) else None))
    if message._state is LEASED:
        loop.acks.append(message)
        loop.stats.acked += 1  # only the batch worker counts acks in a batched run
    elif message._state is ACKED:
        loop.stats.acked += 1


def hold_window(loop: Any, claims: RunClaims, ok: list[Delivery], results: dict[int, bytes]) -> None:
    """:func:`hold_settlement` for each message of ``ok`` at once: the messages of a window run on
    one shared claim whose handlers returned (``results``: the bytes results, by ``id(message)``)."""
    if not ok:
        return
    held = claims.take_held(ok)
    if results:
        get = results.get
        loop.completes.extend((m, h, get(id(m))) for m, h in zip(ok, held, strict=True) if h is not None)
    elif None in held:
        loop.completes.extend((m, h, None) for m, h in zip(ok, held, strict=True) if h is not None)
    else:
        loop.completes.extend(zip(ok, held, itertools.repeat(None)))
    leased = [m for m in ok if m._state is LEASED]
    loop.acks.extend(leased)
    acked = len(leased) if len(leased) == len(ok) else len(leased) + sum(1 for m in ok if m._state is ACKED)
    loop.stats.acked += acked  # only the batch worker counts acks in a batched run


def report_failed_acks(acks: Sequence[Delivery], errors: Sequence[BaseException | None], count: Callable[[str], None]) -> int:
    """Log each message of a settled window whose ack failed (a lost lease also counted as
    ``"lost"``): it will be delivered again. Returns how many failed (both faces' flush)."""
    failed = 0
    for message, error in zip(acks, errors, strict=True):
        if error is None:
            continue
        failed += 1
        if isinstance(error, PreconditionFailed):
            count("lost")
            log.warning("ack of message %s refused: its lease was lost, it will be delivered again", message.id)
        else:
            log.warning("ack of message %s failed: %s; it will be delivered again", message.id, error)
    return failed


def acked_in_batch(
    chunk: list[tuple[int, Delivery]], results: list[BaseException | None]
) -> list[tuple[int, Delivery]]:
    """Mark the messages of ``chunk`` ((index, message) pairs) a native batch ack acked; return the
    rest, to ack one by one (both faces' batched settlement)."""
    again: list[tuple[int, Delivery]] = []
    for (i, m), result in zip(chunk, results, strict=True):
        if result is None:
            m._state = ACKED
        else:
            again.append((i, m))
    return again
