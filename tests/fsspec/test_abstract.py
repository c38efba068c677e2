"""fsspec's own shipped abstract test suite (``fsspec.tests.abstract``) against BucketFileSystem
on mem://, file:// and S3 (moto).

Object storage has no empty directories: ``supports_empty_directories`` is False, which makes
fsspec's suite expect what s3fs and gcsfs do (a directory exists while objects are under it).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

abstract = pytest.importorskip("fsspec.tests.abstract", reason="a dev dependency (pip install -e '.[dev]')")

from portable.fsspec import BucketFileSystem  # noqa: E402
from portable.storage import open_bucket  # noqa: E402

from .conftest import STORAGES, bucket_url  # noqa: E402


class BucketFixtures(abstract.AbstractFixtures):  # type: ignore[misc,name-defined]
    """The fixtures fsspec's mix-ins need, over a fresh bucket per test."""

    @pytest.fixture(params=STORAGES)
    def fs(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BucketFileSystem]:
        with open_bucket(bucket_url(request.param, tmp_path, request)) as bucket:
            yield bucket.fs()

    @pytest.fixture
    def fs_join(self) -> Callable[..., str]:
        return posixpath.join

    @pytest.fixture
    def fs_path(self) -> str:
        return "root"

    @pytest.fixture
    def supports_empty_directories(self) -> bool:
        # Object storage keeps objects, not directories: "a/" exists while a key under it does.
        return False


class TestBucketCopy(abstract.AbstractCopyTests, BucketFixtures):  # type: ignore[misc,name-defined]
    pass


class TestBucketGet(abstract.AbstractGetTests, BucketFixtures):  # type: ignore[misc,name-defined]
    pass


class TestBucketPut(abstract.AbstractPutTests, BucketFixtures):  # type: ignore[misc,name-defined]
    pass


class TestBucketOpen(abstract.AbstractOpenTests, BucketFixtures):  # type: ignore[misc,name-defined]
    pass


class TestBucketPipe(abstract.AbstractPipeTests, BucketFixtures):  # type: ignore[misc,name-defined]
    pass
