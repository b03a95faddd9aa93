"""Fixtures of the Custom::AppCluster tests (helpers in `appcenter_resource_support`): fast delays,
the home's supervisor (every process it started is stopped afterwards), a stack in the emulator."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from appcenter_resource_support import FAST, Stack
from crhelper.local.supervisor import SupervisorClient


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in FAST.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def supervisor(fast: None) -> Iterator[SupervisorClient]:
    client = SupervisorClient()
    yield client
    client.stop_all(grace=0.5)


@pytest.fixture
def stack(tmp_path: Path, supervisor: SupervisorClient) -> Iterator[Stack]:
    made = Stack(tmp_path)
    yield made
    made.close()
