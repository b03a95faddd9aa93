"""Fixtures of the cloud tests: the capturing server (see cloud_support)."""

from __future__ import annotations

from typing import Iterator

import pytest
from cloud_support import CaptureServer


@pytest.fixture(scope="module")
def capture_server() -> Iterator[CaptureServer]:
    """One server for a whole module: the SDK calls of a module share it."""
    with CaptureServer() as server:
        yield server


@pytest.fixture
def capture(capture_server: CaptureServer) -> Iterator[CaptureServer]:
    """The module's server, with nothing recorded, no check and the default answers."""
    capture_server.requests.clear()
    capture_server.check, capture_server.replies = None, []
    yield capture_server
    capture_server.check, capture_server.replies = None, []


@pytest.fixture(autouse=True)
def _no_metadata_service(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Alibaba credentials chain must never reach for the ECS metadata address."""
    monkeypatch.setenv("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true")
