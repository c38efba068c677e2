"""az:// and abfs:// on Azurite: the storage contract, plus what only Azure Blob has."""

from __future__ import annotations

import pytest

from portable.testing.storage_suite import StorageContract


class TestBlobContract(StorageContract):
    xfail: dict[str, str] = {}

    @pytest.fixture
    def bucket_url(self, blob_container: str, unique_name: str, conn_query: str) -> str:
        return f"az://{blob_container}/{unique_name}?{conn_query}"
