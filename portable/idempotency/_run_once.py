"""Running an effect once per key: :func:`run_once`, :func:`arun_once`, :func:`idempotent`.

They work over any :class:`~portable.driver.idempotency.IdempotencyStore`;
the sync and async faces share the waiting rule (:class:`_Waiter`) and the
completion (:func:`_finish`), so they behave alike.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from ..driver.idempotency import (
    DEFAULT_LEASE,
    DEFAULT_TTL,
    Claim,
    IdempotencyStore,
    fingerprint,
)
from ..errors import InProgress, InvalidArgument, PreconditionFailed, TooLarge
from ..resilience import remaining
from ..telemetry._observe import CLAIM_OBSERVERS, notify_claim
from ._open import open_store

if TYPE_CHECKING:
    from ..driver.aio_idempotency import AsyncStore

__all__ = ["arun_once", "idempotent", "run_once"]

P = ParamSpec("P")
R = TypeVar("R")
_log = logging.getLogger("portable.idempotency")


def _json_encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _json_decode(data: bytes) -> Any:
    return json.loads(data)


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


class _Waiter:
    """How long one call waits for another caller's claim of its key to finish."""

    def __init__(self, key: str, wait: float) -> None:
        self._key = key
        self._delays = _poll_delays(wait) if wait > 0 else iter(())

    def pause(self, claim: Claim) -> float | None:
        """None when ``claim`` settles the call (acquired or completed); else seconds to sleep
        before claiming again.

        Raises:
            InProgress: another caller still holds the key and the wait is over.
        """
        if claim.status != "in_progress":
            return None
        delay = next(self._delays, None)
        if delay is None:
            raise InProgress(
                f"the first call with idempotency key {self._key[:200]!r} is still running; retry later "
                "(or pass wait= to wait for it)"
            )
        return delay


def _stored_result(claim: Claim, decode: Callable[[bytes], R]) -> R:
    return decode(claim.result if claim.result is not None else b"null")


def _lost_while_running(key: str) -> None:
    _log.warning(
        "idempotency key %r: the lease expired while the effect ran and another caller took the "
        "key over; the effect may have run twice. Use a longer lease.",
        key[:200],
    )


@contextlib.contextmanager
def _quietly(key: str) -> Iterator[None]:
    """Around a release: a lost claim is fine (the next caller may run), any other failure is logged."""
    try:
        yield
    except PreconditionFailed:
        pass
    except Exception:
        _log.warning("idempotency key %r: could not release the claim; it frees itself when the lease expires", key[:200], exc_info=True)


def _finish(store: IdempotencyStore, key: str, token: str, data: bytes | None) -> None:
    """Complete the claim after the effect ran; a result over the limit frees the key again."""
    try:
        store.complete(key, token, data)
    except TooLarge:
        _release_quietly(store, key, token)
        raise
    except PreconditionFailed:
        _lost_while_running(key)


def _release_quietly(store: IdempotencyStore, key: str, token: str) -> None:
    with _quietly(key):
        store.release(key, token)


def observed_claim(store: IdempotencyStore, key: str, payload_fingerprint: str, lease: float, ttl: float) -> Claim:
    """``store.claim``, told to the claim observers (tracing: a ``claim`` span with its outcome) if any."""
    if not CLAIM_OBSERVERS:
        return store.claim(key, payload_fingerprint, lease=lease, ttl=ttl)
    started = time.time_ns()
    try:
        claim = store.claim(key, payload_fingerprint, lease=lease, ttl=ttl)
    except BaseException as exc:
        notify_claim(store, key, None, exc, started)
        raise
    notify_claim(store, key, claim, None, started)
    return claim


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
    waiter = _Waiter(key, wait)
    claim = observed_claim(store, key, payload_fingerprint, lease, ttl)
    while (pause := waiter.pause(claim)) is not None:
        time.sleep(pause)
        claim = observed_claim(store, key, payload_fingerprint, lease, ttl)
    if claim.status == "completed":
        return _stored_result(claim, decode)
    token = claim.token
    assert token is not None
    try:
        result = fn()
        data = encode(result)
    except BaseException:
        _release_quietly(store, key, token)
        raise
    _finish(store, key, token, data)
    return result


