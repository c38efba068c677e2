"""The compute contract on the embedded local:// launcher."""

from __future__ import annotations

from pathlib import Path

import pytest

from portable.testing.compute_suite import ComputeContract


class TestLocalContract(ComputeContract):
    @pytest.fixture
    def launcher_url(self, jobs_dir: Path) -> str:
        return f"local://{jobs_dir}?workers=4&grace=1&idle=10"
