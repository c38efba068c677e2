"""chaos+<scheme>://: reproducible, provider-shaped faults around any storage or messaging driver."""

from __future__ import annotations

import dataclasses

import pytest

from portable.errors import (
    AlreadyExists,
    DeadlineExceeded,
    InvalidURL,
    PreconditionFailed,
    Throttled,
    Unavailable,
    Unsupported,
)
from portable.messaging import open_subscription, open_topic
from portable.resilience import ResiliencePolicy, RetryPolicy
from portable.storage import open_bucket
from portable.testing.chaos import ChaosStorage, InjectedLostReply, chaos_of
from portable.testing.fault_suite import fault_profile
from portable.urls import open_driver


def once() -> ResiliencePolicy:
    return ResiliencePolicy(retry=RetryPolicy(max_attempts=1), breaker=None)


def test_the_wrapper_strips_its_options_and_opens_the_inner_url(unique_name: str) -> None:
    driver = open_driver("storage", f"chaos+mem://{unique_name}?seed=3&error_rate=0.5&faults=reset,timeout&retry_after=0")
    assert isinstance(driver, ChaosStorage)
    assert driver.inner.endpoint == f"mem://{unique_name}" and driver.endpoint == f"chaos+mem://{unique_name}"
    assert driver.chaos.seed == 3 and driver.chaos.faults == {"reset", "timeout"}
    messaging = open_driver("messaging", f"chaos+mem://{unique_name}?dedup_window=5&error_rate=0")
    assert messaging.inner.scheme == "mem"  # dedup_window reached the inner driver, which would reject it otherwise


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("chaos+mem://x?error_rate=2", "between 0 and 1"),
        ("chaos+mem://x?faults=meteor", "unknown fault kind"),
        ("chaos+mem://x?faults=duplicate", "unknown fault kind"),  # a messaging fault on storage
        ("chaos+mem://x?seed=abc", "must be a int"),
        ("chaos+mem://x?colour=red", "unknown option"),  # left for the inner driver, which rejects it
    ],
)
def test_bad_chaos_urls_are_refused(url: str, message: str) -> None:
    with pytest.raises(InvalidURL, match=message):
        open_bucket(url)


def test_compute_cannot_be_wrapped() -> None:
    with pytest.raises(Unsupported, match="storage and messaging"):
        open_driver("compute", "chaos+local://")


def test_the_same_seed_injects_the_same_faults(unique_name: str) -> None:
    # 900 puts at 30% faults on one endpoint need 0.43 retries a put: more than a retry budget grants
    profile = fault_profile()
    profile = dataclasses.replace(profile, resilience=dataclasses.replace(profile.resilience, retry_budget=None))

    def run(seed: int) -> list[str]:
        bucket = open_bucket(f"chaos+mem://?seed={seed}&error_rate=0.3&retry_after=0", profile=profile)
        for i in range(300):
            bucket.put(f"k{i}", b"x")
        return sorted(chaos_of(bucket).stats.injected.elements())

    assert run(5) == run(5)
    assert run(5) != run(6)


@pytest.mark.parametrize(
    ("fault", "error", "retryable"),
    [
        ("throttle", Throttled, True),
        ("unavailable", Unavailable, True),
        ("reset", Unavailable, True),
        ("timeout", DeadlineExceeded, True),
        ("lost_reply", DeadlineExceeded, True),
    ],
)
def test_each_storage_fault_is_classified_like_a_providers(fault: str, error: type, retryable: bool, unique_name: str) -> None:
    from portable.config import Profile

    profile = Profile(name="t", storage="mem://", queue="mem://", jobs="local://", resilience=once())
    bucket = open_bucket(f"chaos+mem://{unique_name}?faults={fault}&error_rate=1&retry_after=0.25", profile=profile)
    with pytest.raises(error) as info:
        bucket.put("k", b"v")
    assert info.value.retryable is retryable
    assert "injected" in str(info.value)
    if fault == "throttle":
        assert info.value.retry_after == 0.25
    chaos_of(bucket).error_rate = 0
    assert bucket.exists("k") is (fault == "lost_reply")  # only a lost reply's write took effect


def test_an_outage_fails_every_call_until_it_ends(unique_name: str) -> None:
    bucket = open_bucket(f"chaos+mem://{unique_name}?error_rate=0", profile=fault_profile())
    chaos = chaos_of(bucket)
    with chaos.outage("unavailable"), pytest.raises(Unavailable):
        bucket.put("k", b"v")
    bucket.put("k", b"v")
    assert chaos.stats.injected["unavailable"] == 10  # every attempt of the retry policy


