"""The native async messaging engines, at the driver level, on their emulators.

For each engine whose library is natively async (SQS on aiobotocore, Azure
Storage Queue on ``azure.storage.queue.aio``, Pub/Sub on the async GAPIC
clients): ``async_driver()`` is native; publish, receive, ack, nack, extend and
dead-letter work through it; the wire form is exactly the sync driver's (a
provider's own client reads the same from both faces, and both faces read the
same from it); errors classify as the sync ones; and no call uses the bounded
thread pool of :mod:`portable.driver.threads`.

Each test body runs its coroutine with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from portable.driver import threads
from portable.driver.aio_messaging import AsyncSubscriptionDriver, AsyncTopicDriver
from portable.driver.messaging import (
    DEAD_LETTER_REASON,
    MessagingDriver,
    OutgoingMessage,
    ReceivedMessage,
    SubscriptionDriver,
    TopicDriver,
)
from portable.errors import ErrorCode, Unavailable
from portable.messaging import open_driver

R = TypeVar("R")

# receive(wait=0) pulls with return_immediately, which google-cloud-pubsub calls deprecated; the
# service still honours it, and it is the only way not to wait on an empty subscription.
pytestmark = pytest.mark.filterwarnings("ignore:The return_immediately flag is deprecated:DeprecationWarning")

#: body, attributes and key of the message every interop test sends
BODY = '{"order": "naïve café"}'.encode()
BINARY = b"\x00\x01\xff binary"
ATTRIBUTES = {"kind": "order", "trace": "t-1"}


@dataclass
class Case:
    """One engine on its emulator: the sync sides, and what its own client sends and sees."""

    name: str
    url: str
    driver: MessagingDriver
    topic: TopicDriver
    sub: SubscriptionDriver
    #: the provider's own client publishes (body, attributes)
    native_publish: Callable[[bytes, dict[str, str]], None]
    #: the provider's own client receives and deletes one message: what it saw, as plain data
    native_receive: Callable[[], Any]
    #: a handle for this delivery that the provider refuses as lost
    stale_handle: Callable[[ReceivedMessage], Any]
    #: the sync driver of the dead-letter destination (a subscription)
    dead_letters: Callable[[], SubscriptionDriver]
    lease: float = 10.0
    #: the attributes a native producer can send (none on Azure Storage Queue)
    native_attributes: dict[str, str] | None = None

    def __post_init__(self) -> None:
        if self.native_attributes is None:
            self.native_attributes = dict(ATTRIBUTES)


def run(coro_fn: Callable[[], Coroutine[Any, Any, R]]) -> R:
    """Run ``coro_fn()`` on a fresh loop and check that no call went through the bounded pool."""
    threads.shutdown_pool()
    result = asyncio.run(coro_fn())
    assert threads._pool is None, "a native call went through the bounded thread pool"
    assert not [t for t in threading.enumerate() if t.name.startswith("portable-aio")]
    return result


async def receive_one(sub: AsyncSubscriptionDriver, lease: float, tries: int = 10) -> ReceivedMessage:
    for _ in range(tries):
        got = await sub.receive(1, 2.0, lease)
        if got:
            (message,) = got
            assert isinstance(message, ReceivedMessage)
            return message
    raise AssertionError("nothing was delivered")


def sync_receive_one(sub: SubscriptionDriver, lease: float, tries: int = 10) -> ReceivedMessage:
    for _ in range(tries):
        got = sub.receive(1, 2.0, lease)
        if got:
            (message,) = got
            assert isinstance(message, ReceivedMessage)
            return message
    raise AssertionError("nothing was delivered")


def seen(message: ReceivedMessage) -> tuple[Any, ...]:
    """What a receive carries besides its id, handle and times."""
    return (message.body, dict(message.attributes), message.key, message.headers, message.key_bytes, message.tombstone)


# ------------------------------------------------------------------ SQS on moto
@contextlib.contextmanager
def sqs_case(moto_server: Any, name: str) -> Iterator[Case]:
    import boto3

    with pytest.MonkeyPatch.context() as mp:
        for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
            mp.setenv(var, moto_server.env[var])
        for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            mp.delenv(var, raising=False)
        endpoint, region = moto_server.endpoints["endpoint_url"], moto_server.endpoints["region"]
        base = open_driver(f"sqs://base?region={region}&endpoint_url={endpoint}")
        raw = boto3.client("sqs", endpoint_url=endpoint, region_name=region)
        with base.temporary(name) as url:
            driver: Any = open_driver(url)
            queue_url = raw.get_queue_url(QueueName=name)["QueueUrl"]

            def native_publish(body: bytes, attributes: dict[str, str]) -> None:
                raw.send_message(
                    QueueUrl=queue_url,
                    MessageBody=body.decode(),
                    MessageAttributes={k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()},
                )

            def native_receive() -> Any:
                (m,) = raw.receive_message(QueueUrl=queue_url, WaitTimeSeconds=5, MessageAttributeNames=["All"])[
                    "Messages"
                ]
                raw.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
                return m["Body"], m.get("MessageAttributes")

            def dead_letters() -> SubscriptionDriver:
                dlq_url = driver.subscription().dead_letter_url()
                return open_driver(dlq_url).subscription()  # type: ignore[no-any-return]

            try:
                yield Case(
                    "sqs",
                    url,
                    driver,
                    driver.topic(),
                    driver.subscription(),
                    native_publish,
                    native_receive,
                    lambda m: "not-a-receipt-handle",
                    dead_letters,
                )
            finally:
                driver.close()
        base.close()


# ------------------------------------------------------------------ Azure Storage Queue on Azurite
AZURITE_KEY_ENV = "PORTABLE_TEST_AIO_AZURITE_KEY"


@contextlib.contextmanager
def azqueue_case(azurite: Any, name: str) -> Iterator[Case]:
    from azure.storage.queue import BinaryBase64DecodePolicy, BinaryBase64EncodePolicy, QueueClient

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(AZURITE_KEY_ENV, azurite.endpoints["account_key"])
        account, endpoint = azurite.endpoints["account_name"], azurite.endpoints["queue_endpoint"]
        base = open_driver(f"azqueue://{account}/base?queue_endpoint={endpoint}&account_key_env={AZURITE_KEY_ENV}")
        with base.temporary(name) as url:
            driver: Any = open_driver(url)
            conn = azurite.endpoints["connection_string"]
            producer = QueueClient.from_connection_string(  # what Azure Functions and the SDK samples use
                conn, name, message_encode_policy=BinaryBase64EncodePolicy(), message_decode_policy=BinaryBase64DecodePolicy()
            )
            reader = QueueClient.from_connection_string(conn, name)  # the text exactly as it is on the wire

            def native_publish(body: bytes, attributes: dict[str, str]) -> None:
                assert not attributes  # Azure messages have none
                producer.send_message(body)

            def native_receive() -> Any:
                for _ in range(10):
                    m = reader.receive_message()
                    if m is not None:
                        reader.delete_message(m)
                        return m.content
                raise AssertionError("nothing was delivered")

            def stale_handle(m: ReceivedMessage) -> Any:
                driver.extend_lease(m.handle, 10)  # a new pop receipt: the old one is stale
                return m.handle

            def dead_letters() -> SubscriptionDriver:
                return open_driver(driver.dead_letter_url()).subscription()  # type: ignore[no-any-return]

            try:
                yield Case(
                    "azqueue", url, driver, driver.topic(), driver.subscription(), native_publish, native_receive,
                    stale_handle, dead_letters, native_attributes={},
                )  # fmt: skip
            finally:
                driver.close()
                producer.close()
                reader.close()
        base.close()


# ------------------------------------------------------------------ Pub/Sub on Google's emulator
@contextlib.contextmanager
def pubsub_case(emulator: Any, name: str) -> Iterator[Case]:
    from google.cloud import pubsub_v1  # the library's own clients, as a native service uses them

    project, host = emulator.endpoints["project"], emulator.endpoints["host_port"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PUBSUB_EMULATOR_HOST", host)
        base: Any = open_driver(f"pubsub://{project}/topics/{name}?endpoint={host}")
        # exactly-once, so that a lost lease is refused (PRECONDITION_FAILED), and a dead-letter policy
        with base.create_temporary(name, ordering=False, exactly_once=True) as url:
            driver: Any = open_driver(url)
            publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
            topic_path, sub_path = f"projects/{project}/topics/{name}", f"projects/{project}/subscriptions/{name}"

            def native_publish(body: bytes, attributes: dict[str, str]) -> None:
                publisher.publish(topic_path, body, **attributes).result(timeout=30)

            def native_receive() -> Any:
                for _ in range(10):
                    got = subscriber.pull(subscription=sub_path, max_messages=1, timeout=10).received_messages
                    if got:
                        (r,) = got
                        subscriber.acknowledge(subscription=sub_path, ack_ids=[r.ack_id])
                        m = r.message
                        return m.data, dict(m.attributes), m.ordering_key
                raise AssertionError("nothing was delivered")

            def stale_handle(m: ReceivedMessage) -> Any:
                driver.nack(m.handle, 0)
                sync_receive_one(driver, 10.0)  # delivered again, with a new ack id: the old one is stale
                return m.handle

            def dead_letters() -> SubscriptionDriver:
                return open_driver(driver.dead_letter_url()).subscription()  # type: ignore[no-any-return]

            try:
                yield Case(
                    "pubsub", url, driver, driver.topic(), driver.subscription(), native_publish, native_receive,
                    stale_handle, dead_letters,
                )  # fmt: skip
            finally:
                driver.close()
                publisher.stop()
                subscriber.close()
        base.close()


# ------------------------------------------------------------------ the tests
CASES = {"sqs": (sqs_case, "moto_server"), "azqueue": (azqueue_case, "azurite"), "pubsub": (pubsub_case, "pubsub_emulator")}


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest, unique_name: str) -> Iterator[Case]:
    factory = CASES[request.param]
    make, emulator = factory
    with make(request.getfixturevalue(emulator), unique_name) as c:
        yield c


def test_async_drivers_are_native(case: Case) -> None:
    topic, sub = case.topic.async_driver(), case.sub.async_driver()
    assert isinstance(topic, AsyncTopicDriver) and isinstance(sub, AsyncSubscriptionDriver)
    assert topic.native and sub.native
    assert topic.sync is case.topic and sub.sync is case.sub


def test_publish_receive_ack_round_trip(case: Case) -> None:
    async def body() -> None:
        topic, sub = case.topic.async_driver(), case.sub.async_driver()
        try:
            ids = [await topic.publish(OutgoingMessage(b, ATTRIBUTES)) for b in (BODY, BINARY)]
            got = [await receive_one(sub, case.lease) for _ in ids]
            assert sorted(m.id for m in got) == sorted(ids)
            assert sorted(m.body for m in got) == sorted([BODY, BINARY])
            assert all(dict(m.attributes) == ATTRIBUTES and m.delivery_attempt == 1 for m in got)
            await sub.ack(got[0].handle)
            assert await sub.ack_many([got[1].handle]) == [None]
            assert await sub.receive(10, 1.0, case.lease) == []  # acked: never again
            batch = await topic.publish_batch([OutgoingMessage(b"one"), OutgoingMessage(b"two", {"n": "2"})])
            assert all(isinstance(i, str) for i in batch)
            again = [await receive_one(sub, case.lease) for _ in batch]
            assert sorted(m.body for m in again) == [b"one", b"two"]
            assert await sub.ack_many([m.handle for m in again]) == [None, None]
        finally:
            await topic.aclose()
            await sub.aclose()

    run(body)


def test_native_clients_see_the_same_from_both_faces(case: Case) -> None:
    message = OutgoingMessage(BODY, ATTRIBUTES)
    case.topic.publish(message)
    from_sync = case.native_receive()

    async def publish() -> None:
        topic = case.topic.async_driver()
        try:
            await topic.publish(message)
        finally:
            await topic.aclose()

    run(publish)
    assert case.native_receive() == from_sync


def test_both_faces_read_the_same_from_native_clients(case: Case) -> None:
    assert case.native_attributes is not None
    case.native_publish(BODY, case.native_attributes)
    by_sync = sync_receive_one(case.sub, case.lease)
    case.sub.ack(by_sync.handle)
    case.native_publish(BODY, case.native_attributes)

    async def receive() -> ReceivedMessage:
        sub = case.sub.async_driver()
        try:
            m = await receive_one(sub, case.lease)
            await sub.ack(m.handle)
            return m
        finally:
            await sub.aclose()

    by_async = run(receive)
    assert seen(by_async) == seen(by_sync)
    assert by_async.delivery_attempt == by_sync.delivery_attempt == 1
    assert by_async.id != by_sync.id


def test_nack_extend_and_dead_letter(case: Case) -> None:
    async def body() -> None:
        topic, sub = case.topic.async_driver(), case.sub.async_driver()
        try:
            await topic.publish(OutgoingMessage(b"poison", {"n": "1"}))
            first = await receive_one(sub, case.lease)
            assert await sub.receive(1, 0.0, case.lease) == []  # leased
            await sub.nack(first.handle, 0.0)
            second = await receive_one(sub, case.lease)
            assert second.id == first.id and second.delivery_attempt == 2
            handle = await sub.extend_lease(second.handle, case.lease * 3)
            assert await sub.receive(1, 1.0, case.lease) == []  # still leased after the extension
            moved = ReceivedMessage(
                second.id, second.body, second.attributes, second.key, second.publish_time,
                second.delivery_attempt, handle, second.headers, second.key_bytes,
            )  # fmt: skip
            await sub.dead_letter(moved, "cannot parse")
        finally:
            await topic.aclose()
            await sub.aclose()

    run(body)
    dead = sync_receive_one(case.dead_letters(), case.lease)
    assert dead.body == b"poison"
    assert dead.attributes["n"] == "1"
    assert dead.attributes[DEAD_LETTER_REASON] == "cannot parse"


def test_errors_classify_as_the_sync_ones(case: Case) -> None:
    case.topic.publish(OutgoingMessage(b"x"))
    received = sync_receive_one(case.sub, case.lease)
    stale = case.stale_handle(received)
    with pytest.raises(Exception) as sync_error:
        case.sub.ack(stale)

    async def ack() -> BaseException:
        sub = case.sub.async_driver()
        try:
            await sub.ack(stale)
        except Exception as exc:
            return exc
        finally:
            await sub.aclose()
        raise AssertionError("a lost lease was acked")

    async_error = run(ack)
    assert case.driver.code_of(sync_error.value) is ErrorCode.PRECONDITION_FAILED
    assert case.driver.code_of(async_error) is ErrorCode.PRECONDITION_FAILED
    assert type(async_error).__name__ == type(sync_error.value).__name__


def test_one_client_per_loop_closed_by_aclose(case: Case) -> None:
    sub = case.sub.async_driver()
    clients: Any = sub._clients  # type: ignore[attr-defined]

    async def twice() -> None:
        await sub.receive(1, 0.0, case.lease)
        assert asyncio.get_running_loop() in clients
        made = len(clients)
        await asyncio.gather(sub.receive(1, 0.0, case.lease), sub.receive(1, 0.0, case.lease))
        assert len(clients) == made  # the loop's one client served them all

    async def here_and_there() -> None:
        await twice()
        assert len(clients) == 2  # this loop's, and the other loop's
        await sub.aclose()  # closes both: the other loop still runs
        assert len(clients) == 0
        with pytest.raises(Unavailable):  # closed for good: no client is made again
            await sub.receive(1, 0.0, case.lease)

    other = asyncio.new_event_loop()
    runner = threading.Thread(target=other.run_forever, name="other-loop")
    runner.start()
    try:
        asyncio.run_coroutine_threadsafe(twice(), other).result(timeout=60)
        run(here_and_there)
    finally:
        other.call_soon_threadsafe(other.stop)
        runner.join()
        other.close()


def test_a_cancelled_receive_loses_no_message(case: Case) -> None:
    """A receive cancelled mid-wait may have leased what the server sent meanwhile: it comes again after the lease."""
    short = case.driver.capabilities.min_lease_seconds if case.name != "pubsub" else 10.0
    lease = max(1.0, short)

    async def body() -> None:
        topic, sub = case.topic.async_driver(), case.sub.async_driver()
        try:
            waiting = asyncio.create_task(sub.receive(1, 5.0, lease))
            await asyncio.sleep(0.3)  # the long poll (or the polls) under way
            await topic.publish(OutgoingMessage(b"not lost"))
            await asyncio.sleep(0.05)
            waiting.cancel()
            try:
                got = await waiting
            except asyncio.CancelledError:
                got = []  # cancelled in flight: whatever the server handed out is leased, not lost
            if got:  # the receive finished before the cancel: give it back
                await sub.nack(got[0].handle, 0.0)
            again = await receive_one(sub, lease, tries=int(lease * 2) + 10)
            assert again.body == b"not lost"
            await sub.ack(again.handle)
        finally:
            await topic.aclose()
            await sub.aclose()

    run(body)


def test_a_missing_capability_is_the_sync_unsupported(case: Case, unique_name: str) -> None:
    """Dead-lettering where there is no native destination raises the sync face's Unsupported, before any request."""
    from portable.errors import Unsupported

    # the dead-letter destination has none of its own: SQS's redrive target has no redrive policy,
    # Azure's poison queue opens with poison_queue=none, Pub/Sub's dead-letter subscription no policy
    url = case.sub.dead_letter_url()
    assert url is not None
    side: Any = open_driver(url).subscription()
    try:
        message = ReceivedMessage("id-1", b"x", {}, None, dt.datetime.now(dt.UTC), 1, "handle")
        with pytest.raises(Unsupported) as sync_error:
            side.dead_letter(message, "poison")

        async def dead_letter() -> None:
            aside = side.async_driver()
            try:
                assert aside.native
                await aside.dead_letter(message, "poison")
            finally:
                await aside.aclose()

        with pytest.raises(Unsupported) as async_error:
            run(dead_letter)
        assert str(async_error.value) == str(sync_error.value)
    finally:
        side.close()


def test_run_cancelled_at_random_points_handles_every_message_once(case: Case) -> None:
    """tests/aio/test_consumer.py's seeded random cancels of ``run()``, on this native engine's queue."""
    from tests.aio import test_consumer  # one test body, run here on each emulator

    test_consumer.test_run_cancelled_at_random_points_handles_every_message_once(case.url)
