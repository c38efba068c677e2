"""``chaos+<scheme>://`` — fault injection around any storage or messaging driver.

Put ``chaos+`` in front of any storage or messaging URL and every call to the
provider may fail the way real providers fail, reproducibly::

    bucket = open_bucket("chaos+s3://my-bucket/prefix?region=eu-west-1&seed=7&error_rate=0.2")
    topic = open_topic("chaos+mem://orders?seed=1&error_rate=0.2")

The wrapper takes its own options off the URL and opens the rest with
:func:`portable.urls.open_driver`, so the inner driver sees exactly the URL it
would have seen without ``chaos+``. Use it to test a service's own handling of
faults: retries, idempotency keys, consumer loops, breakers.

Options:
    ``seed`` (int): makes the faults reproducible. Defaults to 0.
    ``error_rate`` (float, 0 to 1): the chance that one call to the provider
        (or one delivered message) meets a fault. Defaults to 0.1.
    ``faults`` (comma-separated): which kinds to inject. Defaults to every
        kind that applies to the domain.
    ``retry_after`` (float seconds): the Retry-After of injected throttling.
        Defaults to 0.01.

Fault kinds, each raised as a native error that the wrapper classifies like
a provider's (so the portable layer retries exactly what it would retry):

``throttle``
    Refused before it runs: 503 SlowDown with Retry-After (``retry_after``).
    THROTTLED, retryable.
``unavailable``
    Refused before it runs: 503 Service Unavailable. UNAVAILABLE, retryable.
``reset``
    Connection reset before the request was sent. UNAVAILABLE, retryable.
``timeout``
    Timed out before the provider got the request. DEADLINE_EXCEEDED, retryable.
``lost_reply``
    The write SUCCEEDED, then its reply was lost (writes, stream commits,
    publishes, acks, nacks): the classic maker of duplicates.
    DEADLINE_EXCEEDED, retryable.
``duplicate`` (messaging)
    A received message is delivered again later, as a phantom copy with the
    same id whose ack and nack do nothing (the real delivery settles it).
``reorder`` (messaging)
    A received message without an ordering key is held back and delivered
    after later ones.
``lease_expiry`` (messaging)
    The lease runs out mid-handler: the message is available again at once
    (another consumer may get it while the handler runs) and ack, nack or
    extend_lease of the stale delivery fails; or the lease runs out just
    before an ack or extend_lease. PRECONDITION_FAILED, not retryable.

Reproducibility: whether a call meets a fault, and which, is a hash of
(seed, operation, subject, how many times this operation has met this
subject), where the subject is the object key, the publish's idempotency key
(else the body's fingerprint), or the message id. So a run with the same seed
and the same calls injects the same faults, whatever the thread interleaving,
except for calls without a subject (``receive``, ``list``).

Control at run time: the driver's :attr:`chaos` (a :class:`ChaosController`;
``chaos_of(bucket)`` finds it) counts what was injected and what really took
effect (``stats.applied``: successful writes per key, successful publishes
per idempotency key), changes ``error_rate``, and starts an outage in which
every call fails (``with controller.outage("unavailable"): ...``).

As: whatever the inner driver returns.

Capabilities: the inner driver's. Breakers are kept apart from the real
endpoint's (the endpoint is ``chaos+<inner endpoint>``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Literal
from urllib.parse import urlencode

from ..driver.idempotency import without_options
from ..driver.messaging import (
    MessagingCapabilities,
    MessagingDriver,
    OutgoingMessage,
    QueueStats,
    ReceivedMessage,
    SubscriptionDriver,
    TopicDriver,
)
from ..driver.storage import (
    ListPage,
    ObjectInfo,
    StorageCapabilities,
    StorageDriver,
    WriteOptions,
    WriteStream,
)
from ..errors import ErrorCode, InvalidURL, Unsupported
from ..urls import Domain, ParsedURL, open_driver

__all__ = [
    "ChaosController",
    "ChaosMessaging",
    "ChaosStats",
    "ChaosStorage",
    "InjectedFault",
    "InjectedLeaseLost",
    "InjectedLostReply",
    "InjectedReset",
    "InjectedThrottle",
    "InjectedTimeout",
    "InjectedUnavailable",
    "MESSAGING_FAULTS",
    "OPTIONS",
    "STORAGE_FAULTS",
    "chaos_of",
    "open_chaos",
]

#: faults raised before the call runs: nothing happened at the provider
_BEFORE = ("throttle", "unavailable", "reset", "timeout")
STORAGE_FAULTS: tuple[str, ...] = (*_BEFORE, "lost_reply")
MESSAGING_FAULTS: tuple[str, ...] = (*_BEFORE, "lost_reply", "duplicate", "reorder", "lease_expiry")
#: the URL options the wrapper takes for itself
OPTIONS = ("seed", "error_rate", "faults", "retry_after")


# ---------------------------------------------------------------- native errors
class InjectedFault(Exception):
    """Base of the errors the chaos wrapper raises; each carries its classification.

    Attributes:
        kind: the fault kind (``"throttle"``, ...).
        status: the HTTP status a provider would have answered, or None.
        code, retryable, retry_after: how the wrapper classifies it.
    """

    kind = "fault"
    code = ErrorCode.UNAVAILABLE
    retryable = True
    status: int | None = None

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class InjectedThrottle(InjectedFault):
    """429/503 SlowDown with Retry-After: the provider asked us to slow down."""

    kind = "throttle"
    code = ErrorCode.THROTTLED
    status = 503


class InjectedUnavailable(InjectedFault):
    """503 Service Unavailable."""

    kind = "unavailable"
    status = 503


class InjectedReset(InjectedFault, ConnectionResetError):
    """Connection reset by peer before the request was sent."""

    kind = "reset"


class InjectedTimeout(InjectedFault, TimeoutError):
    """Read timed out before the provider got the request."""

    kind = "timeout"
    code = ErrorCode.DEADLINE_EXCEEDED


class InjectedLostReply(InjectedTimeout):
    """The request succeeded at the provider, but its reply was lost (read timed out)."""

    kind = "lost_reply"


class InjectedLeaseLost(InjectedFault):
    """The message's lease expired: the receipt handle is stale and the message is available again."""

    kind = "lease_expiry"
    code = ErrorCode.PRECONDITION_FAILED
    retryable = False
    status = 400


