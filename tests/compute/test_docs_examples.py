"""docs/compute.md runs: every fenced python block, every `portable jobs` command, the TOML,
the capability table and the measured figures.

Each python block runs on its own (a reader copies one block, not the page), in a fresh
working folder holding the page's TOML blocks as ``./portable.toml`` and the blocks marked
``<!-- file: NAME -->`` as files, so a block can run the job script shown before it. Blocks
run on ``local://`` in that folder; afterwards every local:// supervisor the block started is
stopped (``launcher.driver.stop_supervisor()``), so no process is left behind. A block marked
``<!-- needs: dask -->`` starts a Dask LocalCluster (10-15 s on 2 cores): it runs when
``PORTABLE_TEST_DASK_DOCS=1``; tests/contrib/dask runs the same calls on every CI run. A
traceback points at the line of docs/compute.md that failed.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from portable import cli
from portable.compute import Launcher
from portable.config import load_profile
from portable.embedded.localjobs import LocalLauncher
from tests.docs_pages import Block, enter_workdir
from tests.docs_pages import blocks as page_blocks

from .conftest import process_gone

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "compute.md"
BENCH = ROOT / "bench" / "results" / "jobs.md"
_RUN_DASK = os.environ.get("PORTABLE_TEST_DASK_DOCS") == "1"


def blocks(language: str) -> list[Block]:
    return page_blocks(PAGE, language)


PYTHON = blocks("python")
FILES = {b.marker[1]: b.code for b in PYTHON if b.marker and b.marker[0] == "file"}


def stop_supervisors(folder: Path) -> None:
    """Stop every local:// supervisor serving a state folder under ``folder``; wait until it is gone."""
    for lock in folder.rglob("supervisor.lock"):
        pid = LocalLauncher(lock.parent).stop_supervisor(grace=0.2, timeout=30)
        if pid is not None:
            end = time.monotonic() + 10
            while not process_gone(pid) and time.monotonic() < end:
                time.sleep(0.01)
            assert process_gone(pid), f"supervisor {pid} of {lock.parent} is still alive"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh working folder with the page's TOML as portable.toml and its files; no PORTABLE_* overrides."""
    enter_workdir(PAGE, tmp_path, monkeypatch)
    for name, code in FILES.items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    try:
        yield tmp_path
    finally:
        stop_supervisors(tmp_path)


def test_the_page_has_its_examples() -> None:
    assert len(PYTHON) >= 8
    assert "sum_job.py" in FILES
    assert len(blocks("console")) == 1 and len(blocks("toml")) >= 2
    # every python block either runs here or says why not
    for block in PYTHON:
        assert block.marker in (None, ("needs", "dask")) or block.marker[0] == "file", block


def test_blocks_do_not_share_memory_queues() -> None:
    """mem://NAME is shared by the whole process: two blocks on one name would see each other's messages."""
    owner: dict[str, int] = {}
    for block in PYTHON:
        for name in set(re.findall(r"mem://([\w.-]+)", block.code)):
            assert owner.setdefault(name, block.line) == block.line, (
                f"mem://{name} is used at lines {owner[name]} and {block.line}"
            )


def _needs(block: Block) -> list[pytest.MarkDecorator]:
    if block.marker == ("needs", "dask") and not _RUN_DASK:
        reason = (
            "starts a Dask LocalCluster (10-15 s on 2 cores); set PORTABLE_TEST_DASK_DOCS=1 to run it here. "
            "tests/contrib/dask/test_dask_launcher.py runs the same calls"
        )
        return [pytest.mark.skip(reason=reason)]
    return []


@pytest.mark.parametrize(
    "block", [pytest.param(b, id=f"line{b.line}", marks=_needs(b)) for b in PYTHON]
)
def test_python_block_runs(block: Block, workdir: Path) -> None:
    if block.marker == ("needs", "dask"):
        pytest.importorskip("portable_dask", reason="portable-cloud-dask (contrib/dask) is not installed")
    program = compile("\n" * (block.line - 1) + block.code, str(PAGE), "exec")
    namespace: dict[str, object] = {"__name__": f"docs_compute_line{block.line}"}
    try:
        exec(program, namespace)
    finally:
        for value in namespace.values():
            if isinstance(value, Launcher) and isinstance(value.driver, LocalLauncher):
                value.driver.stop_supervisor(grace=0.2)
                assert value.driver.supervisor_pid() is None


def test_the_job_script_resumes_from_its_checkpoint_when_run_by_hand(workdir: Path) -> None:
    """sum_job.py run twice by hand: the second run starts from the first's last save."""
    first = subprocess.run(
        [sys.executable, "sum_job.py"], capture_output=True, text=True, timeout=60, check=True
    )
    assert first.stdout.splitlines() == ["starting at 1", "total 500500"]
    again = subprocess.run(
        [sys.executable, "sum_job.py"], capture_output=True, text=True, timeout=60, check=True
    )
    assert again.stdout.splitlines() == ["starting at 1001", "total 500500"]


