"""The cost meter's settings: which service prices each provider, where the bytes go, overrides.

From code (:class:`CostSettings`) or from the ``[cost]`` table of ``portable.toml``
(the file :func:`portable.config.config_path` finds)::

    [cost]
    services = { s3 = "s3-express" }   # family -> a PRICES entry (default: the first below)
    egress = "internet"                # or "in-region" (the default): where read bytes go
    egress_by_resource = { "public-assets" = "internet" }
    days_per_month = 30                # for --per-month projections

    [cost.prices.s3-standard]          # any figure of a PRICES entry
    tier1 = 0.0000055
    egress_per_gb = 0.085

An unknown key, service, family, price class or value is a ConfigError naming
the key, never ignored. A bucket whose name ends in ``--x-s3`` is an S3
directory bucket and is priced as ``s3-express`` unless ``services`` says otherwise.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigError
from .prices import PRICES, SERVICE_CLASSES, ServicePrices, with_overrides

__all__ = ["DEFAULT_SERVICES", "CostSettings", "load_cost_settings"]

Egress = Literal["in-region", "internet"]

#: family -> the service that prices it unless the settings say otherwise
DEFAULT_SERVICES: dict[str, str] = {
    "s3": "s3-standard",
    "gcs": "gcs-standard",
    "azure-blob": "azure-blob-hot",
    "sqs": "sqs-standard",
    "pubsub": "pubsub",
    "azure-queue": "azure-queue",
}

#: which services may price a family
_FAMILY_OF_SERVICE: dict[str, str] = {
    "s3-standard": "s3",
    "s3-express": "s3",
    "gcs-standard": "gcs",
    "azure-blob-hot": "azure-blob",
    "sqs-standard": "sqs",
    "pubsub": "pubsub",
    "azure-queue": "azure-queue",
}

_KEYS = frozenset({"services", "egress", "egress_by_resource", "days_per_month", "prices"})
_PRICE_FIELDS = frozenset({"egress_per_gb", "storage_per_gb_month", "upload", "retrieval", "region", "tier", "as_of"})


def _closest(name: str, known: Any) -> str:
    near = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {near[0]}?)" if near else ""


@dataclass(frozen=True)
class CostSettings:
    """How the meter prices what it counts.

    Attributes:
        services: family ("s3", "gcs", "azure-blob", "sqs", "pubsub", "azure-queue") -> the
            PRICES entry that prices it. Defaults to :data:`DEFAULT_SERVICES`.
        egress: where the bytes read from a provider go: "in-region" (no charge: the caller
            runs in the bucket's region, the default) or "internet" (each GB at the
            service's ``egress_per_gb``).
        egress_by_resource: a bucket or queue name -> its own egress assumption.
        days_per_month: the month of a ``--per-month`` projection. Defaults to 30.
        prices: the price table in force (PRICES with the overrides applied).
    """

    services: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_SERVICES))
    egress: Egress = "in-region"
    egress_by_resource: Mapping[str, Egress] = field(default_factory=dict)
    days_per_month: float = 30.0
    prices: Mapping[str, ServicePrices] = field(default_factory=lambda: dict(PRICES))

    def __post_init__(self) -> None:
        check_settings(self, "CostSettings")

    def service_for(self, family: str, resource: str = "") -> ServicePrices:
        """The prices of ``family``'s calls on ``resource`` (an S3 ``--x-s3`` bucket is Express)."""
        name = self.services.get(family, DEFAULT_SERVICES[family])
        if family == "s3" and resource.endswith("--x-s3") and name == DEFAULT_SERVICES["s3"]:
            name = "s3-express"
        return self.prices[name]

    def egress_of(self, resource: str) -> Egress:
        """The egress assumption for ``resource``."""
        return self.egress_by_resource.get(resource, self.egress)


def check_settings(settings: CostSettings, where: str) -> None:
    """Raise ConfigError for an unknown family or service, a bad egress or month."""
    for family, service in settings.services.items():
        if family not in DEFAULT_SERVICES:
            raise ConfigError(
                f"{where}: unknown provider family {family!r}{_closest(family, DEFAULT_SERVICES)}; "
                f"expected one of {', '.join(DEFAULT_SERVICES)}"
            )
        if service not in settings.prices:
            raise ConfigError(
                f"{where}: unknown service {service!r}{_closest(service, settings.prices)}; "
                f"expected one of {', '.join(sorted(settings.prices))}"
            )
        if _FAMILY_OF_SERVICE.get(service) != family:
            raise ConfigError(f"{where}: service {service!r} cannot price {family} calls")
    for name, value in [("egress", settings.egress), *settings.egress_by_resource.items()]:
        if value not in ("in-region", "internet"):
            raise ConfigError(f"{where}: egress of {name!r} must be 'in-region' or 'internet', got {value!r}")
    days = settings.days_per_month
    if isinstance(days, bool) or not isinstance(days, (int, float)) or not (0 < days <= 31) or math.isnan(days):
        raise ConfigError(f"{where}: days_per_month must be a number of days from 1 to 31, got {days!r}")


def _overrides(path: Path, table: Any) -> dict[str, ServicePrices]:
    prices = dict(PRICES)
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: cost.prices must be a table of [cost.prices.SERVICE]")
    for service, figures in table.items():
        if service not in PRICES:
            raise ConfigError(
                f"{path}: unknown service cost.prices.{service}{_closest(service, PRICES)}; "
                f"expected one of {', '.join(sorted(PRICES))}"
            )
        if not isinstance(figures, dict):
            raise ConfigError(f"{path}: cost.prices.{service} must be a table of figures")
        family = _FAMILY_OF_SERVICE[service]
        allowed = set(SERVICE_CLASSES[family]) | _PRICE_FIELDS
        for name, value in figures.items():
            where = f"cost.prices.{service}.{name}"
            if name not in allowed:
                raise ConfigError(f"{path}: unknown key {where}{_closest(name, allowed)}; expected {', '.join(sorted(allowed))}")
            if name in ("region", "tier", "as_of"):
                if not isinstance(value, str) or not value:
                    raise ConfigError(f"{path}: {where} = {value!r}: must be a non-empty string")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ConfigError(f"{path}: {where} = {value!r}: must be a price in USD, >= 0")
        prices[service] = with_overrides(PRICES[service], figures)
    return prices


def load_cost_settings(path: Path | None = None) -> CostSettings:
    """The settings of ``path``'s ``[cost]`` table (default: the config file in force), or the
    defaults when there is no file or no table.

    Raises:
        ConfigError: the file is not TOML, or the table has an unknown key or a bad value.
    """
    if path is None:
        from ..config import config_path

        path = config_path()
        if path is None:
            return CostSettings()
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from None
    table = data.get("cost")
    if table is None:
        return CostSettings()
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: 'cost' must be a table ([cost])")
    unknown = set(table) - _KEYS
    if unknown:
        raise ConfigError(
            f"{path}: unknown key(s) {', '.join(sorted(unknown))} in [cost]; expected {', '.join(sorted(_KEYS))}"
        )
    services = dict(DEFAULT_SERVICES)
    given = table.get("services", {})
    if not isinstance(given, dict):
        raise ConfigError(f"{path}: cost.services must be a table of family = \"service\"")
    services.update(given)
    by_resource = table.get("egress_by_resource", {})
    if not isinstance(by_resource, dict):
        raise ConfigError(f"{path}: cost.egress_by_resource must be a table of name = \"in-region\"|\"internet\"")
    try:
        return CostSettings(
            services=services,
            egress=table.get("egress", "in-region"),
            egress_by_resource=by_resource,
            days_per_month=table.get("days_per_month", 30.0),
            prices=_overrides(path, table.get("prices", {})),
        )
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("CostSettings", f"{path}: [cost]", 1)) from None
