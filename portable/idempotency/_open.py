"""open_store: an idempotency store by URL, through the one scheme registry of :mod:`portable.urls`."""

from __future__ import annotations

from typing import Final

from .. import urls
from ..config import Profile, load_profile
from ..driver.idempotency import DEFAULT_MAX_RESULT_BYTES, IdempotencyStore, without_options
from ..errors import ConfigError, PortableError
from ..resilience import ResiliencePolicy
from ..storage import open_bucket
from ._bucket import BucketStore

__all__ = ["GROUP", "open_store"]

#: The entry-point group in which third-party stores register a scheme
#: (the group :mod:`portable.urls` reads for the domain ``"idempotency"``).
GROUP: Final = "portable.idempotency"


def open_store(
    url: str | urls.ParsedURL | None = None,
    *,
    profile: str | Profile | None = None,
    policy: ResiliencePolicy | None = None,
) -> IdempotencyStore:
    """Open the idempotency store named by ``url``, or the profile's ``idempotency``.

    ``mem://`` is a private :class:`MemoryStore` and ``mem://NAME`` one shared
    by name in this process; ``sqlite://PATH`` a :class:`SqliteStore`;
    ``redis://``, ``rediss://`` and ``unix://`` the Redis store of
    ``portable-cloud[redis]``, ``dynamodb://`` and ``firestore://`` the stores
    of ``portable-cloud[aws]`` and ``portable-cloud[gcp]``; a scheme registered
    in the entry-point group ``portable.idempotency`` its class's
    ``from_url(parsed)`` (entry points win over the built-in schemes). Any
    other URL names a bucket: a :class:`BucketStore` over ``open_bucket(url)``.
    Every built-in store takes the option ``max_result_bytes``.

    Args:
        url: the store's URL. Defaults to the profile's ``idempotency``
            (``PORTABLE_IDEMPOTENCY_URL`` overrides it).
        profile: the profile (a name or a loaded one) whose ``idempotency``
            URL is used when ``url`` is None, and whose resilience policy,
            storage engine and ``requires`` apply to a bucket store's bucket.
            Defaults to the active profile (``PORTABLE_PROFILE``).
        policy: the resilience policy of a bucket store's bucket, instead of
            the profile's. The other stores keep their own (their
            constructors take one).

    Raises:
        ConfigError: no URL given and the profile names no idempotency store.
        UnknownScheme: no store or bucket has the scheme; the message lists
            the known schemes and the closest match.
        MissingDependency: a built-in scheme (``redis://``, ``dynamodb://``,
            ...) whose distribution is not installed; the message names the
            pip extra.
        InvalidURL: a bad option, before any request.
    """
    loaded: Profile | None = None  # read only when needed: a store URL needs no profile
    if url is None:
        loaded = _profile(profile)
        url = loaded.idempotency
        if url is None:
            raise ConfigError(
                "no idempotency store is configured: set idempotency = 'file://./.portable/idempotency' "
                "(or sqlite://, redis://, s3://, ...) in the profile, or PORTABLE_IDEMPOTENCY_URL"
            )
    parsed = urls.parse_url(url)
    if urls.serving_domain("idempotency", parsed.scheme) == "idempotency":
        store = urls.open_driver("idempotency", parsed)
        if not isinstance(store, IdempotencyStore):
            raise PortableError(f"{parsed}: the store is not an IdempotencyStore")
        return store
    limit = parsed.take("max_result_bytes", int, DEFAULT_MAX_RESULT_BYTES)
    bucket = open_bucket(without_options(parsed, "max_result_bytes"), profile=loaded or profile, policy=policy)
    return BucketStore(bucket, max_result_bytes=limit)


def _profile(profile: str | Profile | None) -> Profile:
    return profile if isinstance(profile, Profile) else load_profile(profile)
