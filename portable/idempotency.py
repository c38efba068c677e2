"""Idempotency keys: run an effect once, however often it is asked for.

A caller names an effect with a key (an order id, a message's idempotency
key, a job's name) and *claims* it in a store before running it:

* the first claim is ``"acquired"``: the record is IN_PROGRESS with a lease
  (the claimer's exclusive right to run) and a fingerprint of the payload;
* the claimer runs the effect and calls :meth:`IdempotencyStore.complete`
  with the result (bounded in size); the record is COMPLETED until it expires;
* a later claim of a COMPLETED key is ``"completed"`` and carries the stored
  result, so the caller returns it instead of running the effect again;
* a claim while the lease runs is ``"in_progress"`` (the caller raises
  :class:`~portable.errors.InProgress` or waits, see :func:`run_once`);
* a claim after the lease expired (the claimer crashed) is ``"acquired"``
  again with a new token: the crashed claimer's work is retried;
* a claim whose fingerprint differs from the record's raises
  :class:`~portable.errors.IdempotencyConflict`: the key was reused for a
  different payload, which is a bug in the caller;
* if the effect fails, :meth:`IdempotencyStore.release` gives the claim up so
  the next caller may run it.

``complete`` and ``release`` take the claim's token; when the lease was lost
(it expired and another caller took the key over) they raise
:class:`~portable.errors.PreconditionFailed`.

Stores (:func:`open_store` picks one by URL):

======================  ===============================================
URL                     store
======================  ===============================================
``mem://`` ``mem://N``  :class:`MemoryStore` (one process; ``N`` shares)
``sqlite://PATH``       :class:`SqliteStore` (processes of one machine)
any bucket URL          :class:`BucketStore`: ``file://``, ``s3://``,
                        ``gs://``, ``az://``, ... with no extra database
``redis://``            ``portable_redis.RedisStore`` (``pip install
                        portable-cloud[redis]``)
======================  ===============================================

Third-party stores register a scheme in the entry-point group
``portable.idempotency``; the entry point names a class with a
``from_url(parsed: ParsedURL)`` class method that returns an
:class:`IdempotencyStore`. Entry points win over the built-in schemes.

Times: leases and expiry use the wall clock (``time.time``) because records
are shared between processes and machines; keep clocks in sync (NTP) and
leases well above the clock skew.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, ParamSpec, TypeVar

from ._idempotency_bucket import BucketStore
from ._idempotency_sqlite import SqliteStore
from .driver.idempotency import (
    DEFAULT_LEASE,
    DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_TTL,
    Claim,
    ClaimStatus,
    IdempotencyStore,
    check_claim_args,
    check_result,
    conflict_error,
    fingerprint,
    lost_error,
    new_token,
    without_options,
)
from .errors import (
    ConfigError,
    InProgress,
    InvalidArgument,
    MissingDependency,
    PreconditionFailed,
    TooLarge,
    UnknownScheme,
)
from .resilience import remaining
from .urls import ParsedURL, parse_url

__all__ = [
    "BucketStore",
    "Claim",
    "ClaimStatus",
    "DEFAULT_LEASE",
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_TTL",
    "GROUP",
    "IdempotencyStore",
    "MemoryStore",
    "SqliteStore",
    "arun_once",
    "fingerprint",
    "idempotent",
    "new_token",
    "open_store",
    "run_once",
]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
_log = logging.getLogger("portable.idempotency")


# ---------------------------------------------------------------- memory
@dataclass(slots=True)
class _Record:
    fingerprint: str
    token: str
    completed: bool
    lease_until: float
    expires_at: float
    ttl: float
    result: bytes | None = None


class MemoryStore:
    """Records in a dict: one process, for tests and single-process services.

    Args:
        max_result_bytes: the largest result kept. Defaults to 64 KiB.
        clock: wall-clock seconds; tests pass a fake one.
    """

    def __init__(
        self, *, max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES, clock: Callable[[], float] = time.time
    ) -> None:
        self.max_result_bytes = max_result_bytes
        self._clock = clock
        self._records: dict[str, _Record] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._records)} records)"

    def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        check_claim_args(key, fingerprint, lease, ttl)
        with self._lock:
            now = self._clock()
            record = self._records.get(key)
            if record is not None and record.expires_at <= now:
                record = None
            if record is not None:
                if record.fingerprint != fingerprint:
                    raise conflict_error(key)
                if record.completed:
                    return Claim("completed", None, record.result)
                if record.lease_until > now:
                    return Claim("in_progress")
            token = new_token()
            self._records[key] = _Record(fingerprint, token, False, now + lease, now + ttl, ttl)
            return Claim("acquired", token)

    def complete(self, key: str, token: str, result: bytes | None) -> None:
        check_result(result, self.max_result_bytes)
        with self._lock:
            done = self._records.get(key)
            if done is not None and done.completed and done.token == token:
                return  # completed twice by the same claimer: a retried complete()
            record = self._current(key, token)
            now = self._clock()
            record.completed = True
            record.result = result
            record.expires_at = max(record.expires_at, now + record.ttl)

    def release(self, key: str, token: str) -> None:
        with self._lock:
            self._current(key, token)
            del self._records[key]

    def extend(self, key: str, token: str, lease: float) -> None:
        """Push the lease of a held claim ``lease`` seconds from now (long effects)."""
        with self._lock:
            record = self._current(key, token)
            record.lease_until = self._clock() + lease

    def _current(self, key: str, token: str) -> _Record:
        record = self._records.get(key)
        if record is None or record.token != token or record.completed or record.expires_at <= self._clock():
            raise lost_error(key)
        return record

    def purge_expired(self) -> int:
        """Drop expired records; return how many."""
        with self._lock:
            now = self._clock()
            gone = [k for k, r in self._records.items() if r.expires_at <= now]
            for k in gone:
                del self._records[k]
            return len(gone)


# ---------------------------------------------------------------- running an effect once
def _json_encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _json_decode(data: bytes) -> Any:
    return json.loads(data)


def _in_progress(key: str) -> InProgress:
    return InProgress(
        f"the first call with idempotency key {key[:200]!r} is still running; retry later "
        "(or pass wait= to wait for it)"
    )


def _poll_delays(wait: float) -> Iterator[float]:
    """Sleeps between polls of an in-progress key, up to ``wait`` seconds (and the deadline)."""
    start = time.monotonic()
    limit = wait
    left = remaining()
    if left is not None:
        limit = min(limit, left)
    delay = 0.005
    while True:
        spent = time.monotonic() - start
        if spent >= limit:
            return
        yield min(delay, limit - spent)
        delay = min(delay * 2, 0.5)


def run_once(
    store: IdempotencyStore,
    key: str,
    payload_fingerprint: str,
    fn: Callable[[], R],
    *,
    lease: float = DEFAULT_LEASE,
    ttl: float = DEFAULT_TTL,
    wait: float = 0.0,
    encode: Callable[[R], bytes | None] = _json_encode,
    decode: Callable[[bytes], R] = _json_decode,
) -> R:
    """Run ``fn()`` at most once per ``key``; later calls return its stored result.

    Args:
        store: where the key's record lives.
        key: the idempotency key.
        payload_fingerprint: :func:`fingerprint` of the request.
        fn: the effect. If it raises, the claim is released and the error
            propagates, so the next call runs it again.
        lease: seconds the claim is exclusive; a longer effect should use a
            store's ``extend``. Defaults to 60.
        ttl: seconds the record lives. Defaults to one day.
        wait: seconds to wait for another caller's claim to finish, polling,
            bounded by the :func:`~portable.resilience.deadline` in force.
            Defaults to 0 (raise InProgress at once).
        encode, decode: turn the result into bytes and back. Default to JSON.
            When ``encode`` returns None (nothing worth keeping), later
            callers get ``decode(b"null")``.

    Raises:
        InProgress: another caller holds the key and did not finish within ``wait``.
        IdempotencyConflict: the key was used with a different payload.
        TooLarge: the encoded result is over the store's limit; the claim is
            released (the effect ran, but the key is free again).
    """
    delays = _poll_delays(wait) if wait > 0 else iter(())
    while True:
        claim = store.claim(key, payload_fingerprint, lease=lease, ttl=ttl)
        if claim.status == "completed":
            return decode(claim.result if claim.result is not None else b"null")
        if claim.status == "acquired":
            break
        delay = next(delays, None)
        if delay is None:
            raise _in_progress(key)
        time.sleep(delay)
    token = claim.token
    assert token is not None
    try:
        result = fn()
        data = encode(result)
    except BaseException:
        _release_quietly(store, key, token)
        raise
    try:
        store.complete(key, token, data)
    except TooLarge:
        _release_quietly(store, key, token)
        raise
    except PreconditionFailed:
        _log.warning(
            "idempotency key %r: the lease expired while the effect ran and another caller took the "
            "key over; the effect may have run twice. Use a longer lease.",
            key[:200],
        )
    return result


def _release_quietly(store: IdempotencyStore, key: str, token: str) -> None:
    try:
        store.release(key, token)
    except PreconditionFailed:
        pass  # the lease was lost anyway: the next caller may run
    except Exception:
        _log.warning("idempotency key %r: could not release the claim; it frees itself when the lease expires", key[:200], exc_info=True)


async def arun_once(
    store: IdempotencyStore,
    key: str,
    payload_fingerprint: str,
    fn: Callable[[], Awaitable[R]],
    *,
    lease: float = DEFAULT_LEASE,
    ttl: float = DEFAULT_TTL,
    wait: float = 0.0,
    encode: Callable[[R], bytes | None] = _json_encode,
    decode: Callable[[bytes], R] = _json_decode,
) -> R:
    """:func:`run_once` for a coroutine function. The store's calls run in a thread
    unless it is a :class:`MemoryStore`, so the event loop never blocks on I/O."""
    import asyncio

    inline = isinstance(store, MemoryStore)

    async def call(method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if inline:
            return method(*args, **kwargs)
        return await asyncio.to_thread(method, *args, **kwargs)

    delays = _poll_delays(wait) if wait > 0 else iter(())
    while True:
        claim = await call(store.claim, key, payload_fingerprint, lease=lease, ttl=ttl)
        if claim.status == "completed":
            return decode(claim.result if claim.result is not None else b"null")
        if claim.status == "acquired":
            break
        delay = next(delays, None)
        if delay is None:
            raise _in_progress(key)
        await asyncio.sleep(delay)
    token = claim.token
    assert token is not None
    try:
        result = await fn()
        data = encode(result)
    except BaseException:
        await call(_release_quietly, store, key, token)
        raise
    try:
        await call(store.complete, key, token, data)
    except TooLarge:
        await call(_release_quietly, store, key, token)
        raise
    except PreconditionFailed:
        _log.warning("idempotency key %r: the lease expired while the effect ran; it may have run twice", key[:200])
    return result


def idempotent(
    store: IdempotencyStore | str,
    *,
    key: str | Callable[..., str],
    payload: Callable[..., bytes | str | Mapping[str, Any]] | None = None,
    fields: tuple[str, ...] | None = None,
    namespace: str | None = None,
    lease: float = DEFAULT_LEASE,
    ttl: float = DEFAULT_TTL,
    wait: float = 0.0,
    encode: Callable[[Any], bytes | None] = _json_encode,
    decode: Callable[[bytes], Any] = _json_decode,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Make a function (or coroutine function) run at most once per idempotency key.

    >>> store = MemoryStore()
    >>> @idempotent(store, key="order_id")
    ... def charge(order_id: str, cents: int) -> dict:
    ...     return {"charged": cents}
    >>> charge("o-1", 500)
    {'charged': 500}
    >>> charge("o-1", 500)      # not charged again: the stored result
    {'charged': 500}

    Args:
        store: an IdempotencyStore, or a URL for :func:`open_store` (opened
            on first call).
        key: the name of a parameter whose value is the key, a
            ``str.format`` template over the parameters (``"{user}:{order}"``),
            or a callable taking the function's arguments.
        payload: a callable taking the function's arguments and returning
            what to fingerprint. Defaults to every argument but ``self``/``cls``,
            as a mapping (restricted to ``fields`` if given).
        fields: the parameters whose values make up the fingerprint.
        namespace: prefixed to every key (``"ns:key"``). Defaults to the
            function's module and qualified name, so two functions never share
            keys; pass ``""`` for none.
        lease, ttl, wait, encode, decode: as in :func:`run_once`. The result
            must survive ``decode(encode(result))``: JSON by default.

    Raises:
        InvalidArgument: at decoration, ``key`` names no parameter of the function.
    """

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        sig = inspect.signature(fn)
        params = list(sig.parameters)
        skipped = {params[0]} if params and params[0] in ("self", "cls") else set()
        if isinstance(key, str):
            if key in sig.parameters:
                template = "{" + key + "}"
            elif "{" in key:
                template = key
            else:
                raise InvalidArgument(
                    f"@idempotent(key={key!r}): {fn.__qualname__} has no parameter {key!r}; "
                    f"name one of {', '.join(params) or 'none'}, write a template such as "
                    "'{user}:{order}', or pass a callable"
                )
            if fields is not None:
                unknown = [f for f in fields if f not in sig.parameters]
                if unknown:
                    raise InvalidArgument(f"@idempotent(fields=...): {fn.__qualname__} has no parameter(s) {unknown}")
        ns = f"{fn.__module__}.{fn.__qualname__}" if namespace is None else namespace
        holder: list[IdempotencyStore] = []

        def the_store() -> IdempotencyStore:
            if not holder:
                holder.append(open_store(store) if isinstance(store, str) else store)
            return holder[0]

        def key_and_fp(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str]:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = {k: v for k, v in bound.arguments.items() if k not in skipped}
            if callable(key):
                k = key(*args, **kwargs)
            else:
                try:
                    k = template.format(**bound.arguments)
                except (KeyError, IndexError, AttributeError) as exc:
                    raise InvalidArgument(f"@idempotent(key={key!r}) cannot be filled in: {exc}") from None
            if type(k) is not str or not k:
                raise InvalidArgument(f"@idempotent: the key must be a non-empty str, got {k!r}")
            body = payload(*args, **kwargs) if payload is not None else arguments
            fp = fingerprint(body, fields=fields) if isinstance(body, Mapping) else fingerprint(body)
            return (f"{ns}:{k}" if ns else k), fp

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                k, fp = key_and_fp(args, kwargs)
                return await arun_once(
                    the_store(), k, fp, lambda: fn(*args, **kwargs),
                    lease=lease, ttl=ttl, wait=wait, encode=encode, decode=decode,
                )

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            k, fp = key_and_fp(args, kwargs)
            result: R = run_once(
                the_store(), k, fp, lambda: fn(*args, **kwargs),
                lease=lease, ttl=ttl, wait=wait, encode=encode, decode=decode,
            )
            return result

        return wrapper

    return decorate


