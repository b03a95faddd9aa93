"""Closing a provider while its in-process scheduler is busy re-entering operations."""

from __future__ import annotations

import pytest

import threading
import time

from crhelper import InProgress, Provider
from crhelper.testing import make_event

ROUNDS = 12
OPERATIONS = 8


def _busy_provider(path: str) -> Provider:
    provider = Provider(store=f"sqlite:///{path}")
    provider.set_deadline("Custom::Busy", 600)
    provider.create("Custom::Busy")(lambda props, request: InProgress(state=request.attempt, delay=0))
    return provider


@pytest.mark.slow
def test_close_while_reentries_run_does_not_deadlock(tmp_path, monkeypatch):
    # Jobs keep entering provider.handle(); close() must not hold the lock they need while it
    # waits for them to finish.
    monkeypatch.setenv("CRHELPER_REENTRY", "local")
    for round_ in range(ROUNDS):
        provider = _busy_provider(str(tmp_path / f"busy-{round_}.sqlite"))
        for _ in range(OPERATIONS):
            provider.handle(make_event("Create", "Custom::Busy"))
        time.sleep(0.05)
        closer = threading.Thread(target=provider.close, daemon=True)
        closer.start()
        closer.join(10)
        assert not closer.is_alive(), f"close() deadlocked with running re-entries (round {round_})"