_ERRORS: dict[str, type[InjectedFault]] = {
    "throttle": InjectedThrottle,
    "unavailable": InjectedUnavailable,
    "reset": InjectedReset,
    "timeout": InjectedTimeout,
    "lost_reply": InjectedLostReply,
    "lease_expiry": InjectedLeaseLost,
}
_MESSAGES = {
    "throttle": "SlowDown: Please reduce your request rate (injected)",
    "unavailable": "503 Service Unavailable (injected)",
    "reset": "[Errno 104] Connection reset by peer (injected)",
    "timeout": "Read timed out (injected; the request was not processed)",
    "lost_reply": "Read timed out (injected; the request WAS processed)",
    "lease_expiry": "the receipt handle has expired (injected lease expiry)",
}


# ---------------------------------------------------------------- the controller
@dataclass
class ChaosStats:
    """What the wrapper did.

    Attributes:
        calls: calls per operation.
        injected: faults injected per kind.
        applied: writes that took effect at the inner provider, per object key
            (storage: put, stream commit, copy destination) or per publish
            (the idempotency key, else the body's fingerprint).
    """

    calls: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    applied: Counter[str] = field(default_factory=Counter)


class ChaosController:
    """The knobs and counters of one chaos wrapper (``driver.chaos``).

    Args:
        seed: makes the faults reproducible.
        error_rate: the chance that a call meets a fault, 0 to 1.
        faults: the kinds that may be injected.
        retry_after: the Retry-After of injected throttling, in seconds.
    """

    def __init__(self, *, seed: int = 0, error_rate: float = 0.1, faults: Iterable[str] = STORAGE_FAULTS,
                 retry_after: float = 0.01) -> None:
        self.seed = seed
        self.error_rate = error_rate
        self.faults = frozenset(faults)
        self.retry_after = retry_after
        self.stats = ChaosStats()
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self._outage: str | None = None

    def __repr__(self) -> str:
        return f"ChaosController(seed={self.seed}, error_rate={self.error_rate}, faults={sorted(self.faults)})"

    @contextlib.contextmanager
    def outage(self, kind: str = "unavailable") -> Iterator[None]:
        """Make every call fail with ``kind`` (a fault raised before the call) inside the block."""
        if kind not in _BEFORE:
            raise Unsupported(f"an outage is one of {', '.join(_BEFORE)}, got {kind!r}")
        self._outage = kind
        try:
            yield
        finally:
            self._outage = None

    def start_outage(self, kind: str = "unavailable") -> None:
        """Make every call fail with ``kind`` until :meth:`end_outage`."""
        if kind not in _BEFORE:
            raise Unsupported(f"an outage is one of {', '.join(_BEFORE)}, got {kind!r}")
        self._outage = kind

    def end_outage(self) -> None:
        """End an outage started with :meth:`start_outage`."""
        self._outage = None

    def pick(self, op: str, subject: str, kinds: tuple[str, ...]) -> str | None:
        """The fault that this call meets, or None. Deterministic per (seed, op, subject, n)."""
        with self._lock:
            self.stats.calls[op] += 1
            if self._outage is not None:
                self.stats.injected[self._outage] += 1
                return self._outage
            if self.error_rate <= 0:
                return None
            n = self._counts[(op, subject)] = self._counts[(op, subject)] + 1
        allowed = [k for k in kinds if k in self.faults]
        if not allowed:
            return None
        digest = hashlib.blake2b(f"{self.seed}\0{op}\0{subject}\0{n}".encode("utf-8", "surrogatepass"),
                                 digest_size=16).digest()
        if int.from_bytes(digest[:8], "big") / 2.0**64 >= self.error_rate:
            return None
        kind = allowed[int.from_bytes(digest[8:], "big") % len(allowed)]
        with self._lock:
            self.stats.injected[kind] += 1
        return kind

    def error(self, kind: str) -> InjectedFault:
        """The native error of fault ``kind``."""
        cls = _ERRORS[kind]
        return cls(_MESSAGES[kind], retry_after=self.retry_after if kind == "throttle" else None)

    def applied(self, subject: str) -> None:
        with self._lock:
            self.stats.applied[subject] += 1