# ---------------------------------------------------------------- opening a store by URL
_MEMORY_STORES: dict[str, MemoryStore] = {}
_MEMORY_LOCK = threading.Lock()
_REDIS_SCHEMES = ("redis", "rediss", "unix")
GROUP = "portable.idempotency"


def open_store(url: str | ParsedURL | None = None) -> IdempotencyStore:
    """Open the idempotency store named by ``url``, or the active profile's ``idempotency``.

    ``mem://`` is a private :class:`MemoryStore` and ``mem://NAME`` one shared
    by name in this process; ``sqlite://PATH`` a :class:`SqliteStore`;
    ``redis://`` the Redis store of ``portable-cloud[redis]``; a scheme registered
    in the entry-point group ``portable.idempotency`` its class's
    ``from_url(parsed)``; any other URL a :class:`BucketStore` over
    ``open_bucket(url)``. Every built-in store takes the option
    ``max_result_bytes``.

    Raises:
        ConfigError: no URL given and the profile names no idempotency store.
        MissingDependency: ``redis://`` without ``portable-cloud[redis]``.
        InvalidURL / UnknownScheme: before any request.
    """
    if url is None:
        from .config import load_profile

        url = load_profile().idempotency
        if url is None:
            raise ConfigError(
                "no idempotency store is configured: set idempotency = 'file://./.portable/idempotency' "
                "(or sqlite://, redis://, s3://, ...) in the profile, or PORTABLE_IDEMPOTENCY_URL"
            )
    parsed = parse_url(url)
    scheme = parsed.scheme
    for ep in entry_points(group=GROUP):
        if ep.name == scheme:
            found: IdempotencyStore = ep.load().from_url(parsed)
            return found
    if scheme == "mem":
        limit = parsed.take("max_result_bytes", int, DEFAULT_MAX_RESULT_BYTES)
        parsed.done()
        name = (parsed.netloc + parsed.path).strip("/")
        if not name:
            return MemoryStore(max_result_bytes=limit)
        with _MEMORY_LOCK:
            return _MEMORY_STORES.setdefault(name, MemoryStore(max_result_bytes=limit))
    if scheme == "sqlite":
        return SqliteStore.from_url(parsed)
    if scheme in _REDIS_SCHEMES:
        raise MissingDependency(f"{scheme}:// idempotency stores need the redis store: pip install 'portable-cloud[redis]'")
    limit = parsed.take("max_result_bytes", int, DEFAULT_MAX_RESULT_BYTES)
    from .storage import open_bucket

    try:
        bucket = open_bucket(without_options(parsed, "max_result_bytes"))
    except UnknownScheme as exc:
        raise UnknownScheme(
            f"no idempotency store for {scheme}://: use mem://, sqlite://PATH, redis:// "
            f"(pip install 'portable-cloud[redis]'), a scheme of entry-point group {GROUP}, or a bucket URL. "
            f"{exc}"
        ) from None
    return BucketStore(bucket, max_result_bytes=limit)

