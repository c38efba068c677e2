"""Profiles: which providers a service uses, chosen by configuration, not code.

Where the configuration comes from, later entries winning:

1. the embedded defaults (a local folder, a sqlite queue, local processes),
   so that the first run needs nothing;
2. the profile named by ``PORTABLE_PROFILE`` (default ``default``) in the
   file named by ``PORTABLE_CONFIG``, else ``./portable.toml`` if it exists;
3. ``PORTABLE_STORAGE_URL``, ``PORTABLE_QUEUE_URL``, ``PORTABLE_JOBS_URL``,
   ``PORTABLE_DEAD_LETTER_URL``, ``PORTABLE_IDEMPOTENCY_URL`` and
   ``PORTABLE_STORAGE_ENGINE``.

The file::

    [profiles.aws]
    storage = "s3://acme-data/prefix?region=eu-west-1"
    queue   = "sqs://events?region=eu-west-1"
    jobs    = "batch://jobs?job_definition=etl"
    dead_letter = "sqs://events-dlq?region=eu-west-1"
    idempotency = "s3://acme-data/idempotency"
    requires = ["conditional_create", "native_dead_letter"]
    storage_engine = "obstore"   # or "fsspec", or "opendal" (s3:// only); a URL's own ?engine= wins

    [profiles.aws.resilience]
    max_attempts = 5
    initial_backoff = 0.1
    max_backoff = 20
    timeout = 10
    max_retry_after = 60
    deadline = 60
    breaker = { failure_rate = 0.5, window = 20, min_calls = 10, open_seconds = 30 }
    retry_budget = { ratio = 0.25, min_per_second = 10, max_tokens = 100 }

A bad file raises one :class:`~portable.errors.ConfigError` naming the file,
the key and what was expected (``portable.toml:
profiles.prod.resilience.deadline = -5: must be a positive number of
seconds``); infinities and NaN are refused like any other value out of range.
URLs are shown with their secrets masked. Relative paths in ``file://`` and
``sqlite://`` URLs are relative to the working directory of the process.

Nothing means something else silently:

* a profile that is *named* (``PORTABLE_PROFILE``, or a ``profile=``
  argument) must be defined, or :func:`load_profile` raises ConfigError
  naming where it looked (``PORTABLE_CONFIG``, ``./portable.toml`` in the
  working directory) and the profiles it found. Only the profile nobody named
  falls back to the embedded defaults: with no file at all, or with a file
  that defines no ``[profiles.default]`` (its ``source`` then says so);
* every name in ``requires`` must be a capability some domain declares; a
  typo is a ConfigError with the closest name (``did you mean
  conditional_create?``), when the file is read and again when a provider
  opens (:func:`check_requirements`), for a profile made in code.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .driver.compute import ComputeCapabilities
from .driver.messaging import MessagingCapabilities
from .driver.redaction import redact
from .driver.storage import StorageCapabilities
from .errors import ConfigError, MissingCapability
from .resilience import BreakerPolicy, ResiliencePolicy, RetryBudget, RetryPolicy
from .resilience._policy import shown_value

__all__ = [
    "DEFAULTS",
    "Profile",
    "check_requirements",
    "config_path",
    "known_capabilities",
    "list_profiles",
    "load_profile",
]

DEFAULTS: Mapping[str, str] = {
    "storage": "file://./.portable/objects",
    "queue": "sqlite://./.portable/queue.db?name=events",
    "jobs": "local://./.portable/jobs?workers=4",
}

_URL_KEYS = ("storage", "queue", "jobs", "dead_letter", "idempotency")
_ENV = {
    "storage": "PORTABLE_STORAGE_URL",
    "queue": "PORTABLE_QUEUE_URL",
    "jobs": "PORTABLE_JOBS_URL",
    "dead_letter": "PORTABLE_DEAD_LETTER_URL",
    "idempotency": "PORTABLE_IDEMPOTENCY_URL",
}
_PROFILE_KEYS = frozenset((*_URL_KEYS, "requires", "resilience", "storage_engine"))
_ENGINES = ("fsspec", "obstore", "opendal")
_RETRY_KEYS = {
    "max_attempts": int,
    "initial_backoff": float,
    "max_backoff": float,
    "multiplier": float,
    "timeout": float,
    "max_retry_after": float,
}
_BREAKER_KEYS = {"failure_rate": float, "window": int, "min_calls": int, "open_seconds": float, "half_open_probes": int}
_BUDGET_KEYS = {"ratio": float, "min_per_second": float, "max_tokens": float}
_RESILIENCE_KEYS = frozenset((*_RETRY_KEYS, "breaker", "deadline", "retry_budget"))


def known_capabilities() -> frozenset[str]:
    """Every capability name a profile's ``requires`` may list (the boolean flags of every domain)."""
    return StorageCapabilities.flag_names() | MessagingCapabilities.flag_names() | ComputeCapabilities.flag_names()


