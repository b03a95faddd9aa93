"""The long-running lifecycle on every store backend: polls, one response, duplicates absorbed."""

from __future__ import annotations

import pytest
from store_support import CREDS

from crhelper import InProgress, Provider, Result
from crhelper.testing import make_event


@pytest.fixture
def provider_on(backend, store_url_for, monkeypatch):
    for name, value in CREDS.items():
        monkeypatch.setenv(name, value)
    made = []

    def make() -> Provider:
        provider = Provider(store=store_url_for(backend))
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()


def test_polling_create_and_duplicates_on_each_backend(provider_on, response_server):
    provider = provider_on()
    calls: list[int] = []

    @provider.create("Custom::Job")
    def create(props, request):
        calls.append(request.attempt)
        if request.attempt < 2:
            return InProgress(state={"seen": request.attempt}, delay=0.1)
        return Result(physical_id="job-1", data={"Seen": request.state["seen"]})

    event = response_server.attach(make_event("Create", "Custom::Job"))
    provider.handle(event)
    provider.handle(event)  # a duplicate while in flight
    body = response_server.wait_for(event["RequestId"], timeout=20)
    assert body["Status"] == "SUCCESS" and body["Data"] == {"Seen": 1}
    assert calls == [0, 1, 2]
    assert provider.handle(event) == body  # a late duplicate gets the stored answer again
    assert calls == [0, 1, 2]
