"""Bucket.abort_incomplete: what killed writers leave behind is found and removed, and nothing else is."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from portable.driver.storage import StorageDriver
from portable.embedded.memory import MemoryStorage
from portable.errors import Cancelled, InvalidArgument, InvalidKey, Unsupported
from portable.storage import Bucket, open_bucket

HOUR = dt.timedelta(hours=1)

KILLED_WRITER = """
import os, signal, sys
from portable.storage import open_bucket
bucket = open_bucket(sys.argv[1])
out = bucket.open(sys.argv[2], "wb", part_size=1)
out.write(b"half of an object")
os.kill(os.getpid(), signal.SIGKILL)
"""


def kill_a_writer(url: str, key: str) -> None:
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, url, key], capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()


def temps(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob(".portable-tmp-*"))


def age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "b"


@pytest.fixture
def bucket(root: Path) -> Bucket:
    return open_bucket(f"file://{root}")


def test_a_killed_writers_temp_file_is_removed_once_old_enough(root, bucket):
    kill_a_writer(f"file://{root}", "reports/2026/11.json")
    [left] = temps(root)
    assert left.parent == root / "reports" / "2026"
    assert list(bucket.list()) == []  # invisible...
    assert bucket.abort_incomplete(HOUR) == []  # ...and too young to go
    assert left.exists()
    age(left, 2 * 3600)
    assert bucket.list_incomplete(HOUR) == [f"reports/2026/11.json#{left.name}"]
    assert left.exists()  # a dry run removes nothing
    assert bucket.abort_incomplete(3600) == [f"reports/2026/11.json#{left.name}"]
    assert temps(root) == []
    assert not (root / "reports").exists()  # the folders the writer made went with it
    assert bucket.abort_incomplete(0) == []


def test_committed_objects_and_their_sidecars_are_never_removed(root, bucket):
    bucket.put("a/one", b"1", metadata={"m": "v"}, cache_control="no-cache")
    with bucket.open("a/two", "wb") as out:
        out.write(b"2")
    assert bucket.abort_incomplete(0) == []  # 0: every leftover, however young
    assert bucket.get("a/one") == b"1" and bucket.get("a/two") == b"2"
    assert bucket.head("a/one").metadata == {"m": "v"}
    assert bucket.head("a/one").cache_control == "no-cache"


def test_the_prefix_selects_by_key(root, bucket):
    for key in ("a/x", "a/y", "ab", "b/x"):
        kill_a_writer(f"file://{root}", key)
    for p in temps(root):
        age(p, 7200)
    removed = bucket.abort_incomplete(HOUR, prefix="a/")
    assert [r.split("#")[0] for r in removed] == ["a/x", "a/y"]
    assert [r.split("#")[0] for r in bucket.list_incomplete(HOUR, prefix="a")] == ["ab"]
    assert [r.split("#")[0] for r in bucket.abort_incomplete(HOUR)] == ["ab", "b/x"]
    assert temps(root) == []


def test_a_live_stream_younger_than_the_age_survives_and_commits(root, bucket):
    out = bucket.open("live", "wb", part_size=1)
    out.write(b"so far")
    assert bucket.abort_incomplete(HOUR) == []
    out.write(b", and the rest")
    out.close()
    assert bucket.get("live") == b"so far, and the rest"


def test_a_live_stream_whose_temp_file_was_removed_fails_at_commit_saying_so(root, bucket):
    out = bucket.open("live", "wb", part_size=1)
    out.write(b"so far")
    assert [r.split("#")[0] for r in bucket.abort_incomplete(0)] == ["live"]
    with pytest.raises(Cancelled, match=r"temporary file .* was removed before commit"):
        out.close()
    assert not bucket.exists("live")


def test_a_cut_name_is_removed_when_its_known_part_matches_and_left_when_it_may_not(root, bucket):
    long_name = "n" * 235  # fits a key segment, but not whole in a temporary file's name
    kill_a_writer(f"file://{root}", f"d/{long_name}")
    [left] = temps(root)
    assert "~" in left.name
    age(left, 7200)
    assert bucket.list_incomplete(HOUR, prefix=f"d/{long_name}") == []  # longer than the kept part: unknown
    assert bucket.abort_incomplete(HOUR, prefix="d/nnn") == [f"d/#{left.name}"]


def test_temp_files_of_older_versions_are_found_by_folder(root, bucket):
    (root / "f").mkdir(parents=True)
    old = root / "f" / ".portable-tmp-k2j4h5g6"
    old.write_bytes(b"x")
    age(old, 7200)
    assert bucket.abort_incomplete(HOUR, prefix="g") == []
    assert bucket.abort_incomplete(HOUR, prefix="f/") == ["f/#.portable-tmp-k2j4h5g6"]


def test_leftovers_behind_a_symbolic_link_are_not_touched(tmp_path, root, bucket):
    outside = tmp_path / "outside"
    outside.mkdir()
    theirs = outside / ".portable-tmp-abcd1234-x"
    theirs.write_bytes(b"not ours")
    age(theirs, 7200)
    root.mkdir()
    os.symlink("../outside", root / "link")
    os.symlink("../outside/.portable-tmp-abcd1234-x", root / ".portable-tmp-0000aaaa-y")
    assert bucket.abort_incomplete(0) == []
    assert theirs.exists() and (root / ".portable-tmp-0000aaaa-y").is_symlink()


def test_a_missing_root_has_no_leftovers(tmp_path):
    assert open_bucket(f"file://{tmp_path / 'never'}").abort_incomplete(0) == []


def test_mem_leaves_nothing():
    bucket = open_bucket("mem://")
    out = bucket.open("k", "wb")
    out.write(b"x")
    assert bucket.abort_incomplete(0) == [] and bucket.list_incomplete(0) == []
    out.close()


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "1h", None, dt.timedelta(seconds=-1), True])
def test_a_bad_age_is_refused_before_any_request(bad):
    with pytest.raises(InvalidArgument, match="older_than"):
        open_bucket("mem://").abort_incomplete(bad)


def test_a_bad_prefix_is_refused():
    with pytest.raises(InvalidKey):
        open_bucket("mem://").abort_incomplete(0, prefix="/abs")


class NoLeftoverListing(MemoryStorage):
    abort_incomplete = StorageDriver.abort_incomplete
    list_incomplete = StorageDriver.list_incomplete


def test_a_provider_that_cannot_list_leftovers_says_so():
    bucket = Bucket(NoLeftoverListing())
    with pytest.raises(Unsupported, match="cannot list incomplete writes"):
        bucket.abort_incomplete(HOUR)
    with pytest.raises(Unsupported):
        bucket.list_incomplete(HOUR)
