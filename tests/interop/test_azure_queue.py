"""azqueue:// against azure-storage-queue's own QueueClient on Azurite, both directions.

The native side is what other services use: a plain ``QueueClient`` (the Python
SDK sends text unencoded by default), one with ``TextBase64EncodePolicy`` /
``BinaryBase64EncodePolicy`` (what Azure Functions' queue trigger reads by
default), and a Functions-style reader that base64-decodes the raw text. The
wire form asserted here is the one docs/adapters/azure.md and
docs/native/queues-b.md document.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from portable.errors import InvalidArgument
from portable.messaging import DEAD_LETTER_REASON, open_subscription, open_topic
from portable.testing.messaging_suite import poll

KEY_ENV = "PORTABLE_TEST_INTEROP_AZURITE_KEY"


# -- fixtures (the same Azurite as tests/adapters/azure, through tests/emulators) ----------------
@pytest.fixture(scope="module")
def azure(azurite: Any) -> Iterator[dict[str, str]]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(KEY_ENV, azurite.endpoints["account_key"])
        yield {
            "account": azurite.endpoints["account_name"],
            "queue_endpoint": azurite.endpoints["queue_endpoint"],
            "connection_string": azurite.endpoints["connection_string"],
        }


def service(azure: dict[str, str]) -> Any:
    from azure.storage.queue import QueueServiceClient

    return QueueServiceClient.from_connection_string(azure["connection_string"])


@pytest.fixture
def queue(azure: dict[str, str]) -> Iterator[str]:
    """A fresh queue and its -poison queue, made and removed with the native client."""
    name = f"pt-{uuid.uuid4().hex[:16]}"
    svc = service(azure)
    svc.create_queue(name)
    svc.create_queue(f"{name}-poison")
    yield name
    for q in (name, f"{name}-poison"):
        try:
            svc.delete_queue(q)
        except Exception:
            pass  # a test may have removed it


def url_of(azure: dict[str, str], queue: str, **options: str) -> str:
    query = f"queue_endpoint={azure['queue_endpoint']}&account_key_env={KEY_ENV}"
    query += "".join(f"&{k}={v}" for k, v in options.items())
    return f"azqueue://{azure['account']}/{queue}?{query}"


def native(azure: dict[str, str], queue: str, encode: Any = None, decode: Any = None) -> Any:
    return service(azure).get_queue_client(queue, message_encode_policy=encode, message_decode_policy=decode)


def receive_all(url: str, count: int) -> list[Any]:
    with open_subscription(url, lease=30) as sub:
        got = poll(sub, count, 10)
        sub.ack_many(got)
        assert sub.receive(10, wait=0.3) == []
    return got


def envelope(body: bytes, attributes: dict[str, str] | None = None, key: str | None = None) -> bytes:
    """portable's envelope, written from its documentation (docs/native/queues-b.md), not from its code."""
    header: dict[str, Any] = {}
    if attributes:
        header["a"] = attributes
    if key is not None:
        header["k"] = key
    rest = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode() + b"\n" + body
    return b"portable/1 sha256=" + hashlib.sha256(rest).hexdigest()[:16].encode() + b"\n" + rest


def parse_envelope(raw: bytes) -> tuple[dict[str, Any], bytes]:
    """What a native consumer does to read portable's envelope, from the documentation."""
    first, rest = raw.split(b"\n", 1)
    assert first.startswith(b"portable/1 sha256=")
    assert first[len(b"portable/1 sha256=") :] == hashlib.sha256(rest).hexdigest()[:16].encode()
    header, body = rest.split(b"\n", 1)
    return json.loads(header), body


TEXTS = ["test", "order123", "deadbeef0123", "hello world", "h\u00e9llo \u2603 <&>", ""]


# -- native -> portable --------------------------------------------------------------------
def test_plain_queue_client_text_reads_exactly_with_encoding_text(azure: dict[str, str], queue: str) -> None:
    client = native(azure, queue)  # no encode policy: the SDK's default
    for text in TEXTS:
        client.send_message(text)
    got = receive_all(url_of(azure, queue, encoding="text"), len(TEXTS))
    assert sorted(m.body for m in got) == sorted(t.encode() for t in TEXTS)
    assert all(dict(m.attributes) == {} and m.key is None for m in got)


