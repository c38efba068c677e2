"""Just enough of the Kafka wire protocol to health-check a broker with no client library.

Three requests: ApiVersions (key 18, v0, which every broker answers), Metadata
(key 3) at the newest non-flexible version both sides share (v4..v8), which
lists the brokers a client would be sent to, and FindCoordinator (key 10, v1 or
v2), which answers COORDINATOR_LOAD_IN_PROGRESS until the broker has loaded its
group or transaction state. See the protocol guide at
kafka.apache.org/protocol for the layouts used here.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

API_VERSIONS = 18
METADATA = 3
FIND_COORDINATOR = 10
#: FindCoordinator's key types: a consumer group, a transactional id (also the
#: coordinator an idempotent producer's InitProducerId needs loaded)
GROUP, TRANSACTION = 0, 1
_CLIENT_ID = b"portable-emulator-harness"


class KafkaWireError(RuntimeError):
    """The broker answered, but not with what a healthy broker sends."""


@dataclass(frozen=True)
class Broker:
    node_id: int
    host: str
    port: int


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str | None:
        length = self.take(">h")
        if length < 0:
            return None
        raw = self.data[self.offset : self.offset + length]
        self.offset += length
        return raw.decode()


def _exchange(
    sock: socket.socket, api_key: int, version: int, correlation: int, body: bytes
) -> _Reader:
    header = struct.pack(">hhih", api_key, version, correlation, len(_CLIENT_ID)) + _CLIENT_ID
    frame = header + body
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    (size,) = struct.unpack(">i", _read_exactly(sock, 4))
    reader = _Reader(_read_exactly(sock, size))
    if reader.take(">i") != correlation:
        raise KafkaWireError("response correlation id does not match the request")
    return reader


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < count:
        chunk = sock.recv(count - len(chunks))
        if not chunk:
            raise KafkaWireError("broker closed the connection mid-response")
        chunks += chunk
    return bytes(chunks)


def api_versions(host: str, port: int, timeout: float = 5.0) -> dict[int, tuple[int, int]]:
    """ApiVersions v0: {api_key: (min_version, max_version)}; raises unless error_code is 0."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        return _api_versions(sock)


def _api_versions(sock: socket.socket) -> dict[int, tuple[int, int]]:
    reader = _exchange(sock, API_VERSIONS, 0, 1, b"")
    error = reader.take(">h")
    if error != 0:
        raise KafkaWireError(f"ApiVersions returned error code {error}")
    versions: dict[int, tuple[int, int]] = {}
    for _ in range(reader.take(">i")):
        key, low, high = reader.take(">h"), reader.take(">h"), reader.take(">h")
        versions[key] = (low, high)
    return versions


def metadata_brokers(host: str, port: int, timeout: float = 5.0) -> list[Broker]:
    """The brokers a Metadata request lists; empty while a KRaft broker is still fenced."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        versions = _api_versions(sock)
        if METADATA not in versions:
            raise KafkaWireError("broker does not offer the Metadata API")
        low, high = versions[METADATA]
        version = min(high, 8)
        if version < max(low, 4):
            raise KafkaWireError(f"no Metadata version in 4..8 is offered (broker: {low}..{high})")
        body = struct.pack(">i", -1) + b"\x00"  # all topics; no auto-creation
        if version >= 8:
            body += b"\x00\x00"  # no authorized-operations
        reader = _exchange(sock, METADATA, version, 2, body)
        reader.take(">i")  # throttle_time_ms
        brokers = []
        for _ in range(reader.take(">i")):
            node_id = reader.take(">i")
            broker_host = reader.string() or ""
            broker_port = reader.take(">i")
            reader.string()  # rack
            brokers.append(Broker(node_id, broker_host, broker_port))
        return brokers


def check_broker(host: str, port: int, timeout: float = 5.0) -> list[Broker]:
    """Raise unless the broker answers and advertises itself at exactly host:port."""
    brokers = metadata_brokers(host, port, timeout)
    if not any(b.host == host and b.port == port for b in brokers):
        raise KafkaWireError(f"broker at {host}:{port} advertises {brokers}, not itself")
    return brokers


def coordinator_ready(host: str, port: int, key_type: int, timeout: float = 5.0) -> None:
    """Raise unless FindCoordinator names a coordinator for ``key_type`` (:data:`GROUP`, :data:`TRANSACTION`).

    A fresh KRaft broker creates ``__consumer_offsets`` / ``__transaction_state``
    on the first such request and answers COORDINATOR_NOT_AVAILABLE (15) or
    COORDINATOR_LOAD_IN_PROGRESS (14) until their state is loaded; a group join
    or an idempotent producer's first send made meanwhile waits, which a test
    with a 20 s receive timeout then reads as lost messages.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        versions = _api_versions(sock)
        low, high = versions.get(FIND_COORDINATOR, (0, -1))
        version = min(high, 2)
        if version < max(low, 1):
            raise KafkaWireError(f"no FindCoordinator version in 1..2 is offered (broker: {low}..{high})")
        key = b"portable-emulator-harness"
        body = struct.pack(">h", len(key)) + key + struct.pack(">b", key_type)
        reader = _exchange(sock, FIND_COORDINATOR, version, 3, body)
        reader.take(">i")  # throttle_time_ms
        error = reader.take(">h")
        message = reader.string()
        if error != 0:
            raise KafkaWireError(f"FindCoordinator (key type {key_type}) returned error code {error}: {message}")

