"""Fixtures for the local ECS endpoint: a started LocalECS with transitions in tens of milliseconds.

This folder and tests/cloud go on sys.path so `ecs_support` and `cloud_support` import."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

HERE = Path(__file__).resolve().parent
for folder in (HERE, HERE.parent / "cloud"):  # ecs_support; cloud_support (the optional-SDK rule)
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from crhelper.local.ecs_server import EcsTimings, LocalECS  # noqa: E402

#: Fast enough for tests, slow enough that a poll sees each transitory status.
FAST = EcsTimings(pending=0.05, starting=0.05, stopping=0.05, forced_stopping=0.02)


@pytest.fixture(autouse=True)
def _no_metadata_service(monkeypatch: pytest.MonkeyPatch) -> None:
    """The credentials chain must never reach for 100.100.100.200 (cloud-apis.md §1.2)."""
    monkeypatch.setenv("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true")


@pytest.fixture()
def ecs() -> Iterator[LocalECS]:
    with LocalECS(timings=FAST, kill_grace=0.3) as server:
        yield server
