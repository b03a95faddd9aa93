"""The packages type-check cleanly, so annotations stay true as the code changes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mypy_reports_no_errors() -> None:
    pytest.importorskip("mypy")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "crhelper", "handlers", "--ignore-missing-imports"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert result.returncode == 0, f"mypy found problems:\n{result.stdout}{result.stderr}"
