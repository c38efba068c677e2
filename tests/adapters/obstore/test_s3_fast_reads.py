"""The obstore S3 engine's fast path for batch reads of small objects (portable_obstore._s3_reads).

Over the wire, on moto (which closes every connection after its answer) and s3s-fs (which keeps
them alive): bodies written by boto3 under keys S3 encodes in the path come back byte for byte
with no read handed to obstore; an error answer is the S3 error it names in one request (a
counting proxy sees every request); a kept-alive connection that the server drops as a request
arrives is replaced once; a stalled or chunked answer, and a refused connection, are handed to
obstore; a deadline cuts a stalled batch and closes its connection. The signature is checked
against the driver's own SigV4 signer, and the path is off wherever obstore must read.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from portable.errors import DeadlineExceeded, NotFound
from portable.resilience import deadline
from portable.storage import open_bucket

obstore = pytest.importorskip("obstore")
boto3 = pytest.importorskip("boto3")

from portable_obstore._s3_reads import FastReads, fast_reads_for  # noqa: E402
from portable_obstore.s3 import ObstoreS3Storage, S3RequestFailed, sigv4_headers  # noqa: E402

from tests.cost._proxy import CountingProxy  # noqa: E402

#: keys S3 encodes in the request path: spaces, reserved and non-ASCII characters
ODD_KEYS = ["plain", "a b/c+d~e%f", "x=y&z;w,v", "(paren)!*'", "ünïcødé/ключ", "deep/er/path", "dots..and--dashes"]


def _driver(bucket: Any) -> ObstoreS3Storage:
    driver = bucket.driver
    assert isinstance(driver, ObstoreS3Storage)
    return driver


@pytest.fixture
def prefix() -> str:
    return f"fast-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def native(aws: dict[str, str]) -> Any:
    return boto3.client("s3", endpoint_url=aws["endpoint_url"], region_name=aws["region"])


@pytest.fixture
def s3s(s3s_server: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """s3s-fs with its credentials in the environment for the test, and one new bucket."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        monkeypatch.setenv(name, s3s_server.env[name])
    endpoint, region = s3s_server.endpoints["endpoint_url"], s3s_server.endpoints["region"]
    name = f"fast-{uuid.uuid4().hex[:12]}"
    found = {
        "endpoint_url": endpoint,
        "region": region,
        "bucket": name,
        "key": s3s_server.env["AWS_ACCESS_KEY_ID"],
        "secret": s3s_server.env["AWS_SECRET_ACCESS_KEY"],
    }
    _s3s_client(found).create_bucket(Bucket=name)
    return found


def _s3s_client(s3s: dict[str, str]) -> Any:
    """boto3 on s3s-fs with its keys given (boto3's default session keeps the first keys it resolved)."""
    return boto3.client(
        "s3",
        endpoint_url=s3s["endpoint_url"],
        region_name=s3s["region"],
        aws_access_key_id=s3s["key"],
        aws_secret_access_key=s3s["secret"],
    )


def _write_odd_keys(client: Any, bucket: str, prefix: str) -> dict[str, bytes]:
    bodies = {key: f"{key}:{i}".encode() * (i + 1) for i, key in enumerate(ODD_KEYS)}
    bodies["empty"] = b""
    for key, body in bodies.items():
        client.put_object(Bucket=bucket, Key=f"{prefix}/{key}", Body=body)
    return bodies


def test_a_batch_reads_what_boto3_wrote_on_the_fast_path(s3_bucket: str, s3_query: str, prefix: str, native: Any) -> None:
    bodies = _write_odd_keys(native, s3_bucket, prefix)
    bucket = open_bucket(f"s3://{s3_bucket}/{prefix}?{s3_query}")
    fast = _driver(bucket).fast_reads
    assert fast is not None, "moto over http:// with static credentials takes the fast path"
    for _ in range(2):
        assert bucket.get_many(list(bodies)) == bodies
    assert fast.handed_over == 0, "every answer was read by the fast path, none by obstore"
    bucket.close()


