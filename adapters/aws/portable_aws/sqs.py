"""``sqs://`` — Amazon SQS standard and FIFO queues through boto3.

URLs:
    ``sqs://QUEUE`` names a queue of the account and region the credentials
    and ``region`` give; it is both a topic (publish) and a competing-consumer
    subscription (receive). ``sqs://orders.fifo`` is a FIFO queue. The queue
    must exist (``temporary()`` creates throwaway ones for the contract suite).

Options:
    ``region`` (str): e.g. ``eu-west-1``. Defaults to the SDK's chain.
    ``endpoint_url`` (str): another endpoint (moto, LocalStack, ElasticMQ).
    ``profile`` (str): a profile of ``~/.aws/config``.
    ``owner`` (str): the 12-digit account that owns the queue, for a queue
    shared from another account.
    ``max_message_bytes`` (int): the largest body plus attributes to let
    through. Defaults to 262,144 (256 KiB, the historical SQS limit, which
    every queue takes); raise it up to the queue's ``MaximumMessageSize``
    (AWS allows 1 MiB since 2025) to send larger messages.
    ``timeout`` (float): per-request timeout in seconds; at least 25, so
    that a 20-second long poll is not cut. Defaults to 30.

Names and limits:
    A queue name is 1-80 of ``A-Z a-z 0-9 - _``; a FIFO queue's ends in
    ``.fifo`` (counted in the 80). Another name is InvalidURL before any
    request. SQS counts a message's size as body plus every attribute's
    name, data type and value; ``capabilities.max_message_bytes`` is
    ``max_message_bytes`` less 74 bytes kept for what the driver adds (the
    data-type names, the body attribute below), so with the default any body
    plus attributes up to 262,070 bytes is delivered, text or binary, and a
    larger one is TooLarge before any request. At most 9 attributes (SQS
    takes 10; one is kept for the body attribute). Batches hold up to 10
    messages and 256 KiB in all; ``publish_batch`` splits a batch by size.

Bodies:
    SQS bodies are XML text. A body that is UTF-8 without control characters
    (tab, CR and LF are fine) is sent as the message body, so other SQS
    consumers read it unchanged. Any other body (binary, or empty) travels as
    the Binary attribute ``portable.body`` (raw bytes, counted at their own
    size, not base64's) under the one-character body ``.``, and comes back as
    the body on receipt; that attribute is not shown among the attributes.

Attributes and headers on receipt:
    ``Message.attributes`` holds the String and Number message attributes
    (custom types such as ``Number.float`` or ``String.json`` included) as
    their text. ``Message.headers`` holds every message attribute as
    ``(name, bytes)``, sorted by name (SQS keeps no order; its own
    MD5OfMessageAttributes sorts them so too): a String or Number one as the
    UTF-8 of its text, a Binary one (``Binary`` or ``Binary.*``) as its bytes,
    which appear nowhere else. The data type itself is not carried
    (``as_()`` gives the client for it). ``portable.body`` is left out of both.
    ``Message.key_bytes`` is the UTF-8 of the MessageGroupId; ``tombstone`` is
    always False.

Keys and idempotency:
    ``key`` becomes the MessageGroupId: on a FIFO queue messages of a group
    are delivered in order, one in flight at a time; on a standard queue it
    is carried (SQS fair queues) and order is best effort. A FIFO message
    without a key gets a group of its own (``portable.nokey.<random>``), so
    keyless messages are not ordered and never wait for one another. ``idempotency_key`` becomes
    the MessageDeduplicationId on a FIFO queue (SQS drops a repeat within 5
    minutes); keys longer than 128 characters cannot occur (the portable
    layer caps them). Without an idempotency key a FIFO publish sends a random
    deduplication id, so content-based deduplication never drops two equal
    bodies that the caller published twice on purpose. SQS answers a dropped
    repeat with a new message id; the driver remembers the ids of its own
    recent FIFO publishes and returns the first id for a repeat from the same
    process.

Leases:
    The lease is the visibility timeout, in whole seconds (0 to 43,200):
    ``receive`` sets it per call, ``extend_lease`` and ``nack(delay=)`` call
    ChangeMessageVisibility. ``delivery_attempt`` is ApproximateReceiveCount.
    A receive long-polls (WaitTimeSeconds up to 20, rounded up to a whole
    second).

Dead letters:
    A queue with a redrive policy has ``native_dead_letter``: SQS itself moves
    a message after ``maxReceiveCount`` receives, and ``dead_letter()`` sends
    the message to the redrive target (with ``portable.dead_letter_reason`` and
    as many of the other ``portable.dead_letter_*`` attributes as fit in 10)
    and then deletes it here. The two steps are not atomic: a crash between
    them leaves the message in both queues (at least once).
    ``dead_letter_url`` opens the target as ``sqs://``.

Retries:
    botocore's retries are off (``retries={"total_max_attempts": 1}``); only
    :mod:`portable.resilience` retries.

As:
    ``botocore.client.BaseClient``: the boto3 SQS client.

Capabilities:
    lease_extension, nack_delay, delivery_count; on FIFO queues also ordering
    and publish_dedup (window 300 s); with a redrive policy native_dead_letter.
    Not exactly_once: SQS accepts a stale receipt handle for DeleteMessage.

Known differences:
    * A stale receipt handle is usually accepted (the ack succeeds); an
      invalid one is PreconditionFailed.
    * moto (the test emulator) accepts control characters and does not lock
      FIFO groups exactly as AWS does; the adapter tests run on it.
"""

