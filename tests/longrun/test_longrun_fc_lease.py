"""On Function Compute a step may run until the function timeout: its lease must cover that long."""

from __future__ import annotations

import pytest

import threading
import time
from types import SimpleNamespace

from crhelper import Provider, Result
from crhelper.testing import make_event


@pytest.mark.slow
def test_duplicate_during_a_step_longer_than_the_configured_lease_is_absorbed(tmp_path, monkeypatch, response_server):
    monkeypatch.setenv("CRHELPER_STORE", f"sqlite:///{tmp_path / 'state.sqlite'}")
    monkeypatch.setenv("CRHELPER_STEP_LEASE", "1")
    monkeypatch.setenv("CRHELPER_REENTRY", "local")
    context = SimpleNamespace(
        request_id="fc-req", credentials=None,
        function=SimpleNamespace(name="fn", timeout=10), service=SimpleNamespace(name="svc", qualifier=None),
    )
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []
    provider = Provider()

    @provider.create("Custom::Long")
    def create(props, request):
        calls.append(request.attempt)
        started.set()
        release.wait(8)
        return Result(physical_id="long-1")

    event = response_server.attach(make_event("Create", "Custom::Long"))
    first = threading.Thread(target=provider.handle, args=(event, context))
    try:
        first.start()
        assert started.wait(5)
        time.sleep(1.3)  # past CRHELPER_STEP_LEASE, well inside the 10 s function timeout
        assert provider.handle(event, context) is None  # still in flight: not run a second time
        release.set()
        first.join(10)
        assert calls == [0]
        assert response_server.wait_for(event["RequestId"])["PhysicalResourceId"] == "long-1"
    finally:
        release.set()
        first.join(10)
        provider.close()
