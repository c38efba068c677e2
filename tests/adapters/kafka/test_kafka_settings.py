"""kafka:// without a broker: URL checks, secrets, offset bookkeeping, and a bootstrap that
does not answer (a typed error with the fix, within the deadline)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from portable_kafka import KafkaMessaging
from portable_kafka._progress import PartitionProgress
from portable_kafka._settings import check_topic_name, parse_settings, read_password

import portable.messaging as pm
from portable.errors import ConfigError, DeadlineExceeded, InvalidURL, Unavailable
from portable.resilience import ResiliencePolicy, RetryPolicy, deadline
from portable.urls import parse_url


# ---------------------------------------------------------------- offsets
class Record:  # what fetched_many reads of a kafka-python ConsumerRecord
    def __init__(self, offset: int) -> None:
        self.offset = offset


def fetched(p: PartitionProgress, *offsets: int) -> list[int]:
    return [r.offset for r in p.fetched_many([Record(o) for o in offsets])]


def test_commit_point_moves_only_over_contiguous_settled_offsets() -> None:
    p = PartitionProgress(epoch=1)
    assert fetched(p, 10, 11, 12, 13) == [10, 11, 12, 13]
    assert p.to_commit() is None
    assert p.settle(11) and p.settle(13)
    assert p.to_commit() is None, "an offset above an unsettled one must not be committed"
    assert p.settle(10)
    assert p.to_commit() == 12  # 10 and 11 done; 12 still in flight
    p.committed = 12
    assert p.to_commit() is None
    assert p.settle(12)
    assert p.to_commit() == 14 and p.in_flight == 0


def test_offset_gaps_and_refetches() -> None:
    p = PartitionProgress(epoch=1)
    assert fetched(p, 5, 9, 20) == [5, 9, 20]  # compaction and transaction markers leave gaps
    assert fetched(p, 9, 20, 21) == [21], "a refetched offset is not tracked twice"
    p.settle(5)
    assert p.to_commit() == 6
    p.settle(20)
    p.settle(9)
    p.settle(21)
    assert p.to_commit() == 22
    assert not p.settle(9), "settling twice is refused"
    assert not p.settle(99), "an offset never fetched is refused"
    assert fetched(p, 4) == [], "an offset below the commit point is not fetched again"


# ---------------------------------------------------------------- URLs


def settings(url: str, **env: str):  # type: ignore[no-untyped-def]
    return parse_settings(parse_url(url), env=env)


def test_url_with_defaults_and_derived_topics() -> None:
    s = settings("kafka://b1:9092,b2/orders?group=billing")
    assert s.bootstrap == ("b1:9092", "b2:9092")
    assert (s.topic, s.group) == ("orders", "billing")
    assert s.retry_topic == "orders.billing.retry"
    assert s.dead_letter_topic == "orders.billing.dlq"
    assert s.idempotent and s.acks == "all" and s.start == "earliest"
    config = s.producer_config(lambda: None)
    assert config["enable_idempotence"] is True and config["acks"] == "all"
    assert config["retries"] > 0, "the idempotent producer keeps its own (ordered, deduplicated) resends"
    consumer = s.consumer_config(lambda: None)
    assert consumer["enable_auto_commit"] is False and consumer["group_id"] == "billing"


def test_non_idempotent_producer_does_not_retry() -> None:
    config = settings("kafka://b:9092/t?idempotent=false&acks=1").producer_config(lambda: None)
    assert config["retries"] == 0 and config["acks"] == 1 and config["enable_idempotence"] is False


def test_idempotent_producer_retries_are_bounded_by_the_settings_the_docs_quote() -> None:
    """The one retry loop portable does not own (docs/adapters/kafka.md, "Retries"): every
    bound it has is set explicitly, not left to kafka-python's defaults."""
    config = settings("kafka://b:9092/t").producer_config(lambda: None)
    assert config["enable_idempotence"] is True and config["acks"] == "all"
    assert config["retries"] == float("inf"), "the resends are bounded in time, by delivery_timeout_ms"
    assert config["delivery_timeout_ms"] == 60000 and config["request_timeout_ms"] == 30000
    assert config["max_in_flight_requests_per_connection"] == 5
    assert config["retry_backoff_ms"] == 100
    shorter = settings("kafka://b:9092/t?delivery_timeout=5&request_timeout=2").producer_config(lambda: None)
    assert shorter["delivery_timeout_ms"] == 5000 and shorter["request_timeout_ms"] == 2000
    docs = (Path(__file__).parents[3] / "docs" / "adapters" / "kafka.md").read_text()
    for quoted in ("delivery_timeout_ms", "max_in_flight_requests_per_connection", "retries"):
        assert quoted in docs, f"docs/adapters/kafka.md does not quote {quoted}"


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("kafka://b:9092/bad topic!", "may hold only"),
        ("kafka://b:9092/" + "t" * 250, "the limit is 249"),
        ("kafka://b:9092/..", "may hold only"),
        ("kafka://b:9092/a/b", "one topic"),
        ("kafka:///orders", "name the brokers"),
        ("kafka://b:99999/orders", "port"),
        ("kafka://b:x/orders", "port"),
        ("kafka://b:9092/t?group=", "group"),
        ("kafka://b:9092/t?group=has space&partitions=3", "retry topic"),
        ("kafka://b:9092/t?group=g&retry_topic=no way", "may hold only"),
        ("kafka://b:9092/t?group=g&dead_letter_topic=t", "must differ"),
        ("kafka://b:9092/t?security_protocol=TLS", "security_protocol"),
        ("kafka://b:9092/t?sasl_mechanism=PLAIN", "SASL_SSL"),
        ("kafka://b:9092/t?security_protocol=SASL_SSL", "sasl_mechanism"),
        ("kafka://b:9092/t?security_protocol=SASL_PLAINTEXT&sasl_mechanism=AWS_MSK_IAM", "SASL_SSL"),
        ("kafka://b:9092/t?acks=1", "idempotent=false"),
        ("kafka://b:9092/t?partitions=0", "partitions"),
        ("kafka://b:9092/t?session_timeout_ms=6000&heartbeat_interval_ms=6000", "heartbeat"),
        ("kafka://b:9092/t?linger=5", "unknown option"),
        ("kafka://b:9092/t?start=beginning", "earliest"),
        ("kafka://b:9092/t?assignor=sticky", "cooperative-sticky"),
    ],
)
def test_bad_urls_raise_invalid_url_saying_what_to_fix(url: str, fragment: str) -> None:
    with pytest.raises(InvalidURL) as info:
        settings(url)
    assert fragment in str(info.value)


