"""Fixtures for the HTTP transport tests: a real waitress server on 127.0.0.1:0 serving test providers.

This folder goes on sys.path so `http_providers` imports here (and by file path in `crhelper serve`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import http_providers  # noqa: E402

from crhelper.cli.serve import BackgroundServer  # noqa: E402
from crhelper.transports.http import wsgi_app  # noqa: E402
from crhelper.transports.http_config import EndpointConfig  # noqa: E402

PROVIDER_FILE = HERE / "http_providers.py"


@pytest.fixture(autouse=True)
def _fast_delivery(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Short delivery back-off (settings are read per request) and slow handlers released at teardown."""
    monkeypatch.setenv("CRHELPER_BACKOFF_BASE", "0.05")
    monkeypatch.setenv("CRHELPER_BACKOFF_CAP", "0.2")
    http_providers.RELEASE.clear()
    http_providers.STARTED.clear()
    yield
    http_providers.RELEASE.set()


@pytest.fixture
def serve() -> Iterator[Callable[..., BackgroundServer]]:
    """`serve(EndpointConfig(...))` starts the test provider on an ephemeral port; stopped at teardown."""
    started: list[BackgroundServer] = []

    def start(config: EndpointConfig | None = None, **app_options: object) -> BackgroundServer:
        app = wsgi_app(http_providers.provider, config=config or EndpointConfig(), **app_options)  # type: ignore[arg-type]
        server = BackgroundServer(app).start()
        started.append(server)
        return server

    yield start
    http_providers.RELEASE.set()
    for server in started:
        server.stop()