def test_plain_queue_client_text_with_encoding_base64_is_never_delivered_as_other_bytes(
    azure: dict[str, str], queue: str
) -> None:
    """base64 is applied to every message: base64-shaped texts decode, the rest move to the poison queue."""
    client = native(azure, queue)
    for text in TEXTS:
        client.send_message(text)
    shaped = [t for t in TEXTS if t in ("test", "order123", "deadbeef0123", "")]
    got = receive_all(url_of(azure, queue), len(shaped))
    assert sorted(m.body for m in got) == sorted(base64.b64decode(t) for t in shaped)
    dead = receive_all(url_of(azure, f"{queue}-poison", poison_queue="none"), 2)
    assert sorted(m.body for m in dead) == sorted(t.encode() for t in ("hello world", "h\u00e9llo \u2603 <&>"))
    assert all("?encoding=text" in m.attributes[DEAD_LETTER_REASON] for m in dead)


def test_text_base64_encode_policy_reads_exactly_with_encoding_base64(azure: dict[str, str], queue: str) -> None:
    from azure.storage.queue import TextBase64EncodePolicy

    client = native(azure, queue, encode=TextBase64EncodePolicy())
    for text in TEXTS:
        client.send_message(text)
    got = receive_all(url_of(azure, queue), len(TEXTS))
    assert sorted(m.body for m in got) == sorted(t.encode() for t in TEXTS)


def test_binary_base64_encode_policy_reads_exactly_with_encoding_base64(azure: dict[str, str], queue: str) -> None:
    from azure.storage.queue import BinaryBase64EncodePolicy

    bodies = [b"\x00\x01\xfe\xff binary", bytes(range(256)), b""]
    client = native(azure, queue, encode=BinaryBase64EncodePolicy())
    for body in bodies:
        client.send_message(body)
    got = receive_all(url_of(azure, queue), len(bodies))
    assert sorted(m.body for m in got) == sorted(bodies)


@pytest.mark.parametrize(
    "text",
    [
        'portable/1\n{"a":{"role":"admin"},"k":"k1"}\nbody',
        'portable/1 sha256=0123456789abcdef\n{"a":{"role":"admin"}}\nbody',
        'portable/1 sha256=zz\n{"a":{"role":"admin"}}\nbody',
    ],
)
def test_native_text_that_begins_with_the_envelope_header_gets_no_attributes(
    azure: dict[str, str], queue: str, text: str
) -> None:
    from azure.storage.queue import TextBase64EncodePolicy

    native(azure, queue, encode=TextBase64EncodePolicy()).send_message(text)
    [m] = receive_all(url_of(azure, queue), 1)
    assert (m.body, dict(m.attributes), m.key) == (text.encode(), {}, None)


def test_a_native_producer_that_writes_the_documented_envelope_sets_attributes_and_key(
    azure: dict[str, str], queue: str
) -> None:
    from azure.storage.queue import BinaryBase64EncodePolicy

    raw = envelope(b"\x00payload", {"origin": "native", "portable.idempotency_key": "i-1"}, "k1")
    native(azure, queue, encode=BinaryBase64EncodePolicy()).send_message(raw)
    [m] = receive_all(url_of(azure, queue), 1)
    assert (m.body, dict(m.attributes), m.key, m.idempotency_key) == (
        b"\x00payload", {"origin": "native", "portable.idempotency_key": "i-1"}, "k1", "i-1"
    )  # fmt: skip


# -- portable -> native --------------------------------------------------------------------
BODIES = [b"plain text", "h\u00e9llo".encode(), b"\x00\xff binary", b""]


def test_bare_bodies_are_plain_base64_for_functions_style_readers(azure: dict[str, str], queue: str) -> None:
    from azure.storage.queue import BinaryBase64DecodePolicy

    with open_topic(url_of(azure, queue)) as topic:
        for body in BODIES:
            topic.publish(body)
    raw = native(azure, queue).peek_messages(max_messages=32)
    # the Functions host: Convert.FromBase64String of the message text
    assert sorted(base64.b64decode(m.content, validate=True) for m in raw) == sorted(BODIES)
    decoded = native(azure, queue, decode=BinaryBase64DecodePolicy()).peek_messages(max_messages=32)
    # the SDK's decode policies hand an empty message back as "" (str), not b""
    assert sorted(m.content or b"" for m in decoded) == sorted(BODIES)
    assert [m.content for m in decoded if not m.content] == [""]