def _unknown_capabilities(requires: Iterable[str]) -> str | None:
    """What is wrong with the names in ``requires`` that no domain declares, or None if every one is known."""
    known = known_capabilities()
    unknown = [r for r in requires if r not in known]
    if not unknown:
        return None
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, sorted(known), n=1)
        parts.append(f"{name!r}" + (f" (did you mean {close[0]}?)" if close else ""))
    return (
        f"unknown capability {', '.join(parts)}; known capabilities: {', '.join(sorted(known))}"
    )


@dataclass(frozen=True)
class Profile:
    """A resolved profile: provider URLs, requirements and resilience policy.

    Attributes:
        name: the profile's name.
        storage, queue, jobs: provider URLs of each domain.
        dead_letter: where poison messages go when the queue has no native DLQ.
        idempotency: URL of the idempotency store (a bucket or ``sqlite://``), if any.
        requires: capabilities every provider of this profile must have.
        resilience: the retry and breaker policy.
        storage_engine: ``"obstore"`` or ``"fsspec"`` for s3/gs/az URLs without
            ``?engine=`` (``"opendal"`` for s3 only); None picks the first installed
            (obstore first).
        source: where it came from: a file path, or ``"defaults"``.
    """

    name: str
    storage: str
    queue: str
    jobs: str
    dead_letter: str | None = None
    idempotency: str | None = None
    requires: tuple[str, ...] = ()
    resilience: ResiliencePolicy = field(default_factory=ResiliencePolicy)
    source: str = "defaults"
    storage_engine: str | None = None

    def __repr__(self) -> str:
        urls = ", ".join(
            f"{k}={redact(v)!r}" for k in _URL_KEYS if (v := getattr(self, k)) is not None
        )
        return f"Profile({self.name!r}, {urls}, source={self.source!r})"

    def url_for(self, entry: str) -> str | None:
        """The URL of ``entry`` (``storage``, ``queue``, ``jobs``, ``dead_letter``, ``idempotency``)."""
        return getattr(self, entry)  # type: ignore[no-any-return]

    def shown(self) -> dict[str, Any]:
        """The profile as plain data with every secret masked (for ``portable config show``)."""
        data: dict[str, Any] = {"name": self.name, "source": self.source}
        for key in _URL_KEYS:
            value = getattr(self, key)
            if value is not None:
                data[key] = redact(value)
        data["requires"] = list(self.requires)
        data["storage_engine"] = self.storage_engine
        retry = self.resilience.retry
        budget = self.resilience.retry_budget
        data["resilience"] = {
            "max_attempts": retry.max_attempts,
            "initial_backoff": retry.initial_backoff,
            "max_backoff": retry.max_backoff,
            "multiplier": retry.multiplier,
            "timeout": retry.timeout,
            "max_retry_after": retry.max_retry_after,
            "deadline": self.resilience.deadline,
            "breaker": None
            if self.resilience.breaker is None
            else {
                "failure_rate": self.resilience.breaker.failure_rate,
                "window": self.resilience.breaker.window,
                "min_calls": self.resilience.breaker.min_calls,
                "open_seconds": self.resilience.breaker.open_seconds,
                "half_open_probes": self.resilience.breaker.half_open_probes,
            },
            "retry_budget": None
            if budget is None
            else {"ratio": budget.ratio, "min_per_second": budget.min_per_second, "max_tokens": budget.max_tokens},
        }
        return data


def config_path() -> Path | None:
    """The config file in force: ``PORTABLE_CONFIG``, else ``./portable.toml`` if present."""
    named = os.environ.get("PORTABLE_CONFIG")
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigError(f"PORTABLE_CONFIG names {path}, which is not a file")
        return path
    local = Path("portable.toml")
    return local if local.is_file() else None


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from None
    profiles = data.get("profiles", {})
    unknown_top = set(data) - {"profiles", "cost"}
    if unknown_top:
        raise ConfigError(
            f"{path}: unknown top-level key(s) {', '.join(sorted(unknown_top))}; "
            "expected only [profiles.NAME] tables and [cost]"
        )
    if not isinstance(profiles, dict):
        raise ConfigError(f"{path}: 'profiles' must be a table of [profiles.NAME]")
    return profiles


