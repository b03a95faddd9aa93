"""Fixtures for the local ECS endpoint: a started LocalECS with transitions in tens of milliseconds
(`ecs_support.local_ecs`).

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

from crhelper.local.ecs_server import LocalECS  # noqa: E402
from ecs_support import local_ecs  # noqa: E402


@pytest.fixture(autouse=True)
def _no_metadata_service(monkeypatch: pytest.MonkeyPatch) -> None:
    """The credentials chain must never reach for 100.100.100.200 (cloud-apis.md §1.2)."""
    monkeypatch.setenv("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true")


@pytest.fixture()
def ecs(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalECS]:
    yield from local_ecs(monkeypatch)
