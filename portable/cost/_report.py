"""Counts and their prices: what a run used (:class:`Usage`) and what it cost (:class:`Report`).

A :class:`Usage` is what :class:`~portable.cost.CostMeter` counted: requests and
billed units per (service, resource, price class), and bytes sent and received
per (service, resource). :meth:`Usage.priced` applies a
:class:`~portable.cost.CostSettings` (its price table and egress assumption),
so a saved run can be priced again under other settings; :meth:`Report.per_month`
scales a run to a month of the same traffic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ._settings import CostSettings
from .prices import GB

__all__ = ["FORMAT", "Report", "ReportLine", "Usage", "UsageRow"]

#: the saved meter's format name; a file of another format is refused
FORMAT = "portable.cost/1"


@dataclass(frozen=True)
class UsageRow:
    """Requests of one price class on one bucket or queue."""

    service: str
    family: str
    resource: str
    price_class: str
    requests: int
    units: float


class Usage:
    """What a meter counted between ``started`` and ``ended`` (epoch seconds)."""

    def __init__(
        self,
        rows: list[UsageRow],
        moved: Mapping[tuple[str, str], tuple[int, int]],
        *,
        started: float,
        ended: float,
    ) -> None:
        self.rows = rows
        self.moved = dict(moved)
        self.started = started
        self.ended = ended

    @property
    def requests(self) -> int:
        """Every request counted."""
        return sum(r.requests for r in self.rows)

    def requests_of(self, price_class: str | None = None, *, service: str | None = None,
                    resource: str | None = None) -> int:
        """The requests counted of one price class (and service, resource), or all of them."""
        return sum(
            r.requests for r in self.rows
            if (price_class is None or r.price_class == price_class)
            and (service is None or r.service == service)
            and (resource is None or r.resource == resource)
        )  # fmt: skip

    def units_of(self, price_class: str, *, service: str | None = None) -> float:
        """The billed units of one price class (SQS chunks, Pub/Sub bytes)."""
        return sum(
            r.units for r in self.rows if r.price_class == price_class and (service is None or r.service == service)
        )

    def bytes_out(self, resource: str | None = None) -> int:
        """Bytes received from the provider (downloads, received messages)."""
        return sum(out for (_, res), (_, out) in self.moved.items() if resource is None or res == resource)

    def bytes_in(self, resource: str | None = None) -> int:
        """Bytes sent to the provider (uploads, published messages)."""
        return sum(sent for (_, res), (sent, _) in self.moved.items() if resource is None or res == resource)

    def to_dict(self) -> dict[str, Any]:
        """The form :meth:`CostMeter.save` writes."""
        return {
            "format": FORMAT,
            "started": self.started,
            "ended": self.ended,
            "requests": [
                {"service": r.service, "family": r.family, "resource": r.resource,
                 "price_class": r.price_class, "requests": r.requests, "units": r.units}
                for r in self.rows
            ],
            "bytes": [
                {"service": s, "resource": res, "in": b_in, "out": b_out}
                for (s, res), (b_in, b_out) in self.moved.items()
            ],
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "the saved meter") -> Usage:
        """Read :meth:`to_dict`'s form back.

        Raises:
            ConfigError: a field is missing or of the wrong type.
        """
        try:
            rows = [
                UsageRow(str(r["service"]), str(r["family"]), str(r["resource"]), str(r["price_class"]),
                         int(r["requests"]), float(r["units"]))
                for r in data["requests"]
            ]
            moved = {(str(b["service"]), str(b["resource"])): (int(b["in"]), int(b["out"])) for b in data["bytes"]}
            return cls(rows, moved, started=float(data["started"]), ended=float(data["ended"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: a saved cost meter with a missing or bad field ({exc})") from None

    def priced(self, settings: CostSettings | None = None) -> Report:
        """These counts at the prices of ``settings`` (default: the defaults).

        Raises:
            ConfigError: a row names a service the settings' table does not have.
        """
        settings = settings if settings is not None else CostSettings()
        lines: list[ReportLine] = []
        for r in self.rows:
            prices = _prices(settings, r.service)
            lines.append(ReportLine(r.service, r.resource, r.price_class, r.requests, r.units,
                                    r.units * prices.price_of(r.price_class)))  # fmt: skip
        for (service, resource), (sent, received) in self.moved.items():
            prices = _prices(settings, service)
            for fee, nbytes in (("upload", sent), ("retrieval", received)):
                per_gb = prices.per_gb.get(fee)
                if per_gb and nbytes:
                    lines.append(ReportLine(service, resource, fee, 0, nbytes, nbytes / GB * per_gb))
            if received and settings.egress_of(resource) == "internet":
                lines.append(ReportLine(service, resource, "egress", 0, received, received / GB * prices.egress_per_gb))
        return Report(lines, self.ended - self.started, settings)


def _prices(settings: CostSettings, service: str) -> Any:
    try:
        return settings.prices[service]
    except KeyError:
        raise ConfigError(f"the saved meter names service {service!r}, which the price table lacks") from None


@dataclass(frozen=True)
class ReportLine:
    """One priced line: requests (and billed units) of a price class, or bytes of a per-GB fee."""

    service: str
    resource: str
    item: str
    requests: int
    units: float
    usd: float


class Report:
    """A run's counts with their prices; :meth:`per_month` scales it to a month."""

    def __init__(self, lines: list[ReportLine], seconds: float, settings: CostSettings, scale: float = 1.0) -> None:
        self.lines = lines
        self.seconds = seconds
        self.settings = settings
        self.scale = scale

    @property
    def usd(self) -> float:
        """The total in USD."""
        return sum(line.usd for line in self.lines)

    @property
    def requests(self) -> int:
        """Every request counted."""
        return sum(line.requests for line in self.lines)

    def per_month(self) -> Report:
        """The same traffic for ``settings.days_per_month`` days: every figure times month / run.

        Raises:
            ConfigError: the run lasted no measurable time.
        """
        if self.seconds <= 0:
            raise ConfigError("the run lasted no measurable time: it cannot be projected to a month")
        factor = self.settings.days_per_month * 86400 / self.seconds
        scaled = [
            ReportLine(x.service, x.resource, x.item, round(x.requests * factor), x.units * factor, x.usd * factor)
            for x in self.lines
        ]
        return Report(scaled, self.seconds, self.settings, factor)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (``portable cost --json``)."""
        services = sorted({x.service for x in self.lines})
        return {
            "seconds": self.seconds,
            "scale": self.scale,
            "days_per_month": self.settings.days_per_month,
            "usd": self.usd,
            "requests": self.requests,
            "lines": [x.__dict__ for x in self.lines],
            "prices": {
                s: {"as_of": self.settings.prices[s].as_of, "region": self.settings.prices[s].region,
                    "tier": self.settings.prices[s].tier, "sources": list(self.settings.prices[s].sources)}
                for s in services
            },
        }  # fmt: skip

    def text(self) -> str:
        """The report as a table for a terminal."""
        title = "per month" if self.scale != 1.0 else f"this run ({self.seconds:.1f} s)"
        out = [f"portable cost: {title}"]
        head = f"{'service':<16} {'bucket/queue':<28} {'class':<12} {'requests':>14} {'units':>16} {'USD':>12}"
        out += [head, "-" * len(head)]
        for x in self.lines:
            out.append(
                f"{x.service:<16} {x.resource[:28]:<28} {x.item:<12} {x.requests:>14,} {x.units:>16,.0f} {x.usd:>12.6f}"
            )
        out.append(f"{'total':<58} {self.requests:>14,} {'':>16} {self.usd:>12.6f}")
        for s in sorted({x.service for x in self.lines}):
            p = self.settings.prices[s]
            out.append(f"prices {s}: {p.tier}, {p.region}, as of {p.as_of}; {'; '.join(p.sources)}")
        egress = self.settings.egress
        out.append(f"egress assumption: {egress}" + (" (bytes read are not priced)" if egress == "in-region" else ""))
        return "\n".join(out)
