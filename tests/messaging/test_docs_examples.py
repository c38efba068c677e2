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

PAGE = Path(__file__).resolve().parents[2] / "docs" / "messaging.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_ENVIRONMENT = (
    "PORTABLE_CONFIG",
    "PORTABLE_PROFILE",
    "PORTABLE_STORAGE_URL",
    "PORTABLE_QUEUE_URL",
    "PORTABLE_JOBS_URL",
    "PORTABLE_DEAD_LETTER_URL",
    "PORTABLE_IDEMPOTENCY_URL",
)


def fenced(language: str) -> list[tuple[int, str]]:
    """(line number of the first code line, code) of each block fenced as ``language``."""
    text = PAGE.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start(2)) + 1, m.group(2))
        for m in _FENCE.finditer(text)
        if m.group(1) == language
    ]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working folder holding the page's TOML as portable.toml; no PORTABLE_* overrides."""
    for name in _ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "portable.toml"
    config.write_text("\n".join(code for _, code in fenced("toml")), encoding="utf-8")
    monkeypatch.setenv("PORTABLE_CONFIG", str(config))
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


@pytest.mark.parametrize(("line", "code"), PYTHON, ids=[f"line{line}" for line, _ in PYTHON])
def test_python_block_runs(line: int, code: str, workdir: Path) -> None:
    program = compile("\n" * (line - 1) + code, str(PAGE), "exec")
    exec(program, {"__name__": f"docs_messaging_line{line}"})


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
