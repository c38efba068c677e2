"""The portable messaging layer beyond the contract: opening, profiles, the consumer loop's
edges, signals, the sqlite queue's durability, and the CloudEvents mapping."""

from __future__ import annotations

import datetime as dt
import inspect
import json
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from portable import cli
from portable.cloudevents import CloudEvent, dedup_key_of, from_message, to_message
from portable.config import Profile
from portable.errors import (
    ConfigError,
    IdempotencyConflict,
    InvalidArgument,
    InvalidURL,
    MissingCapability,
    Unavailable,
    UnknownScheme,
)
from portable.idempotency import MemoryStore, fingerprint
from portable.messaging import (
    DEAD_LETTER_REASON,
    Message,
    Subscription,
    open_subscription,
    open_topic,
)
from portable.resilience import ResiliencePolicy, RetryPolicy
from portable.testing.chaos import chaos_of
from portable.testing.messaging_suite import poll, wait_for


def _profile(queue: str, **extra: object) -> Profile:
    return Profile(
        name="t", storage="mem://t", queue=queue, jobs="local://./jobs",
        resilience=ResiliencePolicy(retry=RetryPolicy(max_attempts=2, initial_backoff=0.01), breaker=None),
        **extra,  # type: ignore[arg-type]
    )


def _run_in_thread(sub: Subscription, handler, **options):  # type: ignore[no-untyped-def]
    stop = threading.Event()
    box: dict[str, object] = {}

    def target() -> None:
        box["stats"] = sub.run(handler, stop_event=stop, handle_signals=False, **options)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()

    def finish():  # type: ignore[no-untyped-def]
        stop.set()
        thread.join(30)
        assert not thread.is_alive()
        return box["stats"]

    return finish


# ---------------------------------------------------------------- opening
def test_open_from_the_profile_queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "portable.toml"
    url = f"sqlite://{tmp_path / 'q.db'}?name=orders"
    config.write_text(f'[profiles.default]\nqueue = "{url}"\ndead_letter = "mem://orders-dlq"\n')
    monkeypatch.setenv("PORTABLE_CONFIG", str(config))
    topic = open_topic()
    topic.publish(b"from the profile")
    sub = open_subscription()
    assert sub.url == url
    assert sub.dead_letter == "mem://orders-dlq"
    [m] = sub.receive(1, wait=2)
    assert m.body == b"from the profile"
    m.ack()


def test_profile_requirements_are_checked_at_open(tmp_path: Path) -> None:
    dead_letters = f"sqlite://{tmp_path / 'q.db'}?name=q&dead_letter=true"
    with pytest.raises(MissingCapability, match="native_dead_letter"):
        open_subscription(dead_letters, profile=_profile(dead_letters, requires=("native_dead_letter",)))
    # names of other domains are not this domain's business
    sub = open_subscription(dead_letters, profile=_profile(dead_letters, requires=("conditional_create",)))
    sub.close()


@pytest.mark.parametrize("side", ["topic", "subscription"])
def test_a_policy_given_to_open_overrides_the_profiles(side: str) -> None:
    url = f"chaos+mem://policy-{side}?error_rate=1&faults=unavailable"
    profile = _profile(url)  # two attempts
    policy = ResiliencePolicy(retry=RetryPolicy(max_attempts=4, initial_backoff=0.001, max_backoff=0.001), breaker=None)

    def attempts(**options: object) -> int:
        if side == "topic":
            topic = open_topic(url, profile=profile, **options)  # type: ignore[arg-type]
            with pytest.raises(Unavailable):
                topic.publish(b"never")
            return chaos_of(topic).stats.calls["publish"]
        sub = open_subscription(url, profile=profile, **options)  # type: ignore[arg-type]
        with pytest.raises(Unavailable):
            sub.receive(1)
        return chaos_of(sub).stats.calls["receive"]

    assert attempts() == 2
    assert attempts(policy=policy) == 4


