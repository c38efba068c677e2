"""portable: object storage, queues and job launchers through one provider-neutral API.

Service code names no provider; a profile does::

    import portable.storage
    bucket = portable.storage.open_bucket()       # the active profile's storage
    bucket.put("reports/2026-11.json", data, if_none_match="*")

Submodules: :mod:`portable.storage`, :mod:`portable.messaging`,
:mod:`portable.compute`, :mod:`portable.errors`, :mod:`portable.resilience`,
:mod:`portable.idempotency`, :mod:`portable.config`.
"""

from __future__ import annotations

from .compute import Job, JobSpec, JobState, JobStatus, Launcher, open_launcher
from .config import Profile, load_profile
from .errors import (
    AlreadyExists,
    Cancelled,
    CircuitOpen,
    ConfigError,
    DeadlineExceeded,
    ErrorCode,
    IdempotencyConflict,
    InProgress,
    Internal,
    InvalidArgument,
    InvalidKey,
    InvalidURL,
    MissingCapability,
    MissingDependency,
    NotFound,
    PermissionDenied,
    PortableError,
    PreconditionFailed,
    Throttled,
    TooLarge,
    Unavailable,
    UnknownScheme,
    Unsupported,
)
from .idempotency import IdempotencyStore, idempotent, open_store
from .messaging import Message, Subscription, Topic, open_subscription, open_topic
from .resilience import BreakerPolicy, CircuitBreaker, ResiliencePolicy, RetryPolicy, deadline
from .storage import Bucket, ObjectInfo, open_bucket

__version__ = "0.1.0"

__all__ = [
    "AlreadyExists",
    "BreakerPolicy",
    "Bucket",
    "Cancelled",
    "CircuitBreaker",
    "CircuitOpen",
    "ConfigError",
    "DeadlineExceeded",
    "ErrorCode",
    "IdempotencyConflict",
    "IdempotencyStore",
    "InProgress",
    "Internal",
    "InvalidArgument",
    "InvalidKey",
    "InvalidURL",
    "Job",
    "JobSpec",
    "JobState",
    "JobStatus",
    "Launcher",
    "Message",
    "MissingCapability",
    "MissingDependency",
    "NotFound",
    "ObjectInfo",
    "PermissionDenied",
    "PortableError",
    "PreconditionFailed",
    "Profile",
    "ResiliencePolicy",
    "RetryPolicy",
    "Subscription",
    "Throttled",
    "TooLarge",
    "Topic",
    "Unavailable",
    "UnknownScheme",
    "Unsupported",
    "deadline",
    "idempotent",
    "load_profile",
    "open_bucket",
    "open_launcher",
    "open_store",
    "open_subscription",
    "open_topic",
]
