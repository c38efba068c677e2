"""docs/messaging.md runs: every fenced python block, every `portable ...` command, the TOML.

Each python block runs on its own (a reader copies one block, not the page), in a fresh
working folder, with the page's TOML blocks as ``./portable.toml``. A traceback points at
the line of docs/messaging.md that failed.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

from portable import cli
from portable.config import load_profile
from tests.docs_pages import DOCS, Block, blocks, enter_workdir, run_block

PAGE = DOCS / "messaging.md"


def fenced(language: str) -> list[tuple[int, str]]:
    """(line number of the first code line, code) of each block fenced as ``language``."""
    return [(b.line, b.code) for b in blocks(PAGE, language)]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working folder holding the page's TOML as portable.toml; no PORTABLE_* overrides."""
    enter_workdir(PAGE, tmp_path, monkeypatch)
    return tmp_path


PYTHON = fenced("python")


def test_the_page_has_its_examples() -> None:
    assert len(PYTHON) >= 8
    assert len(fenced("console")) >= 1 and len(fenced("toml")) >= 1


def test_blocks_do_not_share_memory_queues() -> None:
    """mem://NAME is shared by the whole process: two blocks on one name would see each other's messages."""
    owner: dict[str, int] = {}
    for line, code in PYTHON:
        for name in set(re.findall(r"mem://([\w.-]+)", code)):
            assert owner.setdefault(name, line) == line, f"mem://{name} is used at lines {owner[name]} and {line}"


@pytest.mark.parametrize("block", blocks(PAGE, "python"), ids=lambda b: f"line{b.line}")
def test_python_block_runs(block: Block, workdir: Path) -> None:
    run_block(PAGE, block)


def test_the_toml_is_a_valid_profile(workdir: Path) -> None:
    profile = load_profile("orders")
    assert profile.queue == "sqlite://./queue.db?name=orders"
    assert profile.requires == ("ordering", "nack_delay")
    for _, code in fenced("toml"):
        tomllib.loads(code)


def test_queue_commands_run(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    commands = [
        shlex.split(line[2:])
        for _, code in fenced("console")
        for line in code.splitlines()
        if line.startswith("$ portable ")
    ]
    assert len(commands) >= 5
    for argv in commands:
        assert cli.main(argv[1:]) == 0, f"{shlex.join(argv)}: {capsys.readouterr().err}"
    # receive listed both messages and gave them back, so stats counts them as available
    out = capsys.readouterr().out
    assert '"body": "{\\"order\\": 1}"' in out and '"kind": "order"' in out
    assert '"body": "{\\"order\\": 2}"' in out
    assert '"available": 2' in out
