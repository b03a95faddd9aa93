"""Shared fixtures: the capturing ResponseURL server that checks ROS's rules on every response."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from crhelper import Provider
from crhelper.testing import ResponseServer

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"reference material not found at {SHARED}; CI keeps shared/ beside the checkout")
    return SHARED


@pytest.fixture(scope="session")
def required_python() -> Callable[[str], str]:
    """`find(version)`: that Python's interpreter (PATH, pyenv), as FC runtimes and .ci/run find it;
    a test without it skips with the reason, and fails under CI=true (CI machines carry 3.10 and 3.12)."""
    import os

    from crhelper.local.processes import find_python

    def find(version: str) -> str:
        found = find_python(version)
        if found is None:
            message = f"Python {version} is not on this machine (PATH, pyenv)"
            if os.environ.get("CI") == "true":
                pytest.fail(f"{message} and CI=true")
            pytest.skip(message)
        return found

    return find


WHEELHOUSE_ENV = "CRHELPER_WHEELHOUSE_PY312"


@pytest.fixture
def wheelhouse() -> Path:
    """The folder of cp312 wheels `.ci/run` downloads (`$CRHELPER_WHEELHOUSE_PY312`): packages for
    python3.12 are built from it offline. Skips without one; fails under CI=true."""
    import os

    folder = os.environ.get(WHEELHOUSE_ENV, "")
    if not folder or not any(Path(folder).glob("pydantic_core-*cp312*.whl")):
        message = f"{WHEELHOUSE_ENV} names no folder of cp312 wheels (.ci/run downloads one)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message} and CI=true")
        pytest.skip(message)
    return Path(folder)


@pytest.fixture
def response_server(request: pytest.FixtureRequest) -> Iterator[ResponseServer]:
    """A real HTTP ResponseURL server; any protocol violation it saw fails the test at teardown,
    unless the test is marked `allow_violations` (tests that send bad responses on purpose)."""
    with ResponseServer() as server:
        yield server
    if request.node.get_closest_marker("allow_violations") is None:
        assert server.violations == [], f"protocol violations: {server.violations}"


@pytest.fixture()
def providers() -> Iterator[Callable[..., Provider]]:
    """`make(**kw)` builds a Provider that is closed (scheduler, store) when the test ends."""
    made: list[Provider] = []

    def make(**kw: Any) -> Provider:
        provider = Provider(**kw)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep every test's persisted state out of the user's ~/.crhelper."""
    monkeypatch.setenv("CRHELPER_HOME", str(tmp_path_factory.mktemp("crhelper-home")))


@pytest.fixture
def stack_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A CRHELPER_HOME of the test's own for stack runs (tests/stack, tests/ros, the emulator's
    fault tests): provider responses retry quickly, providers log quietly, no router settings of
    the machine's user leak in."""
    monkeypatch.setenv("CRHELPER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CRHELPER_BACKOFF_BASE", "0.02")
    monkeypatch.setenv("CRHELPER_BACKOFF_CAP", "0.1")
    monkeypatch.setenv("CRHELPER_LOG_LEVEL", "WARNING")
    monkeypatch.delenv("CRHELPER_ROUTER_BACKEND", raising=False)
    monkeypatch.delenv("CRHELPER_ROUTER_DB", raising=False)
    return tmp_path / "home"


@pytest.fixture(autouse=True)
def _framework_logging_restored() -> Iterator[None]:
    """A provider's first request attaches the framework's JSON handler and stops propagation
    (`crhelper.logs.configure`): put the `crhelper` logger back after each test, so a later test's
    `caplog` sees the records whatever ran before it."""
    logger = logging.getLogger("crhelper")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    yield
    logger.handlers[:], logger.propagate, logger.level = saved[0], saved[1], saved[2]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "allow_violations: the test provokes protocol violations on purpose")
    config.addinivalue_line("markers", "slow: real subprocesses, signals or long model checks; skipped by the quick subset -m 'not slow'")
