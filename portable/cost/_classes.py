"""Which price class each guarded call falls in, and how many billed requests it made.

A guarded call is one driver method (:class:`~portable.telemetry.CallInfo`'s
``operation``); most send one request, and this module says how many the
others send, from the call's arguments and result:

=====================  ==========================================================
driver method          requests counted
=====================  ==========================================================
get, get_range, head   1 (S3 tier 2 / GCS class B / Azure read, head: Azure other)
put, copy              1 (S3 tier 1 / GCS class A / Azure write)
delete                 1, free
list_page              1 per page (S3 tier 1, GCS class A, Azure list)
get_many, put_many,    1 per key / item / pair (the drivers send one request each)
copy_many
delete_many            S3: 1 DeleteObjects per 1,000 keys; GCS, Azure: 1 per key; free
open_read              1 (the reader's HEAD; the ranged GETs of a streamed read are
                       not guarded calls, so they are not counted: an undercount)
open_write             0 (nothing is sent until a part is full)
write (stream part)    S3: CreateMultipartUpload with the first part, then 1 per part
                       (a part goes out when the next byte arrives); Azure: 1 Put Block
                       per part; GCS: 1 resumable-upload request per part, the first
                       with its initiation
commit                 S3: 1 PutObject if the stream fit one part, else the parts still
                       held plus CompleteMultipartUpload; Azure: Put Blob, or the held
                       block plus Put Block List; GCS: 1 upload, or the last part
signed_url             0 (signed locally)
abort_incomplete       1 list, plus 1 free abort per upload removed
publish                SQS: 1 request per 64 KiB of body and attributes; Pub/Sub: the
                       message's bytes, at least 1,000; Azure Queue: 1
publish_batch          SQS: 1 SendMessageBatch per 10 messages or 256 KiB, each billed per
                       64 KiB; Pub/Sub: 1 request (>= 1,000 bytes); Azure Queue: 1 per message
receive                1 (SQS: per 64 KiB received; Pub/Sub: the bytes, >= 1,000); Azure
                       Queue: 2 when fewer messages came than asked (the SDK asks again
                       and gets an empty page); the polls of a wait on an empty queue
                       are not seen (1 counted)
ack, nack,             1 (Pub/Sub: no throughput charge)
extend_lease
ack_many               SQS: 1 per 10 handles; Pub/Sub: 1; Azure Queue: 1 per handle
topic, subscription    SQS: 2 (GetQueueUrl, GetQueueAttributes); others 1
=====================  ==========================================================

Each failed attempt is one more request of the call's first class (the provider
bills a request that reached it whatever its answer; an attempt that failed
before reaching it, a refused connection, is counted too: the meter cannot tell).
Kafka, file://, mem://, sqlite:// and local jobs have no request price and are
not counted. Methods not in the table count 1 request of the family's cheapest
class, and :data:`UNLISTED` records their names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sized
from typing import Any, NamedTuple

__all__ = ["FAMILIES", "Charge", "Counted", "StreamState", "count_call", "family_of", "failed_attempt"]

#: provider scheme -> the family of services whose price classes it is billed in
FAMILIES: dict[str, str] = {
    "s3": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "azure-blob",
    "abfs": "azure-blob",
    "sqs": "sqs",
    "pubsub": "pubsub",
    "azqueue": "azure-queue",
}

_SQS_CHUNK = 64 * 1024
_MAX_STREAMS = 10_000  # streamed writes followed at once
_SQS_BATCH_BYTES = 256 * 1024
_PUBSUB_MIN = 1000
_PUBSUB_OVERHEAD = 20  # the timestamp, per message (the page's "20 bytes for the timestamp")

# price classes per family: (write, read, list, head, delete)
_CLASSES: dict[str, tuple[str, str, str, str, str]] = {
    "s3": ("tier1", "tier2", "tier1", "tier2", "delete"),
    "gcs": ("class_a", "class_b", "class_a", "class_b", "delete"),
    "azure-blob": ("write", "read", "list_create", "other", "delete"),
}

#: driver methods seen that the table does not list (counted as 1 request of the cheapest class)
UNLISTED: set[tuple[str, str]] = set()


class Charge(NamedTuple):
    """Requests of one price class: how many, and how many billed units they make."""

    price_class: str
    requests: int
    units: float


class Counted(NamedTuple):
    """What one call cost: its charges, the bytes it sent to the provider and received from it."""

    charges: tuple[Charge, ...]
    bytes_in: int = 0
    bytes_out: int = 0


class StreamState:
    """A streamed write followed from ``open_write`` to its commit (for its part count)."""

    __slots__ = ("part_size", "parts_sent", "written")

    def __init__(self, part_size: int) -> None:
        self.part_size = max(1, part_size)
        self.written = 0
        self.parts_sent = 0

    def parts_out_now(self) -> int:
        """Parts sent so far: every full part but the one held back until more bytes come."""
        return max(0, math.ceil(self.written / self.part_size) - 1)


def family_of(provider: str) -> str | None:
    """The price family of a provider scheme, or None when it has no request price (kafka, file, ...)."""
    return FAMILIES.get(provider)


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (bytes, bytearray, memoryview, str)) else 0


def _attr_bytes(message: Any) -> int:
    attributes = getattr(message, "attributes", None) or {}
    total = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in attributes.items())
    for extra in ("key", "idempotency_key"):
        value = getattr(message, extra, None)
        if isinstance(value, str):
            total += len(value.encode())
    return total


def message_bytes(message: Any) -> int:
    """The payload a message sends: body plus attributes (and key) as the provider counts them."""
    body = message if isinstance(message, (bytes, bytearray)) else getattr(message, "body", b"")
    return _size(body) + (0 if isinstance(message, (bytes, bytearray)) else _attr_bytes(message))


def _chunks(nbytes: int) -> int:
    return max(1, math.ceil(nbytes / _SQS_CHUNK))


def _length(value: Any) -> int:
    return len(value) if isinstance(value, Sized) else 0


def _ok_bytes(results: Any) -> int:
    """The bytes of the successful items of a get_many result (pairs of key, bytes-or-error)."""
    total = 0
    if isinstance(results, Iterable) and not isinstance(results, (bytes, str)):
        for item in list(results):
            value = item[1] if isinstance(item, tuple) and len(item) == 2 else item
            total += _size(value)
    return total


def _storage(family: str, op: str, info: Any, result: Any, streams: dict[Any, StreamState]) -> Counted:
    write, read, listing, head, delete = _CLASSES[family]
    args = info.args
    if op in ("get", "get_range"):
        return Counted((Charge(read, 1, 1),), 0, _size(result))
    if op in ("head", "exists"):
        return Counted((Charge(head, 1, 1),))
    if op == "open_read":
        return Counted((Charge(head, 1, 1),))
    if op == "put":
        return Counted((Charge(write, 1, 1),), _size(args[1]) if len(args) > 1 else 0)
    if op == "copy":
        return Counted((Charge(write, 1, 1),))
    if op == "delete":
        return Counted((Charge(delete, 1, 1),))
    if op in ("list_page", "list_incomplete"):
        return Counted((Charge(listing, 1, 1),))
    if op == "signed_url":
        return Counted(())
    if op == "get_many":
        n = _length(args[0]) if args else 0
        return Counted((Charge(read, n, n),), 0, _ok_bytes(result))
    if op == "put_many":
        items = list(args[0]) if args else []
        return Counted((Charge(write, len(items), len(items)),), sum(_size(d) for _, d in items))
    if op == "copy_many":
        n = _length(args[0]) if args else 0
        return Counted((Charge(write, n, n),))
    if op == "delete_many":
        n = _length(args[0]) if args else 0
        requests = math.ceil(n / 1000) if family == "s3" else n
        return Counted((Charge(delete, requests, requests),))
    if op == "abort_incomplete":
        removed = _length(result)
        return Counted((Charge(listing, 1, 1), Charge(delete, removed, removed)))
    if op == "open_write":
        key = args[0] if args else ""
        part_size = args[2] if len(args) > 2 and isinstance(args[2], int) else 8 * 1024 * 1024
        if len(streams) >= _MAX_STREAMS:  # writers that never committed (aborted): forget the oldest
            del streams[next(iter(streams))]
        streams[(info.endpoint, _target(info), key)] = StreamState(part_size)
        return Counted(())
    if op == "write":
        state = streams.get((info.endpoint, _target(info), _key_of(info.what, "write ")))
        data = args[0] if args else b""
        if state is None:  # a stream opened before the meter: one request per part
            return Counted((Charge(write, 1, 1),), _size(data))
        state.written += _size(data)
        now = state.parts_out_now()
        new = now - state.parts_sent
        opened = 1 if state.parts_sent == 0 and new > 0 and family != "azure-blob" else 0
        state.parts_sent = now
        return Counted((Charge(write, new + opened, new + opened),) if new else (), _size(data))
    if op in ("_commit_once", "commit"):
        state = streams.pop((info.endpoint, _target(info), _key_of(info.what, "commit ")), None)
        if state is None:
            return Counted((Charge(write, 1, 1),))
        if state.parts_sent == 0:
            return Counted((Charge(write, 1, 1),))
        rest = max(0, math.ceil(state.written / state.part_size) - state.parts_sent)
        finish = 0 if family == "gcs" else 1  # GCS's last part completes the upload
        n = rest + finish
        return Counted((Charge(write, n, n),))
    if op == "_stored_digest":  # reading back a commit whose answer was lost
        return Counted((Charge(read, 1, 1),))
    UNLISTED.add((family, op))
    return Counted((Charge(read, 1, 1),))


def _target(info: Any) -> str:
    return str(getattr(info, "target", "") or "")


def _key_of(what: str, verb: str) -> str:
    return what[len(verb) :] if what.startswith(verb) else what


def _sqs(op: str, info: Any, result: Any) -> Counted:
    args = info.args
    if op == "publish":
        size = message_bytes(args[0]) if args else 0
        return Counted((Charge("request", 1, _chunks(size)),), size)
    if op == "publish_batch":
        sizes = [message_bytes(m) for m in (list(args[0]) if args else [])]
        requests, units, batch, batch_bytes = 0, 0, 0, 0
        for size in sizes:  # as the driver plans SendMessageBatch: 10 entries, 256 KiB
            if batch and (batch == 10 or batch_bytes + size > _SQS_BATCH_BYTES):
                requests, units, batch, batch_bytes = requests + 1, units + _chunks(batch_bytes), 0, 0
            batch, batch_bytes = batch + 1, batch_bytes + size
        if batch:
            requests, units = requests + 1, units + _chunks(batch_bytes)
        return Counted((Charge("request", requests, units),), sum(sizes))
    if op == "receive":
        got = sum(message_bytes(m) for m in (result or ()))
        return Counted((Charge("request", 1, _chunks(got)),), 0, got)
    if op == "ack_many":
        n = math.ceil(_length(args[0]) / 10) if args else 0
        return Counted((Charge("request", n, n),))
    if op in ("topic", "subscription"):
        return Counted((Charge("request", 2, 2),))
    if op == "dead_letter":
        size = message_bytes(args[0]) if args else 0
        return Counted((Charge("request", 1, 1), Charge("request", 1, _chunks(size))))
    return Counted((Charge("request", 1, 1),))


def _pubsub(op: str, info: Any, result: Any) -> Counted:
    args = info.args
    if op == "publish":
        size = (message_bytes(args[0]) if args else 0) + _PUBSUB_OVERHEAD + _size(result)
        return Counted((Charge("throughput", 1, max(_PUBSUB_MIN, size)),), size)
    if op == "publish_batch":
        messages = list(args[0]) if args else []
        ids = result if isinstance(result, list) else []
        size = sum(message_bytes(m) + _PUBSUB_OVERHEAD for m in messages) + sum(_size(i) for i in ids)
        return Counted((Charge("throughput", 1, max(_PUBSUB_MIN, size)),), size)
    if op == "receive":
        got = sum(message_bytes(m) + _PUBSUB_OVERHEAD + _size(getattr(m, "id", "")) for m in (result or ()))
        return Counted((Charge("throughput", 1, max(_PUBSUB_MIN, got)),), 0, got)
    return Counted((Charge("free", 1, 0),))


def _azure_queue(op: str, info: Any, result: Any) -> Counted:
    args = info.args
    if op == "publish_batch":
        n = _length(args[0]) if args else 0
        return Counted((Charge("operation", n, n),), sum(message_bytes(m) for m in (list(args[0]) if args else [])))
    if op == "publish":
        return Counted((Charge("operation", 1, 1),), message_bytes(args[0]) if args else 0)
    if op == "receive":
        messages = list(result or ())
        asked = args[0] if args and isinstance(args[0], int) else 32
        # the SDK pages Get Messages until a page is empty or max_messages came: a short
        # answer costs a second, empty Get Messages
        n = 2 if 0 < len(messages) < asked else 1
        return Counted((Charge("operation", n, n),), 0, sum(message_bytes(m) for m in messages))
    if op in ("ack", "ack_many"):
        n = (_length(args[0]) if args else 0) if op == "ack_many" else 1
        return Counted((Charge("delete", n, n),))
    return Counted((Charge("operation", 1, 1),))


_MESSAGING: dict[str, Callable[[str, Any, Any], Counted]] = {
    "sqs": _sqs,
    "pubsub": _pubsub,
    "azure-queue": _azure_queue,
}


def count_call(family: str, info: Any, result: Any, streams: dict[Any, StreamState]) -> Counted:
    """The requests a successful call made (``result`` what it returned)."""
    if family in _CLASSES:
        return _storage(family, info.operation, info, result, streams)
    return _MESSAGING[family](info.operation, info, result)


def failed_attempt(family: str, info: Any) -> Charge:
    """One failed attempt of ``info``'s call: one request of its first class, one billed unit
    (Pub/Sub: the 1,000-byte minimum of a request)."""
    op = info.operation
    if family in _CLASSES:
        write, read, listing, head, delete = _CLASSES[family]
        if op in ("put", "copy", "put_many", "copy_many", "write", "_commit_once", "commit"):
            return Charge(write, 1, 1)
        if op in ("list_page", "list_incomplete", "abort_incomplete"):
            return Charge(listing, 1, 1)
        if op in ("delete", "delete_many"):
            return Charge(delete, 1, 1)
        if op in ("head", "open_read"):
            return Charge(head, 1, 1)
        return Charge(read, 1, 1)
    if family == "sqs":
        return Charge("request", 1, 1)
    if family == "pubsub":
        return Charge("throughput", 1, _PUBSUB_MIN) if op in ("publish", "publish_batch", "receive") else Charge(
            "free", 1, 0
        )
    return Charge("delete" if op in ("ack", "ack_many") else "operation", 1, 1)
