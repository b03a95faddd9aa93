"""Fixtures for the stack emulator tests: a store in tmp_path and a scriptable in-process provider."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from emulator_support import Provider

from crhelper.emulator import StackEmulator, StackEvent


@pytest.fixture
def provider() -> Iterator[Provider]:
    p = Provider()
    yield p
    p.release.set()


@pytest.fixture
def emulator(tmp_path: Any) -> Iterator[StackEmulator]:
    with StackEmulator(tmp_path / "home") as instance:
        yield instance


@pytest.fixture
def events() -> list[StackEvent]:
    return []


