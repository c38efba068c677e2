"""A file:// write killed between installing its metadata and its body.

file:// keeps an object's headers and metadata in a sidecar file, installed
by a rename just before the body's rename. A process killed between the two
(a preempted job saving its checkpoint) must leave the old object whole,
metadata included: a checkpoint whose step lives in metadata was unreadable
forever after such a kill (CI, test_count_to_1000_preempted_three_times).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from portable import open_bucket

# The child kills itself with SIGKILL at the chosen rename, as a preemption
# would at the worst moment; nothing after it runs (no except, no finally).
_CHILD = """
import os, signal, sys
import portable
root, kill_at, meta = sys.argv[1], sys.argv[2], sys.argv[3]
real_replace = os.replace
def replace(src, dst, *args, **kwargs):
    if kill_at == "body" and not str(src).endswith(".meta"):
        os.kill(os.getpid(), signal.SIGKILL)
    return real_replace(src, dst, *args, **kwargs)
os.replace = replace
real_unlink = os.unlink
def unlink(path, *args, **kwargs):
    if kill_at == "sidecar-unlink" and str(path).startswith(".portable-meta."):
        os.kill(os.getpid(), signal.SIGKILL)
    return real_unlink(path, *args, **kwargs)
os.unlink = unlink
bucket = portable.open_bucket("file://" + root)
bucket.put("obj", b"new body", metadata={"step": "2"} if meta == "yes" else None)
"""


def _kill_during_write(root: Path, kill_at: str, with_metadata: bool) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), kill_at, "yes" if with_metadata else "no"],
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()


def test_a_kill_before_the_body_rename_keeps_the_old_objects_metadata(tmp_path: Path) -> None:
    bucket = open_bucket(f"file://{tmp_path}")
    old_etag = bucket.put("obj", b"old body", metadata={"step": "1"}, content_type="text/plain")
    _kill_during_write(tmp_path, "body", with_metadata=True)

    assert bucket.get("obj") == b"old body"
    info = bucket.head("obj")
    assert info.etag == old_etag
    assert info.metadata == {"step": "1"}
    assert info.content_type == "text/plain"
    # the next writer that holds the old etag replaces it, and its metadata is its own
    new_etag = bucket.put("obj", b"next", metadata={"step": "3"}, if_match=old_etag)
    assert bucket.head("obj").metadata == {"step": "3"}
    assert bucket.head("obj").etag == new_etag
    # the kept record of the version before is not carried forward twice
    sidecars = [p for p in os.listdir(tmp_path) if p.startswith(".portable-meta.")]
    assert len(sidecars) == 1
    assert (tmp_path / sidecars[0]).read_text().count('"etag"') == 2


def test_a_kill_twice_in_a_row_still_keeps_the_old_metadata(tmp_path: Path) -> None:
    """A second killed write finds the first one's sidecar, whose own record names
    a body that never landed; it still carries the live version's record."""
    bucket = open_bucket(f"file://{tmp_path}")
    bucket.put("obj", b"old body", metadata={"step": "1"})
    _kill_during_write(tmp_path, "body", with_metadata=True)
    _kill_during_write(tmp_path, "body", with_metadata=True)
    assert bucket.head("obj").metadata == {"step": "1"}
    assert bucket.get("obj") == b"old body"


@pytest.mark.parametrize("kill_at", ["body", "sidecar-unlink"])
def test_a_killed_write_without_metadata_keeps_the_old_metadata_or_none_of_it(tmp_path: Path, kill_at: str) -> None:
    """A new version with no metadata removes the old sidecar only after its body
    is in place, so the old body never loses its metadata; once the new body is
    in, the stale sidecar names another etag and is not read as its metadata."""
    bucket = open_bucket(f"file://{tmp_path}")
    bucket.put("obj", b"old body", metadata={"step": "1"})
    _kill_during_write(tmp_path, kill_at, with_metadata=False)
    body = bucket.get("obj")
    info = bucket.head("obj")
    if kill_at == "body":
        assert (body, info.metadata) == (b"old body", {"step": "1"})
    else:
        assert (body, info.metadata) == (b"new body", {})
