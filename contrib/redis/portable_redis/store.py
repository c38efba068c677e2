"""``redis://`` — idempotency records in Redis.

URLs:
    ``redis://[user@]host:6379/DB``, ``rediss://...`` (TLS; a password goes in code:
    ``RedisStore(redis.Redis(..., password=...))``, never in the URL), with
    redis-py's own query options (``socket_timeout``, ``ssl_cert_reqs``, ...)
    passed through.

Options (taken off the URL before redis-py sees it):
    ``prefix`` (str): prepended to every key. Defaults to ``portable:idem:``.
    ``max_result_bytes`` (int): the largest stored result. Defaults to 64 KiB.

How: each record is one hash with the fields and states of
:class:`portable.driver.idempotency.IdempotencyRecord` (``fp``, ``token``,
``state``, ``lease_until``, ``ttl``, ``result``; times in milliseconds) that
Redis itself expires after the record's ``ttl`` (``PEXPIRE``), so it needs no
``expires_at``; ``starts`` and ``failures`` count the claims taken to run and
those released (see :class:`portable.driver.idempotency.Claim`), and a
released record keeps them until it expires. Claim, complete, release and extend are each one Lua script
that applies the rules of :func:`~portable.driver.idempotency.claim_outcome`
and :func:`~portable.driver.idempotency.change_needed` on the server: atomic,
one round trip, with lease times taken from the server's clock (``TIME``), so
the clients' clocks do not matter.
:meth:`RedisStore.claim_many` and :meth:`RedisStore.complete_many` pipeline many
claims (completions) into one round trip each: the consumer loop's batches.

Retries: redis-py retries on its own (3 times with backoff since 6.0); this
store turns that off (``retry=Retry(NoBackoff(), 0)``) and runs every call
through :class:`portable.resilience.Guard`, the one retry layer. Every script
is safe to repeat: a claim whose reply was lost is recognised by its token.

Known differences: a Redis without persistence (``--save ''``) loses the
records on restart, and a failover to a replica can lose the latest writes:
the at-most-once promise is as durable as the Redis behind it.

As: ``redis.Redis``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from string import Template
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from portable.driver import Classifier, ErrorCode
from portable.driver.idempotency import (
    COMPLETED,
    DEFAULT_MAX_RESULT_BYTES,
    IN_PROGRESS,
    RELEASED,
    Claim,
    check_claim_args,
    check_result,
    conflict_error,
    lost_error,
    new_token,
    without_options,
)
from portable.driver.redaction import redact
from portable.errors import IdempotencyConflict, InvalidURL
from portable.resilience import Guard, ResiliencePolicy
from portable.urls import ParsedURL

__all__ = ["RedisStore"]


def _lua(source: str) -> str:
    """A script with the record states of portable.driver.idempotency filled in ($IN_PROGRESS, ...).

    The script's replies (``'acquired'``, ``'completed'``, ...) are claim statuses, not states.
    """
    return Template(source).substitute(IN_PROGRESS=IN_PROGRESS, COMPLETED=COMPLETED, RELEASED=RELEASED)


_CLAIM = _lua("""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local r = redis.call('HMGET', KEYS[1], 'fp', 'token', 'state', 'lease_until', 'result', 'starts', 'failures')
if r[3] and r[3] ~= '$RELEASED' then
  if r[2] == ARGV[2] and r[3] == '$IN_PROGRESS' then
    local s, f = tonumber(r[6] or '1'), tonumber(r[7] or '0')
    if s == 1 and f == 0 then return {'acquired'} end
    return {'acquired', s, f, math.max(0, tonumber(r[4]) - now)}
  end
  if r[1] ~= ARGV[1] then return {'conflict'} end
  if r[3] == '$COMPLETED' then
    if r[5] then return {'completed', r[5]} end
    return {'completed'}
  end
  if tonumber(r[4]) > now then return {'in_progress', tonumber(r[4]) - now} end
end
local starts = 1
local failures = 0
if r[3] then
  starts = tonumber(r[6] or '1') + 1
  failures = tonumber(r[7] or '0')
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'token', ARGV[2], 'state', '$IN_PROGRESS',
           'lease_until', now + tonumber(ARGV[3]), 'ttl', ARGV[4], 'starts', starts, 'failures', failures)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if starts == 1 and failures == 0 then return {'acquired'} end
