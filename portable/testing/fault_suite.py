"""The fault suite: nothing lost, nothing applied twice, under injected faults.

It drives a provider through the ``chaos+`` wrapper (:mod:`portable.testing.chaos`)
the way a careful service would, and checks the two promises that retries and
idempotency keys make together:

* **storage**: ``count`` create-only puts (``if_none_match="*"``), each with
  an ``idempotency_key``, from ``concurrency`` threads. A put that still fails
  after the retry policy is retried by the caller with the same key (what a
  service does). Then: every object holds exactly its bytes (0 lost), and the
  inner provider accepted exactly one write per key (0 applied twice), although
  some writes "succeeded but reported a failure" (``lost_reply``).
* **messaging**: ``count`` publishes, each with an ``idempotency_key``, then
  ``Subscription.run(handler, idempotency=store)`` until every message was
  handled. The handler's effect is counted per message: each exactly once
  (0 lost, 0 applied twice), although publishes were duplicated (lost replies),
  deliveries duplicated and reordered, and leases expired mid-handler.

Run it on any provider, as a function::

    from portable.testing.fault_suite import storage_fault_run, messaging_fault_run

    report = storage_fault_run("s3://bucket/prefix?endpoint_url=...", count=500)
    report.check()                        # AssertionError naming what went wrong

or as pytest mix-ins, one line per provider (an adapter's tests)::

    import pytest
    from portable.testing.fault_suite import MessagingFaultSuite, StorageFaultSuite

    class TestS3Faults(StorageFaultSuite):
        fault_count = 500                 # emulators are slow; 10,000 is the default

        @pytest.fixture
        def fault_storage_url(self, moto_server, unique_name):
            return f"s3://{unique_name}?endpoint_url={moto_server.endpoints['endpoint_url']}"

    class TestSQSFaults(MessagingFaultSuite):
        fault_count = 300

        @pytest.fixture
        def fault_queue_url(self, moto_server, unique_name):
            return f"sqs://{unique_name}?endpoint_url=...&create=true"

The URL is the plain provider URL; the suite adds ``chaos+`` and its options
(``seed``, ``error_rate``, ``retry_after``) itself. The bucket or queue must
exist (or the URL must create it) and may be shared: every run writes under
a fresh prefix and tags its messages. A messaging URL must name a queue (both
sides), or pass ``subscription_url`` for pub/sub. Set ``fault_error_rate``,
``fault_seed``, ``fault_concurrency`` or ``fault_store`` (an idempotency store
URL or object; default an in-process MemoryStore) on the class to change them.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from ..config import Profile
from ..errors import PortableError
from ..idempotency import IdempotencyStore, MemoryStore, open_store
from ..resilience import ResiliencePolicy, RetryPolicy
from .chaos import chaos_of

__all__ = [
    "FaultReport",
    "MessagingFaultSuite",
    "StorageFaultSuite",
    "chaos_url",
    "fault_profile",
    "messaging_fault_run",
    "storage_fault_run",
]

T = TypeVar("T")


def chaos_url(url: str, *, seed: int, error_rate: float, retry_after: float = 0.001) -> str:
    """``url`` wrapped in ``chaos+`` with the given options."""
    sep = "&" if "?" in url else "?"
    return f"chaos+{url}{sep}seed={seed}&error_rate={error_rate}&retry_after={retry_after}"


def fault_profile(url: str = "mem://") -> Profile:
    """A profile for fault runs: many quick retries, no breaker, no retry budget (a fault
    run injects 20-30% faults and expects every call to succeed)."""
    policy = ResiliencePolicy(
        retry=RetryPolicy(max_attempts=10, initial_backoff=0.001, max_backoff=0.05),
        breaker=None,
        retry_budget=None,
    )
    return Profile(name="fault-suite", storage=url, queue=url, jobs="local://", resilience=policy)


@dataclass
class FaultReport:
    """What a fault run did and found.

    Attributes:
        count: operations asked for.
        lost: subjects (keys, message numbers) with no effect.
        twice: subjects whose effect was applied more than once, with the count.
        wrong: subjects whose stored bytes differ from what was written.
        injected: faults injected per kind (all sides together).
        caller_retries: calls that failed after the retry policy and were
            retried by the caller with the same idempotency key.
        seconds: how long the run took.
    """

    domain: str
    count: int
    lost: list[str] = field(default_factory=list)
    twice: dict[str, int] = field(default_factory=dict)
    wrong: list[str] = field(default_factory=list)
    injected: Counter[str] = field(default_factory=Counter)
    caller_retries: int = 0
    seconds: float = 0.0

    def check(self, require_faults: tuple[str, ...] = ("lost_reply",)) -> None:
        """Raise AssertionError naming what was lost, applied twice or corrupted.

        Args:
            require_faults: kinds that must have been injected at least once,
                so that a run which injected nothing cannot pass by accident.
        """
        problems = []
        if self.lost:
            problems.append(f"{len(self.lost)} lost (e.g. {self.lost[:5]})")
        if self.twice:
            problems.append(f"{len(self.twice)} applied more than once (e.g. {dict(list(self.twice.items())[:5])})")
        if self.wrong:
            problems.append(f"{len(self.wrong)} hold the wrong bytes (e.g. {self.wrong[:5]})")
        missing = [k for k in require_faults if not self.injected.get(k)]
        if missing:
            problems.append(f"no {', '.join(missing)} fault was injected; raise count or error_rate")
        if problems:
            raise AssertionError(f"{self.domain} fault run of {self.count}: " + "; ".join(problems))


def _persist(fn: Callable[[], T], report: FaultReport, lock: threading.Lock, give_up: float) -> T:
    """Call ``fn`` until it succeeds, as a service retrying with the same idempotency key would."""
    while True:
        try:
            return fn()
        except PortableError as exc:
            if not exc.retryable or time.monotonic() > give_up:
                raise
            with lock:
                report.caller_retries += 1


def storage_fault_run(
    url: str,
    *,
    count: int = 10_000,
    error_rate: float = 0.2,
    seed: int = 7,
    concurrency: int = 8,
    size: int = 64,
    timeout: float = 600.0,
) -> FaultReport:
    """Create-only puts with idempotency keys under faults; report what was lost or doubled.

    Args:
        url: a storage URL (without ``chaos+``); objects go under a fresh prefix.
        count: puts. size: bytes per object. concurrency: threads.
        error_rate, seed: the chaos options.
        timeout: seconds before the run gives up.
    """
    from ..storage import open_bucket

    started = time.monotonic()
    give_up = started + timeout
    run = uuid.uuid4().hex[:12]
    prefix = f"fault-suite/{run}"
    report = FaultReport("storage", count)
    lock = threading.Lock()
    profile = fault_profile(url)
    bucket = open_bucket(chaos_url(url, seed=seed, error_rate=error_rate), profile=profile)
    plain = open_bucket(url, profile=profile)
    chaos = chaos_of(bucket)

    def key_of(i: int) -> str:
        return f"{prefix}/{i:06d}"

    def payload(i: int) -> bytes:
        return (f"{run}:{i}:".encode() * (size // 8 + 1))[:size]

    def put(i: int) -> None:
        _persist(
            lambda: bucket.put(key_of(i), payload(i), if_none_match="*", idempotency_key=f"{run}-put-{i}"),
            report, lock, give_up,
        )

    try:
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="fault-suite") as pool:
            list(pool.map(put, range(count)))
        applied = chaos.stats.applied
        stored = plain.get_many([key_of(i) for i in range(count)], missing_ok=True)
        for i in range(count):
            key = key_of(i)
            if key not in stored or applied[key] == 0:
                report.lost.append(key)
            elif stored[key] != payload(i):
                report.wrong.append(key)
            if applied[key] > 1:
                report.twice[key] = applied[key]
        report.injected = Counter(chaos.stats.injected)
    finally:
        try:
            plain.delete_many([key_of(i) for i in range(count)])
        finally:
            bucket.close()
            plain.close()
    report.seconds = time.monotonic() - started
    return report


def messaging_fault_run(
    url: str,
    *,
    subscription_url: str | None = None,
    count: int = 10_000,
    error_rate: float = 0.2,
    seed: int = 7,
    concurrency: int = 8,
    store: IdempotencyStore | str | None = None,
    lease: float = 30.0,
    timeout: float = 600.0,
) -> FaultReport:
    """Publishes with idempotency keys, then a consumer loop with an idempotency store, under faults.

    Args:
        url: a messaging URL naming a queue (without ``chaos+``), or a topic
            when ``subscription_url`` names its subscription.
        count: messages. concurrency: handler threads (publishing uses as many).
        store: the consumer's idempotency store (object or URL). Defaults to
            an in-process MemoryStore.
        lease: the consumer's message lease in seconds.
        timeout: seconds before the run gives up and reports what is missing.

    The queue should be empty of other runs' messages; messages of other runs
    (told apart by a run tag in the body) are acked and ignored.
    """
    from ..messaging import open_subscription, open_topic

    started = time.monotonic()
    give_up = started + timeout
    run = uuid.uuid4().hex[:12]
    report = FaultReport("messaging", count)
    lock = threading.Lock()
    profile = fault_profile(url)
    the_store: IdempotencyStore = (
        MemoryStore() if store is None else open_store(store) if isinstance(store, str) else store
    )
    topic = open_topic(chaos_url(url, seed=seed, error_rate=error_rate), profile=profile)
    sub = open_subscription(
        chaos_url(subscription_url or url, seed=seed + 1, error_rate=error_rate), profile=profile, lease=lease
    )
    effects: Counter[int] = Counter()
    all_seen = threading.Event()
    stop = threading.Event()
    tag = f"{run}:".encode()

    def publish(i: int) -> None:
        _persist(lambda: topic.publish(tag + str(i).encode(), idempotency_key=f"{run}-msg-{i}"), report, lock, give_up)

    def handler(message: Any) -> None:
        body: bytes = message.body
        if not body.startswith(tag):
            return  # another run's message: acked, not counted
        i = int(body[len(tag):])
        with lock:
            effects[i] += 1
            if len(effects) >= count:
                all_seen.set()

    def watchdog() -> None:
        all_seen.wait(max(0.0, give_up - time.monotonic()))
        # Let late duplicates arrive: each must be skipped, not handled again.
        time.sleep(min(1.0, max(0.0, give_up - time.monotonic())))
        stop.set()

    try:
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="fault-suite") as pool:
            list(pool.map(publish, range(count)))
        guard = threading.Thread(target=watchdog, name="fault-suite-watchdog", daemon=True)
        guard.start()
        sub.run(
            handler, concurrency=concurrency, idempotency=the_store, max_deliveries=None,
            stop_event=stop, handle_signals=False, backoff=0.01, max_backoff=0.5, poll=0.2,
            idempotency_lease=max(lease, 5.0),
        )
        guard.join()
        for i in range(count):
            if effects[i] == 0:
                report.lost.append(str(i))
            elif effects[i] > 1:
                report.twice[str(i)] = effects[i]
        report.injected = chaos_of(topic).stats.injected + chaos_of(sub).stats.injected
    finally:
        topic.close()
        sub.close()
    report.seconds = time.monotonic() - started
    return report


# ---------------------------------------------------------------- pytest mix-ins
class StorageFaultSuite:
    """Mix-in: one test that runs :func:`storage_fault_run` on ``fault_storage_url``."""

    fault_count = 10_000
    fault_error_rate = 0.2
    fault_seed = 7
    fault_concurrency = 8

    @pytest.fixture
    def fault_storage_url(self) -> str:
        raise NotImplementedError("define a fault_storage_url fixture returning a storage URL")

    def test_no_put_is_lost_or_applied_twice_under_faults(self, fault_storage_url: str) -> None:
        report = storage_fault_run(
            fault_storage_url, count=self.fault_count, error_rate=self.fault_error_rate,
            seed=self.fault_seed, concurrency=self.fault_concurrency,
        )
        report.check()


class MessagingFaultSuite:
    """Mix-in: one test that runs :func:`messaging_fault_run` on ``fault_queue_url``."""

    fault_count = 10_000
    fault_error_rate = 0.2
    fault_seed = 7
    fault_concurrency = 8
    fault_store: IdempotencyStore | str | None = None
    fault_subscription_url: str | None = None

    @pytest.fixture
    def fault_queue_url(self) -> str:
        raise NotImplementedError("define a fault_queue_url fixture returning a messaging URL")

    def test_no_message_is_lost_or_handled_twice_under_faults(self, fault_queue_url: str) -> None:
        report = messaging_fault_run(
            fault_queue_url, subscription_url=self.fault_subscription_url, count=self.fault_count,
            error_rate=self.fault_error_rate, seed=self.fault_seed, concurrency=self.fault_concurrency,
            store=self.fault_store,
        )
        report.check(require_faults=("lost_reply", "duplicate", "reorder"))