async def arun_once(
    store: IdempotencyStore | AsyncStore,
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
    """:func:`run_once` for a coroutine function, with the same arguments and errors.

    ``store`` is a sync store (its calls go through its async driver: the
    bounded pool of :mod:`portable.driver.threads`, or the loop for a
    :class:`MemoryStore`) or an async one (:class:`portable.aio.AsyncIdempotencyStore`).

    Cancellation: a cancel while the claim is being made lets the claim land
    and then releases it; a cancel while ``fn`` runs releases the claim; a
    cancel while the completion is written lets it land. Each of those store
    calls finishes before the CancelledError goes on (a second cancel does not
    cut it short), so a cancelled call leaves the key free, never IN_PROGRESS.
    """
    import asyncio  # ~40 ms to import: only coroutine callers pay for it

    from ..driver.aio_idempotency import as_async_store, settle

    astore = as_async_store(store)
    waiter = _Waiter(key, wait)
    while True:
        started = time.time_ns() if CLAIM_OBSERVERS else 0
        claiming, cancelled = await settle(astore.claim(key, payload_fingerprint, lease=lease, ttl=ttl))
        if started and claiming.done() and not claiming.cancelled():
            failed = claiming.exception()
            notify_claim(store, key, None if failed else claiming.result(), failed, started)
        if cancelled or claiming.cancelled():
            if not claiming.cancelled() and claiming.exception() is None:
                landed = claiming.result()
                if landed.status == "acquired" and landed.token is not None:
                    await _arelease_quietly(astore, key, landed.token)
            raise asyncio.CancelledError
        claim = claiming.result()
        pause = waiter.pause(claim)
        if pause is None:
            break
        await asyncio.sleep(pause)
    if claim.status == "completed":
        return _stored_result(claim, decode)
    token = claim.token
    assert token is not None
    try:
        result = await fn()
        data = encode(result)
    except BaseException:
        await _arelease_quietly(astore, key, token)
        raise
    finishing, cancelled = await settle(astore.complete(key, token, data))
    error = None if finishing.cancelled() else finishing.exception()
    if isinstance(error, TooLarge):
        await _arelease_quietly(astore, key, token)
    elif isinstance(error, PreconditionFailed):
        _lost_while_running(key)
        error = None
    if cancelled or finishing.cancelled():
        raise asyncio.CancelledError  # the completion (or the release) landed first
    if error is not None:
        raise error
    return result


async def _arelease_quietly(astore: AsyncStore, key: str, token: str) -> None:
    """Release the claim, to its end even through a cancel (which the caller raises afterwards)."""
    from ..driver.aio_idempotency import settle

    releasing, _ = await settle(astore.release(key, token))
    with _quietly(key):
        releasing.result()


def idempotent(
    store: IdempotencyStore | AsyncStore | str,
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

    >>> from portable.idempotency import MemoryStore, idempotent
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
            on first call), or an async store
            (:class:`portable.aio.AsyncIdempotencyStore`, coroutine functions only).
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
        InvalidArgument: at decoration, ``key`` names no parameter of the function,
            or an async store is given for a plain (not ``async def``) function.
    """

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        is_async = inspect.iscoroutinefunction(fn)
        if not is_async and inspect.iscoroutinefunction(getattr(store, "claim", None)):
            raise InvalidArgument(
                f"@idempotent: {fn.__qualname__} is a plain function but the store is async; "
                "pass the sync store (AsyncIdempotencyStore.sync) or make the function async def"
            )
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
        holder: list[Any] = []

        def the_store() -> Any:
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

        if is_async:
            afn = cast(Callable[..., Awaitable[Any]], fn)

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                k, fp = key_and_fp(args, kwargs)
                return await arun_once(
                    the_store(), k, fp, lambda: afn(*args, **kwargs),
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


