"""file:// never acts on a path outside its root, and never follows a symbolic link below it.

The layout of every test: ROOT/link -> ../outside (a folder with secret.txt),
ROOT/flink -> ../outside/secret.txt, ROOT/inner -> real (a link that stays inside
the root). Each operation through a link raises PermissionDenied naming it, and
leaves ../outside as it was.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from portable.errors import NotFound, PermissionDenied
from portable.storage import Bucket, open_bucket


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Bucket, Path, Path]:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    (root / "real").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"SECRET")
    (root / "real" / "obj").write_bytes(b"inside")
    os.symlink("../outside", root / "link")
    os.symlink("../outside/secret.txt", root / "flink")
    os.symlink("real", root / "inner")
    return open_bucket(f"file://{root}"), root, outside


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(info: pytest.ExceptionInfo[PermissionDenied], link: str) -> None:
    assert repr(link) in str(info.value), str(info.value)
    assert "symbolic link" in str(info.value)


@pytest.mark.parametrize("key", ["link/x", "link/sub/x", "flink", "inner/new"])
def test_put_through_a_link_is_refused_and_writes_nothing_outside(layout, key):
    bucket, root, outside = layout
    before = snapshot(outside), snapshot(root / "real")
    with pytest.raises(PermissionDenied) as info:
        bucket.put(key, b"evil")
    refused(info, key.split("/")[0])
    assert (snapshot(outside), snapshot(root / "real")) == before
    assert not any(p.name.startswith(".portable") for p in outside.rglob("*"))


@pytest.mark.parametrize("key", ["link/x", "flink", "inner/new"])
def test_streamed_write_through_a_link_is_refused(layout, key):
    bucket, _root, outside = layout
    before = snapshot(outside)
    with pytest.raises(PermissionDenied) as info, bucket.open(key, "wb") as out:
        out.write(b"evil")
    refused(info, key.split("/")[0])
    assert snapshot(outside) == before
    assert os.listdir(outside) == ["secret.txt"]


def test_put_if_none_match_over_a_file_link_is_refused_not_already_exists(layout):
    bucket, _root, outside = layout
    with pytest.raises(PermissionDenied):
        bucket.put("flink", b"x", if_none_match="*")
    assert (outside / "secret.txt").read_bytes() == b"SECRET"


@pytest.mark.parametrize("key", ["link/secret.txt", "flink", "inner/obj"])
def test_reads_through_a_link_are_refused(layout, key):
    bucket, _root, _outside = layout
    for read in (bucket.get, bucket.head, bucket.open, lambda k: bucket.get_range(k, 0, 3), bucket.exists):
        with pytest.raises(PermissionDenied) as info:
            read(key)
        refused(info, key.split("/")[0])


@pytest.mark.parametrize("key", ["link/secret.txt", "flink"])
def test_delete_through_a_link_is_refused_and_removes_nothing(layout, key):
    bucket, root, outside = layout
    with pytest.raises(PermissionDenied):
        bucket.delete(key)
    assert (outside / "secret.txt").read_bytes() == b"SECRET"
    assert (root / key.split("/")[0]).is_symlink()  # the link itself stays too


def test_batches_through_a_link_are_refused(layout):
    bucket, _root, outside = layout
    with pytest.raises(PermissionDenied):
        bucket.put_many({"ok": b"1", "link/planted": b"evil"})
    with pytest.raises(PermissionDenied):
        bucket.get_many(["link/secret.txt"])
    assert os.listdir(outside) == ["secret.txt"]


def test_delete_many_through_a_link_is_refused(layout):
    bucket, _root, outside = layout
    with pytest.raises(PermissionDenied):
        bucket.delete_many(["link/secret.txt"])
    assert (outside / "secret.txt").exists()


def test_copy_from_or_to_a_link_is_refused(layout):
    bucket, root, outside = layout
    bucket.put("plain", b"mine")
    with pytest.raises(PermissionDenied):
        bucket.copy("link/secret.txt", "stolen")
    assert not (root / "stolen").exists()
    with pytest.raises(PermissionDenied):
        bucket.copy("flink", "stolen")
    with pytest.raises(PermissionDenied):
        bucket.copy("plain", "link/planted")
    assert os.listdir(outside) == ["secret.txt"]
    with pytest.raises(PermissionDenied):
        bucket.copy_many({"plain": "link/planted"})
    assert os.listdir(outside) == ["secret.txt"]


def test_list_leaves_links_out_and_refuses_a_prefix_under_one(layout):
    bucket, _root, _outside = layout
    bucket.put("a/b", b"1")
    assert [i.key for i in bucket.list()] == ["a/b", "real/obj"]
    assert [i.key for i in bucket.list(delimiter="/")] == ["a/", "real/"]
    with pytest.raises(PermissionDenied):
        list(bucket.list("link/"))
    with pytest.raises(PermissionDenied):
        list(bucket.list("inner/o"))
    assert list(bucket.list("li")) == []


def test_a_link_swapped_in_for_a_folder_after_the_write_started_is_refused_at_commit(layout):
    """The stream holds its folder open: a rename-swap of the folder for a link cannot redirect it."""
    bucket, root, outside = layout
    with pytest.raises(PermissionDenied):
        bucket.get("link/secret.txt")
    out = bucket.open("real/later", "wb")
    out.write(b"data")
    os.rename(root / "real", root / "moved")
    os.symlink("../outside", root / "real")
    out.close()
    assert os.listdir(outside) == ["secret.txt"]
    assert (root / "moved" / "later").read_bytes() == b"data"  # it landed in the folder it opened
    with pytest.raises(PermissionDenied):
        bucket.get("real/later")


def test_the_root_itself_may_be_a_link(tmp_path):
    (tmp_path / "data").mkdir()
    os.symlink("data", tmp_path / "root-link")
    bucket = open_bucket(f"file://{tmp_path / 'root-link'}")
    bucket.put("k", b"v")
    assert (tmp_path / "data" / "k").read_bytes() == b"v"
    assert bucket.get("k") == b"v"


def test_a_fifo_is_not_an_object_and_does_not_hang(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    os.mkfifo(root / "pipe")
    bucket = open_bucket(f"file://{root}")
    with pytest.raises(NotFound):
        bucket.get("pipe")
    with pytest.raises(NotFound):
        bucket.head("pipe")
    assert list(bucket.list()) == []
