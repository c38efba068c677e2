"""The cost meter: what each call costs, per provider price class, and what a traffic pattern would.

* :class:`CostMeter` counts the requests of every guarded call (a guard observer,
  :mod:`portable.telemetry`), per service, bucket or queue and price class, and
  the bytes each moved; :meth:`CostMeter.report` prices them, :meth:`CostMeter.save`
  keeps them for ``portable cost --from FILE``.
* :data:`PRICES` is the dated, sourced table of list prices (:mod:`portable.cost.prices`);
  :class:`CostSettings` chooses the service per provider (S3 Standard or S3 Express
  One Zone, ...), the egress assumption and overrides, also from ``[cost]`` in portable.toml.
* :func:`project` prices a :class:`Traffic` pattern on several providers without running it.

docs/cost.md has the price classes, how multi-request calls are counted, and the table.
"""

from __future__ import annotations

from ._meter import CostMeter
from ._project import PROVIDER_ALIASES, Projection, Traffic, parse_count, parse_size, project
from ._report import Report, ReportLine, Usage, UsageRow
from ._settings import DEFAULT_SERVICES, CostSettings, load_cost_settings
from .prices import AS_OF, PRICES, ServicePrices

__all__ = [
    "AS_OF",
    "DEFAULT_SERVICES",
    "PRICES",
    "PROVIDER_ALIASES",
    "CostMeter",
    "CostSettings",
    "Projection",
    "Report",
    "ReportLine",
    "ServicePrices",
    "Traffic",
    "Usage",
    "UsageRow",
    "load_cost_settings",
    "parse_count",
    "parse_size",
    "project",
]
