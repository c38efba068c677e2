"""docs/outbox.md runs (every python block on its own), and portable.outbox's docstring examples pass."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

import portable.outbox
from tests.docs_pages import Block, blocks, enter_workdir, run_block

PAGE = Path(__file__).resolve().parents[2] / "docs" / "outbox.md"
BLOCKS = blocks(PAGE, "python")


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 1


@pytest.mark.parametrize("block", BLOCKS, ids=[f"line{b.line}" for b in BLOCKS])
def test_block_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    enter_workdir(PAGE, tmp_path, monkeypatch)
    run_block(PAGE, block)


def test_module_docstring_examples() -> None:
    result = doctest.testmod(portable.outbox, raise_on_error=False)
    assert result.attempted >= 5 and result.failed == 0