# mypy: disable-error-code="import-untyped"
from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from portable.driver.messaging import (
    MessagingCapabilities,
    MessagingDriver,
    OutgoingMessage,
    QueueStats,
    ReceivedMessage,
    SubscriptionDriver,
    TopicDriver,
)
from portable.errors import ErrorCode, InvalidURL, TooLarge
from portable.urls import ParsedURL

from ._aws import (
    AWSClassifier,
    AWSOptions,
    BotoClientOwner,
    aws_error_code,
    boto_config,
    new_client,
)

if TYPE_CHECKING:
    from ._sqs_aio import AsyncSQS

__all__ = ["SQSMessaging", "batch_outcomes", "check_queue_name"]

_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_ACCOUNT = re.compile(r"^\d{12}$")
#: The Binary attribute that carries a body SQS cannot carry as text.
BODY_ATTRIBUTE = "portable.body"
#: The message text of such a message (SQS needs a non-empty body).
_PLACEHOLDER = "."
#: What the driver may add beyond body + attribute names and values, as SQS counts
#: size: the placeholder, the body attribute's name and type, and "String" per attribute.
_OVERHEAD = len(_PLACEHOLDER) + len(BODY_ATTRIBUTE) + 6 + 6 * 9
_NOT_TEXT = re.compile(r"[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ASCII_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")
#: MessageGroupId prefix of a FIFO message published without a key: each gets its own group.
_NO_KEY_GROUP = "portable.nokey."
_SQS_MAX_ATTRIBUTES = 10
_BATCH_BYTES = 262144
_DEDUP_WINDOW = 300.0
_DEAD_LETTER_ATTRIBUTES = (
    "portable.dead_letter_reason",
    "portable.dead_letter_source",
    "portable.delivery_attempts",
    "portable.original_id",
)
_SYSTEM_ATTRIBUTES = ["ApproximateReceiveCount", "SentTimestamp", "MessageGroupId"]


def check_queue_name(name: str) -> str:
    """Return ``name`` if SQS accepts it as a queue name, else raise InvalidURL saying why."""
    base = name[:-5] if name.endswith(".fifo") else name
    if not _QUEUE_NAME.match(base) or len(name) > 80:
        raise InvalidURL(
            f"{name!r} is not an SQS queue name: use 1-80 characters of A-Z, a-z, 0-9, '-' and '_' "
            "(a FIFO queue's name ends in '.fifo')"
        )
    return name


def text_body(body: bytes) -> str | None:
    """``body`` as SQS message text, or None if SQS cannot carry it as text.

    SQS bodies are XML characters: UTF-8 without control characters other
    than tab, CR and LF, and not empty.
    """
    if not body:
        return None
    if body.isascii():
        return None if _ASCII_CONTROL.search(body) else body.decode("ascii")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if _NOT_TEXT.search(text) else text