def list_profiles() -> list[str]:
    """Names of the profiles in the config file in force (empty without a file)."""
    path = config_path()
    return sorted(_read(path)) if path else []


def _typed(path: Path, where: str, key: str, value: Any, kind: type) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        expected = "a whole number" if kind is int else "a number"
        raise ConfigError(f"{path}: {where}.{key} = {shown_value(value)}: must be {expected}")
    return value


def _record(path: Path, where: str, make: Any, table: dict[str, Any], keys: Mapping[str, type]) -> Any:
    """``make(**table)``, each value typed first; an error names the file and the key (``where.key``)."""
    unknown = set(table) - set(keys)
    if unknown:
        raise ConfigError(
            f"{path}: unknown key(s) {', '.join(sorted(unknown))} in {where}; expected " + ", ".join(sorted(keys))
        )
    args = {k: _typed(path, where, k, v, keys[k]) for k, v in table.items()}
    try:
        return make(**args)
    except ConfigError as exc:  # "max_backoff = inf: must be ...": put the file and the table in front
        raise ConfigError(f"{path}: {where}.{exc.message}") from None


def _optional_record(
    path: Path, where: str, key: str, raw: Any, make: Any, keys: Mapping[str, type]
) -> Any:
    """A ``key = { ... }`` table (or ``true``: the defaults; ``false``: none) as ``make``'s record."""
    if raw is True:
        return make()
    if raw is False:
        return None
    if isinstance(raw, dict):
        return _record(path, f"{where}.{key}", make, raw, keys)
    raise ConfigError(f"{path}: {where}.{key} = {shown_value(raw)}: must be a table, true or false")


def _resilience(path: Path, where: str, table: Any) -> ResiliencePolicy:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {where} must be a table")
    unknown = set(table) - _RESILIENCE_KEYS
    if unknown:
        raise ConfigError(
            f"{path}: unknown key(s) {', '.join(sorted(unknown))} in {where}; expected "
            + ", ".join(sorted(_RESILIENCE_KEYS))
        )
    retry = _record(path, where, RetryPolicy, {k: v for k, v in table.items() if k in _RETRY_KEYS}, _RETRY_KEYS)
    breaker = _optional_record(path, where, "breaker", table.get("breaker", True), BreakerPolicy, _BREAKER_KEYS)
    budget = _optional_record(
        path, where, "retry_budget", table.get("retry_budget", True), RetryBudget, _BUDGET_KEYS
    )
    deadline = table.get("deadline")
    if deadline is not None:
        deadline = _typed(path, where, "deadline", deadline, float)
    try:
        return ResiliencePolicy(retry=retry, breaker=breaker, deadline=deadline, retry_budget=budget)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {where}.{exc.message}") from None


def _where_looked() -> str:
    """Where :func:`config_path` looked, for an error that found nothing."""
    named = os.environ.get("PORTABLE_CONFIG")
    if named:
        return f"PORTABLE_CONFIG={named}"
    return f"PORTABLE_CONFIG (not set), then {Path.cwd() / 'portable.toml'} (no such file)"


def _how_found(path: Path) -> str:
    if os.environ.get("PORTABLE_CONFIG"):
        return f"named by PORTABLE_CONFIG={path}"
    return f"found as {Path.cwd() / path} (PORTABLE_CONFIG is not set)"


