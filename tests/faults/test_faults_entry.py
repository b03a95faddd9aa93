"""The Function Compute entry: every envelope answered in every mode, the earliest clock wins, a
request answered FAILED for lack of time never starts, and no exception leaves a stack waiting."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from types import SimpleNamespace

import pytest

from crhelper import Provider, Result
from crhelper.fc import lazy_handler
from crhelper.testing import make_event


def fc_context(timeout: float, remaining_ms: float | None = None) -> SimpleNamespace:
    context = SimpleNamespace(request_id="r", credentials=None,
                              function=SimpleNamespace(timeout=timeout, name="f"),
                              service=SimpleNamespace(name="svc", qualifier=None))
    if remaining_ms is not None:
        context.get_remaining_time_in_millis = lambda: remaining_ms
    return context


def cloud_event(body: str, message_id: str) -> dict:
    return {"id": "evt-" + message_id, "source": "MNS-f-q", "specversion": "1.0", "type": "mns:Queue:SendMessage",
            "subject": "acs:mns:cn-hangzhou:123:queues/q", "aliyunaccountid": "123",
            "data": {"requestId": "R", "messageId": message_id, "messageBody": body}}


ENVELOPES = {
    "topic stream body": lambda req: json.dumps({"body": req, "attrs": {}}).encode(),
    "topic stream raw base64": lambda req: base64.b64encode(req.encode()),
    "topic json": lambda req: json.dumps({"TopicOwner": "1", "TopicName": "t", "Subscriber": "1",
                                          "SubscriptionName": "s", "MessageId": "m", "Message": req,
                                          "MessageMD5": "x", "PublishTime": 1}).encode(),
    "queue batch": lambda req: json.dumps([cloud_event(req, "m-1")]).encode(),
}


@pytest.mark.parametrize("form", sorted(ENVELOPES))
@pytest.mark.parametrize("bad_config", [False, True], ids=["config-ok", "config-bad"])
def test_lazy_entry_with_a_failed_import_answers_mns_envelopes(form, bad_config, response_server, tmp_path, monkeypatch):
    (tmp_path / "broken_mns_provider.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    if bad_config:
        monkeypatch.setenv("CRHELPER_RESPONSE_METHOD", "TELEPORT")
    event = response_server.attach(make_event("Create", "Custom::Any"))
    lazy_handler("broken_mns_provider:provider")(ENVELOPES[form](json.dumps(event)), fc_context(10))
    body = response_server.wait_for(event["RequestId"])
    assert body["Status"] == "FAILED" and "boom at import" in body["Reason"]


@pytest.mark.slow
def test_lazy_entry_counts_the_provider_import_against_the_deadline(response_server, tmp_path, monkeypatch):
    (tmp_path / "slow_import_provider.py").write_text(
        "import time\nfrom crhelper import Provider\ntime.sleep(1.2)\nprovider = Provider()\n"
        "@provider.create('Custom::Slow')\ndef create(props, request):\n    time.sleep(5)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    event = response_server.attach(make_event("Create", "Custom::Slow"))
    started = time.monotonic()
    lazy_handler("slow_import_provider:provider")(json.dumps(event).encode(), fc_context(3))
    elapsed = time.monotonic() - started
    body = response_server.wait_for(event["RequestId"])
    assert body["Status"] == "FAILED"
    assert elapsed < 3.0, f"answered {elapsed:.2f} s after the invocation began, past its 3 s timeout"


def test_the_earliest_clock_wins_over_the_function_timeout(response_server):
    """function.timeout says 60 s but FC says only 1 s remains: FAILED comes before that second ends."""
    provider = Provider()
    provider.create("Custom::Slow")(lambda props, request: time.sleep(5))
    event = response_server.attach(make_event("Create", "Custom::Slow"))
    started = time.monotonic()
    provider.handle(event, fc_context(60, remaining_ms=1000))
    assert time.monotonic() - started < 1.0
    assert response_server.wait_for(event["RequestId"])["Reason"].startswith("timed out")


@pytest.mark.slow
def test_batch_messages_answered_failed_for_lack_of_time_never_run(response_server):
    """Three 1 s handlers in one batch with a 1.6 s function timeout: the first runs and is answered;
    the others are answered FAILED and never start, so they create nothing after their FAILED."""
    ran: list[str] = []
    provider = Provider()

    @provider.create("Custom::Make")
    def create(props, request):
        ran.append(request.logical_resource_id)
        time.sleep(float(props["Seconds"]))
        return Result(physical_id=f"made-{request.logical_resource_id}")

    events = [response_server.attach(make_event("Create", "Custom::Make", {"Seconds": 0.6}, logical_resource_id=f"R{i}"))
              for i in range(3)]
    batch = [cloud_event(json.dumps(e), f"m-{i}") for i, e in enumerate(events)]
    provider.fc_handler(json.dumps(batch).encode(), fc_context(1.6))
    time.sleep(1.5)  # anything that would still start does so now
    bodies = [response_server.wait_for(e["RequestId"]) for e in events]
    assert bodies[0]["Status"] == "SUCCESS"
    not_started = [b for b in bodies if b["Status"] == "FAILED" and b["Reason"].startswith("not started")]
    assert not_started, "no message ran out of time: the test's timing is off"
    for body in not_started:
        assert body["LogicalResourceId"] not in ran, f"{body['LogicalResourceId']} ran after its FAILED"
    # One that was running when time ran out is answered "timed out"; it started before its FAILED.
    for body in bodies:
        if body["Status"] == "FAILED" and body["Reason"].startswith("timed out"):
            assert body["LogicalResourceId"] in ran
    for event in events:
        assert len(response_server.responses_for(event["RequestId"])) == 1


@pytest.mark.parametrize("exc", [KeyboardInterrupt, asyncio.CancelledError, GeneratorExit, SystemExit])
@pytest.mark.parametrize("deadline", [None, 10.0], ids=["no-deadline", "fc-deadline"])
def test_base_exceptions_from_a_handler_are_answered_failed(exc, deadline, response_server, tmp_path, monkeypatch):
    monkeypatch.setenv("CRHELPER_STORE", f"sqlite:///{tmp_path / 'state.sqlite'}")
    provider = Provider()

    @provider.create("Custom::Raise")
    def create(props, request):
        raise exc()

    event = response_server.attach(make_event("Create", "Custom::Raise"))
    try:
        outcome = provider.process(event, fc_context(deadline) if deadline else None)
    finally:
        provider.close()
    assert outcome.delivered
    assert response_server.wait_for(event["RequestId"])["Reason"] == exc.__name__


@pytest.mark.slow
def test_hung_handlers_do_not_delay_other_requests(response_server):
    """70 handlers hang (more than a fixed pool of 64 threads): a new request still runs at once."""
    release = threading.Event()
    provider = Provider()
    provider.create("Custom::Hang")(lambda props, request: release.wait(30) and None)
    provider.create("Custom::Fast")(lambda props, request: Result(physical_id="fast"))
    hung = [response_server.attach(make_event("Create", "Custom::Hang")) for _ in range(70)]
    threads = [threading.Thread(target=provider.handle, args=(e, fc_context(20))) for e in hung]
    try:
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        event = response_server.attach(make_event("Create", "Custom::Fast"))
        started = time.monotonic()
        provider.handle(event, fc_context(20))
        assert response_server.wait_for(event["RequestId"])["PhysicalResourceId"] == "fast"
        assert time.monotonic() - started < 2
    finally:
        release.set()
        for thread in threads:
            thread.join(30)


def test_a_redelivered_invalid_request_is_answered_failed_once(response_server, tmp_path, monkeypatch):
    monkeypatch.setenv("CRHELPER_STORE", f"sqlite:///{tmp_path / 'state.sqlite'}")
    provider = Provider()
    provider.create("Custom::X")(lambda props, request: Result(physical_id="x"))
    event = response_server.attach(make_event("Create", "Custom::X"))
    del event["ResourceType"]
    try:
        first = provider.process(event)
        again = provider.process(event)
    finally:
        provider.close()
    assert first.delivered and first.body["Status"] == "FAILED" and "ResourceType" in first.body["Reason"]
    assert again.body is None
    assert len(response_server.responses_for(event["RequestId"])) == 1
