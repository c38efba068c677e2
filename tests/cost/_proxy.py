"""A counting HTTP proxy in front of moto: every request it receives, and failures on demand.

The client under test is pointed at the proxy (``endpoint_url``); each request is
recorded (method, path, query, headers) and forwarded to moto on a connection of
its own, unless a failure was armed for it (:meth:`CountingProxy.fail_next`): then
the proxy answers 503 SlowDown itself, the way S3 throttles, and moto never sees
it. Listens on a free port of 127.0.0.1; :meth:`close` stops it.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "content-length"}


@dataclass(frozen=True)
class Seen:
    """One request the proxy received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    failed: bool  # answered by the proxy with an injected failure; moto did not see it


Matcher = Callable[[Seen], bool]


class CountingProxy:
    """Forward to ``target`` (``http://host:port``), recording what passes."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._failures: list[tuple[Matcher, int, bytes]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return bytes(out)
                        out += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self) -> None:
                body = self._body()
                split = urlsplit(self.path)
                headers = {k: v for k, v in self.headers.items()}
                probe = Seen(self.command, split.path, parse_qs(split.query, keep_blank_values=True), headers, body, False)
                failure = proxy._take_failure(probe)
                if failure is not None:
                    status, payload = 503, failure
                    reply_headers = [("Content-Type", "application/xml")]
                    proxy._record(replace(probe, failed=True))
                else:
                    proxy._record(probe)
                    status, reply_headers, payload = proxy._forward(self.command, self.path, headers, body)
                self.send_response(status)
                for name, value in reply_headers:
                    if name.lower() not in _HOP:
                        self.send_header(name, value)
                if self.command == "HEAD":
                    length = next((v for k, v in reply_headers if k.lower() == "content-length"), "0")
                    self.send_header("Content-Length", length)
                else:
                    self.send_header("Content-Length", str(len(payload)))
                self.send_header("Connection", "close")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)
                self.close_connection = True

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="counting-proxy", daemon=True)
        self._thread.start()

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def _take_failure(self, seen: Seen) -> bytes | None:
        with self._lock:
            for i, (match, left, payload) in enumerate(self._failures):
                if match(seen):
                    if left <= 1:
                        del self._failures[i]
                    else:
                        self._failures[i] = (match, left - 1, payload)
                    return payload
        return None

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(self._host, self._port, timeout=60)
        try:
            sent = {k: v for k, v in headers.items() if k.lower() not in _HOP}
            sent["Content-Length"] = str(len(body))
            conn.request(method, path, body=body, headers=sent)
            resp = conn.getresponse()
            payload = resp.read()
            return resp.status, list(resp.getheaders()), payload
        finally:
            conn.close()

    def fail_next(self, match: Matcher, times: int = 1, payload: bytes | None = None) -> None:
        """Answer the next ``times`` requests ``match`` accepts with 503 SlowDown (not forwarded)."""
        body = payload or (
            b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b"<Message>Please reduce your request rate.</Message></Error>"
        )
        with self._lock:
            self._failures.append((match, times, body))

    def reset(self) -> None:
        with self._lock:
            self.seen.clear()

    def snapshot(self) -> list[Seen]:
        with self._lock:
            return list(self.seen)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
