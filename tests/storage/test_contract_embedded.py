"""The storage contract on the embedded providers: the executable specification."""

import pytest

from portable.testing.storage_suite import StorageContract


class TestMemory(StorageContract):
    @pytest.fixture
    def bucket_url(self, unique_name: str) -> str:
        return f"mem://{unique_name}"


class TestFile(StorageContract):
    xfail = {
        "test_key_and_prefix_coexist": "a file system path cannot be both a file and a folder",
    }

    @pytest.fixture
    def bucket_url(self, tmp_path) -> str:
        return f"file://{tmp_path / 'bucket'}"
