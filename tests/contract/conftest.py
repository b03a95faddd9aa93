"""Fixtures for the contract tests: the project's pytest plugin fixtures and an isolated CRHELPER_HOME."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from crhelper.pytest_plugin import ros_event, ros_response_server, run_contract, stack_delivery, stack_emulator  # noqa: F401


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("CRHELPER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CRHELPER_BACKOFF_BASE", "0.02")
    monkeypatch.setenv("CRHELPER_BACKOFF_CAP", "0.1")
    monkeypatch.delenv("CRHELPER_ROUTER_BACKEND", raising=False)
    monkeypatch.delenv("CRHELPER_ROUTER_DB", raising=False)
    yield tmp_path / "home"
