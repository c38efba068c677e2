"""The metrics portable records through the OpenTelemetry metrics API.

Names follow the conventions' shape (``{namespace}.client.operation.duration``, as
``db.client.operation.duration`` and ``messaging.client.operation.duration`` do) under the
``portable`` namespace, since one portable call may be storage, messaging, compute or a
store; units are UCUM (``s``, ``By``, ``{request}``).

========================================  =========  ============  ==========================================
name                                      kind       unit          attributes (besides provider/operation/target)
========================================  =========  ============  ==========================================
``portable.client.operation.duration``    histogram  ``s``         ``portable.outcome`` (ok, error), ``error.type``;
                                                                   its count is the number of calls
``portable.client.requests``              counter    ``{request}`` the same; one per attempt (what the provider served)
``portable.client.io``                    counter    ``By``        ``network.io.direction`` (transmit, receive)
``portable.client.retries``               counter    ``{retry}``   ``error.type`` of the failure retried
``portable.client.rejections``            counter    ``{call}``    ``portable.rejected_by`` (breaker, retry_budget)
``portable.breaker.state_changes``        counter    ``{change}``  ``portable.breaker.name``, ``portable.breaker.state``,
                                                                   ``portable.breaker.previous_state``
``portable.idempotency.claims``           counter    ``{claim}``   ``portable.idempotency.outcome`` (acquired,
                                                                   completed: a hit, in_progress, error),
                                                                   ``portable.idempotency.store``
``messaging.client.sent.messages``        counter    ``{message}`` the conventions' own: ``messaging.system``,
                                                                   ``messaging.destination.name``,
                                                                   ``messaging.operation.name``, ``error.type``
``messaging.client.consumed.messages``    counter    ``{message}`` the same, for messages received
========================================  =========  ============  ==========================================

Every call's metrics carry ``portable.provider`` (the scheme), ``portable.operation`` (the driver
method), ``cloud.provider`` where there is one, ``server.address`` for a network endpoint, and
``portable.target`` (the bucket, queue or topic name).
"""

from __future__ import annotations

from typing import Any

__all__ = ["DURATION_BUCKETS", "Instruments"]

#: the conventions' advice for client operation durations (seconds)
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


class Instruments:
    """The instruments of one meter, made once."""

    __slots__ = (
        "breaker_changes",
        "claims",
        "consumed_messages",
        "duration",
        "io",
        "rejections",
        "requests",
        "retries",
        "sent_messages",
    )

    def __init__(self, meter: Any) -> None:
        try:
            self.duration = meter.create_histogram(
                "portable.client.operation.duration",
                unit="s",
                description="Duration of portable operations (all attempts of one call)",
                explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
            )
        except TypeError:  # an API before 1.23 takes no advice
            self.duration = meter.create_histogram(
                "portable.client.operation.duration", unit="s", description="Duration of portable operations"
            )
        self.requests = meter.create_counter(
            "portable.client.requests", unit="{request}", description="Requests sent to providers (attempts)"
        )
        self.io = meter.create_counter("portable.client.io", unit="By", description="Payload bytes sent and received")
        self.retries = meter.create_counter("portable.client.retries", unit="{retry}", description="Attempts retried")
        self.rejections = meter.create_counter(
            "portable.client.rejections",
            unit="{call}",
            description="Calls or retries refused by an open breaker or a spent retry budget",
        )
        self.breaker_changes = meter.create_counter(
            "portable.breaker.state_changes", unit="{change}", description="Circuit breaker state changes"
        )
        self.claims = meter.create_counter(
            "portable.idempotency.claims", unit="{claim}", description="Idempotency claims by outcome"
        )
        self.sent_messages = meter.create_counter(
            "messaging.client.sent.messages", unit="{message}", description="Messages a producer attempted to send"
        )
        self.consumed_messages = meter.create_counter(
            "messaging.client.consumed.messages", unit="{message}", description="Messages a consumer received"
        )
