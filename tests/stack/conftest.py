"""Fixtures for the local ROS (`crhelper stack`) tests: isolated state, fast retries, quiet providers."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own CRHELPER_HOME; provider responses retry quickly and log quietly."""
    monkeypatch.setenv("CRHELPER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CRHELPER_BACKOFF_BASE", "0.02")
    monkeypatch.setenv("CRHELPER_BACKOFF_CAP", "0.1")
    monkeypatch.setenv("CRHELPER_LOG_LEVEL", "WARNING")
    monkeypatch.delenv("CRHELPER_ROUTER_BACKEND", raising=False)
    monkeypatch.delenv("CRHELPER_ROUTER_DB", raising=False)
    yield tmp_path / "home"