def test_topic_name_rule() -> None:
    assert check_topic_name("a.b_c-D9") == "a.b_c-D9"
    with pytest.raises(InvalidURL):
        check_topic_name(".")


def test_passwords_never_come_from_the_url_and_are_never_shown() -> None:
    for url in (
        "kafka://user:hunter2@b:9092/t",
        "kafka://b:9092/t?security_protocol=SASL_SSL&sasl_mechanism=PLAIN&sasl_username=u&sasl_password=hunter2",
    ):
        with pytest.raises(InvalidURL) as info:
            settings(url)
        assert "hunter2" not in str(info.value)
        assert "environment variable" in str(info.value)
    s = settings(
        "kafka://b:9093/hub?security_protocol=SASL_SSL&sasl_mechanism=PLAIN"
        "&sasl_username=$ConnectionString&sasl_password_env=EH_CONN"
    )
    assert s.sasl_username == "$ConnectionString" and s.sasl_password_env == "EH_CONN"
    with pytest.raises(ConfigError) as info:
        read_password(s, env={})
    assert "EH_CONN" in str(info.value)
    secret = "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=topsecret"
    assert read_password(s, env={"EH_CONN": secret}) == secret
    config = s.producer_config(lambda: read_password(s, env={"EH_CONN": secret}))
    assert config["sasl_plain_password"] == secret and config["security_protocol"] == "SASL_SSL"
    driver = KafkaMessaging(s)
    shown = repr(driver) + s.url_for("hub", "g") + driver.settings.endpoint
    assert "topsecret" not in shown and "EH_CONN" in s.url_for("hub", "g")


def test_username_from_the_environment() -> None:
    url = "kafka://b:9096/t?security_protocol=SASL_SSL&sasl_mechanism=SCRAM-SHA-512"
    assert settings(url, KAFKA_SASL_USERNAME="svc").sasl_username == "svc"
    with pytest.raises(ConfigError) as info:
        settings(url)
    assert "KAFKA_SASL_USERNAME" in str(info.value)


def test_a_url_without_the_side_asked_for() -> None:
    with pytest.raises(InvalidURL) as info:
        pm.open_subscription("kafka://127.0.0.1:1/orders")
    assert "?group=" in str(info.value)
    with pytest.raises(InvalidURL):
        pm.open_topic("kafka://127.0.0.1:1/")


