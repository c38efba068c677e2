"""What a traffic pattern would cost a month on each provider, without running it.

    >>> from portable.cost import Traffic, project
    >>> rows = project(Traffic(gets_per_day=200e6, object_size=1024), ["s3", "s3express"])
    >>> [(r.service, round(r.usd, 2)) for r in rows]
    [('s3-standard', 2400.0), ('s3-express', 183.43)]

Storage traffic counts each GET/PUT/LIST/HEAD/DELETE as one request of its
price class (a PUT of an object larger than the service's part size is still
counted as one request: say ``puts_per_day`` in parts for multipart uploads);
per-GB fees (S3 Express One Zone's upload and retrieval) apply to every byte of
each request; egress applies to the bytes read when ``egress="internet"``.
Messaging traffic counts, per message, its publish, its receive and its ack in
requests of ``batch`` messages (SQS: each request billed per 64 KiB; Pub/Sub:
publish and pull billed by bytes, at least 1,000 per request, acks free; Azure
Queue: no batches, one operation each).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import InvalidArgument
from ._settings import CostSettings
from .prices import GB

__all__ = ["PROVIDER_ALIASES", "Projection", "Traffic", "parse_count", "parse_size", "project"]

#: what ``--providers`` accepts for each service of the price table (the names themselves too)
PROVIDER_ALIASES: dict[str, str] = {
    "s3": "s3-standard",
    "s3-standard": "s3-standard",
    "s3express": "s3-express",
    "s3-express": "s3-express",
    "gcs": "gcs-standard",
    "gs": "gcs-standard",
    "gcs-standard": "gcs-standard",
    "azure": "azure-blob-hot",
    "az": "azure-blob-hot",
    "azure-blob-hot": "azure-blob-hot",
    "sqs": "sqs-standard",
    "sqs-standard": "sqs-standard",
    "pubsub": "pubsub",
    "azqueue": "azure-queue",
    "azure-queue": "azure-queue",
}

_STORAGE = {"s3-standard": "s3", "s3-express": "s3", "gcs-standard": "gcs", "azure-blob-hot": "azure-blob"}
# family -> (write, read, list, head, delete) price classes
_CLASSES = {
    "s3": ("tier1", "tier2", "tier1", "tier2", "delete"),
    "gcs": ("class_a", "class_b", "class_a", "class_b", "delete"),
    "azure-blob": ("write", "read", "list_create", "other", "delete"),
}
_COUNT_SUFFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "B": 1e9, "T": 1e12}
_SIZE_UNITS = {
    "": 1, "B": 1, "KB": 1000, "KIB": 1024, "MB": 1000**2, "MIB": 1024**2,
    "GB": 1000**3, "GIB": 1024**3, "TB": 1000**4, "TIB": 1024**4,
}  # fmt: skip
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_count(text: str, what: str = "count") -> float:
    """``"200M"`` -> 2e8: a number with an optional k, M, G (or B, billions) or T suffix.

    Raises:
        InvalidArgument: not a non-negative number, or an unknown suffix.
    """
    m = _NUMBER.match(text)
    if m is None or m.group(2) not in _COUNT_SUFFIX:
        raise InvalidArgument(
            f"{what} {text!r} is not a count: write a number with an optional suffix k, M, G or T (e.g. 200M)"
        )
    return float(m.group(1)) * _COUNT_SUFFIX[m.group(2)]


def parse_size(text: str, what: str = "size") -> int:
    """``"1KiB"`` -> 1024: a number of bytes with an optional unit B, KB, KiB, MB, MiB, GB, GiB, TB, TiB.

    Raises:
        InvalidArgument: not a non-negative number, or an unknown unit.
    """
    m = _NUMBER.match(text)
    unit = m.group(2).upper() if m is not None else ""
    if m is None or unit not in _SIZE_UNITS:
        raise InvalidArgument(
            f"{what} {text!r} is not a size: write bytes with an optional unit "
            "B, KB, KiB, MB, MiB, GB, GiB, TB or TiB (e.g. 1KiB)"
        )
    return round(float(m.group(1)) * _SIZE_UNITS[unit])


@dataclass(frozen=True)
class Traffic:
    """A day's traffic: requests per day and the object (or message) size in bytes.

    Attributes:
        gets_per_day, puts_per_day, lists_per_day, heads_per_day, deletes_per_day: storage requests.
        object_size: bytes per GET and PUT.
        stored_gb: GiB kept stored all month (0: storage not priced).
        messages_per_day: messages published, each received once and acked once.
        message_size: bytes per message (body and attributes).
        batch: messages per publish, receive and ack request (1-10).
        egress: "internet" prices the bytes read at the service's egress rate; "in-region" does not.
    """

    gets_per_day: float = 0.0
    puts_per_day: float = 0.0
    lists_per_day: float = 0.0
    heads_per_day: float = 0.0
    deletes_per_day: float = 0.0
    object_size: int = 0
    stored_gb: float = 0.0
    messages_per_day: float = 0.0
    message_size: int = 0
    batch: int = 1
    egress: str = "in-region"

    def __post_init__(self) -> None:
        for name in ("gets_per_day", "puts_per_day", "lists_per_day", "heads_per_day", "deletes_per_day",
                     "object_size", "stored_gb", "messages_per_day", "message_size"):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise InvalidArgument(f"{name} must be a number >= 0, got {value!r}")
        if type(self.batch) is not int or not 1 <= self.batch <= 10:
            raise InvalidArgument(f"batch must be an int from 1 to 10, got {self.batch!r}")
        if self.egress not in ("in-region", "internet"):
            raise InvalidArgument(f"egress must be 'in-region' or 'internet', got {self.egress!r}")


@dataclass(frozen=True)
class Projection:
    """One service's month of a traffic pattern."""

    service: str
    tier: str
    region: str
    as_of: str
    days: float
    requests: float
    items: dict[str, float] = field(default_factory=dict)  # item -> USD
    sources: tuple[str, ...] = ()

    @property
    def usd(self) -> float:
        """The month's total."""
        return sum(self.items.values())


