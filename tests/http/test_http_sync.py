"""Sync (`web[sync]`) endpoint: the HTTP reply is the response object, always before ROS's 10 s."""

from __future__ import annotations

import time

import pytest
import requests

from crhelper.invariants import body_violations
from crhelper.testing import ResponseServer, make_event
from crhelper.transports.http_config import ROS_SYNC_LIMIT, EndpointConfig, EndpointConfigError


def test_sync_path_replies_with_the_response_and_sends_no_callback(serve, response_server: ResponseServer) -> None:
    server = serve()
    event = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "s"}))
    started = time.monotonic()
    reply = requests.post(server.url + "/sync", json=event, timeout=ROS_SYNC_LIMIT)
    assert time.monotonic() - started < 2.0
    assert reply.status_code == 200 and reply.headers["Content-Type"] == "application/json"
    body = reply.json()
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "echo-s"
    assert body["RequestId"] == event["RequestId"] and body["StackId"] == event["StackId"]
    parsed, problems = body_violations(reply.content, event)
    assert problems == [] and parsed == body
    time.sleep(0.2)
    assert response_server.captures == []  # ROS expects no callback for web[sync]


@pytest.mark.slow
def test_slow_handler_is_answered_failed_before_the_limit(serve) -> None:
    server = serve(EndpointConfig(sync_within=1.0))
    event = make_event("Create", "Custom::Slow", {"Seconds": 8})
    started = time.monotonic()
    reply = requests.post(server.url + "/sync", json=event, timeout=ROS_SYNC_LIMIT)
    elapsed = time.monotonic() - started
    assert reply.status_code == 200
    body = reply.json()
    assert body["Status"] == "FAILED" and "timed out" in body["Reason"]
    assert body["RequestId"] == event["RequestId"]
    assert 0.9 <= elapsed < 2.0


def test_default_sync_budget_leaves_room_under_rosss_fixed_limit() -> None:
    assert EndpointConfig().sync_within < ROS_SYNC_LIMIT - 1.0
    with pytest.raises(EndpointConfigError, match="sync_within"):
        EndpointConfig(sync_within=ROS_SYNC_LIMIT)


def test_sync_request_without_response_url_and_server_wide_sync_mode(serve) -> None:
    server = serve(EndpointConfig(mode="sync"))
    event = make_event("Create", "Custom::Echo", {"Name": "nourl"})
    del event["ResponseURL"], event["IntranetResponseURL"]
    reply = requests.post(server.url + "/", json=event, timeout=ROS_SYNC_LIMIT)
    assert reply.status_code == 200 and reply.json()["PhysicalResourceId"] == "echo-nourl"


def test_failures_are_failed_bodies_with_status_200(serve) -> None:
    server = serve()
    broken = requests.post(server.url + "/sync", json=make_event("Create", "Custom::Broken"), timeout=10)
    assert broken.status_code == 200 and broken.json()["Reason"] == "this resource always fails"
    unknown = requests.post(server.url + "/sync", json=make_event("Create", "Custom::Nope"), timeout=10)
    assert unknown.status_code == 200 and unknown.json()["Status"] == "FAILED"
    not_ros = requests.post(server.url + "/sync", json={"RequestType": "Create"}, timeout=10)
    assert not_ros.status_code == 400


def test_handler_raising_system_exit_still_gets_a_failed_body_in_time(serve) -> None:
    server = serve()
    event = make_event("Create", "Custom::Exit")
    started = time.monotonic()
    reply = requests.post(server.url + "/sync", json=event, timeout=ROS_SYNC_LIMIT)
    assert time.monotonic() - started < 2.0
    assert reply.status_code == 200 and reply.json()["Status"] == "FAILED"
    assert reply.json()["RequestId"] == event["RequestId"]
    again = requests.post(server.url + "/sync", json=make_event("Create", "Custom::Echo", {"Name": "next"}), timeout=10)
    assert again.json()["PhysicalResourceId"] == "echo-next"


def test_respond_hook_replaces_the_provider(serve) -> None:
    calls: list[float] = []

    def respond(event: dict, within: float) -> dict:
        calls.append(within)
        return {"Status": "FAILED", "Reason": "hooked", "StackId": event["StackId"], "RequestId": event["RequestId"],
                "LogicalResourceId": event["LogicalResourceId"], "PhysicalResourceId": "crhelper:CREATE_FAILED"}

    server = serve(EndpointConfig(sync_within=3.0), respond=respond)
    reply = requests.post(server.url + "/sync", json=make_event("Create", "Custom::Echo"), timeout=10)
    assert reply.json()["Reason"] == "hooked"
    assert len(calls) == 1 and 2.5 < calls[0] <= 3.0


def test_sync_duplicates_run_the_handler_once_and_get_the_same_answer(tmp_path, monkeypatch) -> None:
    import threading

    from crhelper import Provider, Result
    from crhelper.cli.serve import BackgroundServer
    from crhelper.transports.http import wsgi_app

    monkeypatch.setenv("CRHELPER_STORE", f"sqlite:///{tmp_path / 'state.sqlite'}")
    calls: list[str] = []
    provider = Provider()

    @provider.create("Custom::Counted")
    def create(props, request):
        calls.append(request.request_id)
        time.sleep(0.5)
        return Result(physical_id=f"counted-{len(calls)}")

    server = BackgroundServer(wsgi_app(provider, config=EndpointConfig(sync_within=3.0))).start()
    try:
        event = make_event("Create", "Custom::Counted", response_url="http://127.0.0.1:9/unused")
        replies: list[dict] = []

        def post() -> None:
            replies.append(requests.post(server.url + "/sync", json=event, timeout=ROS_SYNC_LIMIT).json())

        threads = [threading.Thread(target=post) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        late = requests.post(server.url + "/sync", json=event, timeout=ROS_SYNC_LIMIT).json()
    finally:
        server.stop()
        provider.close()
    assert calls == [event["RequestId"]]
    assert [r["PhysicalResourceId"] for r in replies + [late]] == ["counted-1"] * 4