def _controller_from(url: ParsedURL, domain: str) -> ChaosController:
    known = STORAGE_FAULTS if domain == "storage" else MESSAGING_FAULTS
    seed = url.take("seed", int, 0)
    rate = url.take("error_rate", float, 0.1)
    retry_after = url.take("retry_after", float, 0.01)
    named = url.take_str("faults")
    if not 0 <= rate <= 1:
        raise InvalidURL(f"error_rate in {url} must be between 0 and 1, got {rate}")
    if retry_after < 0:
        raise InvalidURL(f"retry_after in {url} must be >= 0, got {retry_after}")
    faults = known
    if named is not None:
        faults = tuple(f.strip() for f in named.split(",") if f.strip())
        unknown = sorted(set(faults) - set(known))
        if unknown:
            raise InvalidURL(
                f"unknown fault kind(s) {', '.join(unknown)} in {url}; {domain} takes: {', '.join(known)}"
            )
    return ChaosController(seed=seed, error_rate=rate, faults=faults, retry_after=retry_after)


class _Classifying:
    """Classify injected faults; leave the inner driver's own errors to it."""

    inner: Any

    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, InjectedFault):
            return exc.code
        return self.inner.code_of(exc)  # type: ignore[no-any-return]

    def is_retryable(self, exc: BaseException) -> bool:
        if isinstance(exc, InjectedFault):
            return exc.retryable
        return self.inner.is_retryable(exc)  # type: ignore[no-any-return]

    def retry_after(self, exc: BaseException) -> float | None:
        if isinstance(exc, InjectedFault):
            return exc.retry_after
        return self.inner.retry_after(exc)  # type: ignore[no-any-return]

    def as_(self, kind: type[Any]) -> Any:
        return self.inner.as_(kind)


