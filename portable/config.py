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
    storage_engine = "obstore"   # or "fsspec"; a URL's own ?engine= wins

    [profiles.aws.resilience]
    max_attempts = 5
    initial_backoff = 0.1
    max_backoff = 20
    timeout = 10
    max_retry_after = 60
    deadline = 60
    breaker = { failure_rate = 0.5, window = 20, min_calls = 10, open_seconds = 30 }

A bad file raises one :class:`~portable.errors.ConfigError` naming the file,
the key and what was expected. URLs are shown with their secrets masked.
Relative paths in ``file://`` and ``sqlite://`` URLs are relative to the
working directory of the process.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .driver.redaction import redact
from .errors import ConfigError, MissingCapability, NotFound
from .resilience import BreakerPolicy, ResiliencePolicy, RetryPolicy

__all__ = [
    "DEFAULTS",
    "Profile",
    "check_requirements",
    "config_path",
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
_ENGINES = ("fsspec", "obstore")
_RETRY_KEYS = {
    "max_attempts": int,
    "initial_backoff": float,
    "max_backoff": float,
    "multiplier": float,
    "timeout": float,
    "max_retry_after": float,
}
_BREAKER_KEYS = {"failure_rate": float, "window": int, "min_calls": int, "open_seconds": float, "half_open_probes": int}


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
            ``?engine=``; None picks the first installed (obstore first).
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
    unknown_top = set(data) - {"profiles"}
    if unknown_top:
        raise ConfigError(
            f"{path}: unknown top-level key(s) {', '.join(sorted(unknown_top))}; "
            "expected only [profiles.NAME] tables"
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
        raise ConfigError(
            f"{path}: {where}.{key} must be a {kind.__name__}, got {type(value).__name__} {value!r}"
        )
    return value


def _resilience(path: Path, where: str, table: Any) -> ResiliencePolicy:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {where} must be a table")
    unknown = set(table) - set(_RETRY_KEYS) - {"breaker", "deadline"}
    if unknown:
        raise ConfigError(
            f"{path}: unknown key(s) {', '.join(sorted(unknown))} in {where}; expected "
            + ", ".join(sorted((*_RETRY_KEYS, "breaker", "deadline")))
        )
    retry_args = {k: _typed(path, where, k, v, _RETRY_KEYS[k]) for k, v in table.items() if k in _RETRY_KEYS}
    deadline = table.get("deadline")
    if deadline is not None:
        deadline = _typed(path, where, "deadline", deadline, float)
    breaker: BreakerPolicy | None = BreakerPolicy()
    raw_breaker = table.get("breaker", True)
    try:
        retry = RetryPolicy(**retry_args)
        if raw_breaker is False:
            breaker = None
        elif isinstance(raw_breaker, dict):
            unknown = set(raw_breaker) - set(_BREAKER_KEYS)
            if unknown:
                raise ConfigError(
                    f"unknown key(s) {', '.join(sorted(unknown))} in breaker; expected "
                    + ", ".join(sorted(_BREAKER_KEYS))
                )
            breaker = BreakerPolicy(
                **{k: _typed(path, f"{where}.breaker", k, v, _BREAKER_KEYS[k]) for k, v in raw_breaker.items()}
            )
        elif raw_breaker is not True:
            raise ConfigError("breaker must be a table, true or false")
    except ConfigError as exc:
        if str(exc).startswith(str(path)):
            raise
        raise ConfigError(f"{path}: {where}: {exc}") from None
    return ResiliencePolicy(retry=retry, breaker=breaker, deadline=deadline)


def load_profile(name: str | None = None) -> Profile:
    """Resolve the profile ``name`` (default: ``PORTABLE_PROFILE`` or ``default``).

    Raises:
        ConfigError: the file is malformed; the message names file, key and expectation.
        NotFound: a profile was named explicitly but the file does not define it.
    """
    explicit = name or os.environ.get("PORTABLE_PROFILE")
    name = explicit or "default"
    path = config_path()
    values: dict[str, Any] = dict(DEFAULTS)
    resilience = ResiliencePolicy()
    requires: tuple[str, ...] = ()
    source = "defaults"
    engine: str | None = None
    if path is not None:
        profiles = _read(path)
        table = profiles.get(name)
        if table is None and explicit:
            known = ", ".join(sorted(profiles)) or "none"
            raise NotFound(f"{path}: no profile [profiles.{name}]; defined: {known}")
        if table is not None:
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

    Only names that belong to ``domain`` (those in ``known``) are checked here;
    the other domains check theirs when they open.

    Raises:
        MissingCapability: naming every missing capability of this provider.
    """
    known_set = set(known)
    have = set(supported)
    missing = sorted(r for r in requires if r in known_set and r not in have)
    if missing:
        raise MissingCapability(
            f"the profile requires {', '.join(missing)}, which {provider} does not provide; "
            "choose another provider or drop the requirement",
            provider=provider,
        )
