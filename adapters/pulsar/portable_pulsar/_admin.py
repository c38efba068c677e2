"""The few admin REST calls the driver makes (``/admin/v2``): create a subscription, read
stats, delete a topic. Standard library HTTP, no proxy, the JWT as a bearer token."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from portable.errors import ErrorCode

__all__ = ["AdminError", "admin_request"]


class AdminError(Exception):
    """A non-2xx answer of the broker's admin REST API (``status`` is the HTTP status)."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"Pulsar admin {method} {path} answered {status}: {body[:300]}")
        self.status = status

    @property
    def code(self) -> ErrorCode:
        if self.status == 404:
            return ErrorCode.NOT_FOUND
        if self.status == 409:
            return ErrorCode.ALREADY_EXISTS
        if self.status in (401, 403):
            return ErrorCode.PERMISSION_DENIED
        if self.status == 412:
            return ErrorCode.PRECONDITION_FAILED
        if self.status == 429:
            return ErrorCode.THROTTLED
        if self.status >= 500 or self.status == 0:
            return ErrorCode.UNAVAILABLE
        return ErrorCode.INVALID_ARGUMENT


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def admin_request(
    base: str, method: str, path: str, *, token: str | None, body: Any = None, timeout: float = 30.0
) -> Any:
    """One admin call; the decoded JSON answer (None for an empty one). AdminError otherwise.

    A connection failure is raised as the standard library's (URLError wraps ConnectionError
    and is classified UNAVAILABLE by the driver).
    """
    data = None if body is None else json.dumps(body).encode()
    headers = {"Accept": "application/json"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        raise AdminError(exc.code, method, path, exc.read().decode(errors="replace")) from None
    return json.loads(raw) if raw.strip() else None
