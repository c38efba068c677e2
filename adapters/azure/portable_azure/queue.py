"""``azqueue://`` — Azure Storage Queues, on azure-storage-queue.

URLs:
    ``azqueue://ACCOUNT/QUEUE``: a queue of a storage account. It is both a
    topic (publish) and a competing-consumer subscription (receive). The
    queue must exist, unless ``create=true``.

Options:
    ``queue_endpoint`` (alias ``endpoint_url``) (str): the Queue service URL,
        for Azurite ``http://127.0.0.1:10001/devstoreaccount1``. Defaults to
        ``https://ACCOUNT.queue.core.windows.net`` or the connection string's
        QueueEndpoint.
    ``auth``, ``connection_string_env``, ``account_key_env``, ``sas_token_env``:
        credentials, exactly as for ``az://`` (see :mod:`portable_azure.blob`);
        a secret is never accepted in the URL.
    ``encoding`` (str): how bytes become Azure's text messages, one setting
        applied to every message both ways, whatever its content. ``base64``
        (default; what Azure Functions' queue trigger and the SDKs'
        ``TextBase64EncodePolicy`` / ``BinaryBase64EncodePolicy`` write and read)
        carries any bytes, at 4/3 the size; ``text`` sends the body as UTF-8 text
        and reads every message's text as its UTF-8 bytes: the setting for plain
        text producers (azure-storage-queue's ``QueueClient`` sends text unencoded
        unless given an encode policy; so does .NET's ``QueueClient`` by default).
        ``text`` refuses a body that is not UTF-8 or holds XML-invalid control
        characters. A queue read with ``base64`` decodes ``"test"`` as the
        base64 it is (``b"\\xb5\\xeb-"``); declare ``text`` for such producers.
    ``envelope`` (str): ``auto`` (default): attributes, a key or an idempotency
        key travel in portable's envelope (below); ``never``: bodies are bare on
        the wire both ways, for native consumers, and a publish with
        attributes, a key or an idempotency key raises InvalidArgument before
        any request; received texts are bodies as they are, never unwrapped.
    ``poison_queue`` (str): the dead-letter queue. Defaults to
        ``QUEUE-poison`` (Azure Functions' convention); ``none`` turns the
        native dead letter off (the portable layer then needs ``dead_letter=``).
    ``time_to_live`` (int): seconds a published message lives; ``-1`` for
        ever. Defaults to Azure's 7 days.
    ``max_poll_interval`` (float): the longest pause between two polls while
        ``receive`` waits. Defaults to 1.0.
    ``create`` (bool): create the queue (and the poison queue) when opened.
        Defaults to false.
    ``timeout`` / ``connection_timeout`` (float): per-request read and connect
        timeouts in seconds. Defaults to 30 and 10.

Names and limits:
    A queue name is 3-63 lower-case letters, digits and single hyphens,
    starting and ending with a letter or digit (InvalidURL otherwise). Azure
    takes a message of at most 64 KiB of text: with ``base64`` that is 49,152
    bytes; ``capabilities.max_message_bytes`` keeps 1 KiB of that for the
    envelope below (48,128 with base64, 64,512 with text; all of it with
    ``envelope=never``), and a message whose envelope still does not fit
    raises TooLarge before any request.

Envelope:
    Azure messages have no attributes. With ``envelope=auto`` a message with
    attributes (``portable.idempotency_key`` included) or a key, and a bare
    body that starts with ``portable/``, is sent as (bytes, then encoded)::

        portable/1 sha256=<C>\\n<H>\\n<body>

    ``<H>`` is one line of compact JSON, UTF-8, ``{"a": {name: value, ...},
    "k": key}`` (each member only when present), and ``<C>`` the first 16
    lower-case hex digits of the SHA-256 of ``<H>\\n<body>``. Any other body is
    sent bare, so other consumers read it unchanged. A received message is
    unwrapped only if its first line is ``portable/1 sha256=`` + 16 hex digits
    that match, and ``<H>`` is such a JSON object: a native text that merely
    begins with ``portable/1`` (64 bits of checksum do not match by accident)
    is delivered whole, as its body, with no attributes. Envelopes of portable
    0.1's first form (``portable/1\\n{...}``, no checksum) are such texts.

Messages that do not fit the encoding:
    With ``encoding=base64``, a message whose text is not base64 (RFC 4648
    alphabet and padding, no whitespace) is never delivered as other bytes:
    ``receive`` moves it to the poison queue, its text as the body (the UTF-8
    bytes ``encoding=text`` would have delivered) and
    ``portable.dead_letter_reason`` naming ``?encoding=text``, deletes it here
    and logs a warning (``portable.azure``). With ``poison_queue=none``
    ``receive`` raises ConfigError naming it and ``?encoding=text``, gives back
    the other messages it got, and the misfit stays queued. Every text fits
    ``encoding=text``.

Leases:
    The lease is the visibility timeout, in whole seconds from 1 second to 7
    days: ``receive`` sets it, ``extend_lease`` and ``nack(delay=)`` call
    Update Message (``extend_lease`` returns the new pop receipt as the
    handle). ``delivery_attempt`` is the dequeue count. Azure has no long
    poll: ``receive(wait=)`` polls, pausing 50 ms, then longer, up to
    ``max_poll_interval``. An ack or nack with a stale pop receipt (the lease
    ran out and the message was received again) is PreconditionFailed, so
    acks are exactly once.

Dead letters:
    Azure Storage Queues have none; this driver keeps one the way Azure
    Functions does: ``dead_letter()`` sends the message (body, key,
    attributes and the ``portable.dead_letter_*`` attributes) to the poison
    queue, creating it on first use, then deletes it here (with
    ``envelope=never`` only the bare body moves, and the reason is logged).
    The two steps are not atomic: a crash between them leaves the message in
    both (at least once). ``dead_letter_url`` opens the poison queue as
    ``azqueue://``, with this queue's encoding and envelope.

Retries:
    The azure-storage-queue client is built with ``retry_total=0`` and
    ``retry_to_secondary=False``; only :mod:`portable.resilience` retries.

As:
    ``azure.storage.queue.QueueClient`` (this queue) and
    ``azure.storage.queue.QueueServiceClient``.

Capabilities:
    lease_extension, nack_delay, delivery_count, exactly_once, and
    native_dead_letter (the poison queue). No ordering (keys are carried),
    no publish dedup (idempotency keys are carried as an attribute).
    ``max_batch`` is 32 (Get Messages' limit); Azure has no batch send, so
    ``publish_batch`` sends up to 8 messages at once (one key's in order).

Known differences:
    * ``stats().available`` is Azure's approximate message count, which
      includes leased and delayed messages; ``in_flight`` and ``delayed`` are None.
    * Azure Service Bus (ordering, sessions, native dead letters) is not
      provided: no emulator runs here to verify it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime as dt
import hashlib
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from portable.driver.messaging import (
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DELIVERY_ATTEMPTS,
    IDEMPOTENCY_ATTRIBUTE,
    ORIGINAL_ID,
    MessagingCapabilities,
    MessagingDriver,
    OutgoingMessage,
    QueueStats,
    ReceivedMessage,
    SubscriptionDriver,
    TopicDriver,
)
from portable.errors import ConfigError, InvalidArgument, InvalidURL, TooLarge, Unsupported
from portable.resilience import attempt_timeout
from portable.urls import ParsedURL

from ._common import (
    AzureAuth,
    AzureClassifier,
    check_account_name,
    check_container_or_queue_name,
    error_code,
    reject_inline_secrets,
    request_timeouts,
    resolve_auth,
)

if TYPE_CHECKING:
    from ._queue_aio import AsyncStorageQueue

__all__ = ["StorageQueueMessaging", "decode_message", "encode_message"]

#: Azure's limit on a message's text.
MAX_TEXT = 64 * 1024
_ENVELOPE_RESERVE = 1024
#: The first line of portable's envelope: this, 16 hex digits of a SHA-256, a newline.
MAGIC = b"portable/1 sha256="
#: A bare body that starts with this is wrapped, so no reader mistakes it for an envelope.
ENVELOPE_PREFIX = b"portable/"
_CHECKSUM_HEX = 16
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_MAX_LEASE = 7 * 24 * 3600.0
#: How many messages a publish_batch sends at once (Azure has no batch send), on either face.
PUBLISH_AT_ONCE = 8

log = logging.getLogger("portable.azure")


# ------------------------------------------------------------------ envelope
def _checksum(rest: bytes) -> bytes:
    return hashlib.sha256(rest).hexdigest()[:_CHECKSUM_HEX].encode("ascii")


def _refuse_without_envelope(attributes: dict[str, str], key: str | None) -> InvalidArgument:
    what = []
    if key is not None:
        what.append("an ordering key")
    if IDEMPOTENCY_ATTRIBUTE in attributes:
        what.append("an idempotency key")
    named = sorted(n for n in attributes if n != IDEMPOTENCY_ATTRIBUTE)
    if named:
        what.append("attributes (" + ", ".join(named[:5]) + (", ..." if len(named) > 5 else "") + ")")
    return InvalidArgument(
        f"envelope=never sends bodies bare, so {' and '.join(what)} cannot travel on an Azure Storage queue: "
        "remove them, or drop envelope=never to carry them in portable's envelope (portable/1 ...)"
    )


def encode_message(
    body: bytes, attributes: dict[str, str], key: str | None, encoding: str, envelope: str = "auto"
) -> str:
    """The Azure message text for a body, its attributes and key (see the module docstring).

    Raises:
        InvalidArgument: ``envelope="never"`` with attributes or a key; ``encoding="text"``
            with a body that is not UTF-8 text XML can carry.
    """
    if envelope == "never":
        if attributes or key is not None:
            raise _refuse_without_envelope(attributes, key)
        raw = body
    elif attributes or key is not None or body.startswith(ENVELOPE_PREFIX):
        header: dict[str, Any] = {}
        if attributes:
            header["a"] = attributes
        if key is not None:
            header["k"] = key
        rest = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n" + body
        raw = MAGIC + _checksum(rest) + b"\n" + rest
    else:
        raw = body
    if encoding == "base64":
        return base64.b64encode(raw).decode("ascii")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument("encoding=text carries UTF-8 text only; this body is binary: use encoding=base64") from None
    if _XML_INVALID.search(text):
        raise InvalidArgument("encoding=text cannot carry control characters (XML forbids them): use encoding=base64")
    return text


def _unwrap(raw: bytes) -> tuple[bytes, dict[str, str], str | None] | None:
    """``(body, attributes, key)`` if ``raw`` is an envelope portable wrote, else None."""
    if not raw.startswith(MAGIC):
        return None
    line_end = len(MAGIC) + _CHECKSUM_HEX
    if raw[line_end : line_end + 1] != b"\n":
        return None
    rest = raw[line_end + 1 :]
    if raw[len(MAGIC) : line_end] != _checksum(rest):
        return None  # not portable's own: a native text that only looks like it
    header_end = rest.find(b"\n")
    try:
        header = json.loads(rest[:header_end]) if header_end >= 0 else None
    except ValueError:
        return None
    if not isinstance(header, dict) or not set(header) <= {"a", "k"}:
        return None
    attributes = header.get("a", {})
    key = header.get("k")
    if not isinstance(attributes, dict) or not all(type(v) is str for v in attributes.values()):
        return None
    if key is not None and type(key) is not str:
        return None
    return rest[header_end + 1 :], attributes, key


def decode_message(text: str, encoding: str, envelope: str = "auto") -> tuple[bytes, dict[str, str], str | None]:
    """Invert :func:`encode_message`: ``(body, attributes, key)``.

    The queue's ``encoding`` is applied to every message, whatever its content;
    an envelope is read only if its checksum holds (and never with
    ``envelope="never"``); anything else is the body, as it is.

    Raises:
        ConfigError: ``encoding="base64"`` and ``text`` is not base64 (a producer
            that sends plain text: read such a queue with ``encoding=text``).
    """
    if encoding == "base64":
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(
                "the message is not base64, and this queue is read with encoding=base64; if its producers "
                "send plain text (azure-storage-queue's QueueClient does unless given TextBase64EncodePolicy), "
                "open the queue with ?encoding=text"
            ) from None
    else:
        raw = text.encode("utf-8")
    if envelope == "never":
        return raw, {}, None
    unwrapped = _unwrap(raw)
    return unwrapped if unwrapped is not None else (raw, {}, None)


def _pauses(until: float, longest: float) -> Iterator[float]:
    pause = 0.05
    while (now := time.monotonic()) < until:
        yield min(pause, until - now)
        pause = min(pause * 2, longest)


def _text_size(text: str, encoding: str) -> int:
    return len(text) if encoding == "base64" else len(text.encode("utf-8"))


class _QueuePublishing:
    """The publishing side of a Storage queue: the message text (envelope, encoding, size) and sends.

    Mixed into :class:`StorageQueueMessaging`, which holds the clients; Azure has no batch send,
    so a batch is sent a few messages at once from a small thread pool, one key's in order.
    """

    # what StorageQueueMessaging sets (declared here for the type checker only)
    scheme: str
    encoding: str
    envelope: str
    _client: Any
    _ttl: int | None
    _pool: ThreadPoolExecutor | None
    _pool_lock: threading.Lock
    _kw: Callable[[], dict[str, Any]]

    def _text(self, message: OutgoingMessage) -> str:
        text = encode_message(message.body, dict(message.attributes), message.key, self.encoding, self.envelope)
        if _text_size(text, self.encoding) > MAX_TEXT:
            raise TooLarge(
                f"the message is {_text_size(text, self.encoding)} characters as Azure text (envelope and "
                f"{self.encoding} included); Azure takes {MAX_TEXT}; store large payloads in a bucket",
                provider=self.scheme,
            )
        return text

    def publish(self, message: OutgoingMessage) -> str:
        return self._send(self._client, self._text(message))

    def _send(self, client: Any, text: str) -> str:
        sent = client.send_message(text, time_to_live=self._ttl, **self._kw())
        return str(sent.id)

    def _publisher(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(PUBLISH_AT_ONCE, thread_name_prefix="azqueue-publish")
            return self._pool

    def _plan_batch(self, items: list[OutgoingMessage]) -> tuple[list[str], list[list[int]]]:
        """(each message's text, the indexes of each key's messages in order): what both faces send.

        Every size is checked before anything is sent; a message without a key is a group of its own.
        """
        texts = [self._text(m) for m in items]
        groups: dict[object, list[int]] = {}
        for i, m in enumerate(items):
            groups.setdefault(m.key if m.key is not None else ("", i), []).append(i)
        return texts, list(groups.values())

    def publish_batch(self, messages: Iterable[OutgoingMessage]) -> list[str | BaseException]:
        items = list(messages)
        texts, groups = self._plan_batch(items)
        results: list[str | BaseException] = [RuntimeError("not sent")] * len(items)

        def send_group(indexes: list[int]) -> None:
            failed: BaseException | None = None
            for i in indexes:
                if failed is not None:
                    # Keep one key's order: a later message is not sent past a failed one; it
                    # reports the same error, so the portable layer retries both, in order.
                    results[i] = failed
                    continue
                try:
                    results[i] = self._send(self._client, texts[i])
                except Exception as exc:
                    results[i] = failed = exc

        if len(groups) == 1:
            send_group(groups[0])
        else:
            list(self._publisher().map(send_group, groups))
        return results


class StorageQueueMessaging(_QueuePublishing, AzureClassifier, MessagingDriver, TopicDriver, SubscriptionDriver):
    """One Azure Storage queue: both sides, with a poison queue as its dead letter."""

    scheme = "azqueue"

    def __init__(
        self,
        queue: str,
        *,
        auth: AzureAuth,
        encoding: str = "base64",
        envelope: str = "auto",
        poison_queue: str | None = "",
        time_to_live: int | None = None,
        max_poll_interval: float = 1.0,
        timeout: float = 30.0,
        connection_timeout: float = 10.0,
        url_query: str = "",
    ) -> None:
        """Open ``queue`` with the credentials of ``auth``; no request is sent.

        Args:
            encoding: ``base64`` or ``text``, applied to every message both ways.
            envelope: ``auto`` (attributes and keys travel in portable's envelope)
                or ``never`` (bodies bare both ways; attributes and keys refused).
            poison_queue: the dead-letter queue's name; ``""`` for ``QUEUE-poison``,
                None for no native dead letter.
            url_query: the URL's options (never secrets), reused in
                :meth:`dead_letter_url` and :meth:`temporary`.
        """
        from azure.storage.queue import QueueServiceClient

        check_container_or_queue_name(queue, "queue")
        if encoding not in ("base64", "text"):
            raise InvalidURL(f"encoding={encoding!r}: use base64 (any bytes) or text (UTF-8 text)")
        if envelope not in ("auto", "never"):
            raise InvalidURL(
                f"envelope={envelope!r}: use auto (attributes and keys travel in portable's envelope) or "
                "never (bare bodies for native consumers; attributes and keys refused)"
            )
        if poison_queue == "":
            poison_queue = f"{queue}-poison"
            if len(poison_queue) > 63:
                raise InvalidURL(f"queue {queue!r} is too long for a '-poison' queue; name one with poison_queue=NAME")
        if poison_queue is not None:
            check_container_or_queue_name(poison_queue, "poison_queue")
        self.queue = queue
        self.poison_queue = poison_queue
        self.encoding = encoding
        self.envelope = envelope
        self.auth = auth
        self.endpoint = f"{auth.endpoint}/{queue}"
        self._ttl = time_to_live
        self._max_poll = max(0.05, max_poll_interval)
        self._timeout = timeout
        self._connection_timeout = connection_timeout
        self._query = url_query
        limit = (MAX_TEXT * 3 // 4 if encoding == "base64" else MAX_TEXT) - (
            _ENVELOPE_RESERVE if envelope == "auto" else 0
        )
        self.capabilities = MessagingCapabilities(
            ordering=False,
            native_dead_letter=poison_queue is not None,
            lease_extension=True,
            exactly_once=True,
            publish_dedup=False,
            nack_delay=True,
            delivery_count=True,
            max_lease_seconds=_MAX_LEASE,
            min_lease_seconds=1.0,
            lease_granularity_seconds=1.0,
            max_message_bytes=limit,
            max_attributes=32,
            dedup_window_seconds=None,
            max_batch=32,
        )
        self._credential = auth.sdk_credential(asynchronous=False)
        self._service = QueueServiceClient(
            auth.endpoint,
            credential=self._credential,
            retry_total=0,
            retry_to_secondary=False,
            connection_timeout=connection_timeout,
            read_timeout=timeout,
            user_agent="portable-azure",
        )
        self._client = self._service.get_queue_client(queue)
        self._poison_client = self._service.get_queue_client(poison_queue) if poison_queue else None
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._closed = False

    @classmethod
    def from_url(cls, url: ParsedURL) -> StorageQueueMessaging:
        """Open ``azqueue://ACCOUNT/QUEUE?...``."""
        reject_inline_secrets(url)
        account = url.host
        queue = url.path.strip("/")
        if not account or not queue or "/" in queue:
            raise InvalidURL(f"{url}: write azqueue://ACCOUNT/QUEUE, e.g. azqueue://myaccount/orders")
        check_container_or_queue_name(queue, "queue")
        queue_endpoint = url.take_str("queue_endpoint")
        endpoint_url = url.take_str("endpoint_url")
        if queue_endpoint and endpoint_url:
            raise InvalidURL(f"{url}: give queue_endpoint or endpoint_url, not both")
        endpoint = queue_endpoint or endpoint_url
        if endpoint is None:
            check_account_name(account)
        encoding = (url.take_str("encoding", "base64") or "base64").lower()
        envelope = (url.take_str("envelope", "auto") or "auto").lower()
        poison = url.take_str("poison_queue", "")
        time_to_live = url.take("time_to_live", int, 0)
        max_poll = url.take("max_poll_interval", float, 1.0)
        create = url.take("create", bool, False)
        timeout = url.take("timeout", float, 30.0)
        connection_timeout = url.take("connection_timeout", float, 10.0)
        if time_to_live < -1 or max_poll <= 0 or timeout <= 0 or connection_timeout <= 0:
            raise InvalidURL(f"{url}: time_to_live is -1 or >= 0 seconds; the timeouts must be positive")
        auth = resolve_auth(url, "queue", account=account, endpoint=endpoint)
        url.done()
        if auth.kind == "anonymous":
            raise InvalidURL(f"{url}: Azure Storage Queues do not allow anonymous access; choose another auth")
        if auth.account != account:
            raise InvalidURL(f"{url}: the URL names account {account!r} but the credentials are for {auth.account!r}")
        query = url.raw.partition("?")[2]
        driver = cls(
            queue,
            auth=auth,
            encoding=encoding,
            envelope=envelope,
            poison_queue=None if (poison or "").lower() == "none" else poison,
            time_to_live=time_to_live or None,
            max_poll_interval=max_poll,
            timeout=timeout,
            connection_timeout=connection_timeout,
            url_query=query,
        )
        if create:
            driver.create()
        return driver

    def __repr__(self) -> str:
        return f"StorageQueueMessaging(azqueue://{self.auth.account}/{self.queue}, {self.auth!r})"

    # -- sides -----------------------------------------------------------
    def topic(self) -> StorageQueueMessaging:
        return self

    def subscription(self) -> StorageQueueMessaging:
        return self

    def async_driver(self) -> AsyncStorageQueue:
        """Both sides on ``azure.storage.queue.aio``, on the event loop (:mod:`portable_azure._queue_aio`)."""
        from ._queue_aio import AsyncStorageQueue

        return AsyncStorageQueue(self)

    # -- plumbing ----------------------------------------------------------
    def _kw(self) -> dict[str, Any]:
        return request_timeouts(self._timeout, self._connection_timeout)

    def create(self) -> None:
        """Create the queue and the poison queue if they do not exist."""
        from azure.core.exceptions import ResourceExistsError

        for client in (self._client, self._poison_client):
            if client is not None:
                with contextlib.suppress(ResourceExistsError):
                    client.create_queue(**self._kw())

    def _url_for(self, queue: str, **options: str) -> str:
        pairs = [p for p in self._query.split("&") if p and p.split("=", 1)[0] not in ("poison_queue", "create", *options)]
        pairs += [f"{k}={v}" for k, v in options.items()]
        query = "&".join(pairs)
        return f"azqueue://{self.auth.account}/{queue}" + (f"?{query}" if query else "")

    # -- receiving -----------------------------------------------------------
    def _polls(self, wait: float) -> Iterator[float]:
        """The pauses between the polls of a ``receive(wait=)``: Azure has no long poll.

        50 ms, doubling up to ``max_poll_interval``, until ``wait`` (or the portable
        deadline in force, counted from this call) runs out. The caller polls once,
        then once after each pause.
        """
        until = time.monotonic() + wait
        left = attempt_timeout()
        if left is not None:
            until = min(until, time.monotonic() + left)
        return _pauses(until, self._max_poll)

    def _receive_request(self, max_messages: int, lease: float) -> dict[str, Any]:
        """Get Messages' arguments (both faces send exactly these)."""
        return {
            "messages_per_page": max_messages,
            "max_messages": max_messages,
            "visibility_timeout": max(1, math.ceil(lease)),
            **self._kw(),
        }

    def _delivery(self, item: Any) -> ReceivedMessage:
        """The delivery of a received ``QueueMessage``. ConfigError if its text does not fit the encoding."""
        body, attributes, key = decode_message(item.content or "", self.encoding, self.envelope)
        return ReceivedMessage(
            id=item.id,
            body=body,
            attributes=attributes,
            key=key,
            publish_time=item.inserted_on or dt.datetime.now(dt.UTC),
            delivery_attempt=max(1, int(item.dequeue_count or 1)),
            handle=(item.id, item.pop_receipt),
        )

    def _sort(self, item: Any, out: list[ReceivedMessage], misfits: list[tuple[Any, ConfigError]]) -> None:
        """Append ``item``'s delivery to ``out``, or ``item`` to ``misfits`` (see :meth:`_set_aside`)."""
        try:
            out.append(self._delivery(item))
        except ConfigError as exc:
            misfits.append((item, exc))

    def receive(self, max_messages: int, wait: float, lease: float) -> list[ReceivedMessage]:
        polls = self._polls(wait)
        while True:
            got = self._receive_once(max_messages, lease)
            pause = next(polls, None)
            if got or pause is None:
                return got
            time.sleep(pause)

    def _receive_once(self, max_messages: int, lease: float) -> list[ReceivedMessage]:
        out: list[ReceivedMessage] = []
        misfits: list[tuple[Any, ConfigError]] = []
        for item in self._client.receive_messages(**self._receive_request(max_messages, lease)):
            self._sort(item, out, misfits)
        if misfits:
            self._set_aside(misfits, out)
        return out

    def _set_aside(self, misfits: list[tuple[Any, ConfigError]], good: list[ReceivedMessage]) -> None:
        """Take messages that do not fit the queue's encoding out of the stream; never deliver them as other bytes.

        With a poison queue each goes there (its text as the body, the reason naming
        ``encoding=text``) and is deleted here. Without one, the good messages of
        this receive are given back and ConfigError is raised; the misfits stay
        leased, so they come back after the lease and raise again.
        """
        where = f"azqueue://{self.auth.account}/{self.queue}"
        if self._poison_client is None:
            for message in good:
                with contextlib.suppress(Exception):
                    self.nack(message.handle, 0)
            item, exc = misfits[0]
            raise ConfigError(
                f"message {item.id} in {where} does not fit the queue's encoding={self.encoding} and there is no "
                f"poison queue to move it to (poison_queue=none): {exc}. It stays in the queue",
                provider=self.scheme,
            )
        for item, exc in misfits:
            reason = f"{exc}. Its text is kept here as the body"
            message = ReceivedMessage(
                id=item.id,
                body=(item.content or "").encode("utf-8"),
                attributes={},
                key=None,
                publish_time=item.inserted_on or dt.datetime.now(dt.UTC),
                delivery_attempt=max(1, int(item.dequeue_count or 1)),
                handle=(item.id, item.pop_receipt),
            )
            try:
                if self.envelope == "never":
                    self._move_to_poison(item.content or "", message.handle)  # as it came: there is no envelope
                else:
                    self.dead_letter(message, reason)
            except Exception as move_error:
                log.warning(
                    "message %s in %s does not fit encoding=%s and could not be moved to the poison queue "
                    "(it comes back after its lease): %s",
                    item.id, where, self.encoding, move_error,
                )  # fmt: skip
                continue
            log.warning(
                "message %s in %s does not fit encoding=%s; moved to poison queue %s: %s",
                item.id, where, self.encoding, self.poison_queue, exc,
            )  # fmt: skip

    def ack(self, handle: Any) -> None:
        message_id, pop_receipt = handle
        self._client.delete_message(message_id, pop_receipt, **self._kw())

    def nack(self, handle: Any, delay: float) -> None:
        message_id, pop_receipt = handle
        self._client.update_message(message_id, pop_receipt, visibility_timeout=math.ceil(delay), **self._kw())

    def extend_lease(self, handle: Any, seconds: float) -> Any:
        message_id, pop_receipt = handle
        updated = self._client.update_message(
            message_id, pop_receipt, visibility_timeout=max(1, math.ceil(seconds)), **self._kw()
        )
        return (message_id, updated.pop_receipt)

    # -- dead letters ----------------------------------------------------------
    def dead_letter(self, message: ReceivedMessage, reason: str) -> None:
        self._move_to_poison(self._poison_text(message, reason), message.handle)

    def _poison_text(self, message: ReceivedMessage, reason: str) -> str:
        """The text of ``message``'s copy in the poison queue, with the dead-letter attributes and ``reason``.

        Raises:
            Unsupported: there is no poison queue (before any request).
        """
        if self._poison_client is None:
            raise Unsupported(f"{self.endpoint} has no poison queue (poison_queue=none)", provider=self.scheme)
        if self.envelope == "never":
            # Bare bodies: the reason cannot travel with the message, so it is logged.
            log.warning("message %s dead-lettered to %s: %s", message.id, self.poison_queue, reason)
            return encode_message(message.body, {}, None, self.encoding, "never")
        attributes = dict(message.attributes)
        attributes.update(
            {
                DEAD_LETTER_SOURCE: f"azqueue://{self.auth.account}/{self.queue}",
                DELIVERY_ATTEMPTS: str(message.delivery_attempt),
                ORIGINAL_ID: message.id,
            }
        )
        text = ""
        for cut in (len(reason), 200, 0):  # shorten the reason until the envelope fits
            attributes[DEAD_LETTER_REASON] = reason[:cut] or "dead-lettered"
            text = encode_message(message.body, attributes, message.key, self.encoding)
            if _text_size(text, self.encoding) <= MAX_TEXT:
                break
        return text

    def _move_to_poison(self, text: str, handle: Any) -> None:
        """Send ``text`` to the poison queue (created on first use, as Azure Functions does), then ack ``handle``."""
        from azure.core.exceptions import ResourceNotFoundError

        assert self._poison_client is not None
        try:
            self._send(self._poison_client, text)
        except ResourceNotFoundError as exc:
            if error_code(exc) != "QueueNotFound":
                raise
            self._poison_client.create_queue(**self._kw())
            self._send(self._poison_client, text)
        self.ack(handle)

    def dead_letter_url(self) -> str | None:
        if self.poison_queue is None:
            return None
        return self._url_for(self.poison_queue, poison_queue="none")

    def stats(self) -> QueueStats:
        count = self._client.get_queue_properties(**self._kw()).approximate_message_count
        dead = None
        if self._poison_client is not None:
            from azure.core.exceptions import ResourceNotFoundError

            try:
                dead = self._poison_client.get_queue_properties(**self._kw()).approximate_message_count
            except ResourceNotFoundError:
                dead = 0
        return QueueStats(available=count, dead_letters=dead)

    @contextlib.contextmanager
    def temporary(self, name: str) -> Iterator[str]:
        """A fresh queue ``name`` (and ``name-poison``) next to this one, deleted afterwards."""
        queue = check_container_or_queue_name(name[:56].rstrip("-"), "queue")
        created = []
        try:
            for q in (queue, f"{queue}-poison"):
                self._service.create_queue(q, **self._kw())
                created.append(q)
            yield self._url_for(queue)
        finally:
            for q in created:
                with contextlib.suppress(Exception):
                    self._service.delete_queue(q)

    # -- escape hatches ------------------------------------------------------
    def as_(self, kind: type[Any]) -> Any:
        from azure.storage.queue import QueueClient, QueueServiceClient

        natives: dict[type[Any], Any] = {QueueClient: self._client, QueueServiceClient: self._service}
        return natives.get(kind)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self._service.close()
        close = getattr(self._credential, "close", None)
        if callable(close):
            close()
