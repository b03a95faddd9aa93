"""Fixtures for the local ROS (`crhelper stack`) tests: isolated state, fast retries, quiet providers."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def home(stack_home: Path) -> Path:
    """Every test gets its own CRHELPER_HOME; provider responses retry quickly and log quietly."""
    return stack_home