# ---------------------------------------------------------------- storage
_READ = _BEFORE
_WRITE = (*_BEFORE, "lost_reply")


class ChaosStorage(_Classifying, StorageDriver):
    """A storage driver that injects faults around another one."""

    inner: StorageDriver

    def __init__(self, inner: StorageDriver, controller: ChaosController) -> None:
        self.inner = inner
        self.chaos = controller
        self.scheme = inner.scheme
        self.endpoint = f"chaos+{inner.endpoint}"
        self.capabilities: StorageCapabilities = inner.capabilities
        self.batch_concurrency = inner.batch_concurrency

    def __repr__(self) -> str:
        return f"ChaosStorage({self.inner!r}, {self.chaos!r})"

    def _before(self, op: str, subject: str, kinds: tuple[str, ...] = _READ) -> str | None:
        kind = self.chaos.pick(op, subject, kinds)
        if kind is not None and kind != "lost_reply":
            raise self.chaos.error(kind)
        return kind

    def _after(self, kind: str | None, applied: str | None) -> None:
        if applied is not None:
            self.chaos.applied(applied)
        if kind == "lost_reply":
            raise self.chaos.error(kind)

    def get(self, key: str) -> bytes:
        self._before("get", key)
        return self.inner.get(key)

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        self._before("get_range", key)
        return self.inner.get_range(key, start, end)

    def head(self, key: str) -> ObjectInfo:
        self._before("head", key)
        return self.inner.head(key)

    def put(self, key: str, data: bytes, options: WriteOptions) -> str | None:
        kind = self._before("put", key, _WRITE)
        etag = self.inner.put(key, data, options)
        self._after(kind, key)
        return etag

    def delete(self, key: str) -> None:
        kind = self._before("delete", key, _WRITE)
        self.inner.delete(key)
        self._after(kind, None)

    def abort_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        kind = self._before("abort_incomplete", prefix, _WRITE)
        removed = self.inner.abort_incomplete(prefix, older_than)
        self._after(kind, None)
        return removed

    def list_incomplete(self, prefix: str, older_than: dt.timedelta) -> list[str]:
        self._before("list_incomplete", prefix)
        return self.inner.list_incomplete(prefix, older_than)

    def copy(self, src: str, dst: str) -> str | None:
        kind = self._before("copy", dst, _WRITE)
        etag = self.inner.copy(src, dst)
        self._after(kind, dst)
        return etag

    def open_read(self, key: str) -> IO[bytes]:
        self._before("open_read", key)
        return self.inner.open_read(key)

    def open_write(self, key: str, options: WriteOptions, part_size: int) -> WriteStream:
        self._before("open_write", key)
        return _ChaosWrite(self, key, self.inner.open_write(key, options, part_size))

    def list_page(
        self, prefix: str, delimiter: str | None, start_after: str | None, page_size: int, token: str | None
    ) -> ListPage:
        self._before("list", "")
        return self.inner.list_page(prefix, delimiter, start_after, page_size, token)

    def signed_url(
        self, key: str, method: Literal["GET", "PUT"], expires: dt.timedelta, content_type: str | None
    ) -> str:
        return self.inner.signed_url(key, method, expires, content_type)

    def close(self) -> None:
        self.inner.close()


class _ChaosWrite(WriteStream):
    def __init__(self, driver: ChaosStorage, key: str, inner: WriteStream) -> None:
        self._driver = driver
        self._key = key
        self._inner = inner

    def write(self, data: bytes) -> None:
        self._driver._before("write_part", self._key)  # before: a retried part is never appended twice
        self._inner.write(data)

    def commit(self) -> str | None:
        kind = self._driver._before("commit", self._key, _WRITE)
        etag = self._inner.commit()
        self._driver._after(kind, self._key)
        return etag

    def abort(self) -> None:
        self._inner.abort()