# ---------------------------------------------------------------- brokers that do not answer


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never says a word (a black-holed broker)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(2)
    for conn in accepted:
        conn.close()
    server.close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


QUICK = ResiliencePolicy(retry=RetryPolicy(max_attempts=3, initial_backoff=0.05), breaker=None)


@pytest.mark.parametrize("kind", ["refused", "silent"])
def test_a_bootstrap_that_does_not_answer_is_unavailable_with_the_fix(kind: str, silent_port: int) -> None:
    port = closed_port() if kind == "refused" else silent_port
    started = time.monotonic()
    with pytest.raises(Unavailable) as info:
        pm.open_topic(f"kafka://127.0.0.1:{port}/orders?connect_timeout=1", policy=QUICK)
    assert time.monotonic() - started < 5, "connect_timeout bounds the wait and the error is not retried"
    text = str(info.value)
    assert f"127.0.0.1:{port}" in text and "security_protocol" in text


def test_a_deadline_bounds_the_bootstrap(silent_port: int) -> None:
    started = time.monotonic()
    with pytest.raises((Unavailable, DeadlineExceeded)), deadline(1.5):
        pm.open_subscription(f"kafka://127.0.0.1:{silent_port}/orders?group=g", policy=QUICK)
    assert time.monotonic() - started < 4


# ---------------------------------------------------------------- records -> deliveries
def test_a_record_with_headers_keeps_them_all_and_a_null_header_value_reads_as_empty() -> None:
    """kafka-python's producer cannot write a null header value (the Java client can): the
    delivery is made from a record as kafka-python's fetcher hands it over."""
    import collections

    from kafka import TopicPartition
    from portable_kafka._receive import LocalLeases

    record = collections.namedtuple("record", "offset timestamp key value headers")
    class Leases(LocalLeases):  # the bookkeeping alone, without a consumer
        ack = nack = receive = None  # type: ignore[assignment]

    leases = Leases()
    headers = [
        ("a", None), ("portable.kafka.attempt", b"3"), ("b", b"\xff"), ("a", b"x"),
        ("portable.kafka.id", b"t/0/1"), ("c", b"\xff"), ("c", b"text"), ("d", b"text"), ("d", b"\xfe"),
    ]  # fmt: skip
    m = leases._delivery_with_headers(TopicPartition("t", 0), record(7, 1000, None, None, headers))
    assert m.headers == (("a", b""), ("b", b"\xff"), ("a", b"x"), ("c", b"\xff"), ("c", b"text"), ("d", b"text"), ("d", b"\xfe"))
    assert dict(m.attributes) == {"a": "x", "c": "text"}, "the last value of a name wins, if it is text"
    assert (m.id, m.delivery_attempt) == ("t/0/1", 3), "the retry headers were read, then left out"
    assert (m.tombstone, m.body, m.key, m.key_bytes) == (True, b"", None, None)
    again = leases._next_attempt(m)
    assert (again.headers, again.tombstone, again.delivery_attempt, again.id) == (m.headers, True, 4, m.id)


@pytest.mark.parametrize(
    "headers",
    [
        [("portable.idempotency_key", b"k-1")],
        [("a", b"1"), ("b", b"\xff"), ("a", b"2")],
        [("c", b"text"), ("c", b"\xfe")],  # a value that is not text drops the earlier text one
        [("d", b"\xfe"), ("d", b"text"), ("e", b"")],
        [("f", b"x"), ("portable.kafka.attempt", b"2")],  # a retry copy: the full path
        [("g", None), ("h", b"y")],  # a null value: the full path
    ],
)
def test_inline_headers_read_as_the_full_path_does(headers: list[tuple[str, bytes | None]]) -> None:
    """Both engines track a record whose headers are all the application's inline
    (plain_attributes); what it builds must be what _delivery_with_headers builds for that record."""
    import collections

    from kafka import TopicPartition
    from portable_kafka._receive import LocalLeases, plain_attributes

    record = collections.namedtuple("record", "offset timestamp key value headers")

    class Leases(LocalLeases):
        ack = nack = receive = None  # type: ignore[assignment]

    full = Leases()._delivery_with_headers(TopicPartition("t", 0), record(7, 1000, b"k", b"v", headers))
    inline = plain_attributes(headers)
    if any(value is None or name.startswith("portable.kafka.") for name, value in headers):
        assert inline is None, "a retry copy or a null value goes the full path"
        return
    assert inline == dict(full.attributes)
    assert tuple(headers) == full.headers
    assert (full.id, full.delivery_attempt) == ("t/0/7", 1)
