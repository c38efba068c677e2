"""Opening buckets: :func:`open_bucket` (with the portable layer) and :func:`open_driver` (without)."""

from __future__ import annotations

from .. import urls
from ..config import Profile, check_requirements, load_profile
from ..driver.storage import StorageCapabilities, StorageDriver
from ..errors import InvalidURL, PortableError
from ..resilience import ResiliencePolicy
from ._bucket import Bucket


def open_driver(url: str) -> StorageDriver:
    """Open the storage driver for ``url`` (no portable layer around it)."""
    driver = urls.open_driver("storage", url)
    if not isinstance(driver, StorageDriver):
        raise PortableError(f"{urls.parse_url(url)}: the driver is not a StorageDriver")
    return driver


def open_bucket(
    url: str | None = None,
    *,
    profile: str | Profile | None = None,
    policy: ResiliencePolicy | None = None,
) -> Bucket:
    """Open a bucket by URL, or the active profile's ``storage`` URL.

    The profile's ``storage_engine`` applies either way (a URL's own
    ``?engine=`` wins), and its ``requires`` are checked now: a provider that
    lacks a required capability fails here, at start-up, with MissingCapability.

    Args:
        url: the bucket's URL. Defaults to the profile's ``storage``.
        profile: a profile name or :class:`~portable.config.Profile`. Defaults
            to the active profile.
        policy: the retry, breaker and deadline policy of every call. Defaults
            to the profile's resilience policy.

    Raises:
        InvalidURL: ``url`` is ``""`` (or blank): pass None for the profile's bucket.
        UnknownScheme / MissingDependency / InvalidURL / ConfigError: before any request.
    """
    if url is not None and (type(url) is not str or not url.strip()):
        raise InvalidURL(
            f"open_bucket({url!r}): a bucket URL must be a non-empty str such as 'file://./data' or "
            "'s3://bucket/prefix'; pass None (or nothing) to open the active profile's bucket"
        )
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    target = url or prof.storage
    if prof.storage_engine is not None:
        target = urls.with_default_engine(target, prof.storage_engine)
    driver = open_driver(target)
    check_requirements(
        "storage", driver.scheme, driver.capabilities.supported(), StorageCapabilities.flag_names(), prof.requires
    )
    return Bucket(driver, url=target, policy=prof.resilience if policy is None else policy)
