"""Batch reads of small S3 objects on keep-alive HTTP/1.1 connections of an event loop.

Why this exists: a batch of 1 KiB GETs is bound by CPU on both ends, and the client's share
is what a library can change. On the s3s bench server (2 cores, 16 in flight) OpenDAL's
blocking ``read`` on 16 threads, the fastest peer, costs about 60 us of client CPU per
object and obstore's about 200 (a thread handoff per request and per wake-up); one
asyncio loop driving 16 connections with requests signed here costs about 24 us, and
reads 1.2-1.35x as many objects per second (bench/results, docs/performance.md).

What it does, and what it leaves to obstore: :meth:`FastReads.get` sends one SigV4-signed
``GET`` on a pooled connection and reads an answer that has a ``Content-Length`` (and no
``Transfer-Encoding``): a ``200`` is the body; another status is an :class:`ErrorAnswer`,
which the driver raises as the S3 error it names (``NoSuchKey``, ``SlowDown``), as it does
for every request it signs itself. For anything else (a redirect, a ``403``, a chunked or
malformed answer, a refused or dropped connection, a timeout) it returns None, and the
caller reads that key through obstore, which sends the request again and reports its
result or its typed error exactly as without this path. A 403 is handed over rather than
reported because obstore's signing is the reference: a refusal of a request signed here is
confirmed there before it is an error. No retries here: only :mod:`portable.resilience`
retries (a pooled connection that the server closed while idle is replaced once, before any
answer, as every HTTP client does).

When it is used (:func:`fast_reads_for`): the endpoint is ``http://`` (over TLS obstore
reads: this path is measured only over plain HTTP), the credentials are static
(``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, with ``AWS_SESSION_TOKEN`` when set,
read at each batch), no credential provider is configured (a profile, boto3's chain, an
instance role: obstore refreshes those) and no proxy is set in the environment (obstore
would go through it).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import time
import urllib.parse
import weakref

from ._s3_signed import signing_key

__all__ = ["ErrorAnswer", "FastReads", "fast_reads_for"]

#: Proxy variables that make reqwest (obstore's HTTP client) go through a proxy: with one set,
#: every read goes through obstore.
_PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")

#: The longest answer head read (status line and headers); a longer one is not ours to parse.
_MAX_HEAD = 64 * 1024

_UNSIGNED = "UNSIGNED-PAYLOAD"
_SIGNED_HEADERS = "host;x-amz-content-sha256;x-amz-date"
_SIGNED_WITH_TOKEN = "host;x-amz-content-sha256;x-amz-date;x-amz-security-token"


def fast_reads_for(base_url: str, region: str, timeout: float, has_provider: bool) -> FastReads | None:
    """The fast read path of a bucket whose requests go to ``base_url``, or None where obstore must read.

    Args:
        base_url: the bucket's URL (path style: ``http://host:port/bucket``; virtual-hosted:
            ``http://bucket.host:port``).
        region: the signing region.
        timeout: seconds one request may take (then obstore reads the key).
        has_provider: whether the store has a credential provider (then obstore reads).
    """
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme != "http" or has_provider or not parts.hostname:
        return None
    if parts.username is not None or parts.password is not None:
        return None  # user info in the endpoint (from AWS_ENDPOINT_URL): not ours to send, nor to show
    if any(os.environ.get(name) for name in _PROXY_VARIABLES):
        return None
    return FastReads(parts.hostname, parts.port or 80, parts.netloc, parts.path.rstrip("/"), region, timeout)


class _Unusable(Exception):
    """The answer cannot be read here (no length, chunked, malformed): the caller reads the key through obstore."""


class ErrorAnswer(Exception):
    """An answer with an error status and a length: the driver raises it as an S3 error of its own.

    Attributes:
        status: the HTTP status.
        body: the answer's body (S3's error XML).
    """

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body


#: Statuses handed to obstore rather than reported from here: a redirect (another region or
#: endpoint, which obstore follows or reports) and 403 (a signature obstore computes its own way
#: is the reference: a refusal here is checked there before it is an error).
_HANDED_OVER = frozenset({301, 302, 303, 307, 308, 403})


class _Connection(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.status = 0
        self.body_at = -1  # where the body starts in ``buffer``, once the head is read
        self.end = -1  # where the answer ends
        self.reusable = True
        self.closed = False

    # -- asyncio.Protocol ----------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        waiter = self.waiter
        if waiter is None or waiter.done():
            self.reusable = False  # bytes nobody asked for: the stream is out of step
            return
        if self.body_at < 0:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                if len(self.buffer) > _MAX_HEAD:
                    self._fail(_Unusable("answer head too long"))
                return
            try:
                self._read_head(bytes(self.buffer[:head_end]))
            except _Unusable as exc:
                self._fail(exc)
                return
            self.body_at = head_end + 4
        if len(self.buffer) >= self.end:
            if len(self.buffer) > self.end:
                self.reusable = False
            with memoryview(self.buffer) as view:
                body = bytes(view[self.body_at : self.end])
            self.buffer.clear()
            self.body_at = self.end = -1
            self.waiter = None
            waiter.set_result((self.status, body))

    def eof_received(self) -> bool | None:
        self.reusable = False
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        self._fail(ConnectionError("connection closed before the answer was complete"))

    # -- helpers ----------------------------------------------------------------
    def _read_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        status = lines[0].split(b" ", 2)
        if len(status) < 2 or not status[0].startswith(b"HTTP/1.") or not status[1].isdigit():
            raise _Unusable(f"status line {lines[0][:80]!r}")
        self.status = int(status[1])
        if self.status < 200 or self.status in _HANDED_OVER:
            raise _Unusable(f"status {self.status}")
        keep_alive = status[0] != b"HTTP/1.0"  # HTTP/1.0 closes unless the answer says keep-alive
        length = -1
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    raise _Unusable("bad Content-Length") from None
                if length < 0:
                    raise _Unusable("bad Content-Length")
            elif name == b"transfer-encoding":
                raise _Unusable("Transfer-Encoding")
            elif name == b"connection":
                keep_alive = b"close" not in value.lower() and (keep_alive or b"keep-alive" in value.lower())
        if not keep_alive:
            self.reusable = False
        if length < 0:
            raise _Unusable("no Content-Length")
        self.end = len(head) + 4 + length

    def _fail(self, exc: Exception) -> None:
        self.reusable = False
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None and not self.closed:
            self.transport.close()


class FastReads:
    """Signed GETs on a pool of keep-alive connections (see the module's docstring).

    One pool of connections per event loop: a connection is used only by the loop that opened it.
    """

    def __init__(self, host: str, port: int, netloc: str, base_path: str, region: str, timeout: float) -> None:
        self.host, self.port, self.netloc = host, port, netloc
        self.base_path = base_path
        self.region = region
        self.timeout = timeout
        #: each event loop's idle connections
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_Connection]] = (
            weakref.WeakKeyDictionary()
        )
        self._keys: dict[tuple[str, str], bytes] = {}  # (secret, day) -> signing key
        #: reads handed to obstore so far (an answer this module does not read, or no answer)
        self.handed_over = 0

    def __repr__(self) -> str:
        return f"FastReads(host={self.host!r}, port={self.port}, base_path={self.base_path!r})"

    # -- signing --------------------------------------------------------------------
    def _signing_key(self, secret: str, day: str) -> bytes:
        key = self._keys.get((secret, day))
        if key is None:
            key = signing_key(secret, day, self.region)
            if len(self._keys) > 8:
                self._keys.clear()
            self._keys[(secret, day)] = key
        return key

    def request(self, path: str, credentials: tuple[str, str, str | None], now: float | None = None) -> bytes:
        """The bytes of a GET of ``path`` (URI-encoded), signed with SigV4 at ``now`` (epoch seconds)."""
        access_key, secret, token = credentials
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        day = stamp[:8]
        if token:
            canonical = (
                f"GET\n{path}\n\nhost:{self.netloc}\nx-amz-content-sha256:{_UNSIGNED}\nx-amz-date:{stamp}\n"
                f"x-amz-security-token:{token}\n\n{_SIGNED_WITH_TOKEN}\n{_UNSIGNED}"
            )
            names, extra = _SIGNED_WITH_TOKEN, f"x-amz-security-token: {token}\r\n"
        else:
            canonical = (
                f"GET\n{path}\n\nhost:{self.netloc}\nx-amz-content-sha256:{_UNSIGNED}\nx-amz-date:{stamp}\n"
                f"\n{_SIGNED_HEADERS}\n{_UNSIGNED}"
            )
            names, extra = _SIGNED_HEADERS, ""
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(secret, day), to_sign.encode(), hashlib.sha256).hexdigest()
        return (
            f"GET {path} HTTP/1.1\r\nHost: {self.netloc}\r\nx-amz-content-sha256: {_UNSIGNED}\r\n"
            f"x-amz-date: {stamp}\r\n{extra}Authorization: AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
            f"SignedHeaders={names}, Signature={signature}\r\n\r\n"
        ).encode()

    def path_of(self, full_key: str) -> str:
        """The request path of a key (bucket path included for path-style URLs), encoded once as S3 signs it."""
        return self.base_path + "/" + urllib.parse.quote(full_key, safe="/~")

    # -- connections -----------------------------------------------------------------
    async def _connection(self) -> tuple[_Connection, bool]:
        """An idle connection of this loop (and True), else a new one (and False)."""
        loop = asyncio.get_running_loop()
        idle = self._pools.get(loop)
        if idle is None:
            idle = self._pools[loop] = []
        while idle:
            conn = idle.pop()
            if conn.reusable and not conn.closed:
                return conn, True
            conn.close()
        return await self._open(), False

    def _release(self, conn: _Connection, clean: bool) -> None:
        if clean and conn.reusable and not conn.closed:
            self._pools.setdefault(asyncio.get_running_loop(), []).append(conn)
        else:
            conn.close()

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Connection, self.host, self.port)
        return conn

    async def get(self, full_key: str, credentials: tuple[str, str, str | None]) -> bytes | None:
        """The body of ``full_key``, or None when obstore must read it (see the module's docstring).

        Raises:
            ErrorAnswer: S3 answered an error status (404 NoSuchKey, 503 SlowDown, ...) with a length.

        A pooled connection that the server closed while it sat idle (no byte of an answer came
        back) is replaced by a new one, once: a GET is safe to send again.
        """
        message = self.request(self.path_of(full_key), credentials)
        try:
            conn, reused = await self._connection()
            answer, dropped = await self._exchange(conn, message)
            if dropped and reused:
                answer, _ = await self._exchange(await self._open(), message)
        except OSError:
            answer = None  # refused or unreachable: obstore tries, and reports its own error
        if answer is None:
            self.handed_over += 1
            return None
        status, body = answer
        if status != 200:
            raise ErrorAnswer(status, body)
        return body

    async def _exchange(self, conn: _Connection, message: bytes) -> tuple[tuple[int, bytes] | None, bool]:
        """``((status, body), False)``; ``(None, True)`` when the connection dropped before any byte
        of an answer (send again); ``(None, False)`` when obstore must read the key."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        conn.waiter = waiter
        assert conn.transport is not None
        timer = loop.call_later(self.timeout, conn._fail, TimeoutError("no answer in time"))
        clean = False
        try:
            conn.transport.write(message)
            answer = await waiter
            clean = True
            return answer, False
        except ConnectionError:
            return None, not conn.buffer  # nothing came back: the server had closed it while idle
        except (_Unusable, TimeoutError):
            return None, False
        finally:
            timer.cancel()
            self._release(conn, clean)

    def close(self) -> None:
        """Close the idle connections, each on its own loop's thread (callable from any thread)."""
        while True:
            try:
                pools = list(self._pools.items())
                break
            except RuntimeError:  # another loop added its pool meanwhile
                continue
        for loop, idle in pools:
            if loop.is_closed():
                continue  # a closed loop runs nothing more: its sockets close when collected
            try:
                loop.call_soon_threadsafe(_close_all, idle)
            except RuntimeError:
                pass  # closed meanwhile


def _close_all(idle: list[_Connection]) -> None:
    """Close the connections of a pool (on its loop's thread, where the pool is used)."""
    while idle:
        idle.pop().close()
