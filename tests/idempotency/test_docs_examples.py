"""docs/idempotency.md runs: every fenced python block, on its own, in a fresh working folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs_pages import Block, blocks, enter_workdir, run_block

PAGE = Path(__file__).resolve().parents[2] / "docs" / "idempotency.md"
BLOCKS = blocks(PAGE, "python")


def test_the_page_has_examples() -> None:
    assert BLOCKS


@pytest.mark.parametrize("block", BLOCKS, ids=[f"line{b.line}" for b in BLOCKS])
def test_block_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    enter_workdir(PAGE, tmp_path, monkeypatch)
    run_block(PAGE, block)