def test_text_bodies_read_with_text_base64_decode_policy(azure: dict[str, str], queue: str) -> None:
    from azure.storage.queue import TextBase64DecodePolicy

    with open_topic(url_of(azure, queue)) as topic:
        topic.publish("h\u00e9llo <&>".encode())
    [m] = native(azure, queue, decode=TextBase64DecodePolicy()).peek_messages()
    assert m.content == "h\u00e9llo <&>"


def test_encoding_text_is_what_a_plain_queue_client_reads(azure: dict[str, str], queue: str) -> None:
    with open_topic(url_of(azure, queue, encoding="text")) as topic:
        for text in TEXTS:
            topic.publish(text.encode())
        with pytest.raises(InvalidArgument, match="encoding=base64"):
            topic.publish(b"\xff binary")
    raw = native(azure, queue).receive_messages(max_messages=32)
    assert sorted(m.content for m in raw) == sorted(TEXTS)


def test_attributes_key_and_idempotency_key_travel_in_the_documented_envelope(
    azure: dict[str, str], queue: str
) -> None:
    from azure.storage.queue import BinaryBase64DecodePolicy

    with open_topic(url_of(azure, queue)) as topic:
        topic.publish(b"\x00body", key="k1", attributes={"origin": "portable", "n": "\u00e9"}, idempotency_key="i-1")
        topic.publish(b"portable/ starts like an envelope")
    seen = native(azure, queue, decode=BinaryBase64DecodePolicy()).peek_messages(max_messages=32)
    raws = sorted(m.content for m in seen)
    header, body = parse_envelope(raws[0])
    assert (header, body) == (
        {"a": {"origin": "portable", "n": "\u00e9", "portable.idempotency_key": "i-1"}, "k": "k1"},
        b"\x00body",
    )
    assert raws[0] == envelope(b"\x00body", header["a"], "k1")  # byte for byte the documented form
    assert parse_envelope(raws[1]) == ({}, b"portable/ starts like an envelope")  # wrapped so no reader mistakes it


def test_envelope_never_keeps_every_body_bare(azure: dict[str, str], queue: str) -> None:
    url = url_of(azure, queue, envelope="never", encoding="text")
    with open_topic(url) as topic:
        topic.publish(b"portable/1 sha256=0123456789abcdef\n{}\nbare")
        for kwargs in ({"attributes": {"a": "1"}}, {"key": "k"}, {"idempotency_key": "i"}):
            with pytest.raises(InvalidArgument, match="envelope=never"):
                topic.publish(b"x", **kwargs)
    [m] = native(azure, queue).peek_messages()
    assert m.content == "portable/1 sha256=0123456789abcdef\n{}\nbare"
    [back] = receive_all(url, 1)
    assert (back.body, dict(back.attributes)) == (b"portable/1 sha256=0123456789abcdef\n{}\nbare", {})


def test_a_dead_lettered_message_is_enveloped_in_the_poison_queue(azure: dict[str, str], queue: str) -> None:
    from azure.storage.queue import BinaryBase64DecodePolicy

    url = url_of(azure, queue)
    with open_topic(url) as topic, open_subscription(url) as sub:
        topic.publish(b"poison", attributes={"origin": "t"})
        [m] = poll(sub, 1, 10)
        m.dead_letter("RuntimeError: bad")
    [raw] = native(azure, f"{queue}-poison", decode=BinaryBase64DecodePolicy()).peek_messages()
    header, body = parse_envelope(raw.content)
    assert body == b"poison"
    assert header["a"]["origin"] == "t" and header["a"]["portable.dead_letter_reason"] == "RuntimeError: bad"
    assert set(header["a"]) == {
        "origin", "portable.dead_letter_reason", "portable.dead_letter_source", "portable.delivery_attempts",
        "portable.original_id",
    }  # fmt: skip