def test_a_batch_on_s3s_reads_what_boto3_wrote_on_kept_alive_connections(s3s: dict[str, str], prefix: str) -> None:
    client = _s3s_client(s3s)
    bodies = _write_odd_keys(client, s3s["bucket"], prefix)
    bucket = open_bucket(f"s3://{s3s['bucket']}/{prefix}?endpoint_url={s3s['endpoint_url']}&region={s3s['region']}")
    fast = _driver(bucket).fast_reads
    assert fast is not None
    for _ in range(3):
        assert bucket.get_many(list(bodies)) == bodies
    assert fast.handed_over == 0
    idle = sum(len(pool) for pool in fast._pools.values())
    assert 0 < idle <= len(bodies), "the connections stay open between batches, one per read in flight at most"
    bucket.close()
    until = time.monotonic() + 5
    while sum(len(pool) for pool in fast._pools.values()) and time.monotonic() < until:
        time.sleep(0.01)
    assert sum(len(pool) for pool in fast._pools.values()) == 0, "close() closes the idle connections"


def test_an_error_answer_is_the_s3_error_it_names_in_one_request(
    s3_bucket: str, aws: dict[str, str], prefix: str, native: Any
) -> None:
    native.put_object(Bucket=s3_bucket, Key=f"{prefix}/here", Body=b"here")
    proxy = CountingProxy(aws["endpoint_url"])
    try:
        driver = ObstoreS3Storage(s3_bucket, prefix, region=aws["region"], endpoint_url=proxy.url)
        outcomes = dict(driver.get_many(["here", "gone"]))
        assert outcomes["here"] == b"here"
        error = outcomes["gone"]
        assert isinstance(error, S3RequestFailed) and error.status == 404 and error.code == "NoSuchKey"
        assert driver.code_of(error).name == "NOT_FOUND"
        gets = [seen for seen in proxy.snapshot() if seen.method == "GET"]
        assert len(gets) == 2, "a missing key costs one GET, not a second one through obstore"
        assert driver.fast_reads is not None and driver.fast_reads.handed_over == 0
        # the secret is in no part of the error
        secret = native._request_signer._credentials.secret_key
        chain: BaseException | None = error
        while chain is not None:
            assert secret not in str(chain) and secret not in repr(chain)
            chain = chain.__cause__ or chain.__context__
        assert secret not in repr(driver.fast_reads)

        proxy.fail_next(lambda seen: seen.method == "GET")
        throttled = dict(driver.get_many(["here"]))["here"]
        assert isinstance(throttled, S3RequestFailed) and throttled.code == "SlowDown"
        assert driver.code_of(throttled).name == "THROTTLED" and driver.is_retryable(throttled)

        # through a Bucket the throttled item is retried alone, and the batch succeeds
        bucket = open_bucket(f"s3://{s3_bucket}/{prefix}?region={aws['region']}&endpoint_url={proxy.url}")
        proxy.reset()
        proxy.fail_next(lambda seen: seen.method == "GET")
        assert bucket.get_many(["here"]) == {"here": b"here"}
        gets = [seen for seen in proxy.snapshot() if seen.method == "GET"]
        assert [seen.failed for seen in gets] == [True, False], "one throttled GET, then one retried"
        bucket.close()
    finally:
        proxy.close()


def test_a_bucket_reports_a_missing_key_as_not_found(s3_bucket: str, s3_query: str, prefix: str) -> None:
    bucket = open_bucket(f"s3://{s3_bucket}/{prefix}?{s3_query}")
    bucket.put("one", b"1")
    with pytest.raises(NotFound):
        bucket.get_many(["one", "two"])
    bucket.close()


def _accept_in_a_thread(listener: socket.socket, serve: Callable[[socket.socket], None]) -> None:
    """Accept connections on ``listener`` until it is closed, each served by ``serve`` on a thread of its own."""

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


