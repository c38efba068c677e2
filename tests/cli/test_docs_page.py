"""docs/cli.md's first example runs as written, through the installed entry point, and prints what it says."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.cli.conftest import EXE, REPO, clean_env


def test_the_pages_example_runs_and_its_comments_hold(tmp_path):
    page = (REPO / "docs" / "cli.md").read_text()
    block = re.search(r"^```sh\n(.*?)^```$", page, re.MULTILINE | re.DOTALL)
    assert block is not None
    env = clean_env(tmp_path)
    env["PATH"] = f"{Path(EXE).parent}:{env['PATH']}"
    proc = subprocess.run(["bash", "-e", "-c", block.group(1)], cwd=tmp_path, env=env, capture_output=True,
                          timeout=180)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "copied 2 objects, 8 B in " in err and "synced 0 objects, 0 B in " in err and "; 2 skipped" in err
    assert '{"bytes": 8, "objects": 2, "url": "' in proc.stdout.decode()
    assert (tmp_path / "a.jpg").read_bytes() == b"one\n" and not (tmp_path / "only-jpg" / "2026" / "a.jpg").exists()
    assert not (tmp_path / "only-jpg" / "2026" / "b.png").exists()
    assert (tmp_path / "backup" / "photos" / "2026" / "b.png").exists()  # rm -r --dry-run kept it