return {'acquired', starts, failures, tonumber(ARGV[3])}
""")

_COMPLETE = _lua("""
local r = redis.call('HMGET', KEYS[1], 'token', 'state', 'ttl')
if not r[1] or r[1] ~= ARGV[1] then return 'lost' end
if r[2] == '$COMPLETED' then return 'ok' end
if r[2] ~= '$IN_PROGRESS' then return 'lost' end
redis.call('HSET', KEYS[1], 'state', '$COMPLETED')
if ARGV[3] == '1' then redis.call('HSET', KEYS[1], 'result', ARGV[2]) end
redis.call('PEXPIRE', KEYS[1], r[3])
return 'ok'
""")

_RELEASE = _lua("""
local r = redis.call('HMGET', KEYS[1], 'token', 'state')
if not r[1] or r[1] ~= ARGV[1] then return 'lost' end
if r[2] == '$RELEASED' then return 'ok' end
if r[2] ~= '$IN_PROGRESS' then return 'lost' end
redis.call('HSET', KEYS[1], 'state', '$RELEASED')
redis.call('HINCRBY', KEYS[1], 'failures', 1)
return 'ok'
""")

_FORGET = _lua("""
local r = redis.call('HMGET', KEYS[1], 'token', 'state')
if not r[1] then return 'ok' end
if r[1] ~= ARGV[1] then return 'lost' end
if r[2] == '$COMPLETED' then return 'lost' end
redis.call('DEL', KEYS[1])
return 'ok'
""")

_EXTEND = _lua("""
local r = redis.call('HMGET', KEYS[1], 'token', 'state')
if not r[1] or r[1] ~= ARGV[1] or r[2] ~= '$IN_PROGRESS' then return 'lost' end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'lease_until', now + tonumber(ARGV[2]))
return 'ok'
""")


class _RedisClassifier(Classifier):
    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, redis.exceptions.TimeoutError):
            return ErrorCode.DEADLINE_EXCEEDED
        if isinstance(exc, redis.exceptions.BusyLoadingError | redis.exceptions.ConnectionError):
            return ErrorCode.UNAVAILABLE
        if isinstance(exc, redis.exceptions.AuthenticationError | redis.exceptions.NoPermissionError):
            return ErrorCode.PERMISSION_DENIED
        if isinstance(exc, redis.exceptions.ResponseError) and str(exc).startswith(("BUSY", "TRYAGAIN", "LOADING")):
            return ErrorCode.UNAVAILABLE
        return super().code_of(exc)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


class RedisStore:
    """Idempotency records in Redis, shared by every process that reaches it.

    Args:
        client: a ``redis.Redis`` (``decode_responses=False``). Turn its own
            retries off (``retry=Retry(NoBackoff(), 0)``); :meth:`from_url` does.
        prefix: prepended to every key. Defaults to ``portable:idem:``.
        max_result_bytes: the largest result kept. Defaults to 64 KiB.
        policy: the retry policy of the guard around each call.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "portable:idem:",
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        policy: ResiliencePolicy | None = None,
        endpoint: str = "redis",
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.max_result_bytes = max_result_bytes
        self._guard = Guard("redis", endpoint, _RedisClassifier(), policy)
        self._claim = client.register_script(_CLAIM)
        self._complete = client.register_script(_COMPLETE)
        self._release = client.register_script(_RELEASE)
        self._forget = client.register_script(_FORGET)
        self._extend = client.register_script(_EXTEND)

    @classmethod
    def from_url(cls, url: ParsedURL) -> RedisStore:
        """Open ``redis://host:port/db?prefix=...&max_result_bytes=...``."""
        prefix = url.take_str("prefix", "portable:idem:") or ""
        limit = url.take("max_result_bytes", int, DEFAULT_MAX_RESULT_BYTES)
        inner = without_options(url, "prefix", "max_result_bytes")
        try:
            client = redis.Redis.from_url(inner, retry=Retry(NoBackoff(), 0), decode_responses=False)
        except ValueError as exc:
            raise InvalidURL(f"{url}: {redact(str(exc))}") from None
        return cls(client, prefix=prefix, max_result_bytes=limit, endpoint=f"redis://{url.host}{url.path}")

    def __repr__(self) -> str:
        return f"RedisStore({self._guard.endpoint!r}, prefix={self.prefix!r})"

    def as_(self, kind: type[Any]) -> Any:
        """The ``redis.Redis`` client, or None for any other type."""
        return self.client if isinstance(self.client, kind) else None

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()

    def _key(self, key: str) -> str:
        return self.prefix + key

    # -- the protocol ---------------------------------------------------
    def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        check_claim_args(key, fingerprint, lease, ttl)
        token = new_token()
        reply = self._guard.call(
            "claim", "claim an idempotency key", self._claim,
            keys=[self._key(key)], args=[fingerprint, token, _ms(lease), _ms(ttl)],
        )
        return _to_claim(key, token, reply, lease)

    def claim_many(
        self, items: Iterable[tuple[str, str]], *, lease: float, ttl: float
    ) -> list[Claim | IdempotencyConflict]:
        """Claim many (key, fingerprint) pairs in one round trip (a pipeline of scripts).

        Returns, in input order, each key's Claim, or the IdempotencyConflict
        it met (raised only by :meth:`claim`, returned here so one bad key
        does not hide the others' claims).
        """
        pairs = list(items)
        for key, fp in pairs:
            check_claim_args(key, fp, lease, ttl)
        tokens = [new_token() for _ in pairs]

        def run() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for (key, fp), token in zip(pairs, tokens, strict=True):
                self._claim(keys=[self._key(key)], args=[fp, token, _ms(lease), _ms(ttl)], client=pipe)
            return pipe.execute()

        replies = self._guard.call("claim", f"claim {len(pairs)} idempotency keys", run)
        out: list[Claim | IdempotencyConflict] = []
        for (key, _), token, reply in zip(pairs, tokens, replies, strict=True):
            try:
                out.append(_to_claim(key, token, reply, lease))
            except IdempotencyConflict as exc:
                out.append(exc)
        return out

    def complete(self, key: str, token: str, result: bytes | None) -> None:
        check_result(result, self.max_result_bytes)
        reply = self._guard.call(
            "write", "complete an idempotency key", self._complete,
            keys=[self._key(key)], args=[token, result or b"", "0" if result is None else "1"],
        )
        if reply != b"ok":
            raise lost_error(key)

    def complete_many(self, items: Iterable[tuple[str, str, bytes | None]]) -> list[BaseException | None]:
        """Complete many (key, token, result) claims in one round trip (a pipeline of scripts).

        Returns each item's error in input order: TooLarge for a result over
        ``max_result_bytes`` (not sent), PreconditionFailed for a lost claim, or
        None. Each completion is atomic on its own (the pipeline is not a transaction).
        """
        triples = list(items)
        out: list[BaseException | None] = [None] * len(triples)
        sent: list[int] = []
        for i, (_, _, result) in enumerate(triples):
            try:
                check_result(result, self.max_result_bytes)
            except Exception as exc:
                out[i] = exc
                continue
            sent.append(i)
        if not sent:
            return out

        def run() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for i in sent:
                key, token, result = triples[i]
                self._complete(
                    keys=[self._key(key)], args=[token, result or b"", "0" if result is None else "1"], client=pipe
                )
            return pipe.execute()

        replies = self._guard.call("write", f"complete {len(sent)} idempotency keys", run)
        for i, reply in zip(sent, replies, strict=True):
            if reply != b"ok":
                out[i] = lost_error(triples[i][0])
        return out

    def release(self, key: str, token: str) -> None:
        reply = self._guard.call(
            "write", "release an idempotency key", self._release, keys=[self._key(key)], args=[token]
        )
        if reply != b"ok":
            raise lost_error(key)

    def forget(self, key: str, token: str) -> None:
        """Give the claim up and drop its counts: the next claim is a first start.

        Raises:
            PreconditionFailed: the claim was lost.
        """
        reply = self._guard.call(
            "write", "forget an idempotency key", self._forget, keys=[self._key(key)], args=[token]
        )
        if reply != b"ok":
            raise lost_error(key)

    def extend(self, key: str, token: str, lease: float) -> None:
        """Push the lease of a held claim ``lease`` seconds from now (long effects)."""
        reply = self._guard.call(
            "write", "extend an idempotency lease", self._extend, keys=[self._key(key)], args=[token, _ms(lease)]
        )
        if reply != b"ok":
            raise lost_error(key)

    def server_time(self) -> float:
        """The Redis server's clock, in seconds (leases are measured on it)."""
        seconds, micros = self._guard.call("read", "time", self.client.time)
        return seconds + micros / 1e6 if isinstance(seconds, int) else time.time()


def _to_claim(key: str, token: str, reply: list[Any], lease: float) -> Claim:
    """The Claim of a claim script's reply. ``acquired`` alone is a first start (counts 1
    and 0) with the whole ``lease``; a later start carries its counts and lease left."""
    status = reply[0]
    if status == b"acquired":
        if len(reply) == 1:
            return Claim("acquired", token, None, lease, 1, 0)
        return Claim("acquired", token, None, int(reply[3]) / 1000, int(reply[1]), int(reply[2]))
    if status == b"completed":
        return Claim("completed", None, reply[1] if len(reply) > 1 else None)
    if status == b"in_progress":
        return Claim("in_progress", lease_remaining=int(reply[1]) / 1000)
    if status == b"conflict":
        raise conflict_error(key)
    raise RuntimeError(f"unexpected reply {reply!r} from the claim script")