def test_the_toml_is_a_valid_configuration(workdir: Path) -> None:
    nightly = load_profile("nightly")
    assert nightly.jobs == "local://./.portable/jobs?workers=2&grace=5"
    assert nightly.requires == ("detached", "preempt")
    assert load_profile("aws").jobs.startswith("batch://etl-queue?job_definition=etl")
    for block in blocks("toml"):
        tomllib.loads(block.code)


def test_jobs_commands_run(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each `$ portable ...` line runs through cli.main; `VAR=$(...)` keeps its output for `$VAR`,
    `python` is this interpreter, and the lines shown after a command are in its output."""
    (console,) = blocks("console")
    variables: dict[str, str] = {}
    ran = 0
    expected: list[str] = []
    output = ""

    def check_expected() -> None:
        for line in expected:
            assert line in output.splitlines(), f"{line!r} not in the output {output!r}"

    for line in console.code.splitlines():
        if not line.startswith("$ "):
            expected.append(line)
            continue
        check_expected()
        expected = []
        command = line[2:]
        assign = re.fullmatch(r"(\w+)=\$\((.*)\)", command)
        if assign:
            command = assign.group(2)
        command = re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], command)
        argv = [sys.executable if arg == "python" else arg for arg in shlex.split(command)]
        assert argv[0] == "portable", line
        code = cli.main(argv[1:])
        captured = capsys.readouterr()
        assert code == 0, f"{line}: {captured.err}"
        output = captured.out
        if assign:
            variables[assign.group(1)] = output.strip()
        ran += 1
    check_expected()
    assert ran >= 6
    # the profile's launcher (the default local:// folder here) holds what the commands did
    hello, slow, check = load_list(capsys)
    assert (hello["name"], hello["state"], hello["idempotency_key"]) == (
        "hello",
        "SUCCEEDED",
        "hello-2026-11-30",
    )
    assert slow["name"] == "slow" and slow["state"] in ("PENDING", "RUNNING", "CANCELLED")
    assert (check["name"], check["state"]) == ("check", "SUCCEEDED")
    assert variables["JOB"] == hello["job_id"] and variables["SLOW"] == slow["job_id"]


def load_list(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    assert cli.main(["jobs", "list", "--json"]) == 0
    listed: list[dict[str, object]] = json.loads(capsys.readouterr().out)
    return listed


def _capability_rows() -> dict[str, dict[str, bool]]:
    """The page's capability table: {provider column: {capability: has it}}."""
    text = PAGE.read_text(encoding="utf-8")
    table = text.split("| capability | local:// | dask:// | batch:// |", 1)[1].split("\n\n", 1)[0]
    columns = ["local", "dask", "batch"]
    found: dict[str, dict[str, bool]] = {c: {} for c in columns}
    for row in table.strip().splitlines()[1:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        names = re.findall(r"^`(\w+)`|, `(\w+)`", cells[0])
        for first, later in names:
            for column, cell in zip(columns, cells[1:], strict=True):
                found[column][first or later] = cell == "yes"
    return found


@pytest.mark.parametrize(
    ("column", "target"),
    [
        ("local", "portable.embedded.localjobs:LocalLauncher"),
        ("dask", "portable_dask.launcher:DaskLauncher"),
        ("batch", "portable_aws.batch:BatchLauncher"),
    ],
)
def test_the_capability_table_is_the_drivers(column: str, target: str) -> None:
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        pytest.skip(f"{module_name} is not installed: {exc}")
    capabilities = getattr(module, class_name).capabilities
    table = _capability_rows()[column]
    assert set(table) == capabilities.flag_names()
    assert {name for name, has in table.items() if has} == capabilities.supported()


def test_the_measured_figures_are_the_benchmarks() -> None:
    """Each median in bench/results/jobs.md appears, rounded, in the page's table."""
    text = PAGE.read_text(encoding="utf-8")
    measured = text.split("## Measured", 1)[1]
    medians = re.findall(
        r"^\| [^|]+ \| ([0-9.]+) \| [0-9.]+ \| [0-9.]+ \| ([0-9.]+) \|",
        BENCH.read_text(),
        re.MULTILINE,
    )
    assert len(medians) == 8
    for median, ratio in medians:
        assert f": {round(float(median))} (" in measured, (
            f"median {median} of {BENCH.name} is not on the page"
        )
        if ratio != "1.0":
            assert f"| {float(ratio):.2f} |" in measured, (
                f"ratio {ratio} of {BENCH.name} is not on the page"
            )