# ---------------------------------------------------------------- messaging
@dataclass(frozen=True, slots=True)
class _Handle:
    inner: Any
    message_id: str
    phantom: bool = False  # a duplicate delivery: settling it does nothing
    stale: bool = False  # its lease ran out while the handler ran: settling it fails


class ChaosMessaging(_Classifying, MessagingDriver):
    """A messaging driver that injects faults around another one."""

    inner: MessagingDriver

    def __init__(self, inner: MessagingDriver, controller: ChaosController, options: Mapping[str, str] | None = None) -> None:
        self.inner = inner
        self.chaos = controller
        self.scheme = inner.scheme
        self.endpoint = f"chaos+{inner.endpoint}"
        self.capabilities: MessagingCapabilities = inner.capabilities
        self._options = dict(options or {})

    @contextlib.contextmanager
    def temporary(self, name: str) -> Iterator[str]:
        """The inner provider's temporary queue, under the same faults."""
        with self.inner.temporary(name) as inner_url:
            query = urlencode(self._options)
            sep = "&" if "?" in inner_url else "?"
            yield f"chaos+{inner_url}{sep}{query}" if query else f"chaos+{inner_url}"

    def __repr__(self) -> str:
        return f"ChaosMessaging({self.inner!r}, {self.chaos!r})"

    def topic(self) -> TopicDriver:
        side = _ChaosTopic(self, self.inner.topic())
        self.capabilities = self.inner.capabilities  # opening a side may refine them
        return side

    def subscription(self) -> SubscriptionDriver:
        side = _ChaosSubscription(self, self.inner.subscription())
        self.capabilities = self.inner.capabilities
        return side

    def close(self) -> None:
        self.inner.close()


class _ChaosTopic(TopicDriver):
    def __init__(self, driver: ChaosMessaging, inner: TopicDriver) -> None:
        self._chaos = driver.chaos
        self._inner = inner

    def publish(self, message: OutgoingMessage) -> str:
        subject = message.idempotency_key or hashlib.blake2b(message.body, digest_size=16).hexdigest()
        kind = self._chaos.pick("publish", subject, _WRITE)
        if kind is not None and kind != "lost_reply":
            raise self._chaos.error(kind)
        found = self._inner.publish(message)
        self._chaos.applied(subject)
        if kind == "lost_reply":
            raise self._chaos.error(kind)
        return found

    def close(self) -> None:
        self._inner.close()


