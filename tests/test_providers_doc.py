"""docs/providers.md stays true: its matrix is what the drivers declare."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_providers_matrix_matches_the_drivers_capabilities():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "providers_matrix.py")],
        capture_output=True, text=True, timeout=300, check=True,
    )
    doc = (ROOT / "docs" / "providers.md").read_text()
    start = doc.index("<!-- matrix:start")
    block = doc[doc.index("-->", start) + 3 : doc.index("<!-- matrix:end -->")]
    assert block.strip() == proc.stdout.strip(), (
        "docs/providers.md is out of date: run .venv/bin/python scripts/providers_matrix.py --write"
    )


def test_every_boolean_capability_is_documented_as_a_column():
    from portable.driver.compute import ComputeCapabilities
    from portable.driver.messaging import MessagingCapabilities
    from portable.driver.storage import StorageCapabilities

    doc = (ROOT / "docs" / "providers.md").read_text()
    for caps in (StorageCapabilities, MessagingCapabilities, ComputeCapabilities):
        for name in caps.flag_names():
            assert f"| {name} |" in doc or f" {name} |" in doc, name
