"""The storage contract on the embedded providers: the executable specification."""

import pytest

from portable.embedded.file import FileStorage
from portable.testing.storage_suite import StorageContract


class TestMemory(StorageContract):
    @pytest.fixture
    def bucket_url(self, unique_name: str) -> str:
        return f"mem://{unique_name}"


class TestFile(StorageContract):
    xfail = dict(FileStorage.known_differences)

    @pytest.fixture
    def bucket_url(self, tmp_path) -> str:
        return f"file://{tmp_path / 'bucket'}"