@pytest.mark.parametrize("opener", [open_topic, open_subscription])
def test_openers_take_url_then_profile_and_policy(opener: object) -> None:
    parameters = list(inspect.signature(opener).parameters.values())  # type: ignore[arg-type]
    assert [(p.name, p.kind, p.default) for p in parameters[:3]] == [
        ("url", inspect.Parameter.POSITIONAL_OR_KEYWORD, None),
        ("profile", inspect.Parameter.KEYWORD_ONLY, None),
        ("policy", inspect.Parameter.KEYWORD_ONLY, None),
    ]


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("sqs2://q", UnknownScheme),
        ("mem://q?colour=red", InvalidURL),
        ("mem://?dead_letter=true", InvalidURL),
        ("mem://q?dedup_window=-1", InvalidURL),
        ("sqlite://?name=q", InvalidURL),
        ("sqlite://./q.db?name=bad/name", InvalidURL),
        ("sqlite://./q.db?synchronous=maybe", InvalidURL),
        ("not a url", InvalidURL),
    ],
)
def test_bad_urls_fail_at_open(url: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        open_subscription(url, profile=_profile("mem://x"))


def test_a_subscription_has_no_dead_letter_destination_without_config(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'q.db'}?name=q&dead_letter=true"
    sub = open_subscription(url, profile=_profile("mem://other"))
    with pytest.raises(ConfigError, match="dead_letter"):
        sub.run(lambda m: None, max_deliveries=3, handle_signals=False)
    # and the profile's dead_letter is not applied to someone else's queue
    sub = open_subscription(url, profile=_profile("mem://other", dead_letter="mem://dlq"))
    assert sub.dead_letter is None


def test_message_repr_never_shows_the_body() -> None:
    topic = open_topic("mem://repr-q", profile=_profile("mem://repr-q"))
    topic.publish(b"secret-token-123")
    [m] = open_subscription("mem://repr-q", profile=_profile("mem://repr-q")).receive(1)
    assert "secret-token-123" not in repr(m)
    assert "bytes=16" in repr(m)


def test_bytearray_and_memoryview_bodies_are_copied() -> None:
    topic = open_topic("mem://views", profile=_profile("mem://views"))
    data = bytearray(b"abc")
    topic.publish(data)
    topic.publish(memoryview(b"def"))
    data[0:1] = b"X"
    got = open_subscription("mem://views", profile=_profile("mem://views")).receive(2)
    assert sorted(m.body for m in got) == [b"abc", b"def"]


# ---------------------------------------------------------------- the consumer loop
def test_run_handles_one_key_at_a_time_and_other_keys_in_parallel() -> None:
    url = "mem://keys-parallel"
    topic = open_topic(url, profile=_profile(url))
    for i in range(10):
        for key in ("a", "b", "c"):
            topic.publish(f"{key}{i}".encode(), key=key)
    active: Counter[str] = Counter()
    overlap: list[str] = []
    most = [0]
    lock = threading.Lock()
    done: list[bytes] = []

    def handler(m: Message) -> None:
        assert m.key is not None
        with lock:
            active[m.key] += 1
            if active[m.key] > 1:
                overlap.append(m.key)
            most[0] = max(most[0], sum(active.values()))
        time.sleep(0.01)
        with lock:
            active[m.key] -= 1
            done.append(m.body)

    finish = _run_in_thread(open_subscription(url, profile=_profile(url)), handler, concurrency=6, poll=0.2)
    wait_for(lambda: len(done) == 30, 20, "30 messages")
    stats = finish()
    assert overlap == []
    assert most[0] > 1, "different keys should run in parallel"
    for key in "abc":
        assert [b for b in done if b.startswith(key.encode())] == [f"{key}{i}".encode() for i in range(10)]
    assert stats.acked == 30


def test_run_dead_letters_a_message_delivered_too_often_without_running_it() -> None:
    url = "mem://crashy"
    open_topic(url, profile=_profile(url)).publish(b"kills consumers")
    sub = open_subscription(url, profile=_profile(url))
    for _ in range(3):  # three consumers "crashed": leases ran out unacked
        [m] = poll(sub, 1, 5, lease=0.05)
        wait_for(lambda m=m: m.lease_remaining == 0, 2, "the lease to end")
    calls: list[Message] = []
    finish = _run_in_thread(sub, calls.append, max_deliveries=3, poll=0.2)
    dlq = open_subscription(sub.dead_letter_url or "", profile=_profile(url))
    [dead] = poll(dlq, 1, 5)
    stats = finish()
    assert calls == []
    assert "delivered 4 times" in dead.attributes[DEAD_LETTER_REASON]
    assert stats.dead_lettered == 1


def test_an_explicit_dead_letter_topic_wins_over_the_native_one() -> None:
    url = "mem://explicit-dlq"
    open_topic(url, profile=_profile(url)).publish(b"poison")
    sub = open_subscription(url, profile=_profile(url))

    def fail(m: Message) -> None:
        raise KeyError("nope")

    finish = _run_in_thread(sub, fail, max_deliveries=1, dead_letter="mem://explicit-dlq-target", poll=0.2)
    [dead] = poll(open_subscription("mem://explicit-dlq-target"), 1, 5)
    finish()
    assert "KeyError" in dead.attributes[DEAD_LETTER_REASON]
    assert sub.stats().dead_letters == 0


def test_run_respects_a_handler_that_settles_the_message_itself() -> None:
    url = "mem://self-settle"
    topic = open_topic(url, profile=_profile(url))
    topic.publish(b"later")
    sub = open_subscription(url, profile=_profile(url))
    seen: list[int] = []

    def handler(m: Message) -> None:
        seen.append(m.delivery_attempt)
        if m.delivery_attempt == 1:
            m.nack(delay=0)

    finish = _run_in_thread(sub, handler, poll=0.2)
    wait_for(lambda: seen == [1, 2], 5, "the second delivery")
    stats = finish()
    assert stats.acked == 1 and stats.failed == 0


def test_run_extends_leases_of_long_handlers() -> None:
    url = "mem://long-handler"
    open_topic(url, profile=_profile(url)).publish(b"slow")
    sub = open_subscription(url, profile=_profile(url))
    calls: list[int] = []

    def handler(m: Message) -> None:
        calls.append(m.delivery_attempt)
        time.sleep(2.5)  # two and a half leases long

    finish = _run_in_thread(sub, handler, lease=1.0, concurrency=2, poll=0.2)
    wait_for(lambda: sub.stats().available == 0 and sub.stats().in_flight == 0 and calls, 10, "the ack")
    stats = finish()
    assert calls == [1]
    assert stats.acked == 1


def test_run_nacks_a_key_in_progress_elsewhere_and_dead_letters_a_conflict() -> None:
    url = "mem://idem-edges"
    store = MemoryStore()
    held = store.claim("busy", fingerprint(b"x"), lease=60, ttl=600)
    assert held.status == "acquired"
    store.claim("clash", fingerprint(b"original"), lease=60, ttl=600)
    topic = open_topic(url, profile=_profile(url))
    topic.publish(b"x", idempotency_key="busy")
    topic.publish(b"different payload", idempotency_key="clash")
    sub = open_subscription(url, profile=_profile(url))
    calls: list[Message] = []
    finish = _run_in_thread(sub, calls.append, idempotency=store, idempotency_lease=1.0, poll=0.2)
    dlq = open_subscription(sub.dead_letter_url or "", profile=_profile(url))
    [dead] = poll(dlq, 1, 5)
    wait_for(lambda: sub.stats().delayed == 1, 5, "the busy message to be held back")
    stats = finish()
    assert calls == []
    assert IdempotencyConflict.__name__ in dead.attributes[DEAD_LETTER_REASON]
    assert stats.nacked >= 1 and stats.dead_lettered == 1


def test_run_gives_held_messages_back_at_stop_and_counts_unfinished_handlers() -> None:
    url = "mem://stop-edges"
    topic = open_topic(url, profile=_profile(url))
    for i in range(4):
        topic.publish(f"{i}".encode(), key="same")
    sub = open_subscription(url, profile=_profile(url))
    gate = threading.Event()
    started = threading.Event()

    def handler(m: Message) -> None:
        started.set()
        gate.wait(10)

    stop = threading.Event()
    box: dict[str, object] = {}
    thread = threading.Thread(
        target=lambda: box.setdefault(
            "stats", sub.run(handler, stop_event=stop, handle_signals=False, drain_timeout=0.3, poll=0.2)
        ),
        daemon=True,
    )
    thread.start()
    assert started.wait(5)
    stop.set()
    thread.join(10)
    stats = box["stats"]
    gate.set()
    assert stats.unfinished == 1  # type: ignore[attr-defined]
    assert stats.acked == 0  # type: ignore[attr-defined]


def test_sigterm_stops_run_gracefully_from_the_main_thread() -> None:
    assert threading.current_thread() is threading.main_thread()
    url = "mem://sigterm"
    topic = open_topic(url, profile=_profile(url))
    topic.publish_batch([b"1", b"2", b"3"])
    sub = open_subscription(url, profile=_profile(url))
    handled: list[bytes] = []
    before = signal.getsignal(signal.SIGTERM)

    def handler(m: Message) -> None:
        handled.append(m.body)
        if len(handled) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)

    stats = sub.run(handler, concurrency=1, poll=0.2)
    assert signal.getsignal(signal.SIGTERM) is before
    assert stats.acked == len(handled) >= 1
    rest = poll(sub, 3 - len(handled), 5)
    assert sorted([*handled, *(m.body for m in rest)]) == [b"1", b"2", b"3"]


