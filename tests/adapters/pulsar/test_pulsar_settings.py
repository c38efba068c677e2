"""pulsar:// bad input: every mistake is a typed error naming the fix, before any connection
(these tests need no broker: a request would fail, and the point is that none is made)."""

from __future__ import annotations

import pytest

import portable.messaging as pm
from portable.errors import InvalidURL
from portable.urls import parse_url

pytest.importorskip("pulsar", reason="pulsar:// needs pulsar-client")

from portable_pulsar._settings import parse_settings
from portable_pulsar.pulsar import PulsarMessaging

# nothing listens on port 1: any request would fail with a connection error, not InvalidURL
BASE = "pulsar://127.0.0.1:1/public/default/events"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (f"{BASE}?subscription=s&colour=red", "unknown option(s) colour"),
        (f"{BASE}?subscription=s&type=round_robin", "type='round_robin'"),
        ("pulsar://127.0.0.1:1/public/events?subscription=s", "TENANT/NAMESPACE/TOPIC"),
        ("pulsar://127.0.0.1:1/public/default/a/b", "TENANT/NAMESPACE/TOPIC"),
        ("pulsar:///public/default/t", "names no broker"),
        ("pulsar://user:pw@127.0.0.1:1/public/default/t", "token_env= (default PULSAR_AUTH_TOKEN)"),
        (f"{BASE}?subscription=bad%20name", "subscription name"),
        ("pulsar://127.0.0.1:1/public/default/t%20x", "topic name"),
        (f"{BASE}?subscription=s&receiver_queue_size=0", "receiver_queue_size=0"),
        (f"{BASE}?subscription=s&receiver_queue_size=many", "must be a int"),
        (f"{BASE}?subscription=s&compression=brotli", "compression='brotli'"),
        (f"{BASE}?subscription=s&start=middle", "start='middle'"),
        (f"{BASE}?subscription=s&send_timeout=0", "send_timeout=0"),
        (f"{BASE}?subscription=s&admin_url=ftp://x", "admin_url="),
        (f"{BASE}?subscription=s&dead_letter_topic=none&max_redeliveries=3", "needs a dead-letter topic"),
        (f"{BASE}?subscription=s&batching=maybe", "must be a bool"),
    ],
)
def test_bad_url_is_invalid_url_naming_the_fix(url: str, says: str) -> None:
    with pytest.raises(InvalidURL) as caught:
        parse_settings(parse_url(url))
    assert says in str(caught.value)


def test_defaults() -> None:
    s = parse_settings(parse_url("pulsar://broker/acme/orders/created?subscription=billing"))
    assert s.host == "broker:6650" and s.service_url == "pulsar://broker:6650"
    assert s.full_topic() == "persistent://acme/orders/created"
    assert s.type == "shared" and s.start == "earliest" and s.batching
    assert s.admin_url == "http://broker:8080"
    assert s.dead_letter_topic == "created-billing-DLQ" and s.dead_letter_subscription == "billing"
    assert s.max_redeliveries == 0


def test_a_subscription_needs_a_name_before_any_request() -> None:
    driver = PulsarMessaging.from_url(parse_url(BASE))
    try:
        with pytest.raises(InvalidURL, match="subscription=NAME"):
            driver.subscription()
        assert driver._client is None  # nothing connected
    finally:
        driver.close()


def test_capabilities_follow_the_subscription_type() -> None:
    shared = PulsarMessaging.from_url(parse_url(f"{BASE}?subscription=s"))
    failover = PulsarMessaging.from_url(parse_url(f"{BASE}?subscription=s&type=failover&dead_letter_topic=none"))
    assert shared.capabilities.delivery_count and shared.capabilities.native_dead_letter
    assert not failover.capabilities.delivery_count and not failover.capabilities.native_dead_letter
    assert not shared.capabilities.publish_dedup and not shared.capabilities.exactly_once


def test_bad_publish_input_through_the_portable_layer_sends_nothing() -> None:
    # open_topic connects (creates the producer); the checks below run before that request
    with pytest.raises(InvalidURL, match="unknown option"):
        pm.open_topic(f"{BASE}?subscription=s&linger_ms=5")
