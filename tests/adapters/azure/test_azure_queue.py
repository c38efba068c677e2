"""azqueue:// on Azurite: the messaging contract, plus what only Azure Storage Queues have."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from azure_support import queue_service
from portable_azure.queue import MAGIC, StorageQueueMessaging, decode_message, encode_message

from portable.config import Profile
from portable.driver.messaging import OutgoingMessage
from portable.errors import (
    ConfigError,
    InvalidArgument,
    InvalidURL,
    NotFound,
    PreconditionFailed,
    Throttled,
    TooLarge,
)
from portable.messaging import (
    DEAD_LETTER_REASON,
    Subscription,
    Topic,
    open_subscription,
    open_topic,
)
from portable.resilience import ResiliencePolicy, RetryPolicy
from portable.testing.fault_suite import MessagingFaultSuite
from portable.testing.messaging_suite import MessagingContract, poll


class TestStorageQueueContract(MessagingContract):
    xfail: dict[str, str] = {}

    @pytest.fixture
    def queue_url(self, azure: dict[str, str], fresh_queue: str, queue_query: str) -> str:
        return f"azqueue://{azure['account']}/{fresh_queue}?{queue_query}"


class TestStorageQueueFaults(MessagingFaultSuite):
    """Publishes and a consumer loop under injected faults: nothing lost, nothing handled twice."""

    fault_count = 120

    @pytest.fixture
    def fault_queue_url(self, azure: dict[str, str], fresh_queue: str, queue_query: str) -> str:
        return f"azqueue://{azure['account']}/{fresh_queue}?{queue_query}"


@pytest.fixture
def stub_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """A throwaway shared key for a stub server (which checks no signature)."""
    monkeypatch.setenv("PT_STUB_KEY", base64.b64encode(b"not a real key").decode())
    return "account_key_env=PT_STUB_KEY"


def profile(url: str, attempts: int = 3) -> Profile:
    policy = ResiliencePolicy(retry=RetryPolicy(max_attempts=attempts, initial_backoff=0.0), breaker=None)
    return Profile(name="t", storage="mem://t", queue=url, jobs="local://./.portable/jobs", resilience=policy)


@pytest.fixture
def url(azure: dict[str, str], fresh_queue: str, queue_query: str) -> str:
    return f"azqueue://{azure['account']}/{fresh_queue}?{queue_query}"


@pytest.fixture
def topic(url: str) -> Any:
    t = open_topic(url, profile=profile(url))
    yield t
    t.close()


@pytest.fixture
def sub(url: str) -> Any:
    s = open_subscription(url, profile=profile(url), lease=30)
    yield s
    s.close()


# -- URLs, names and secrets ------------------------------------------------------------
@pytest.mark.parametrize("name", ["ab", "Upper", "under_score", "two--hyphens", "trailing-", "q" * 64])
def test_invalid_queue_names_raise_before_any_request(name: str) -> None:
    with pytest.raises(InvalidURL, match="queue name"):
        open_topic(f"azqueue://acct/{name}?auth=identity&queue_endpoint=http://127.0.0.1:9/acct")


def test_anonymous_access_is_refused_for_queues() -> None:
    with pytest.raises(InvalidURL, match="anonymous"):
        open_topic("azqueue://acct/queue1?auth=anonymous")


def test_a_secret_in_the_url_is_refused() -> None:
    with pytest.raises(InvalidURL, match="account_key_env") as info:
        open_topic("azqueue://acct/queue1?account_key=TOPSECRETVALUE")
    assert "TOPSECRETVALUE" not in str(info.value)


def test_a_bad_encoding_is_refused() -> None:
    with pytest.raises(InvalidURL, match="encoding"):
        open_topic("azqueue://acct/queue1?auth=identity&encoding=utf16")


def test_the_account_of_the_credentials_must_match_the_url(fresh_queue: str, conn_query: str, azure: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="devstoreaccount1"):
        open_topic(f"azqueue://otheraccount/{fresh_queue}?{conn_query}")
    with open_topic(f"azqueue://{azure['account']}/{fresh_queue}?{conn_query}") as t:
        assert t.publish(b"via connection string")


def test_repr_and_errors_hold_no_key(azure: dict[str, str], url: str) -> None:
    key = azure["connection_string"].split("AccountKey=")[1].split(";")[0]
    missing = url.replace("/pt-", "/gone-")
    with open_topic(missing, profile=profile(missing)) as t:
        with pytest.raises(NotFound) as info:
            t.publish(b"x")
        assert key not in str(info.value) and key not in repr(t) and key not in repr(t._driver)


# -- the envelope and the encoding --------------------------------------------------
@pytest.mark.parametrize("encoding", ["base64", "text"])
@pytest.mark.parametrize(
    ("body", "attributes", "key"),
    [
        (b"plain", {}, None),
        (b"with attrs", {"a": "1", "\u00e9": "\u00e9t\u00e9"}, "k-1"),
        (MAGIC + b"looks framed", {}, None),
        (b'portable/1\n{"a":{"x":"1"}}\nold form', {}, None),
        (b"", {}, None),
    ],
)
def test_envelope_round_trips(encoding: str, body: bytes, attributes: dict[str, str], key: str | None) -> None:
    text = encode_message(body, attributes, key, encoding)
    assert decode_message(text, encoding) == (body, attributes, key)


def test_a_plain_body_is_plain_base64_that_other_consumers_read(topic: Topic, azure: dict[str, str], fresh_queue: str) -> None:
    from azure.storage.queue import BinaryBase64DecodePolicy

    topic.publish(b"\x00\x01binary")
    raw = queue_service(azure).get_queue_client(fresh_queue, message_decode_policy=BinaryBase64DecodePolicy())
    [message] = raw.peek_messages()
    assert message.content == b"\x00\x01binary"  # what Azure Functions' base64 binding reads


def test_messages_from_other_producers_are_read_by_the_declared_encoding(sub: Subscription, azure: dict[str, str], fresh_queue: str) -> None:
    from azure.storage.queue import BinaryBase64EncodePolicy

    queue_service(azure).get_queue_client(fresh_queue, message_encode_policy=BinaryBase64EncodePolicy()).send_message(b"b64 bytes")
    got = poll(sub, 1, 10)
    assert [m.body for m in got] == [b"b64 bytes"]
    sub.ack_many(got)


# issue 15.1: whether a body survives never depends on its content
NATIVE_TEXTS = ["test", "order123", "deadbeefcafe0123", "hello world", "plain text, not base64!"]


def test_with_base64_every_message_is_base64_decoded_and_a_misfit_goes_to_the_poison_queue(
    sub: Subscription, azure: dict[str, str], fresh_queue: str
) -> None:
    raw = queue_service(azure).get_queue_client(fresh_queue)  # no encode policy: the SDK's default
    for text in NATIVE_TEXTS:
        raw.send_message(text)
    got = poll(sub, 3, 10)
    # the three that are base64 are decoded as base64, like every other message: the declared setting
    assert sorted(m.body for m in got) == sorted(base64.b64decode(t) for t in ("test", "order123", "deadbeefcafe0123"))
    assert b"\xb5\xeb-" in [m.body for m in got]
    sub.ack_many(got)
    assert sub.receive(5, wait=0.5) == []  # the other two are not delivered as other bytes...
    assert sub.dead_letter_url is not None
    with open_subscription(sub.dead_letter_url, profile=profile(sub.dead_letter_url)) as dlq:
        dead = poll(dlq, 2, 10)
        assert sorted(m.body for m in dead) == [b"hello world", b"plain text, not base64!"]  # ...but kept whole
        for m in dead:
            assert "?encoding=text" in m.attributes[DEAD_LETTER_REASON]
            assert m.attributes["portable.dead_letter_source"].endswith(f"/{fresh_queue}")
        dlq.ack_many(dead)


def test_with_text_every_native_text_arrives_as_its_utf8_bytes(azure: dict[str, str], fresh_queue: str, queue_query: str) -> None:
    url = f"azqueue://{azure['account']}/{fresh_queue}?{queue_query}&encoding=text"
    raw = queue_service(azure).get_queue_client(fresh_queue)
    for text in [*NATIVE_TEXTS, "h\u00e9llo \u2603", ""]:
        raw.send_message(text)
    with open_subscription(url, profile=profile(url)) as s:
        got = poll(s, len(NATIVE_TEXTS) + 2, 10)
        assert sorted(m.body for m in got) == sorted(t.encode() for t in [*NATIVE_TEXTS, "h\u00e9llo \u2603", ""])
        s.ack_many(got)


def test_without_a_poison_queue_a_misfit_raises_config_error_and_stays_queued(
    azure: dict[str, str], fresh_queue: str, queue_query: str
) -> None:
    url = f"azqueue://{azure['account']}/{fresh_queue}?{queue_query}&poison_queue=none"
    queue_service(azure).get_queue_client(fresh_queue).send_message("hello world")
    with open_subscription(url, profile=profile(url), lease=30) as s, pytest.raises(ConfigError, match=r"\?encoding=text"):
        poll(s, 1, 10)
    props = queue_service(azure).get_queue_client(fresh_queue).get_queue_properties()
    assert props.approximate_message_count == 1


@pytest.mark.parametrize(
    "text",
    [
        'portable/1\n{"a":{"role":"admin"},"k":"k1"}\nbody',  # portable 0.1's unchecked form
        'portable/1 sha256=0000000000000000\n{"a":{"role":"admin"}}\nbody',  # a checksum that does not match
        "portable/1 sha256=\n{}\nbody",
        "portable/2 sha256=0000000000000000\n{}\nbody",
    ],
)
def test_a_native_text_that_looks_like_an_envelope_is_delivered_whole(
    text: str, azure: dict[str, str], fresh_queue: str, queue_query: str
) -> None:
    url = f"azqueue://{azure['account']}/{fresh_queue}?{queue_query}&encoding=text"
    queue_service(azure).get_queue_client(fresh_queue).send_message(text)
    with open_subscription(url, profile=profile(url)) as s:
        [m] = poll(s, 1, 10)
        assert (m.body, dict(m.attributes), m.key) == (text.encode(), {}, None)
        m.ack()


def test_only_an_envelope_whose_checksum_holds_is_unwrapped() -> None:
    genuine = encode_message(b"body", {"role": "admin"}, "k1", "text")
    assert decode_message(genuine, "text") == (b"body", {"role": "admin"}, "k1")
    first, _, rest = genuine.partition("\n")
    assert first.startswith("portable/1 sha256=") and len(first) == len("portable/1 sha256=") + 16
    tampered = first + "\n" + rest.replace("admin", "owner")
    assert decode_message(tampered, "text") == (tampered.encode(), {}, None)
    assert decode_message(genuine, "text", "never") == (genuine.encode(), {}, None)


def test_envelope_never_keeps_bodies_bare_and_refuses_what_cannot_travel(
    stub_server: Any, stub_key: str, azure: dict[str, str], fresh_queue: str, queue_query: str
) -> None:
    server = stub_server(500, "InternalError")
    stub = f"azqueue://devstoreaccount1/queue1?{stub_key}&queue_endpoint={server.endpoint()}&envelope=never"
    with open_topic(stub, profile=profile(stub)) as t:
        for kwargs, named in [
            ({"attributes": {"a": "1"}}, r"attributes \(a\)"),
            ({"key": "k"}, "ordering key"),
            ({"idempotency_key": "i-1"}, "idempotency key"),
        ]:
            with pytest.raises(InvalidArgument, match=named) as info:
                t.publish(b"x", **kwargs)
            assert "envelope=never" in str(info.value)
        with pytest.raises(InvalidArgument, match="envelope=never"):
            t.publish_batch([b"fine", OutgoingMessage(b"x", key="k")])
        assert t.capabilities.max_message_bytes == 49152
    assert server.requests == 0
    url = f"azqueue://{azure['account']}/{fresh_queue}?{queue_query}&envelope=never"
    with open_topic(url, profile=profile(url)) as t, open_subscription(url, profile=profile(url)) as s:
        t.publish(b"portable/1 looks like an envelope")
        [raw] = queue_service(azure).get_queue_client(fresh_queue).peek_messages()
        assert base64.b64decode(raw.content) == b"portable/1 looks like an envelope"
        [m] = poll(s, 1, 10)
        assert m.body == b"portable/1 looks like an envelope"
        m.dead_letter("bare bodies only")
        assert s.dead_letter_url is not None and "envelope=never" in s.dead_letter_url
    [dead] = queue_service(azure).get_queue_client(f"{fresh_queue}-poison").peek_messages()
    assert base64.b64decode(dead.content) == b"portable/1 looks like an envelope"


def test_a_bad_envelope_setting_is_refused() -> None:
    with pytest.raises(InvalidURL, match="envelope"):
        open_topic("azqueue://acct/queue1?auth=identity&envelope=sometimes")


def test_text_encoding_sends_readable_text_and_refuses_binary(azure: dict[str, str], fresh_queue: str, queue_query: str) -> None:
    url = f"azqueue://{azure['account']}/{fresh_queue}?{queue_query}&encoding=text"
    with open_topic(url, profile=profile(url)) as t, open_subscription(url, profile=profile(url)) as s:
        assert t.capabilities.max_message_bytes == 64 * 1024 - 1024
        t.publish("h\u00e9llo <xml> & text".encode())
        [raw] = queue_service(azure).get_queue_client(fresh_queue).peek_messages()
        assert raw.content == "h\u00e9llo <xml> & text"
        with pytest.raises(InvalidArgument, match="encoding=base64"):
            t.publish(b"\xff\xfe binary")
        with pytest.raises(InvalidArgument, match="control"):
            t.publish(b"bell \x07")
        [m] = poll(s, 1, 10)
        assert m.body == "h\u00e9llo <xml> & text".encode()
        m.ack()


def test_an_envelope_that_does_not_fit_is_too_large_before_any_request(stub_server: Any, stub_key: str) -> None:
    server = stub_server(500, "InternalError")
    url = f"azqueue://devstoreaccount1/queue1?{stub_key}&queue_endpoint={server.endpoint()}"
    with open_topic(url, profile=profile(url)) as t:
        limit = t.capabilities.max_message_bytes
        quotes = '"' * 1000  # JSON doubles each quote: the envelope outgrows its reserve
        with pytest.raises(TooLarge, match="Azure takes 65536"):
            t.publish(b"x" * (limit - 3000), attributes={"q1": quotes, "q2": quotes})
        with pytest.raises(TooLarge):
            t.publish(b"x" * (limit + 1))
    assert server.requests == 0


def test_the_largest_base64_message_fits_azure(topic: Topic, sub: Subscription) -> None:
    limit = topic.capabilities.max_message_bytes
    assert limit == 49152 - 1024
    body = b"\xab" * (limit - 40)
    topic.publish(body, key="k", attributes={"name": "v" * 30})
    [m] = poll(sub, 1, 10)
    assert (m.body, m.key) == (body, "k")
    m.ack()


# -- leases, dead letters and retries -----------------------------------------------
def test_a_stale_pop_receipt_fails_nack_and_extend(topic: Topic, url: str) -> None:
    topic.publish(b"contended")
    with open_subscription(url, profile=profile(url)) as s:
        [stale] = poll(s, 1, 10, lease=1)
        [fresh] = poll(s, 1, 10, lease=30)
        assert fresh.delivery_attempt == 2
        with pytest.raises(PreconditionFailed):
            stale.extend_lease(5)
        with pytest.raises(PreconditionFailed):
            stale.nack()
        fresh.ack()


def test_extend_lease_returns_a_new_pop_receipt(topic: Topic, sub: Subscription) -> None:
    topic.publish(b"heartbeat")
    [m] = poll(sub, 1, 10, lease=5)
    before = m._handle
    m.extend_lease(10)
    assert m._handle[0] == before[0] and m._handle[1] != before[1]
    m.ack()  # with the new receipt


def test_dead_letter_creates_the_poison_queue_on_first_use(topic: Topic, sub: Subscription, azure: dict[str, str], fresh_queue: str) -> None:
    queue_service(azure).delete_queue(f"{fresh_queue}-poison")
    topic.publish(b"poison", key="pk", attributes={"origin": "t"})
    [m] = poll(sub, 1, 10)
    m.dead_letter("RuntimeError: bad input")
    assert sub.dead_letter_url is not None and sub.dead_letter_url.split("?")[0].endswith(f"/{fresh_queue}-poison")
    with open_subscription(sub.dead_letter_url, profile=profile(sub.dead_letter_url)) as dlq:
        assert not dlq.capabilities.native_dead_letter  # the poison queue has no poison queue
        [dead] = poll(dlq, 1, 10)
        assert (dead.body, dead.key, dead.attributes["origin"]) == (b"poison", "pk", "t")
        assert dead.attributes[DEAD_LETTER_REASON] == "RuntimeError: bad input"
        assert dead.attributes["portable.original_id"] == m.id
        dead.ack()
    assert sub.stats().dead_letters == 0
    assert sub.receive(1, wait=0.2) == []


def test_poison_queue_none_needs_a_configured_dead_letter(url: str) -> None:
    with open_subscription(url + "&poison_queue=none", profile=profile(url)) as s:
        assert not s.capabilities.native_dead_letter and s.dead_letter_url is None
        with pytest.raises(ConfigError):
            s.run(lambda m: None, max_deliveries=3, handle_signals=False)


def test_stats_count_messages_and_dead_letters(topic: Topic, sub: Subscription) -> None:
    topic.publish_batch([b"1", b"2", b"3"])
    [m] = poll(sub, 1, 10)
    m.dead_letter("testing")
    stats = sub.stats()
    assert (stats.available, stats.dead_letters) == (2, 1)


def test_time_to_live_is_sent(azure: dict[str, str], fresh_queue: str, queue_query: str) -> None:
    url = f"azqueue://{azure['account']}/{fresh_queue}?{queue_query}&time_to_live=120"
    with open_topic(url, profile=profile(url)) as t:
        t.publish(b"short-lived")
    [raw] = queue_service(azure).get_queue_client(fresh_queue).peek_messages()
    assert 110 <= (raw.expires_on - raw.inserted_on).total_seconds() <= 130


def test_create_option_creates_both_queues(azure: dict[str, str], unique_name: str, queue_query: str) -> None:
    url = f"azqueue://{azure['account']}/{unique_name}?{queue_query}&create=true"
    try:
        with open_topic(url, profile=profile(url)) as t:
            assert t.publish(b"x")
        names = {q.name for q in queue_service(azure).list_queues(name_starts_with=unique_name)}
        assert names == {unique_name, f"{unique_name}-poison"}
    finally:
        for name in (unique_name, f"{unique_name}-poison"):
            queue_service(azure).delete_queue(name)


def test_temporary_queues_are_removed(url: str, azure: dict[str, str], unique_name: str) -> None:
    driver = StorageQueueMessaging.from_url(__import__("portable.urls").urls.parse_url(url))
    try:
        with driver.temporary(f"{unique_name}-tmp") as temp:
            with open_topic(temp, profile=profile(temp)) as t:
                assert t.publish(b"x")
            assert "create" not in temp
        assert list(queue_service(azure).list_queues(name_starts_with=f"{unique_name}-tmp")) == []
    finally:
        driver.close()


def test_the_sdk_makes_one_attempt_per_portable_attempt(stub_server: Any, stub_key: str) -> None:
    server = stub_server(503, "ServerBusy")
    url = f"azqueue://devstoreaccount1/queue1?{stub_key}&queue_endpoint={server.endpoint()}"
    with open_topic(url, profile=profile(url, attempts=3)) as t, pytest.raises(Throttled):
        t.publish(b"x")
    assert server.requests == 3


def test_as_returns_the_queue_client(topic: Topic, fresh_queue: str) -> None:
    from azure.storage.queue import QueueClient, QueueServiceClient

    assert topic.as_(QueueClient).queue_name == fresh_queue
    assert isinstance(topic.as_(QueueServiceClient), QueueServiceClient)


def test_a_path_style_endpoint_for_another_account_is_refused(azure: dict[str, str], fresh_queue: str, queue_query: str) -> None:
    with pytest.raises(ConfigError, match="devstoreaccount1"):
        open_topic(f"azqueue://otheraccount/{fresh_queue}?{queue_query}")
