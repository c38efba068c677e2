"""The price table: public list prices, dated, each with the page it was read from.

Prices are USD list prices (no free tier, no volume tier beyond the first, no
discount). Each :class:`ServicePrices` says the region and storage tier it is
for, the date the figures were read (``as_of``), where (``sources``), and which
figures could not be checked against the provider's own page (``unverified``);
docs/cost.md prints the same table. The web was not reachable when this table
was made: the figures were read from stored copies of the pages named in
``sources`` (the provider's page where one was stored, else a dated third-party
transcription of it), on the date given.

Each price class maps to the price of one *billed unit*: a request for S3, GCS,
Azure Blob and Azure Queue; a 64 KiB chunk of a request's payload for SQS; a
byte for Pub/Sub (at least 1,000 bytes per request). ``per_gb`` holds the
per-byte fees that are not egress (S3 Express One Zone's data upload and
retrieval); ``egress_per_gb`` the price of a GB leaving the provider's network
to the internet, first paid tier (the first 100 GB a month are free on AWS and
Azure, which a per-run meter does not subtract).

Override any figure in ``portable.toml`` (see :mod:`portable.cost._settings`)::

    [cost.prices.s3-standard]
    tier1 = 0.0000055      # USD per PUT/COPY/POST/LIST request
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

__all__ = ["AS_OF", "PRICES", "SERVICE_CLASSES", "ServicePrices", "with_overrides"]

#: when the table's figures were read (each service repeats it, so an override can date its own)
AS_OF = "2026-12-01"

_GIB = 1024**3


@dataclass(frozen=True)
class ServicePrices:
    """The list prices of one provider service in one region and tier.

    Attributes:
        service: the table's name for it ("s3-standard", "gcs-standard", ...).
        provider: "aws", "gcp" or "azure".
        region: the region the prices are for.
        tier: the storage tier or queue type.
        unit: what one billed unit is ("request", "64KiB-chunk", "byte").
        classes: price class -> USD per billed unit.
        per_gb: other per-GB fees (S3 Express One Zone's "upload" and "retrieval"), USD per GiB.
        egress_per_gb: USD per GiB to the internet, first paid tier.
        as_of: when the figures were read.
        sources: the pages they come from.
        unverified: the figures (class names, "egress", "storage") that nothing found confirmed:
            neither a stored copy of the provider's page, nor a dated transcription of it, nor a
            third party quoting it; docs/cost.md says which source confirmed the others.
        storage_per_gb_month: USD per GiB-month stored (for projections that say a size).
    """

    service: str
    provider: str
    region: str
    tier: str
    unit: str
    classes: Mapping[str, float]
    egress_per_gb: float
    as_of: str
    sources: tuple[str, ...]
    unverified: tuple[str, ...] = ()
    per_gb: Mapping[str, float] = field(default_factory=dict)
    storage_per_gb_month: float = 0.0

    def price_of(self, price_class: str) -> float:
        """USD per billed unit of ``price_class`` (0 for a free class such as "delete")."""
        return self.classes.get(price_class, 0.0)


_S3_PAGE = "https://aws.amazon.com/s3/pricing/"
_S3_FAQ = "https://aws.amazon.com/s3/faqs/ (S3 Express One Zone pricing examples)"
_S3_REQ_THIRD = "https://docs.zilliz.com/docs/storage-request-cost (AWS us-east-1 Class 1 $5.00/M, Class 2 $0.40/M)"
_GCS_PAGE = "https://cloud.google.com/storage/pricing"
_GCS_THIRD = (
    "https://raw.githubusercontent.com/api-evangelist/gcp-cloud-storage/refs/heads/main/plans/"
    "gcp-cloud-storage-plans-pricing.yml (transcribed from the GCS page 2026-09-20)"
)
_AZ_PAGE = "https://azure.microsoft.com/en-us/pricing/details/storage/blobs/"
_AZ_OPS = "https://learn.microsoft.com/en-us/azure/storage/blobs/map-rest-apis-transaction-categories"
_AZ_THIRD = (
    "https://raw.githubusercontent.com/api-evangelist/microsoft-azure-blob-storage/refs/heads/main/plans/"
    "microsoft-azure-blob-storage-plans-pricing.yml (LRS US East, written 2026-05-04, not harvested from the page)"
)
_AZQ_PAGE = "https://azure.microsoft.com/en-us/pricing/details/storage/queues/"
_SQS_PAGE = "https://aws.amazon.com/sqs/pricing/"
_SQS_THIRD = "https://cloudburn.io/blog/amazon-sqs-pricing (us-east-1, March 2026)"
_PUBSUB_PAGE = "https://cloud.google.com/pubsub/pricing"

#: the price classes each family of services counts, in report order
SERVICE_CLASSES: dict[str, tuple[str, ...]] = {
    "s3": ("tier1", "tier2", "delete"),
    "gcs": ("class_a", "class_b", "delete"),
    "azure-blob": ("write", "read", "list_create", "other", "delete"),
    "sqs": ("request",),
    "pubsub": ("throughput", "free"),
    "azure-queue": ("operation", "delete"),
}

PRICES: dict[str, ServicePrices] = {
    "s3-standard": ServicePrices(
        service="s3-standard", provider="aws", region="us-east-1", tier="S3 Standard", unit="request",
        classes={"tier1": 0.005 / 1000, "tier2": 0.0004 / 1000, "delete": 0.0},
        egress_per_gb=0.09, storage_per_gb_month=0.023,
        as_of=AS_OF, sources=(_S3_PAGE, _S3_REQ_THIRD),
        unverified=("storage", "egress"),
    ),
    "s3-express": ServicePrices(
        service="s3-express", provider="aws", region="us-east-1", tier="S3 Express One Zone", unit="request",
        classes={"tier1": 0.00113 / 1000, "tier2": 0.00003 / 1000, "delete": 0.0},
        # the FAQ's examples charge upload and retrieval on every byte of a request (10 KB requests)
        per_gb={"upload": 0.0032, "retrieval": 0.0006},
        egress_per_gb=0.09, storage_per_gb_month=0.11,
        as_of=AS_OF, sources=(_S3_FAQ, _S3_PAGE),
        unverified=("egress",),
    ),
    "gcs-standard": ServicePrices(
        service="gcs-standard", provider="gcp", region="us-central1", tier="Standard", unit="request",
        classes={"class_a": 0.005 / 1000, "class_b": 0.0004 / 1000, "delete": 0.0},
        egress_per_gb=0.12, storage_per_gb_month=0.020,
        as_of=AS_OF, sources=(_GCS_PAGE, _GCS_THIRD),
        unverified=(),
    ),
    "azure-blob-hot": ServicePrices(
        service="azure-blob-hot", provider="azure", region="eastus", tier="Hot (LRS)", unit="request",
        classes={
            "write": 0.055 / 10000, "read": 0.0044 / 10000, "list_create": 0.055 / 10000,
            "other": 0.0044 / 10000, "delete": 0.0,
        },
        egress_per_gb=0.087, storage_per_gb_month=0.018,
        as_of=AS_OF, sources=(_AZ_PAGE, _AZ_THIRD, _AZ_OPS),
        unverified=("write", "read", "list_create", "other", "egress", "storage"),
    ),
    "sqs-standard": ServicePrices(
        service="sqs-standard", provider="aws", region="us-east-1", tier="Standard queue", unit="64KiB-chunk",
        classes={"request": 0.40 / 1_000_000},
        egress_per_gb=0.09,
        as_of=AS_OF, sources=(_SQS_PAGE, _SQS_THIRD),
        unverified=("egress",),
    ),
    "pubsub": ServicePrices(
        service="pubsub", provider="gcp", region="global", tier="Pub/Sub (throughput)", unit="byte",
        classes={"throughput": 40.0 / 1024**4, "free": 0.0},
        egress_per_gb=0.12,
        as_of=AS_OF, sources=(_PUBSUB_PAGE,),
        unverified=("egress",),
    ),
    "azure-queue": ServicePrices(
        service="azure-queue", provider="azure", region="eastus", tier="Queue Storage (GPv2, LRS)", unit="request",
        classes={"operation": 0.004 / 10000, "delete": 0.004 / 10000},
        egress_per_gb=0.087,
        as_of=AS_OF, sources=(_AZQ_PAGE,),
        unverified=("operation", "delete", "egress"),
    ),
}  # fmt: skip

#: the bytes one "GB" is in every per-GB figure above (the providers bill GiB and call it GB)
GB = _GIB


def with_overrides(base: ServicePrices, overrides: Mapping[str, float | str]) -> ServicePrices:
    """``base`` with the figures a user gave: class names, "egress_per_gb", "storage_per_gb_month",
    "upload"/"retrieval" (per GB), "region", "tier" or "as_of". The caller checked the names."""
    classes = dict(base.classes)
    per_gb = dict(base.per_gb)
    changes: dict[str, object] = {}
    for name, value in overrides.items():
        if name in ("region", "tier", "as_of"):
            changes[name] = value
        elif name in ("egress_per_gb", "storage_per_gb_month"):
            changes[name] = float(value)
        elif name in ("upload", "retrieval"):
            per_gb[name] = float(value)
        else:
            classes[name] = float(value)
    overridden = tuple(sorted(set(overrides) - {"region", "tier", "as_of"}))
    sources = (*base.sources, f"portable.toml overrides: {', '.join(overridden)}") if overridden else base.sources
    return replace(base, classes=classes, per_gb=per_gb, sources=sources, **changes)  # type: ignore[arg-type]