class _SQSPublishing(TopicDriver):
    """The publishing side of an SQS queue: the wire form of a message, batches, FIFO dedup memory.

    Mixed into :class:`SQSMessaging`, which holds the client and the queue's settings.
    """

    client: Any
    queue: str
    fifo: bool
    _queue_url: str | None
    _recent: OrderedDict[str, tuple[str, float]]
    _recent_lock: threading.Lock
    _queue_max: int
    scheme: str

    if TYPE_CHECKING:

        @property
        def queue_url(self) -> str: ...  # SQSMessaging's: looked up on first use

    def _entry(self, message: OutgoingMessage) -> tuple[dict[str, Any], int]:
        """SendMessage arguments for ``message`` and its size as SQS counts it."""
        body = message.body
        text = text_body(body)
        attributes: dict[str, Any] = {}
        size = 0
        for name, value in message.attributes.items():
            attributes[name] = {"DataType": "String", "StringValue": value}
            size += len(name) + 6 + len(value.encode("utf-8"))
        if text is not None:
            size += len(body)
        else:
            text = _PLACEHOLDER
            if body:
                attributes[BODY_ATTRIBUTE] = {"DataType": "Binary", "BinaryValue": body}
                size += len(_PLACEHOLDER) + len(BODY_ATTRIBUTE) + 6 + len(body)
            else:
                attributes[BODY_ATTRIBUTE] = {"DataType": "String", "StringValue": "empty"}
                size += len(_PLACEHOLDER) + len(BODY_ATTRIBUTE) + 6 + 5
        if size > self._queue_max:
            raise TooLarge(
                f"the message is {size} bytes as SQS counts it (body, attribute names, types and values); "
                f"sqs://{self.queue} takes at most {self._queue_max}; store large payloads in a bucket "
                "and publish their key",
                provider=self.scheme,
            )
        entry: dict[str, Any] = {"MessageBody": text}
        if attributes:
            entry["MessageAttributes"] = attributes
        if self.fifo:
            entry["MessageGroupId"] = message.key or _NO_KEY_GROUP + uuid.uuid4().hex
            entry["MessageDeduplicationId"] = message.idempotency_key or uuid.uuid4().hex
        elif message.key is not None:
            entry["MessageGroupId"] = message.key
        return entry, size

    def _remembered(self, message: OutgoingMessage) -> str | None:
        if not (self.fifo and message.idempotency_key):
            return None
        with self._recent_lock:
            found = self._recent.get(message.idempotency_key)
        if found is not None and time.monotonic() - found[1] < _DEDUP_WINDOW:
            return found[0]
        return None

    def _remember(self, message: OutgoingMessage, message_id: str) -> None:
        if not (self.fifo and message.idempotency_key):
            return
        with self._recent_lock:
            self._recent[message.idempotency_key] = (message_id, time.monotonic())
            self._recent.move_to_end(message.idempotency_key)
            while len(self._recent) > 10_000:
                self._recent.popitem(last=False)

    def _published(self, message: OutgoingMessage, message_id: str) -> str:
        """The id to report for ``message`` once SQS answered ``message_id``: the first one for a FIFO repeat."""
        known = self._remembered(message)
        if known is not None:
            return known
        self._remember(message, message_id)
        return message_id

    def publish(self, message: OutgoingMessage) -> str:
        entry, _size = self._entry(message)
        resp = self.client.send_message(QueueUrl=self._queue_url or self.queue_url, **entry)
        return self._published(message, resp["MessageId"])

    def _plan_batches(
        self, items: list[OutgoingMessage]
    ) -> tuple[list[str | BaseException | None], list[list[dict[str, Any]]]]:
        """The SendMessageBatch requests for ``items``: (outcomes so far, entries per request).

        Each entry's ``Id`` is its index in ``items``; a message too large on its own
        is judged at once (its outcome is the TooLarge), the rest are ``None`` until sent.
        Requests hold at most 10 entries and 256 KiB.
        """
        out: list[str | BaseException | None] = [None] * len(items)
        batches: list[list[dict[str, Any]]] = []
        batch: list[dict[str, Any]] = []
        batch_bytes = 0
        for i, message in enumerate(items):
            try:
                entry, size = self._entry(message)
            except TooLarge as exc:
                out[i] = exc
                continue
            if batch and (len(batch) == 10 or batch_bytes + size > _BATCH_BYTES):
                batches.append(batch)
                batch, batch_bytes = [], 0
            batch.append({"Id": str(i), **entry})
            batch_bytes += size
        if batch:
            batches.append(batch)
        return out, batches

    def _batch_sent(self, items: list[OutgoingMessage], resp: dict[str, Any], out: list[Any]) -> None:
        """Record a SendMessageBatch answer's per-entry outcomes in ``out``."""
        from botocore.exceptions import ClientError

        for ok in resp.get("Successful", ()):
            i = int(ok["Id"])
            out[i] = self._published(items[i], ok["MessageId"])
        for failed in resp.get("Failed", ()):
            status = 400 if failed.get("SenderFault") else 500
            out[int(failed["Id"])] = ClientError(
                {
                    "Error": {"Code": failed.get("Code", ""), "Message": failed.get("Message", "")},
                    "ResponseMetadata": {"HTTPStatusCode": status},
                },
                "SendMessageBatch",
            )

    def publish_batch(self, messages: Iterable[OutgoingMessage]) -> list[str | BaseException]:
        items = list(messages)
        out, batches = self._plan_batches(items)
        for entries in batches:
            resp = self.client.send_message_batch(QueueUrl=self._queue_url or self.queue_url, Entries=entries)
            self._batch_sent(items, resp, out)
        return batch_outcomes(out)


