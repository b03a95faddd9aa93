"""Fixtures of the local ROS API tests: isolated state, a started LocalRos bound to in-process providers."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from crhelper.emulator.delivery_bindings import Bindings
from crhelper.ros.server import LocalRos
from ros_support import PROVIDERS, TOKEN


@pytest.fixture(autouse=True)
def home(stack_home: Path) -> Path:
    """Every test gets its own CRHELPER_HOME; provider responses retry quickly and log quietly."""
    return stack_home


@pytest.fixture
def ros(home: Path) -> Iterator[LocalRos]:
    """The local ROS on a free port, Custom::Echo bound to the in-process echo provider."""
    bindings = Bindings(providers={TOKEN: f"{PROVIDERS}:provider"}, mode="inprocess")
    with LocalRos(home=home, bindings=bindings, capture_output=True) as server:
        yield server
