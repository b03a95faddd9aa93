"""Long-running handlers and idempotent delivery, end to end through the response server."""

from __future__ import annotations

import json
import threading
import time

import pytest

from crhelper import InProgress, Provider, Result
from crhelper.testing import make_event


@pytest.fixture
def store_url(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'state.sqlite'}"
    monkeypatch.setenv("CRHELPER_STORE", url)
    return url


@pytest.fixture
def provider_factory(providers):
    return providers


def polling_provider(make, polls: int, delay: float, calls: list) -> Provider:
    provider = make()

    @provider.create("Custom::Slow")
    def create(props, request):
        calls.append((request.attempt, request.state))
        step = (request.state or {}).get("step", 0) + 1
        if step < polls:
            return InProgress(state={"step": step}, delay=delay)
        return Result(physical_id="slow-1", data={"Steps": step})

    return provider


def test_five_polls_complete_with_one_response(response_server, store_url, provider_factory):
    calls: list = []
    provider = polling_provider(provider_factory, polls=5, delay=0.1, calls=calls)
    event = response_server.attach(make_event("Create", "Custom::Slow"))
    assert provider.handle(event) is None  # nothing is answered until the work is done
    body = response_server.wait_for(event["RequestId"], timeout=10)
    assert body["Status"] == "SUCCESS" and body["Data"] == {"Steps": 5}
    assert [attempt for attempt, _ in calls] == [0, 1, 2, 3, 4]
    assert [state for _, state in calls] == [None, {"step": 1}, {"step": 2}, {"step": 3}, {"step": 4}]
    time.sleep(0.3)
    assert len(response_server.captures) == 1


@pytest.mark.slow
def test_deadline_sends_failed_on_time_and_runs_on_timeout(response_server, store_url, provider_factory):
    provider = provider_factory()
    cleaned: list[str] = []
    provider.set_deadline("Custom::Never", 1)

    @provider.create("Custom::Never")
    def create(props, request):
        return InProgress(state={"n": request.attempt}, delay=0.3)

    @provider.on_timeout("Custom::Never")
    def cleanup(request):
        cleaned.append(request.logical_resource_id)

    event = response_server.attach(make_event("Create", "Custom::Never"))
    started = time.monotonic()
    provider.handle(event)
    body = response_server.wait_for(event["RequestId"], timeout=10)
    assert time.monotonic() - started < 3
    assert body["Status"] == "FAILED" and body["Reason"].startswith("did not complete within 1 s")
    assert cleaned == ["Res"]


def test_duplicate_while_in_flight_does_not_run_again(response_server, store_url, provider_factory):
    release = threading.Event()
    calls: list[int] = []
    provider = provider_factory()

    @provider.create("Custom::Gate")
    def create(props, request):
        calls.append(1)
        release.wait(5)
        return Result(physical_id="gate")

    event = response_server.attach(make_event("Create", "Custom::Gate"))
    first = threading.Thread(target=provider.handle, args=(json.dumps(event),))
    first.start()
    while not calls:
        time.sleep(0.01)
    assert provider.handle(json.dumps(event)) is None  # the duplicate is absorbed
    release.set()
    first.join(5)
    assert calls == [1]
    assert response_server.wait_for(event["RequestId"])["PhysicalResourceId"] == "gate"


def test_duplicate_after_a_delivered_answer_sends_nothing(response_server, store_url, provider_factory):
    calls: list[int] = []
    provider = provider_factory()
    provider.create("Custom::Once")(lambda props, request: calls.append(1) or Result(physical_id=f"once-{len(calls)}"))
    event = response_server.attach(make_event("Create", "Custom::Once"))
    first = provider.handle(event)
    again = provider.handle(event)
    assert again is None and calls == [1]
    assert response_server.responses_for(event["RequestId"]) == [first]  # exactly one answer


@pytest.mark.allow_violations
def test_duplicate_after_an_undelivered_answer_resends_the_stored_response(response_server, store_url, provider_factory,
                                                                          monkeypatch):
    monkeypatch.setenv("CRHELPER_RESPONSE_ATTEMPTS", "1")
    calls: list[int] = []
    provider = provider_factory()
    provider.create("Custom::Once")(lambda props, request: calls.append(1) or Result(physical_id=f"once-{len(calls)}"))
    event = response_server.attach(make_event("Create", "Custom::Once"), fail_first=1)
    first = provider.process(event)
    assert first.body is not None and not first.delivered
    again = provider.process(event)
    assert again.body == first.body and again.delivered and calls == [1]
    assert provider.process(event).body is None  # delivered now: a third copy sends nothing
    assert response_server.responses_for(event["RequestId"]) == [first.body]


def test_duplicate_during_a_long_operation_is_absorbed(response_server, store_url, provider_factory):
    calls: list = []
    provider = polling_provider(provider_factory, polls=3, delay=0.3, calls=calls)
    event = response_server.attach(make_event("Create", "Custom::Slow"))
    provider.handle(event)
    time.sleep(0.1)
    provider.handle(event)
    body = response_server.wait_for(event["RequestId"], timeout=10)
    assert body["Data"] == {"Steps": 3} and len(calls) == 3


def test_continuation_ids_not_urls_travel_in_reentries(response_server, store_url, provider_factory, capsys):
    calls: list = []
    provider = polling_provider(provider_factory, polls=2, delay=0.1, calls=calls)
    event = response_server.attach(make_event("Create", "Custom::Slow"))
    provider.handle(event)
    response_server.wait_for(event["RequestId"], timeout=10)
    assert "Signature=" not in capsys.readouterr().err


def test_store_none_refuses_in_progress_clearly(response_server, monkeypatch, provider_factory):
    monkeypatch.setenv("CRHELPER_STORE", "none")
    provider = provider_factory()
    provider.create("Custom::Slow")(lambda props, request: InProgress(state=1, delay=1))
    event = response_server.attach(make_event("Create", "Custom::Slow"))
    provider.handle(event)
    assert "need a store" in response_server.wait_for(event["RequestId"])["Reason"]


def test_bad_in_progress_values_are_failed(response_server, store_url, provider_factory):
    provider = provider_factory()
    provider.create("Custom::Bad")(lambda props, request: InProgress(state={"when": object()}, delay=1))
    provider.create("Custom::Late")(lambda props, request: InProgress(state=None, delay=99999))
    event = response_server.attach(make_event("Create", "Custom::Bad"))
    provider.handle(event)
    assert "InProgress.state must be JSON-serialisable" in response_server.wait_for(event["RequestId"])["Reason"]
    event = response_server.attach(make_event("Create", "Custom::Late"))
    provider.handle(event)
    assert "InProgress.delay must be a number of seconds from 0 to 3600" in response_server.wait_for(event["RequestId"])["Reason"]


def test_sync_in_band_path_refuses_in_progress(provider_factory):
    provider = provider_factory()
    provider.create("Custom::Slow")(lambda props, request: InProgress(state=1, delay=1))
    body = provider.respond(make_event("Create", "Custom::Slow"))
    assert body["Status"] == "FAILED" and "replies in-band" in body["Reason"]

