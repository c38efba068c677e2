"""docs/async.md runs: every fenced python block on its own, in a fresh working folder.

The FastAPI example needs FastAPI, which portable does not depend on: it is compiled (so a
syntax slip fails here) and run only where FastAPI is installed; the bare ASGI twin of the
same endpoint always runs.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.docs_pages import DOCS, Block, blocks, enter_workdir, run_block

PAGE = DOCS / "async.md"
PYTHON = blocks(PAGE, "python")


def test_the_page_has_its_examples_and_sections() -> None:
    assert len(PYTHON) >= 6
    text = PAGE.read_text(encoding="utf-8")
    for heading in ("## Storage", "## Streaming", "## A FastAPI endpoint", "## Consuming messages",
                    "## Threads and native engines", "## Cancellation"):
        assert f"\n{heading}\n" in text, heading
    assert any(b.marker == ("needs", "fastapi") for b in PYTHON)


def _marks(block: Block) -> list[pytest.MarkDecorator]:
    if block.marker is not None and block.marker[0] == "needs" and importlib.util.find_spec(block.marker[1]) is None:
        return [pytest.mark.skip(reason=f"{block.marker[1]} is not installed (the page's example needs it)")]
    return []


@pytest.mark.parametrize("block", [pytest.param(b, id=f"line{b.line}", marks=_marks(b)) for b in PYTHON])
def test_python_block_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    enter_workdir(PAGE, tmp_path, monkeypatch)
    run_block(PAGE, block)


@pytest.mark.parametrize("block", [b for b in PYTHON if b.marker is not None], ids=lambda b: f"line{b.line}")
def test_a_block_that_cannot_run_here_still_compiles(block: Block) -> None:
    compile(block.code, str(PAGE), "exec")
