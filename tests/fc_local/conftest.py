"""Fixtures for the local Function Compute endpoint tests.

This folder goes on sys.path so `fc_local_handlers` imports here and, through the server's
inherited sys.path, inside every worker process.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from crhelper.local.fc_server import LocalFunctionCompute  # noqa: E402
from fc_local_catalog import FUNCTIONS, SERVICE  # noqa: E402


@pytest.fixture(scope="module")
def fc() -> Iterator[LocalFunctionCompute]:
    server = LocalFunctionCompute(async_retry_delay=0.05, async_workers=3)
    for name, settings in FUNCTIONS.items():
        server.register(SERVICE, name, **settings)  # type: ignore[arg-type]
    with server:
        yield server


@pytest.fixture()
def client(fc: LocalFunctionCompute):  # type: ignore[no-untyped-def]
    return fc.client()
