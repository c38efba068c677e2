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

import importlib
from typing import TYPE_CHECKING, Any

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
from .resilience import BreakerPolicy, CircuitBreaker, ResiliencePolicy, RetryPolicy, deadline

if TYPE_CHECKING:
    from .compute import Job, JobSpec, JobState, JobStatus, Launcher, open_launcher
    from .idempotency import IdempotencyStore, idempotent, open_store
    from .messaging import Message, Subscription, Topic, open_subscription, open_topic
    from .storage import Bucket, ObjectInfo, open_bucket

# The domain modules load on first use, so `import portable.storage` does not
# import messaging and compute (PEP 562).
_LAZY = {
    "Bucket": "storage",
    "IdempotencyStore": "idempotency",
    "Job": "compute",
    "JobSpec": "compute",
    "JobState": "compute",
    "JobStatus": "compute",
    "Launcher": "compute",
    "Message": "messaging",
    "ObjectInfo": "storage",
    "Subscription": "messaging",
    "Topic": "messaging",
    "idempotent": "idempotency",
    "open_bucket": "storage",
    "open_launcher": "compute",
    "open_store": "idempotency",
    "open_subscription": "messaging",
    "open_topic": "messaging",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'portable' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"portable.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