def _service(name: str) -> str:
    try:
        return PROVIDER_ALIASES[name.strip().lower()]
    except KeyError:
        raise InvalidArgument(
            f"unknown provider {name!r}; expected one of {', '.join(sorted(PROVIDER_ALIASES))}"
        ) from None


def project(traffic: Traffic, providers: Iterable[str], settings: CostSettings | None = None) -> list[Projection]:
    """A month (``settings.days_per_month`` days) of ``traffic`` on each of ``providers``.

    Raises:
        InvalidArgument: an unknown provider name, or no provider at all.
    """
    settings = settings if settings is not None else CostSettings()
    services = [_service(p) for p in providers]
    if not services:
        raise InvalidArgument("name at least one provider (e.g. s3,gcs,azure,s3express)")
    days = settings.days_per_month
    out = []
    for service in services:
        prices = settings.prices[service]
        items: dict[str, float] = {}
        if service in _STORAGE:
            requests = _storage(traffic, prices, _CLASSES[_STORAGE[service]], days, items)
        else:
            requests = _messages(traffic, prices, service, days, items)
        out.append(Projection(service, prices.tier, prices.region, prices.as_of, days, requests, items, prices.sources))
    return out


def _storage(traffic: Traffic, prices: object, classes: tuple[str, ...], days: float, items: dict[str, float]) -> float:
    from .prices import ServicePrices

    assert isinstance(prices, ServicePrices)
    write, read, listing, head, delete = classes
    counts = (
        (write, traffic.puts_per_day), (read, traffic.gets_per_day), (listing, traffic.lists_per_day),
        (head, traffic.heads_per_day), (delete, traffic.deletes_per_day),
    )  # fmt: skip
    requests = 0.0
    for price_class, per_day in counts:
        if per_day:
            n = per_day * days
            requests += n
            items[price_class] = items.get(price_class, 0.0) + n * prices.price_of(price_class)
    read_gb = traffic.gets_per_day * days * traffic.object_size / GB
    written_gb = traffic.puts_per_day * days * traffic.object_size / GB
    if prices.per_gb.get("retrieval") and read_gb:
        items["retrieval"] = read_gb * prices.per_gb["retrieval"]
    if prices.per_gb.get("upload") and written_gb:
        items["upload"] = written_gb * prices.per_gb["upload"]
    if traffic.egress == "internet" and read_gb:
        items["egress"] = read_gb * prices.egress_per_gb
    if traffic.stored_gb:
        items["storage"] = traffic.stored_gb * prices.storage_per_gb_month
    return requests


def _messages(traffic: Traffic, prices: object, service: str, days: float, items: dict[str, float]) -> float:
    from .prices import ServicePrices

    assert isinstance(prices, ServicePrices)
    messages = traffic.messages_per_day * days
    if not messages:
        return 0.0
    per_request = messages / traffic.batch  # publish, receive and ack requests, each
    payload = traffic.batch * traffic.message_size
    if service == "sqs-standard":
        chunks = max(1, math.ceil(payload / (64 * 1024)))
        requests = 3 * per_request
        items["request"] = (2 * per_request * chunks + per_request) * prices.price_of("request")
    elif service == "pubsub":
        requests = 3 * per_request
        billed = max(1000, payload + 20 * traffic.batch)
        items["throughput"] = 2 * per_request * billed * prices.price_of("throughput")
    else:  # Azure Queue: one operation per message each way
        requests = 3 * messages
        items["operation"] = 2 * messages * prices.price_of("operation")
        items["delete"] = messages * prices.price_of("delete")
    if traffic.egress == "internet":
        items["egress"] = messages * traffic.message_size / GB * prices.egress_per_gb
    return requests