def load_profile(name: str | None = None) -> Profile:
    """Resolve the profile ``name`` (default: ``PORTABLE_PROFILE`` or ``default``).

    A named profile (``name``, or ``PORTABLE_PROFILE``) must be defined in the
    config file in force. Only the profile nobody named uses the embedded
    defaults where no file defines it.

    Raises:
        ConfigError: the file is malformed (the message names file, key and
            expectation); a named profile is not defined (it names where it
            looked and what it found); ``requires`` names an unknown capability.
    """
    explicit = name or os.environ.get("PORTABLE_PROFILE")
    chosen_by = "" if not explicit else f" (asked for by {'the profile argument' if name else 'PORTABLE_PROFILE'})"
    name = explicit or "default"
    path = config_path()
    values: dict[str, Any] = dict(DEFAULTS)
    resilience = ResiliencePolicy()
    requires: tuple[str, ...] = ()
    source = "defaults"
    engine: str | None = None
    if path is None and explicit:
        raise ConfigError(
            f"profile {name!r}{chosen_by} is not defined: no configuration file was found; looked at "
            f"{_where_looked()}. Write [profiles.{name}] in portable.toml, or point PORTABLE_CONFIG at the "
            "file that defines it (the embedded defaults are used only when no profile is named)"
        )
    if path is not None:
        profiles = _read(path)
        table = profiles.get(name)
        if table is None and explicit:
            known = ", ".join(sorted(profiles)) or "none"
            raise ConfigError(
                f"{path}: no profile [profiles.{name}]{chosen_by}; defined: {known} "
                f"(the file was {_how_found(path)})"
            )
        if table is None:
            source = f"defaults ({path} defines no [profiles.{name}])"
        else:
            source = str(path)
            where = f"profiles.{name}"
            if not isinstance(table, dict):
                raise ConfigError(f"{path}: {where} must be a table")
            unknown = set(table) - _PROFILE_KEYS
            if unknown:
                raise ConfigError(
                    f"{path}: unknown key(s) {', '.join(sorted(unknown))} in [{where}]; expected "
                    + ", ".join(sorted(_PROFILE_KEYS))
                )
            for key in _URL_KEYS:
                if key in table:
                    value = table[key]
                    if not isinstance(value, str) or "://" not in value:
                        raise ConfigError(
                            f"{path}: {where}.{key} must be a provider URL string such as "
                            f"'file://./data', got {redact(repr(value))}"
                        )
                    values[key] = value
            if "requires" in table:
                req = table["requires"]
                if not isinstance(req, list) or not all(isinstance(r, str) for r in req):
                    raise ConfigError(f"{path}: {where}.requires must be a list of capability names")
                problem = _unknown_capabilities(req)
                if problem:
                    raise ConfigError(f"{path}: {where}.requires: {problem}")
                requires = tuple(req)
            if "resilience" in table:
                resilience = _resilience(path, f"{where}.resilience", table["resilience"])
            if "storage_engine" in table:
                engine = table["storage_engine"]
                if engine not in _ENGINES:
                    raise ConfigError(
                        f"{path}: {where}.storage_engine must be one of {', '.join(_ENGINES)}, got {engine!r}"
                    )
    for key, env in _ENV.items():
        override = os.environ.get(env)
        if override:
            if "://" not in override:
                raise ConfigError(f"{env} must be a provider URL such as 'file://./data', got {redact(override)!r}")
            values[key] = override
    env_engine = os.environ.get("PORTABLE_STORAGE_ENGINE")
    if env_engine:
        if env_engine not in _ENGINES:
            raise ConfigError(f"PORTABLE_STORAGE_ENGINE must be one of {', '.join(_ENGINES)}, got {env_engine!r}")
        engine = env_engine
    return Profile(
        name=name,
        storage=values["storage"],
        queue=values["queue"],
        jobs=values["jobs"],
        dead_letter=values.get("dead_letter"),
        idempotency=values.get("idempotency"),
        requires=requires,
        resilience=resilience,
        source=source,
        storage_engine=engine,
    )


def check_requirements(
    domain: str, provider: str, supported: Iterable[str], known: Iterable[str], requires: Iterable[str]
) -> None:
    """Fail at start-up if a provider lacks a capability the profile requires.

    Only names that belong to ``domain`` (those in ``known``) are checked for
    support here; the other domains check theirs when they open. A name no
    domain declares is an error wherever it is opened (a profile made in code
    skipped the check :func:`load_profile` makes).

    Raises:
        ConfigError: ``requires`` names an unknown capability (with the closest known name).
        MissingCapability: naming every missing capability of this provider.
    """
    problem = _unknown_capabilities(requires)
    if problem:
        raise ConfigError(f"the profile's requires: {problem}")
    known_set = set(known)
    have = set(supported)
    missing = sorted(r for r in requires if r in known_set and r not in have)
    if missing:
        raise MissingCapability(
            f"the profile requires {', '.join(missing)}, which {provider} does not provide; "
            "choose another provider or drop the requirement",
            provider=provider,
        )
