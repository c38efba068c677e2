"""Helpers of the Azure adapter tests (imported by conftest.py and the test modules)."""

from __future__ import annotations

from typing import Any

CONNECTION_ENV = "PORTABLE_TEST_AZURITE_CONNECTION_STRING"
KEY_ENV = "PORTABLE_TEST_AZURITE_ACCOUNT_KEY"


def blob_service(azure: dict[str, str]) -> Any:
    """A raw, synchronous BlobServiceClient on Azurite (for setting up and checking)."""
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient.from_connection_string(azure["connection_string"])


def queue_service(azure: dict[str, str]) -> Any:
    """A raw, synchronous QueueServiceClient on Azurite."""
    from azure.storage.queue import QueueServiceClient

    return QueueServiceClient.from_connection_string(azure["connection_string"])


class StubServer:
    """A local HTTP server that answers every request with one canned error, and counts them.

    It stands in for an unhealthy Azure endpoint: the SDK under test talks to
    it over the wire, so the count shows how many attempts really went out.
    """

    def __init__(self, status: int, error_code: str = "", headers: dict[str, str] | None = None, delay: float = 0.0) -> None:
        import http.server
        import threading

        self.requests = 0
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                stub.requests += 1
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                if delay:
                    stub.stopped.wait(delay)
                body = (
                    f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{error_code}</Code>'
                    "<Message>stub</Message></Error>"
                ).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                if error_code:
                    self.send_header("x-ms-error-code", error_code)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.stopped = threading.Event()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def endpoint(self, account: str = "devstoreaccount1") -> str:
        return f"http://127.0.0.1:{self.port}/{account}"

    def close(self) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()

