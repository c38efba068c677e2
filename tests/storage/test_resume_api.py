"""``open(key, "wb", resume=True)`` and ``upload``: validation, and the behaviour on file:// and mem://.

The kill-and-resume test on every provider's emulator is tests/storage/test_resume_kill.py;
the contract tests (every adapter) are in portable/testing/storage_suite.py.
"""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path
from typing import Any

import pytest

import portable.aio
from portable.errors import InvalidArgument, NotFound, Unsupported
from portable.storage import Bucket, open_bucket

PART = 64 * 1024


@pytest.fixture
def bucket(tmp_path: Path) -> Bucket:
    return open_bucket(f"file://{tmp_path}/objects")


def temp_files(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob(".portable-tmp-*"))


def dead_writer(bucket: Bucket, key: str, data: bytes) -> None:
    """A resumable writer that fails after writing ``data``: it keeps its parts."""
    with pytest.raises(RuntimeError), bucket.open(key, "wb", resume=True, part_size=PART) as out:
        out.write(data)
        raise RuntimeError("the writer died")


# ---------------------------------------------------------------- validation, before any request
def test_mem_refuses_resume_naming_why(tmp_path: Path) -> None:
    with pytest.raises(Unsupported, match="end with the process"):
        open_bucket("mem://").open("k", "wb", resume=True)
    with pytest.raises(Unsupported, match="end with the process"):
        open_bucket("mem://").upload("k", io.BytesIO(b"x"), resume=True)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"resume": "yes"}, InvalidArgument, "True or False"),
        ({"source": io.BytesIO(b"")}, InvalidArgument, "with resume=True"),
        ({"resume": True, "if_none_match": "*"}, Unsupported, "if_none_match"),
        ({"resume": True, "if_match": '"e"'}, Unsupported, "if_none_match / if_match"),
        ({"resume": True, "source": object()}, InvalidArgument, "seekable binary file"),
    ],
)
def test_bad_resume_arguments_are_refused(bucket: Bucket, kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        bucket.open("k", "wb", **kwargs)


def test_resume_is_for_writes(bucket: Bucket) -> None:
    with pytest.raises(InvalidArgument, match="mode 'wb'"):
        bucket.open("k", "rb", resume=True)  # type: ignore[call-overload]


def test_a_non_seekable_source_is_refused(bucket: Bucket) -> None:
    read_end, write_end = os.pipe()
    os.close(write_end)
    with open(read_end, "rb", buffering=0) as pipe, pytest.raises(InvalidArgument, match="seekable"):
        bucket.open("k", "wb", resume=True, source=pipe)


def test_upload_of_a_missing_path_is_not_found(bucket: Bucket, tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="does not exist"):
        bucket.upload("k", tmp_path / "nope.bin", resume=True)


# ---------------------------------------------------------------- file://
def test_a_killed_writer_leaves_one_temp_file_that_a_resume_continues(bucket: Bucket, tmp_path: Path) -> None:
    data = os.urandom(5 * PART + 17)
    dead_writer(bucket, "a/b.bin", data[: 3 * PART + 5])
    root = tmp_path / "objects"
    assert len(temp_files(root)) == 1
    assert list(bucket.list()) == []
    out: Any = bucket.open("a/b.bin", "wb", resume=True, part_size=PART)
    # the writer hands whole parts to the driver: the 5 bytes of a part not yet full died with it
    assert out.resumed_from == 3 * PART == out.tell()
    out.write(data[out.resumed_from :])
    out.close()
    assert bucket.get("a/b.bin") == data
    assert temp_files(root) == []


def test_upload_resumes_from_a_path_and_sends_only_the_rest(bucket: Bucket, tmp_path: Path) -> None:
    data = os.urandom(4 * PART)
    path = tmp_path / "src.bin"
    path.write_bytes(data)
    dead_writer(bucket, "up.bin", data[: 2 * PART])
    assert bucket.upload("up.bin", path, resume=True, part_size=PART)
    assert bucket.get("up.bin") == data


def test_a_changed_source_never_makes_a_mixed_object(bucket: Bucket) -> None:
    old = os.urandom(3 * PART)
    dead_writer(bucket, "c.bin", old)
    new = old[:PART] + os.urandom(2 * PART)
    source = io.BytesIO(new)
    out: Any = bucket.open("c.bin", "wb", resume=True, source=source, part_size=PART)
    assert out.resumed_from == PART == source.tell()
    out.write(source.read())
    out.close()
    assert bucket.get("c.bin") == new


def test_a_shorter_source_drops_the_parts_it_does_not_have(bucket: Bucket) -> None:
    dead_writer(bucket, "s.bin", b"z" * (3 * PART))
    source = io.BytesIO(b"z" * (PART + 3))
    out: Any = bucket.open("s.bin", "wb", resume=True, source=source, part_size=PART)
    assert out.resumed_from == PART
    out.write(source.read())
    out.close()
    assert bucket.get("s.bin") == b"z" * (PART + 3)


def test_abort_incomplete_removes_the_resumable_temp_file(bucket: Bucket, tmp_path: Path) -> None:
    dead_writer(bucket, "x/old.bin", b"o" * PART)
    assert bucket.list_incomplete(0) == [f"x/old.bin#{temp_files(tmp_path / 'objects')[0]}"]
    assert len(bucket.abort_incomplete(0)) == 1
    assert temp_files(tmp_path / "objects") == []
    out: Any = bucket.open("x/old.bin", "wb", resume=True, part_size=PART)
    assert out.resumed_from == 0
    out.abort()
    assert temp_files(tmp_path / "objects") == []


def test_a_plain_writer_still_aborts_on_error(bucket: Bucket, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), bucket.open("p.bin", "wb", part_size=PART) as out:
        out.write(b"p" * (2 * PART))
        raise RuntimeError("boom")
    assert temp_files(tmp_path / "objects") == []


# ---------------------------------------------------------------- the async face
def test_the_async_face_resumes_and_uploads(tmp_path: Path) -> None:
    data = os.urandom(4 * PART + 9)
    path = tmp_path / "src.bin"
    path.write_bytes(data)

    async def main() -> None:
        async with portable.aio.open_bucket(f"file://{tmp_path}/objects") as bucket:
            with pytest.raises(RuntimeError):
                async with bucket.open("as.bin", "wb", resume=True, part_size=PART) as out:
                    await out.write(data[: 2 * PART])
                    raise RuntimeError("the writer died")
            assert [o async for o in bucket.list()] == []
            with open(path, "rb") as source:
                out = await bucket.open("as.bin", "wb", resume=True, source=source, part_size=PART)
                assert out.resumed_from == 2 * PART == source.tell()
                await out.write(source.read())
                await out.close()
            assert await bucket.get("as.bin") == data
            dead = await bucket.open("up.bin", "wb", resume=True, part_size=PART)
            await dead.write(data[:PART])
            await dead._suspend()
            assert await bucket.upload("up.bin", path, resume=True, part_size=PART)
            assert await bucket.get("up.bin") == data
            with pytest.raises(Unsupported):
                async with portable.aio.open_bucket("mem://") as mem:
                    await mem.open("k", "wb", resume=True)

    asyncio.run(main())
    assert temp_files(tmp_path / "objects") == []
