"""docs/logging.md runs: every fenced python block on its own, in a fresh working folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from portable._logging import DOMAIN_LOGGERS
from tests.docs_pages import DOCS, Block, blocks, enter_workdir, run_block

PAGE = DOCS / "logging.md"
PYTHON = blocks(PAGE, "python")


def test_the_page_names_every_domain_logger() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for name in DOMAIN_LOGGERS.values():
        assert f"| `{name}` |" in text, name
    assert PYTHON


@pytest.mark.parametrize("block", [pytest.param(b, id=f"line{b.line}") for b in PYTHON])
def test_python_block_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    enter_workdir(PAGE, tmp_path, monkeypatch)
    run_block(PAGE, block)