def test_run_under_chaos_has_exactly_once_effects_with_an_idempotency_store() -> None:
    url = "chaos+mem://chaotic?seed=11&error_rate=0.15"
    patient = Profile(
        name="chaos", storage="mem://t", queue=url, jobs="local://./jobs",
        resilience=ResiliencePolicy(retry=RetryPolicy(max_attempts=10, initial_backoff=0.001, max_backoff=0.01),
                                    breaker=None),
    )
    topic = open_topic(url, profile=patient)
    keys = [f"order-{i}" for i in range(60)]
    for k in keys:
        topic.publish(k.encode(), idempotency_key=k)
    store = MemoryStore()
    effects: Counter[str] = Counter()
    lock = threading.Lock()

    def handler(m: Message) -> None:
        with lock:
            effects[m.body.decode()] += 1

    sub = open_subscription(url, profile=patient, lease=1.0)
    finish = _run_in_thread(sub, handler, concurrency=4, idempotency=store, max_deliveries=None, backoff=0.05, poll=0.2)
    wait_for(lambda: set(effects) >= set(keys), 30, "every order to take effect")
    finish()
    assert set(effects) == set(keys)
    assert max(effects.values()) == 1, f"effects repeated: {[k for k, n in effects.items() if n > 1]}"
    assert all(store.claim(k, fingerprint(k.encode()), lease=1, ttl=60).status == "completed" for k in keys)


