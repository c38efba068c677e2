"""docs/cost.md: its example runs, its settings block is valid, and its projection table is what
``project`` computes from the price table (so the page cannot drift from the code)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from portable.cost import PRICES, Traffic, load_cost_settings, project
from tests.docs_pages import DOCS, blocks, enter_workdir, run_block

PAGE = DOCS / "cost.md"


@pytest.mark.parametrize("block", blocks(PAGE, "python"), ids=lambda b: f"line{b.line}")
def test_python_blocks_run(block: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    enter_workdir(PAGE, tmp_path, monkeypatch)
    run_block(PAGE, block)  # type: ignore[arg-type]
    assert (tmp_path / "run-cost.json").is_file()


def test_the_settings_block_is_valid(tmp_path: Path) -> None:
    settings_block = next(b for b in blocks(PAGE, "") if b.code.startswith("[cost]"))
    path = tmp_path / "cost.toml"
    path.write_text(settings_block.code)
    settings = load_cost_settings(path)
    assert settings.service_for("s3").service == "s3-express"
    assert settings.prices["s3-standard"].price_of("tier1") == 0.0000045


def test_the_projection_table_matches_project() -> None:
    text = PAGE.read_text(encoding="utf-8")
    table = text[text.index("**200 M GETs a day"):]
    shown = {m.group(1).strip(): float(m.group(2).replace(",", ""))
             for m in re.finditer(r"^\| ([^|]+) \| [^|]+ \| [\d,]+ \| ([\d,.]+) \|", table, re.MULTILINE)}  # fmt: skip
    rows = project(Traffic(gets_per_day=200e6, object_size=1024), ["s3", "gcs", "azure", "s3express"])
    names = {"s3-standard": "S3 Standard", "gcs-standard": "GCS Standard",
             "azure-blob-hot": "Azure Blob Hot (LRS)", "s3-express": "S3 Express One Zone"}  # fmt: skip
    assert {names[r.service]: round(r.usd, 2) for r in rows} == shown
    assert all(PRICES[r.service].as_of in table for r in rows)
    egress = project(Traffic(gets_per_day=200e6, object_size=1024, egress="internet"), ["s3", "gcs", "azure"])
    for r in egress:
        assert f"${r.items['egress']:,.2f}" in table