class _ChaosSubscription(SubscriptionDriver):
    def __init__(self, driver: ChaosMessaging, inner: SubscriptionDriver) -> None:
        self._driver = driver
        self._chaos = driver.chaos
        self._inner = inner
        self._lock = threading.Lock()
        self._later: list[ReceivedMessage] = []  # held back (reorder) and phantom copies (duplicate)

    def _raise_before(self, op: str, subject: str, kinds: tuple[str, ...]) -> str | None:
        kind = self._chaos.pick(op, subject, kinds)
        if kind is not None and kind in _BEFORE:
            raise self._chaos.error(kind)
        return kind

    def receive(self, max_messages: int, wait: float, lease: float) -> list[ReceivedMessage]:
        """The inner driver's deliveries as ReceivedMessage copies with chaos handles (so a
        driver's own Delivery objects are copied too, and never handed out twice)."""
        self._raise_before("receive", "", _BEFORE)
        with self._lock:
            out = self._later[:max_messages]
            del self._later[:max_messages]
        room = max_messages - len(out)
        if room <= 0:
            return out
        got = self._inner.receive(room, 0.0 if out else wait, lease)
        for m in got:
            real = ReceivedMessage.like(m, _Handle(m.handle, m.id))
            kind = self._chaos.pick("deliver", m.id, ("duplicate", "reorder", "lease_expiry"))
            if kind == "lease_expiry":
                # The lease runs out as the handler starts: the message is available again at
                # once (another consumer may get it while this one works) and this delivery is stale.
                with contextlib.suppress(Exception):
                    self._inner.nack(m.handle, 0.0)
                out.append(ReceivedMessage.like(m, _Handle(m.handle, m.id, stale=True)))
            elif kind == "duplicate":
                phantom = ReceivedMessage.like(m, _Handle(m.handle, m.id, phantom=True), m.delivery_attempt + 1)
                out.append(real)
                with self._lock:
                    self._later.append(phantom)
            elif kind == "reorder" and m.key is None:
                with self._lock:
                    self._later.append(real)
            else:
                out.append(real)
        return out

    def _check_stale(self, h: _Handle) -> None:
        if h.stale:
            raise self._chaos.error("lease_expiry")

    def ack(self, handle: Any) -> None:
        h: _Handle = handle
        if h.phantom:
            return  # a duplicate delivery: the real message is settled through its own handle
        self._check_stale(h)
        kind = self._raise_before("ack", h.message_id, (*_WRITE, "lease_expiry"))
        if kind == "lease_expiry":
            self._expire(h)
        self._inner.ack(h.inner)
        if kind == "lost_reply":
            raise self._chaos.error(kind)

    def nack(self, handle: Any, delay: float) -> None:
        h: _Handle = handle
        if h.phantom:
            return
        self._check_stale(h)
        kind = self._raise_before("nack", h.message_id, _WRITE)
        self._inner.nack(h.inner, delay)
        if kind == "lost_reply":
            raise self._chaos.error(kind)

    def extend_lease(self, handle: Any, seconds: float) -> Any:
        h: _Handle = handle
        if h.phantom:
            return h
        self._check_stale(h)
        kind = self._raise_before("extend_lease", h.message_id, (*_BEFORE, "lease_expiry"))
        if kind == "lease_expiry":
            self._expire(h)
        return _Handle(self._inner.extend_lease(h.inner, seconds), h.message_id)

    def _expire(self, h: _Handle) -> None:
        """The lease ran out: the message is available again and this handle is stale."""
        with contextlib.suppress(Exception):
            self._inner.nack(h.inner, 0.0)
        raise self._chaos.error("lease_expiry")

    def dead_letter(self, message: ReceivedMessage, reason: str) -> None:
        h: _Handle = message.handle
        if h.phantom:
            return
        self._check_stale(h)
        self._raise_before("dead_letter", h.message_id, _BEFORE)
        self._inner.dead_letter(ReceivedMessage.like(message, h.inner), reason)

    def dead_letter_url(self) -> str | None:
        return self._inner.dead_letter_url()

    def stats(self) -> QueueStats:
        return self._inner.stats()

    def close(self) -> None:
        self._inner.close()


# ---------------------------------------------------------------- opening
def open_chaos(domain: Domain, url: ParsedURL) -> StorageDriver | MessagingDriver:
    """Open ``chaos+<scheme>://...``: the inner URL's driver wrapped in a fault injector.

    Raises:
        InvalidURL: a bad chaos option or fault kind (before anything is opened).
        Unsupported: ``domain`` is compute.
    """
    head, _, inner_scheme = url.scheme.partition("+")
    if head != "chaos" or not inner_scheme:
        raise InvalidURL(f"{url} is not a chaos URL: write chaos+<scheme>://..., e.g. chaos+mem://q?error_rate=0.2")
    if domain not in ("storage", "messaging"):
        raise Unsupported(f"chaos+ wraps storage and messaging URLs, not {domain}")
    controller = _controller_from(url, domain)
    inner = open_driver(domain, without_options(url, *OPTIONS, scheme=inner_scheme))
    if domain == "storage":
        return ChaosStorage(inner, controller)
    return ChaosMessaging(inner, controller, {k: v for k, v in url.options.items() if k in OPTIONS})


def chaos_of(obj: Any) -> ChaosController:
    """The :class:`ChaosController` behind a Bucket, Topic, Subscription or driver.

    Raises:
        Unsupported: ``obj`` was not opened with a ``chaos+`` URL.
    """
    for attr in ("chaos", "driver", "_driver"):
        found = getattr(obj, attr, None)
        if isinstance(found, ChaosController):
            return found
        if isinstance(found, ChaosStorage | ChaosMessaging):
            return found.chaos
    raise Unsupported(f"{obj!r} was not opened with a chaos+ URL")

