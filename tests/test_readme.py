"""The README's quickstart runs as written, on the embedded defaults, with no configuration."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_quickstart_runs_on_the_embedded_defaults(tmp_path):
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Quickstart\s+```python\n(.*?)```", readme, re.S)
    assert block is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTABLE_")}
    proc = subprocess.run(
        [sys.executable, "-c", block.group(1)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "reports/2026-11.json" in proc.stdout
    assert (tmp_path / ".portable" / "objects" / "reports" / "2026-11.json").read_bytes() == b'{"v": 2}'
    assert (tmp_path / ".portable" / "queue.db").exists()


def test_the_readme_names_exactly_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert "python3 -m portable demo" in readme
    assert "bash scripts/test" in readme
    assert "bash scripts/test" in (ROOT / ".ci" / "run").read_text()
