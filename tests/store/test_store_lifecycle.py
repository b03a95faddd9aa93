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


@pytest.mark.slow
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
    assert provider.handle(event) is None  # a late duplicate: its answer was delivered, nothing is sent twice
    assert calls == [0, 1, 2]


def test_answer_is_sent_when_the_store_refuses_to_record_it(moto_server, response_server, store_url_for, monkeypatch):
    """OSS refuses writes mid-operation (a revoked policy): the handler's answer still reaches ROS."""
    for name, value in CREDS.items():
        monkeypatch.setenv(name, value)
    provider = Provider(store=store_url_for("oss"))
    gate = moto_server.gate

    @provider.create("Custom::Done")
    def create(props, request):
        gate.refuse_puts_with = "403 Forbidden"  # after the claim, before the answer is recorded
        return Result(physical_id="done-1")

    try:
        event = response_server.attach(make_event("Create", "Custom::Done"))
        provider.handle(event)
        assert response_server.wait_for(event["RequestId"], timeout=20)["PhysicalResourceId"] == "done-1"
    finally:
        gate.refuse_puts_with = None
        provider.close()


@pytest.mark.slow
@pytest.mark.allow_violations
def test_a_duplicate_after_an_undelivered_answer_resends_it_once_on_each_backend(provider_on, response_server,
                                                                               monkeypatch):
    # The duplicate's claim stores its continuation and withdraws it (it does not own); adopting the
    # re-send then stores a continuation again, which S3/OSS's create-only logs refuse for a withdrawn id.
    monkeypatch.setenv("CRHELPER_RESPONSE_ATTEMPTS", "1")
    provider = provider_on()
    calls: list[int] = []
    provider.create("Custom::Once")(lambda props, request: calls.append(1) or Result(physical_id="once-1"))
    event = response_server.attach(make_event("Create", "Custom::Once"), fail_first=1)
    first = provider.process(event)
    assert first.body is not None and first.body["Status"] == "SUCCESS" and not first.delivered
    again = provider.process(event)
    assert again.body == first.body and again.delivered and calls == [1]
    assert provider.process(event).body is None  # delivered now: a third copy sends nothing
    assert response_server.responses_for(event["RequestId"]) == [first.body]