# ---------------------------------------------------------------- sqlite durability
def test_sqlite_messages_and_leases_survive_a_restart(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'durable.db'}?name=jobs"
    topic = open_topic(url, profile=_profile(url))
    topic.publish_batch([b"a", b"b"])
    topic.publish(b"keyed", key="k")
    sub = open_subscription(url, profile=_profile(url))
    got = sub.receive(3, wait=1, lease=0.3)
    assert len(got) == 3
    got[0].nack(delay=0.5)
    topic.close()
    sub.close()  # the "process" ends with two messages leased and one delayed
    again = open_subscription(url, profile=_profile(url))
    back = poll(again, 3, 5, lease=30)
    assert sorted(m.body for m in back) == [b"a", b"b", b"keyed"]
    assert all(m.delivery_attempt == 2 for m in back)
    again.ack_many(back)
    assert again.stats().available == 0


def test_sqlite_dead_letters_can_be_listed_and_redriven_with_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite://{tmp_path / 'cli.db'}?name=q"
    assert cli.main(["queue", "publish", "--queue", url, "--attr", "kind=test", "poison"]) == 0
    sub = open_subscription(url, profile=_profile(url))
    [m] = sub.receive(1, wait=1)
    m.dead_letter("manual: bad data")
    capsys.readouterr()
    assert cli.main(["queue", "stats", "--queue", url]) == 0
    assert json.loads(capsys.readouterr().out) == {"available": 0, "in_flight": 0, "delayed": 0, "dead_letters": 1}
    assert cli.main(["queue", "dlq", "--queue", url]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["body"] == "poison" and listed["attributes"][DEAD_LETTER_REASON] == "manual: bad data"
    assert cli.main(["queue", "dlq", "--queue", url, "--redrive"]) == 0
    capsys.readouterr()
    assert cli.main(["queue", "receive", "--queue", url, "--ack"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["body"] == "poison" and out["attributes"] == {"kind": "test"}
    assert cli.main(["queue", "stats", "--queue", url]) == 0
    assert json.loads(capsys.readouterr().out)["dead_letters"] == 0


def test_cli_publish_lines_receive_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    url = f"sqlite://{tmp_path / 'lines.db'}?name=q"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"one\ntwo\n\xff\n")))
    assert cli.main(["queue", "publish", "--queue", url, "--lines"]) == 0
    assert len(capsys.readouterr().out.split()) == 3
    assert cli.main(["queue", "receive", "--queue", url, "--max", "5"]) == 0
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [s.get("body", s.get("body_base64")) for s in shown] == ["one", "two", "/w=="]
    assert cli.main(["queue", "publish", "--queue", url, "--attr", "noequals", "x"]) == 1
    assert "NAME=VALUE" in capsys.readouterr().err
    assert cli.main(["queue", "publish", "--queue", url, "--attr", "portable.x=1", "x"]) == 1
    assert "reserved" in capsys.readouterr().err


# ---------------------------------------------------------------- CloudEvents
def test_cloudevents_structured_mode_keeps_binary_and_text_data() -> None:
    binary = CloudEvent(id="1", source="/s", type="t", data=b"\x00\x01", datacontenttype="application/octet-stream")
    body, attrs = to_message(binary, mode="structured")
    doc = json.loads(body)
    assert doc["data_base64"] == "AAE=" and attrs["content-type"].startswith("application/cloudevents+json")
    assert from_message(body, attrs) == binary
    text = CloudEvent(id="2", source="/s", type="t", data="h\u00e9".encode(), datacontenttype="text/plain")
    body, attrs = to_message(text, mode="structured")
    assert json.loads(body)["data"] == "h\u00e9"
    assert from_message(body, attrs) == text


