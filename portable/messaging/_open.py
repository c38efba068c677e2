"""From a URL (or the active profile's ``queue``) to a driver, and what Topic and Subscription share.

``open_topic`` and ``open_subscription`` resolve the same way: the profile is
loaded, the URL's driver is built, the side asked for is opened through the
retry layer, and then the profile's ``requires`` are checked against the
capabilities that opening the side may have refined.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Self, TypeVar

from .. import urls
from .._native import native_object
from ..config import Profile, check_requirements, load_profile
from ..driver.messaging import (
    MessagingCapabilities,
    MessagingDriver,
    SubscriptionDriver,
    TopicDriver,
)
from ..driver.redaction import redact
from ..errors import PortableError
from ..resilience import Guard, ResiliencePolicy

T = TypeVar("T")
SideT = TypeVar("SideT", bound=TopicDriver | SubscriptionDriver)


def open_driver(url: str) -> MessagingDriver:
    """Open the messaging driver for ``url`` (no portable layer around it)."""
    driver = urls.open_driver("messaging", url)
    if not isinstance(driver, MessagingDriver):
        raise PortableError(f"{urls.parse_url(url)}: the driver is not a MessagingDriver")
    return driver


@dataclass(frozen=True)
class Resolved:
    """A URL, or the active profile's ``queue``, with its driver and the policy that applies.

    Attributes:
        url: the URL given, else the profile's ``queue``.
        profile: the profile given, or the active one.
        policy: the ``policy`` given, else the profile's resilience policy.
        driver: the URL's driver, not yet talked to.
    """

    url: str
    profile: Profile
    policy: ResiliencePolicy | None
    driver: MessagingDriver

    @classmethod
    def of(cls, url: str | None, profile: str | Profile | None, policy: ResiliencePolicy | None) -> Resolved:
        """Resolve ``url`` (or the profile's ``queue``) and build its driver.

        Raises:
            UnknownScheme / MissingDependency / InvalidURL / ConfigError: before any request.
        """
        prof = profile if isinstance(profile, Profile) else load_profile(profile)
        target = url or prof.queue
        return cls(target, prof, policy or prof.resilience, open_driver(target))

    def open(self, what: str, side: Callable[[], SideT]) -> SideT:
        """Open one side of the URL (``driver.topic`` or ``driver.subscription``) through the
        retry layer, then check the profile's ``requires`` against its capabilities.

        Raises:
            InvalidURL: the URL does not name that side.
            MissingCapability: the profile requires what the provider lacks.
        """
        driver = self.driver
        opened = Guard(driver.scheme, driver.endpoint, driver, self.policy).call(
            "admin", f"open {what} {redact(self.url)}", side
        )
        check_requirements(
            "messaging", driver.scheme, driver.capabilities.supported(), MessagingCapabilities.flag_names(),
            self.profile.requires,
        )  # fmt: skip
        return opened


class MessagingClient(Generic[SideT]):
    """What :class:`Topic` and :class:`Subscription` share: a driver, one side of its URL,
    the guard that calls them, and their lifetime (``url``, ``provider`` and
    ``capabilities`` are as they document)."""

    def __init__(
        self, driver: MessagingDriver, side: SideT, *, url: str, policy: ResiliencePolicy | None, action: str
    ) -> None:
        self._driver = driver
        self._side = side
        self.url = url
        self.provider = driver.scheme
        self.capabilities = driver.capabilities
        self._guard = Guard(driver.scheme, driver.endpoint, driver, policy)
        self._what = f"{action} {redact(url) or driver.endpoint}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact(self.url)!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def as_(self, kind: type[T]) -> T:
        """Return the native object of type ``kind`` (each adapter documents which)."""
        return native_object(self._driver, kind, self.provider)

    def close(self) -> None:
        """Release the driver's connections."""
        self._side.close()
        self._driver.close()
