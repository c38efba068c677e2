"""Running a docs page's examples: its fenced blocks, a working folder holding its TOML, one block.

Each python block runs on its own (a reader copies one block, not the page), in a fresh
working folder with the page's TOML blocks as ``./portable.toml`` and no ``PORTABLE_*``
overrides from the environment. A traceback points at the page's line that failed.
A block may be preceded by a marker line ``<!-- KIND: VALUE -->`` (compute.md names files
and needs with it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
_FENCE = re.compile(r"^(?:<!-- (\w+): ([^>]*?) -->\n)?```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
ENVIRONMENT = (
    "PORTABLE_CONFIG",
    "PORTABLE_PROFILE",
    "PORTABLE_STORAGE_URL",
    "PORTABLE_QUEUE_URL",
    "PORTABLE_JOBS_URL",
    "PORTABLE_DEAD_LETTER_URL",
    "PORTABLE_IDEMPOTENCY_URL",
)


@dataclass(frozen=True)
class Block:
    line: int  # of the first code line
    language: str
    code: str
    marker: tuple[str, str] | None  # ("file", "sum_job.py"), ("needs", "dask")


def blocks(page: Path, language: str) -> list[Block]:
    """The blocks of ``page`` fenced as ``language``, in order."""
    text = page.read_text(encoding="utf-8")
    return [
        Block(
            text.count("\n", 0, m.start(4)) + 1,
            m.group(3),
            m.group(4),
            (m.group(1), m.group(2).strip()) if m.group(1) else None,
        )
        for m in _FENCE.finditer(text)
        if m.group(3) == language
    ]


def enter_workdir(page: Path, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``folder`` the working folder, holding ``page``'s TOML as portable.toml (PORTABLE_CONFIG)."""
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(folder)
    config = folder / "portable.toml"
    config.write_text("\n".join(b.code for b in blocks(page, "toml")), encoding="utf-8")
    monkeypatch.setenv("PORTABLE_CONFIG", str(config))


def run_block(page: Path, block: Block) -> None:
    """Run one python block as its own module; a traceback names the page's line."""
    program = compile("\n" * (block.line - 1) + block.code, str(page), "exec")
    exec(program, {"__name__": f"docs_{page.stem}_line{block.line}"})