class _Relay:
    """A TCP relay to a server whose connections a test can drop as a request arrives."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.accepted = 0
        self.drop_next = False
        self.dropped = 0
        self._lock = threading.Lock()
        _accept_in_a_thread(self.listener, self._relay)

    def _relay(self, client: socket.socket) -> None:
        with self._lock:
            self.accepted += 1
        upstream = socket.create_connection(self.target)
        threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()
        self._pump(client, upstream, True)

    def _pump(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        try:
            while data := src.recv(65536):
                if requests:
                    with self._lock:
                        drop, self.drop_next = self.drop_next, False
                    if drop:  # as a server closing an idle connection when the request arrives
                        self.dropped += 1
                        break
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.listener.close()


def test_a_connection_dropped_as_the_request_arrives_is_replaced_once(s3s: dict[str, str], prefix: str) -> None:
    client = _s3s_client(s3s)
    keys = [f"k{i}" for i in range(4)]
    for key in keys:
        client.put_object(Bucket=s3s["bucket"], Key=f"{prefix}/{key}", Body=key.encode())
    parts = urllib.parse.urlsplit(s3s["endpoint_url"])
    relay = _Relay(parts.hostname or "127.0.0.1", parts.port or 80)
    try:
        driver = ObstoreS3Storage(s3s["bucket"], prefix, region=s3s["region"], endpoint_url=relay.url, concurrency=1)
        assert dict(driver.get_many(keys)) == {key: key.encode() for key in keys}
        assert relay.accepted == 1, "one connection, kept alive, carried the whole batch"
        relay.drop_next = True
        assert dict(driver.get_many(keys[:1])) == {"k0": b"k0"}
        assert relay.dropped == 1 and relay.accepted == 2, "the dropped request was sent again on a new connection"
        assert driver.fast_reads is not None and driver.fast_reads.handed_over == 0
    finally:
        relay.close()


class _Stalled:
    """A server that accepts connections and reads requests, and answers with ``answer`` (None: never)."""

    def __init__(self, answer: bytes | None = None) -> None:
        self.answer = answer
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closed_by_client = threading.Event()
        _accept_in_a_thread(self.listener, self._serve)

    def _serve(self, conn: socket.socket) -> None:
        try:
            while data := conn.recv(65536):
                if self.answer is not None and b"\r\n\r\n" in data:
                    conn.sendall(self.answer)
        except OSError:
            pass
        self.closed_by_client.set()
        conn.close()

    def close(self) -> None:
        self.listener.close()


CREDENTIALS = ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None)


def _fast(port: int, timeout: float = 5.0) -> FastReads:
    fast = fast_reads_for(f"http://127.0.0.1:{port}/bucket", "us-east-1", timeout, False)
    assert fast is not None
    return fast


def test_a_chunked_answer_is_handed_to_obstore() -> None:
    server = _Stalled(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    try:
        fast = _fast(server.port)
        assert asyncio.run(fast.get("key", CREDENTIALS)) is None
        assert fast.handed_over == 1
    finally:
        server.close()


def test_an_http_1_0_answer_is_read_and_its_connection_not_kept() -> None:
    server = _Stalled(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi")
    try:
        fast = _fast(server.port)

        async def read() -> tuple[bytes | None, int]:
            body = await fast.get("key", CREDENTIALS)
            return body, len(fast._pools.get(asyncio.get_running_loop(), []))

        assert asyncio.run(read()) == (b"hi", 0)
        assert server.closed_by_client.wait(5)
    finally:
        server.close()


def test_a_redirect_and_a_403_are_handed_to_obstore() -> None:
    for status in (b"301 Moved Permanently", b"403 Forbidden"):
        server = _Stalled(b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\n\r\n")
        try:
            fast = _fast(server.port)
            assert asyncio.run(fast.get("key", CREDENTIALS)) is None, status
        finally:
            server.close()


def test_a_stalled_answer_is_handed_to_obstore_after_the_timeout() -> None:
    server = _Stalled()
    try:
        fast = _fast(server.port, timeout=0.3)
        started = time.monotonic()
        assert asyncio.run(fast.get("key", CREDENTIALS)) is None
        assert 0.25 < time.monotonic() - started < 5
        assert server.closed_by_client.wait(5), "the timed-out connection is closed, not pooled"
    finally:
        server.close()


def test_a_refused_connection_is_handed_to_obstore() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    fast = _fast(port)
    assert asyncio.run(fast.get("key", CREDENTIALS)) is None
    assert fast.handed_over == 1


def test_a_deadline_cuts_a_stalled_batch_and_closes_its_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", CREDENTIALS[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CREDENTIALS[1])
    server = _Stalled()
    try:
        bucket = open_bucket(f"s3://bucket?endpoint_url=http://127.0.0.1:{server.port}&region=us-east-1&timeout=30")
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded), deadline(0.5):
            bucket.get_many(["a", "b"])
        assert time.monotonic() - started < 10
        assert server.closed_by_client.wait(5), "a cancelled request's connection is closed, not pooled"
        bucket.close()
    finally:
        server.close()


@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzEBEaDEXAMPLETOKEN"])
def test_the_signature_is_the_drivers_own_sigv4(token: str | None) -> None:
    fast = FastReads("127.0.0.1", 9000, "127.0.0.1:9000", "/bucket", "eu-west-3", 30.0)
    now = dt.datetime(2026, 12, 7, 8, 30, 15, tzinfo=dt.UTC)
    path = fast.path_of("a b/ünï~(x)+y")
    assert path == "/bucket/a%20b/%C3%BCn%C3%AF~%28x%29%2By"
    request = fast.request(path, (CREDENTIALS[0], CREDENTIALS[1], token), now.timestamp()).decode()
    head = dict(line.split(": ", 1) for line in request.split("\r\n")[1:] if ": " in line)
    expected = sigv4_headers(
        "GET", "127.0.0.1:9000", path, "", {}, "UNSIGNED-PAYLOAD",
        credentials=(CREDENTIALS[0], CREDENTIALS[1], token), region="eu-west-3", now=now,
    )
    assert request.startswith(f"GET {path} HTTP/1.1\r\n")
    assert head["Authorization"] == expected["authorization"]
    assert head["x-amz-date"] == expected["x-amz-date"]
    assert head.get("x-amz-security-token") == expected.get("x-amz-security-token")


def test_the_fast_path_is_off_where_obstore_must_read(monkeypatch: pytest.MonkeyPatch) -> None:
    assert fast_reads_for("https://s3.eu-west-3.amazonaws.com/bucket", "eu-west-3", 30, False) is None
    assert fast_reads_for("http://127.0.0.1:9000/bucket", "us-east-1", 30, True) is None  # a credential provider
    assert fast_reads_for("http://user:pass@127.0.0.1:9000/bucket", "us-east-1", 30, False) is None  # user info
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    assert fast_reads_for("http://127.0.0.1:9000/bucket", "us-east-1", 30, False) is None
    monkeypatch.delenv("HTTP_PROXY")
    assert fast_reads_for("http://127.0.0.1:9000/bucket", "us-east-1", 30, False) is not None


def test_the_opendal_engine_keeps_its_own_reads(s3_bucket: str, s3_query: str) -> None:
    pytest.importorskip("portable_opendal")
    bucket = open_bucket(f"s3://{s3_bucket}?{s3_query}&engine=opendal")
    assert _driver(bucket).fast_reads is None
    bucket.close()



# ---------------------------------------------------------------- the async face
def test_the_async_face_reads_on_the_callers_loop_with_no_thread(
    s3s: dict[str, str], prefix: str, obstore_relays: list[object]
) -> None:
    import portable.aio

    client = _s3s_client(s3s)
    bodies = _write_odd_keys(client, s3s["bucket"], prefix)

    async def main() -> None:
        bucket = portable.aio.open_bucket(
            f"s3://{s3s['bucket']}/{prefix}?endpoint_url={s3s['endpoint_url']}&region={s3s['region']}"
        )
        fast = _driver(bucket.sync).fast_reads
        assert fast is not None
        try:
            for key, body in bodies.items():
                assert await bucket.get(key) == body
            assert await bucket.get_many(list(bodies)) == bodies
            with pytest.raises(NotFound):
                await bucket.get("missing")
            assert await bucket.get_many(["plain", "missing"], missing_ok=True) == {"plain": bodies["plain"]}
            assert fast.handed_over == 0 and obstore_relays == [], "no read went through obstore or a relay thread"
            assert fast._pools.get(asyncio.get_running_loop()), "this loop's own connections, kept alive"
        finally:
            await bucket.aclose()

    asyncio.run(main())


def test_a_cancelled_async_read_closes_its_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    import portable.aio

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", CREDENTIALS[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CREDENTIALS[1])
    server = _Stalled()

    async def main() -> None:
        bucket = portable.aio.open_bucket(f"s3://bucket?endpoint_url=http://127.0.0.1:{server.port}&region=us-east-1")
        try:
            task = asyncio.ensure_future(bucket.get("a"))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await bucket.aclose()

    try:
        asyncio.run(main())
        assert server.closed_by_client.wait(5), "the cancelled request's connection is closed, not pooled"
    finally:
        server.close()
