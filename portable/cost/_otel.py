"""The meter's counts as OpenTelemetry metrics, when opentelemetry-api is installed and a
meter provider is set (the global proxy, or no package at all, means off).

Instruments (meter ``portable.cost``), each a monotonic counter:

* ``portable.cost.requests`` (unit ``{request}``): requests sent, by price class;
* ``portable.cost.usd`` (unit ``{USD}``: UCUM has no currency, so the unit is an
  annotation, as the conventions advise for non-units): their list price;
* ``portable.cost.transfer`` (unit ``By``): bytes received from the provider
  (``portable.cost.direction`` = ``out``) and sent to it (``in``).

Attributes: ``cloud.provider`` (aws, gcp, azure), ``portable.cost.service``
(the price table's entry, e.g. ``s3-standard``), ``portable.cost.resource`` (the
bucket or queue), ``portable.cost.price_class`` (``tier1``, ``class_b``, ...;
for bytes the fee: ``egress``, ``retrieval``, ``upload``, ``none``).
No ``portable.cost.*`` name is in the semantic conventions: the prefix is portable's own.
"""

from __future__ import annotations

import sys
from typing import Any

from ._classes import Counted
from ._settings import CostSettings
from .prices import GB

__all__ = ["CostInstruments"]


class CostInstruments:
    """The three counters of one meter provider."""

    def __init__(self, meter: Any) -> None:
        self.requests = meter.create_counter(
            "portable.cost.requests", unit="{request}", description="Requests sent, by provider price class"
        )
        self.usd = meter.create_counter(
            "portable.cost.usd", unit="{USD}", description="List price of the requests and bytes, in USD"
        )
        self.transfer = meter.create_counter(
            "portable.cost.transfer", unit="By", description="Bytes moved to (in) and from (out) the provider"
        )

    @classmethod
    def if_provider_set(cls, provider: Any = None) -> CostInstruments | None:
        """Instruments on ``provider``, or on the global meter provider when a real one is set;
        None when there is none, or when the program never imported opentelemetry (then no
        provider can have been set: like :mod:`portable.telemetry`, the meter never imports it
        first)."""
        if provider is None:
            if "opentelemetry" not in sys.modules:
                return None
            try:
                from ..telemetry._otel import _real_meter_provider
            except ImportError:
                return None
            provider = _real_meter_provider()
            if provider is None:
                return None
        from .. import __version__

        return cls(provider.get_meter("portable.cost", __version__))

    def record(self, settings: CostSettings, service: str, resource: str, counted: Counted) -> None:
        """Add one call's counts (an exporter's failure never reaches the call)."""
        try:
            prices = settings.prices[service]
            base = {
                "cloud.provider": prices.provider,
                "portable.cost.service": service,
                "portable.cost.resource": resource,
            }
            for charge in counted.charges:
                attrs = {**base, "portable.cost.price_class": charge.price_class}
                if charge.requests:
                    self.requests.add(charge.requests, attrs)
                usd = charge.units * prices.price_of(charge.price_class)
                if usd:
                    self.usd.add(usd, attrs)
            for direction, nbytes, fee in (("in", counted.bytes_in, "upload"), ("out", counted.bytes_out, "retrieval")):
                if not nbytes:
                    continue
                usd = nbytes / GB * prices.per_gb.get(fee, 0.0)
                egress = direction == "out" and settings.egress_of(resource) == "internet"
                self.transfer.add(nbytes, {**base, "portable.cost.direction": direction,
                                           "portable.cost.price_class": "egress" if egress else fee})  # fmt: skip
                if egress:
                    usd += nbytes / GB * prices.egress_per_gb
                if usd:
                    self.usd.add(usd, {**base, "portable.cost.price_class": "egress" if egress else fee})
        except Exception:  # an observer must not raise (portable.telemetry._observe)
            pass
