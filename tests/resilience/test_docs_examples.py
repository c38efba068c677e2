"""docs/resilience.md runs: every fenced python block, and its TOML is a valid configuration.

Each python block runs on its own (a reader copies one block, not the page), in a fresh
working folder, with the page's TOML blocks as ``./portable.toml`` and no breakers left
over from other tests. A traceback points at the line of docs/resilience.md that failed.
"""

from __future__ import annotations

import importlib.util
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from portable.config import load_profile
from portable.embedded.localjobs import LocalLauncher
from portable.resilience import reset_breakers
from tests.docs_pages import DOCS, Block, blocks, enter_workdir, run_block

PAGE = DOCS / "resilience.md"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh working folder holding the page's TOML as portable.toml; no PORTABLE_* overrides.

    Afterwards, a local:// supervisor that a block started is stopped.
    """
    enter_workdir(PAGE, tmp_path, monkeypatch)
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


PYTHON = blocks(PAGE, "python")


def test_the_page_has_its_examples() -> None:
    assert len(PYTHON) >= 8
    assert len(blocks(PAGE, "toml")) >= 1


def _needs(block: Block) -> list[pytest.MarkDecorator]:
    """A block marked ``<!-- needs: tenacity -->`` is skipped where tenacity is not installed.

    tenacity is a dependency of the core distribution, so an installed checkout has it; an
    environment made before it was one skips the block instead of failing it.
    """
    if block.marker == ("needs", "tenacity") and importlib.util.find_spec("tenacity") is None:
        return [pytest.mark.skip(reason="tenacity is not installed (pip install -e . installs it)")]
    return []


@pytest.mark.parametrize("block", [pytest.param(b, id=f"line{b.line}", marks=_needs(b)) for b in PYTHON])
def test_python_block_runs(block: Block, workdir: Path) -> None:
    assert block.marker in (None, ("needs", "tenacity")), block
    run_block(PAGE, block)


def test_the_toml_is_a_valid_configuration(workdir: Path) -> None:
    for block in blocks(PAGE, "toml"):
        tomllib.loads(block.code)
    aws = load_profile("aws")
    assert aws.queue == "sqs://events?region=eu-west-1"
    assert aws.resilience.retry.timeout == 10 and aws.resilience.retry.max_retry_after == 60
    assert aws.resilience.breaker is not None and aws.resilience.breaker.half_open_probes == 1
    flaky = load_profile("flaky")
    assert flaky.storage.startswith("chaos+mem://") and flaky.resilience.retry.max_attempts == 8