def test_cloudevents_read_other_tools_messages() -> None:
    # the spec's JSON example, as the cloudevents SDK and others write it
    spec_example = json.dumps({
        "specversion": "1.0", "type": "com.github.pull_request.opened", "source": "https://github.com/cloudevents/spec/pull",
        "subject": "123", "id": "A234-1234-1234", "time": "2018-04-05T17:31:00Z", "comexampleextension1": "value",
        "datacontenttype": "text/xml", "data": "<much wow=\"xml\"/>",
    }).encode()
    event = from_message(spec_example, {"content-type": "application/cloudevents+json; charset=UTF-8"})
    assert event.data == b'<much wow="xml"/>'
    assert event.time == dt.datetime(2018, 4, 5, 17, 31, tzinfo=dt.UTC)
    assert event.extensions == {"comexampleextension1": "value"}
    # Pub/Sub's binding writes ce- attributes
    pubsub = from_message(b"{}", {"ce-id": "9", "ce-source": "/p", "ce-type": "x", "ce-specversion": "1.0",
                                  "content-type": "application/json"})
    assert (pubsub.id, pubsub.datacontenttype) == ("9", "application/json")
    assert dedup_key_of(b"{}", {"ce-id": "9", "ce-source": "/p"}) == pubsub.dedup_key()
    assert dedup_key_of(b"plain", {}) is None


@pytest.mark.parametrize(
    ("body", "attributes"),
    [
        (b"plain", {}),
        (b"not json", {"content-type": "application/cloudevents+json"}),
        (b"[]", {"content-type": "application/cloudevents+json"}),
        (b"{}", {"ce_specversion": "1.0", "ce_id": "1"}),
        (b"{}", {"ce_specversion": "1.0", "ce_id": "1", "ce_source": "/s", "ce_type": "t", "ce_time": "yesterday"}),
    ],
)
def test_cloudevents_refuse_what_is_not_an_event(body: bytes, attributes: dict[str, str]) -> None:
    with pytest.raises(InvalidArgument):
        from_message(body, attributes)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"id": ""},
        {"source": 3},
        {"data": "text"},
        {"time": dt.datetime(2026, 1, 1)},
        {"extensions": {"Bad-Name": "v"}},
        {"extensions": {"id": "v"}},
        {"specversion": "0.3"},
    ],
)
def test_cloudevent_fields_are_validated(kwargs: dict[str, object]) -> None:
    base: dict[str, object] = {"id": "1", "source": "/s", "type": "t"}
    with pytest.raises(InvalidArgument):
        CloudEvent(**{**base, **kwargs})  # type: ignore[arg-type]


def _dead_letter_while_readers_open(name: str) -> bool:
    """One round: two threads open ``name``'s dead-letter queue while a third dead-letters into it;
    whether every reader sees the dead letter."""
    from portable.driver.messaging import OutgoingMessage
    from portable.embedded.memqueue import MemoryMessaging

    base = MemoryMessaging(name)
    base.publish(OutgoingMessage(b"poison"))
    [received] = base.receive(1, 0, 30)
    readers: list[MemoryMessaging] = []
    barrier = threading.Barrier(3)

    def open_reader() -> None:
        barrier.wait()
        readers.append(MemoryMessaging(name, dead_letter=True))

    def dead_letter() -> None:
        barrier.wait()
        base.dead_letter(received, "poison")

    threads = [threading.Thread(target=f) for f in (open_reader, open_reader, dead_letter)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return all(reader.stats().available == 1 for reader in readers)


def test_a_dead_letter_is_read_by_a_reader_opened_while_it_was_written() -> None:
    """mem:// makes a queue's dead-letter queue on first use; a consumer dead-lettering on its own
    thread while another thread opens ``?dead_letter=true`` must reach the same queue (unlocked,
    both made one: 72 of 2,000 rounds of four threads split, and the reader never saw the
    message, which is how test_consumer_crash_safety's dead-letter tests failed under load)."""
    import sys

    rounds = 600
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        lost = [i for i in range(rounds) if not _dead_letter_while_readers_open(f"dl-race-{os.getpid()}-{i}")]
    finally:
        sys.setswitchinterval(old)
    assert lost == [], f"{len(lost)} of {rounds} dead letters went to a queue no reader had"