def batch_outcomes(out: list[Any]) -> list[Any]:
    """``out`` with every undecided (None) outcome reported as an error."""
    return [r if r is not None else RuntimeError("no result") for r in out]


class SQSClassifier(AWSClassifier):
    """AWSClassifier with SQS's receipt-handle and batch-size codes."""

    def code_of(self, exc: BaseException) -> ErrorCode:
        code, _status = aws_error_code(exc)
        if code in (
            "ReceiptHandleIsInvalid",
            "AWS.SimpleQueueService.ReceiptHandleIsInvalid",
            "MessageNotInflight",
            "AWS.SimpleQueueService.MessageNotInflight",
        ):
            return ErrorCode.PRECONDITION_FAILED
        if code == "InvalidParameterValue" and "receipt handle" in str(exc).lower():
            return ErrorCode.PRECONDITION_FAILED
        if code in ("AWS.SimpleQueueService.BatchRequestTooLong", "BatchRequestTooLong"):
            return ErrorCode.TOO_LARGE
        return super().code_of(exc)


class SQSMessaging(BotoClientOwner, SQSClassifier, _SQSPublishing, MessagingDriver, TopicDriver, SubscriptionDriver):
    """One SQS queue: both the topic and the subscription."""

    scheme = "sqs"

    def __init__(
        self,
        queue: str,
        *,
        options: AWSOptions | None = None,
        owner: str | None = None,
        max_message_bytes: int = 262144,
    ) -> None:
        self.queue = check_queue_name(queue)
        self.fifo = queue.endswith(".fifo")
        self.options = options or AWSOptions()
        self.owner = owner
        self.endpoint = self.options.describe("sqs")
        self._queue_max = max_message_bytes
        timeout_options = replace(self.options, timeout=max(self.options.timeout, 25.0))
        self.client: Any = new_client("sqs", self.options, boto_config(timeout_options, pool=32))
        self._queue_url: str | None = None
        self._dead_letter_arn: str | None = None
        self._open_lock = threading.Lock()
        self._recent: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._recent_lock = threading.Lock()
        self.capabilities = self._capabilities()

    @classmethod
    def from_url(cls, url: ParsedURL) -> SQSMessaging:
        name = url.host
        if not name:
            raise InvalidURL(f"{url} names no queue: write sqs://QUEUE_NAME")
        if url.path.strip("/"):
            raise InvalidURL(f"{url}: an SQS queue URL is sqs://QUEUE_NAME, with no path")
        options = AWSOptions.take(url)
        owner = url.take_str("owner")
        if owner is not None and not _ACCOUNT.match(owner):
            raise InvalidURL(f"owner in {url} must be a 12-digit AWS account id")
        max_bytes = url.take("max_message_bytes", int, 262144)
        if not 1024 <= max_bytes <= 1048576:
            raise InvalidURL(f"max_message_bytes in {url} must be from 1,024 to 1,048,576, got {max_bytes}")
        url.done()
        return cls(name, options=options, owner=owner, max_message_bytes=max_bytes)

    def __repr__(self) -> str:
        return f"SQSMessaging(queue={self.queue!r}, endpoint={self.endpoint!r})"

    def _capabilities(self) -> MessagingCapabilities:
        return MessagingCapabilities(
            ordering=self.fifo,
            native_dead_letter=self._dead_letter_arn is not None,
            lease_extension=True,
            exactly_once=False,
            publish_dedup=self.fifo,
            nack_delay=True,
            delivery_count=True,
            max_lease_seconds=43200.0,
            min_lease_seconds=0.0,
            lease_granularity_seconds=1.0,
            max_message_bytes=self._queue_max - _OVERHEAD,
            max_attributes=_SQS_MAX_ATTRIBUTES - 1,
            dedup_window_seconds=_DEDUP_WINDOW if self.fifo else None,
            max_batch=10,
        )

    # -- opening ---------------------------------------------------------
    @property
    def queue_url(self) -> str:
        """The queue's URL, looked up on first use."""
        url = self._queue_url
        if url is None:
            self._open()
            url = self._queue_url
            assert url is not None
        return url

    def _open(self) -> None:
        with self._open_lock:
            if self._queue_url is not None:
                return
            kwargs: dict[str, Any] = {"QueueName": self.queue}
            if self.owner:
                kwargs["QueueOwnerAWSAccountId"] = self.owner
            url = self.client.get_queue_url(**kwargs)["QueueUrl"]
            attrs = self.client.get_queue_attributes(
                QueueUrl=url, AttributeNames=["RedrivePolicy", "MaximumMessageSize"]
            ).get("Attributes", {})
            policy = attrs.get("RedrivePolicy")
            if policy:
                self._dead_letter_arn = json.loads(policy).get("deadLetterTargetArn")
            queue_max = int(attrs.get("MaximumMessageSize", 262144))
            self._queue_max = min(self._queue_max, queue_max)
            self._queue_url = url
            self.capabilities = self._capabilities()

    def topic(self) -> SQSMessaging:
        self._open()
        return self

    def async_driver(self) -> AsyncSQS:
        """Both sides on aiobotocore, on the event loop (:mod:`portable_aws._sqs_aio`)."""
        from ._sqs_aio import AsyncSQS

        return AsyncSQS(self)

    def subscription(self) -> SQSMessaging:
        self._open()
        return self

    # -- receiving -------------------------------------------------------
    def _receive_request(self, max_messages: int, wait: float, lease: float) -> dict[str, Any]:
        """ReceiveMessage's arguments (both faces send exactly these)."""
        return {
            "QueueUrl": self._queue_url or self.queue_url,
            "MaxNumberOfMessages": max_messages,
            "WaitTimeSeconds": min(20, math.ceil(wait)),
            "VisibilityTimeout": math.ceil(lease),
            "MessageAttributeNames": ["All"],
            "MessageSystemAttributeNames": _SYSTEM_ATTRIBUTES,
        }

    def receive(self, max_messages: int, wait: float, lease: float) -> list[ReceivedMessage]:
        resp = self.client.receive_message(**self._receive_request(max_messages, wait, lease))
        return [self._received(m) for m in resp.get("Messages", ())]

    def _received(self, raw: dict[str, Any]) -> ReceivedMessage:
        native = dict(raw.get("MessageAttributes") or {})
        marker = native.pop(BODY_ATTRIBUTE, None)
        attributes: dict[str, str] = {}
        headers: list[tuple[str, bytes]] = []
        for name in sorted(native):  # SQS keeps no order; by name, as SQS's own MD5OfMessageAttributes
            value = native[name]
            if "StringValue" in value:  # String, Number and their custom types (Number.float, ...)
                text = str(value["StringValue"])
                attributes[name] = text
                headers.append((name, text.encode("utf-8")))
            elif "BinaryValue" in value:  # Binary and Binary.*: the bytes, not text
                headers.append((name, bytes(value["BinaryValue"])))
        if marker is None:
            body = str(raw.get("Body", "")).encode("utf-8")
        else:
            binary = marker.get("BinaryValue")
            body = bytes(binary) if binary is not None else b""
        system = raw.get("Attributes") or {}
        sent = system.get("SentTimestamp")
        published = (
            dt.datetime.fromtimestamp(int(sent) / 1000, dt.UTC) if sent else dt.datetime.now(dt.UTC)
        )
        group = system.get("MessageGroupId")
        key = None if group is None or group.startswith(_NO_KEY_GROUP) else group
        return ReceivedMessage(
            id=raw["MessageId"],
            body=body,
            attributes=attributes,
            key=key,
            publish_time=published,
            delivery_attempt=max(1, int(system.get("ApproximateReceiveCount", 1))),
            handle=raw["ReceiptHandle"],
            headers=tuple(headers),
        )

    def ack(self, handle: Any) -> None:
        self.client.delete_message(QueueUrl=self._queue_url or self.queue_url, ReceiptHandle=handle)

    @staticmethod
    def _ack_batches(items: list[Any]) -> list[list[dict[str, str]]]:
        """DeleteMessageBatch entries for ``items``, 10 a request; each ``Id`` is the handle's index."""
        return [
            [{"Id": str(start + j), "ReceiptHandle": h} for j, h in enumerate(items[start : start + 10])]
            for start in range(0, len(items), 10)
        ]

    @staticmethod
    def _acks_failed(resp: dict[str, Any], out: list[BaseException | None]) -> None:
        """Record a DeleteMessageBatch answer's failed entries in ``out``."""
        from botocore.exceptions import ClientError

        for failed in resp.get("Failed", ()):
            out[int(failed["Id"])] = ClientError(
                {"Error": {"Code": failed.get("Code", ""), "Message": failed.get("Message", "")}},
                "DeleteMessageBatch",
            )

    def ack_many(self, handles: Iterable[Any]) -> list[BaseException | None]:
        items = list(handles)
        out: list[BaseException | None] = [None] * len(items)
        for entries in self._ack_batches(items):
            try:
                resp = self.client.delete_message_batch(QueueUrl=self._queue_url or self.queue_url, Entries=entries)
            except Exception as exc:
                for entry in entries:
                    out[int(entry["Id"])] = exc
                continue
            self._acks_failed(resp, out)
        return out

    def nack(self, handle: Any, delay: float) -> None:
        self.client.change_message_visibility(
            QueueUrl=self._queue_url or self.queue_url, ReceiptHandle=handle, VisibilityTimeout=math.ceil(delay)
        )

    def extend_lease(self, handle: Any, seconds: float) -> Any:
        self.client.change_message_visibility(
            QueueUrl=self._queue_url or self.queue_url, ReceiptHandle=handle, VisibilityTimeout=math.ceil(seconds)
        )
        return handle

    # -- dead letters ----------------------------------------------------
    def _dead_letter_name(self) -> tuple[str, str | None] | None:
        """(queue name, region) of the redrive target, from its ARN."""
        arn = self._dead_letter_arn
        if not arn:
            return None
        parts = arn.split(":")
        return parts[-1], (parts[3] if len(parts) > 3 and parts[3] else None)

    def _dead_letter_request(self, message: ReceivedMessage, reason: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(GetQueueUrl arguments of the redrive target, SendMessage arguments of the moved copy).

        Only called with a redrive target (``native_dead_letter``).
        """
        target = self._dead_letter_name()
        assert target is not None
        name, _region = target
        account = self._dead_letter_arn.split(":")[4] if self._dead_letter_arn else None
        lookup: dict[str, Any] = {"QueueName": name}
        if account:
            lookup["QueueOwnerAWSAccountId"] = account
        attributes = dict(message.attributes)
        # Binary attributes are in headers only: the moved copy keeps them as Binary
        binary = {n: v for n, v in message.headers if n not in attributes and n != BODY_ATTRIBUTE}
        extra = (reason, self.endpoint + "/" + self.queue, str(message.delivery_attempt), message.id)
        for name_, value in zip(_DEAD_LETTER_ATTRIBUTES, extra, strict=True):
            if len(attributes) + len(binary) >= _SQS_MAX_ATTRIBUTES - 1:
                break  # keep one slot for the body marker; the reason always comes first
            attributes[name_] = value
        dlq_fifo = name.endswith(".fifo")
        out = OutgoingMessage(message.body, attributes, message.key, None)
        entry, _size = self._entry(out)
        if binary:
            entry.setdefault("MessageAttributes", {}).update(
                {n: {"DataType": "Binary", "BinaryValue": v} for n, v in binary.items()}
            )
        if dlq_fifo:
            entry["MessageGroupId"] = message.key or _NO_KEY_GROUP + uuid.uuid4().hex
            entry["MessageDeduplicationId"] = message.id
        else:
            entry.pop("MessageDeduplicationId", None)
        return lookup, entry

    def dead_letter(self, message: ReceivedMessage, reason: str) -> None:
        if self._dead_letter_name() is None:
            return super().dead_letter(message, reason)
        lookup, entry = self._dead_letter_request(message, reason)
        dlq_url = self.client.get_queue_url(**lookup)["QueueUrl"]
        self.client.send_message(QueueUrl=dlq_url, **entry)
        self.ack(message.handle)
        return None

    def dead_letter_url(self) -> str | None:
        target = self._dead_letter_name()
        if target is None:
            return None
        name, region = target
        query = [f"region={region or self.options.region}"] if (region or self.options.region) else []
        if self.options.endpoint_url:
            query.append(f"endpoint_url={self.options.endpoint_url}")
        if self.options.profile:
            query.append(f"profile={self.options.profile}")
        return f"sqs://{name}" + (f"?{'&'.join(query)}" if query else "")

    def stats(self) -> QueueStats:
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"]
        attrs = self.client.get_queue_attributes(QueueUrl=self._queue_url or self.queue_url, AttributeNames=names)[
            "Attributes"
        ]
        dead: int | None = None
        target = self._dead_letter_name()
        if target is not None:
            dlq_url = self.client.get_queue_url(QueueName=target[0])["QueueUrl"]
            dead_attrs = self.client.get_queue_attributes(
                QueueUrl=dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]
            dead = int(dead_attrs.get("ApproximateNumberOfMessages", 0))
        return QueueStats(
            available=int(attrs.get(names[0], 0)),
            in_flight=int(attrs.get(names[1], 0)),
            delayed=int(attrs.get(names[2], 0)),
            dead_letters=dead,
        )

    # -- temporary queues for the contract suite ------------------------
    @contextlib.contextmanager
    def temporary(self, name: str) -> Iterator[str]:
        """A fresh queue ``name`` (FIFO if this URL's queue is) with a dead-letter queue.

        The redrive policy's maxReceiveCount is 1,000 (the most SQS takes), so
        the portable layer's ``max_deliveries`` decides when to dead-letter.
        """
        suffix = ".fifo" if self.fifo else ""
        base = check_queue_name(name[: 80 - 9])
        attrs: dict[str, str] = {"FifoQueue": "true"} if self.fifo else {}
        dlq = self.client.create_queue(QueueName=f"{base}-dlq{suffix}", Attributes=attrs)["QueueUrl"]
        urls = [dlq]
        try:
            arn = self.client.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            redrive = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 1000})
            main = self.client.create_queue(
                QueueName=f"{base}{suffix}", Attributes={**attrs, "RedrivePolicy": redrive}
            )["QueueUrl"]
            urls.append(main)
            yield self._url_for(f"{base}{suffix}")
        finally:
            for queue_url in reversed(urls):
                with contextlib.suppress(Exception):
                    self.client.delete_queue(QueueUrl=queue_url)

    def _url_for(self, queue: str) -> str:
        query = []
        if self.options.region:
            query.append(f"region={self.options.region}")
        if self.options.endpoint_url:
            query.append(f"endpoint_url={self.options.endpoint_url}")
        if self.options.profile:
            query.append(f"profile={self.options.profile}")
        if self._queue_max != 262144:
            query.append(f"max_message_bytes={self._queue_max}")
        return f"sqs://{queue}" + (f"?{'&'.join(query)}" if query else "")
