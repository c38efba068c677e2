"""docs/resilience.md runs: every fenced python block, and its TOML is a valid configuration.

Each python block runs on its own (a reader copies one block, not the page), in a fresh
working folder, with the page's TOML blocks as ``./portable.toml`` and no breakers left
over from other tests. A traceback points at the line of docs/resilience.md that failed.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from portable.config import load_profile
from portable.embedded.localjobs import LocalLauncher
from portable.resilience import reset_breakers

PAGE = Path(__file__).resolve().parents[2] / "docs" / "resilience.md"
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
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh working folder holding the page's TOML as portable.toml; no PORTABLE_* overrides.

    Afterwards, a local:// supervisor that a block started is stopped.
    """
    for name in _ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "portable.toml"
    config.write_text("\n".join(code for _, code in fenced("toml")), encoding="utf-8")
    monkeypatch.setenv("PORTABLE_CONFIG", str(config))
    reset_breakers()
    try:
        yield tmp_path
    finally:
        reset_breakers()
        for pid_file in tmp_path.rglob("supervisor.pid"):
            LocalLauncher(pid_file.parent).stop_supervisor(grace=0.2, timeout=30)


@pytest.fixture(autouse=True)
def _quiet_consumer_logs(caplog: pytest.LogCaptureFixture) -> None:
    # the fault runs log every refused ack and lost lease; hundreds are expected
    caplog.set_level("ERROR", logger="portable.messaging")


PYTHON = fenced("python")


def test_the_page_has_its_examples() -> None:
    assert len(PYTHON) >= 8
    assert len(fenced("toml")) >= 1


@pytest.mark.parametrize(("line", "code"), PYTHON, ids=[f"line{line}" for line, _ in PYTHON])
def test_python_block_runs(line: int, code: str, workdir: Path) -> None:
    program = compile("\n" * (line - 1) + code, str(PAGE), "exec")
    exec(program, {"__name__": f"docs_resilience_line{line}"})


def test_the_toml_is_a_valid_configuration(workdir: Path) -> None:
    for _, code in fenced("toml"):
        tomllib.loads(code)
    aws = load_profile("aws")
    assert aws.queue == "sqs://events?region=eu-west-1"
    assert aws.resilience.retry.timeout == 10 and aws.resilience.retry.max_retry_after == 60
    assert aws.resilience.breaker is not None and aws.resilience.breaker.half_open_probes == 1
    flaky = load_profile("flaky")
    assert flaky.storage.startswith("chaos+mem://") and flaky.resilience.retry.max_attempts == 8
