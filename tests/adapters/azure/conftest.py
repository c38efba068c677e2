"""Fixtures of the Azure adapter tests: one Azurite per session (tests/emulators).

The drivers read secrets only from the environment, so the session puts
Azurite's connection string and account key into two variables of its own
and the URLs name them (``connection_string_env=``, ``account_key_env=``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from azure_support import CONNECTION_ENV, KEY_ENV, StubServer, blob_service, queue_service


@pytest.fixture(scope="session")
def azure(azurite: Any) -> Iterator[dict[str, str]]:
    """Azurite's endpoints and account, with its secrets in the environment for the session."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CONNECTION_ENV, azurite.endpoints["connection_string"])
        mp.setenv(KEY_ENV, azurite.endpoints["account_key"])
        for name in (
            "AZURE_STORAGE_CONNECTION_STRING",
            "AZURE_STORAGE_ACCOUNT_KEY",
            "AZURE_STORAGE_SAS_TOKEN",
            "AZURE_STORAGE_ACCOUNT_NAME",
        ):
            mp.delenv(name, raising=False)
        yield {
            "blob_endpoint": azurite.endpoints["blob_endpoint"],
            "queue_endpoint": azurite.endpoints["queue_endpoint"],
            "account": azurite.endpoints["account_name"],
            "connection_string": azurite.endpoints["connection_string"],
        }


@pytest.fixture(scope="session")
def blob_container(azure: dict[str, str]) -> str:
    """One container for the session; each test works under its own prefix."""
    name = f"pt-{uuid.uuid4().hex[:12]}"
    blob_service(azure).create_container(name)
    return name


@pytest.fixture(scope="session")
def conn_query() -> str:
    """The query that points a driver at Azurite through its connection string."""
    return f"connection_string_env={CONNECTION_ENV}"


@pytest.fixture
def stub_server() -> Iterator[Any]:
    """``stub_server(status, error_code, headers, delay)`` starts a StubServer, stopped after the test."""
    started: list[StubServer] = []

    def start(status: int, error_code: str = "", headers: dict[str, str] | None = None, delay: float = 0.0) -> StubServer:
        server = StubServer(status, error_code, headers, delay)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture(scope="session")
def queue_query(azure: dict[str, str]) -> str:
    """The query that points a queue driver at Azurite (the account is the URL's netloc)."""
    return f"queue_endpoint={azure['queue_endpoint']}&account_key_env={KEY_ENV}"


@pytest.fixture
def fresh_queue(azure: dict[str, str], unique_name: str) -> Iterator[str]:
    """A new, empty queue and its ``-poison`` queue, deleted after the test; yields the queue's name."""
    service = queue_service(azure)
    service.create_queue(unique_name)
    service.create_queue(f"{unique_name}-poison")
    yield unique_name
    for name in (unique_name, f"{unique_name}-poison"):
        try:
            service.delete_queue(name)
        except Exception:
            pass  # a test may have deleted it on purpose