def test_streamed_writes_and_batches_meet_faults_too(unique_name: str) -> None:
    bucket = open_bucket(f"chaos+mem://{unique_name}?seed=2&error_rate=0.3&retry_after=0", profile=fault_profile())
    with bucket.open("big", "wb", part_size=1) as fh:  # type: ignore[call-overload]
        for i in range(50):
            fh.write(b"%03d" % i)
    assert bucket.get("big") == b"".join(b"%03d" % i for i in range(50))
    bucket.put_many({f"m{i}": b"%d" % i for i in range(100)})
    assert bucket.get_many([f"m{i}" for i in range(100)]) == {f"m{i}": b"%d" % i for i in range(100)}
    stats = chaos_of(bucket).stats
    assert stats.injected and stats.calls["write_part"] >= 50 and stats.calls["commit"] >= 1


def test_a_lost_reply_on_a_create_only_put_looks_like_already_exists_without_a_key(unique_name: str) -> None:
    bucket = open_bucket(f"chaos+mem://{unique_name}?faults=lost_reply&error_rate=1", profile=fault_profile())
    with pytest.raises(AlreadyExists) as info:
        bucket.put("k", b"v", if_none_match="*")
    assert isinstance(info.value.__context__ or info.value.__cause__, Exception)
    assert chaos_of(bucket).stats.applied["k"] == 1  # it did write, once
    assert isinstance(chaos_of(bucket).error("lost_reply"), InjectedLostReply)


def test_duplicate_and_reordered_deliveries(unique_name: str) -> None:
    topic = open_topic(f"mem://{unique_name}")
    for i in range(40):
        topic.publish(b"%d" % i)
    sub = open_subscription(f"chaos+mem://{unique_name}?seed=4&error_rate=0.5&faults=duplicate,reorder", lease=30)
    seen: list[bytes] = []
    ids: list[str] = []
    for _ in range(200):
        batch = sub.receive(10, wait=0)
        for m in batch:
            seen.append(m.body)
            ids.append(m.id)
            m.ack()
        if not batch and len(set(seen)) == 40 and not sub._driver_sub._later:  # type: ignore[attr-defined]
            break
    injected = chaos_of(sub).stats.injected
    assert injected["duplicate"] > 0 and injected["reorder"] > 0
    assert sorted(set(seen), key=int) == [b"%d" % i for i in range(40)]  # nothing lost
    assert len(seen) == 40 + injected["duplicate"]  # each duplicate delivered once more, same id
    assert len(ids) - len(set(ids)) == injected["duplicate"]
    assert seen != sorted(seen, key=int)  # some arrived out of order


def test_a_lease_that_expires_mid_handler_redelivers_and_makes_the_ack_fail(unique_name: str) -> None:
    topic = open_topic(f"mem://{unique_name}")
    topic.publish(b"job")
    sub = open_subscription(f"chaos+mem://{unique_name}?faults=lease_expiry&error_rate=1", lease=30, policy=once())
    [message] = sub.receive(1, wait=0)
    chaos_of(sub).error_rate = 0
    [again] = sub.receive(1, wait=0)  # while the first handler still runs
    assert again.id == message.id and again.delivery_attempt == 2
    with pytest.raises(PreconditionFailed, match="lease expiry"):
        message.ack()
    again.ack()
    assert sub.receive(1, wait=0) == []


def test_a_lost_publish_reply_duplicates_the_message_unless_the_provider_dedups(unique_name: str) -> None:
    topic = open_topic(f"chaos+mem://{unique_name}?faults=lost_reply&error_rate=0.5&seed=9&retry_after=0",
                       profile=fault_profile())
    for i in range(20):
        topic.publish(b"%d" % i, idempotency_key=f"k{i}")
    applied = chaos_of(topic).stats.applied
    assert max(applied.values()) > 1  # the provider accepted some publishes twice...
    sub = open_subscription(f"mem://{unique_name}")
    bodies = [m.body for m in sub.receive(100, wait=0)]
    assert sorted(bodies, key=int) == [b"%d" % i for i in range(20)]  # ...and mem:// dropped the repeats


def test_chaos_of_refuses_what_is_not_wrapped() -> None:
    with pytest.raises(Unsupported, match="not opened with a chaos"):
        chaos_of(open_bucket("mem://"))


def test_inner_options_keep_their_encoding() -> None:
    from portable.driver.idempotency import without_options
    from portable.urls import parse_url

    url = parse_url("chaos+az://acct/c?sas_token=sv%3D2020%26sig%3Dabc&seed=1&error_rate=0.1")
    inner = without_options(url, "seed", "error_rate", scheme="az")
    assert inner == "az://acct/c?sas_token=sv%3D2020%26sig%3Dabc"
    assert parse_url(inner).options == {"sas_token": "sv=2020&sig=abc"}
    assert without_options(parse_url("mem://x?seed=1"), "seed") == "mem://x"
