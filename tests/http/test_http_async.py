"""Async (`web:`) endpoint end to end: acknowledged at once, answered on the ResponseURL."""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode

import requests

import http_providers
from crhelper.constants import CREATE_FAILED_MARKER
from crhelper.testing import ResponseServer, make_event
from crhelper.transports.http_config import EndpointConfig


def _post(url: str, body: object, **kwargs: object) -> requests.Response:
    return requests.post(url, json=body, timeout=10, **kwargs)  # type: ignore[arg-type]


def test_create_update_delete_are_acknowledged_then_answered_on_the_response_url(serve, response_server: ResponseServer) -> None:
    server = serve()
    create = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "a", "Size": 3}))
    started = time.monotonic()
    reply = _post(server.url + "/", create)
    assert reply.status_code == 200
    assert reply.json() == {"Accepted": True, "RequestId": create["RequestId"], "LogicalResourceId": "Res"}
    created = response_server.wait_for(create["RequestId"])
    assert created["Status"] == "SUCCESS" and created["PhysicalResourceId"] == "echo-a"
    assert created["Data"] == {"Echo": {"Name": "a", "Size": 3}}

    update = response_server.attach(
        make_event("Update", "Custom::Echo", {"Name": "a", "Size": 4}, old_properties={"Name": "a", "Size": 3},
                   physical_resource_id="echo-a", stack_id=create["StackId"])
    )
    assert _post(server.url, update).status_code == 200
    updated = response_server.wait_for(update["RequestId"])
    assert updated["Status"] == "SUCCESS" and updated["PhysicalResourceId"] == "echo-a"
    assert updated["Data"]["Was"] == {"Name": "a", "Size": 3}

    delete = response_server.attach(
        make_event("Delete", "Custom::Echo", {"Name": "a"}, physical_resource_id="echo-a", stack_id=create["StackId"])
    )
    assert _post(server.url + "/any/path", delete).status_code == 200
    assert response_server.wait_for(delete["RequestId"])["Status"] == "SUCCESS"
    assert time.monotonic() - started < 10
    assert len(response_server.captures) == 3  # one response each, nothing duplicated


def test_the_acknowledgement_does_not_wait_for_the_handler(serve, response_server: ResponseServer) -> None:
    server = serve()
    event = response_server.attach(make_event("Create", "Custom::Slow", {"Seconds": 5}))
    started = time.monotonic()
    assert _post(server.url, event).status_code == 200
    assert time.monotonic() - started < 1.0
    assert response_server.responses_for(event["RequestId"]) == []
    http_providers.RELEASE.set()
    assert response_server.wait_for(event["RequestId"])["Status"] == "SUCCESS"


def test_handler_failure_and_invalid_request_type_are_answered_failed_not_refused(serve, response_server: ResponseServer) -> None:
    server = serve()
    broken = response_server.attach(make_event("Create", "Custom::Broken"))
    odd = response_server.attach(make_event("Create", "Custom::Echo"))
    odd["RequestType"] = "Rename"
    assert _post(server.url, broken).status_code == 200
    assert _post(server.url, odd).status_code == 200
    failed = response_server.wait_for(broken["RequestId"])
    assert failed["Status"] == "FAILED" and failed["Reason"] == "this resource always fails"
    assert response_server.wait_for(odd["RequestId"])["Status"] == "FAILED"


def test_form_encoded_body_with_json_maps(serve, response_server: ResponseServer) -> None:
    server = serve()
    event = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "form", "Tags": {"k": "v"}}))
    fields = {k: json.dumps(v) if isinstance(v, dict) else v for k, v in event.items()}
    reply = requests.post(server.url, data=urlencode(fields), timeout=10,
                          headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert reply.status_code == 200, reply.text
    answer = response_server.wait_for(event["RequestId"])
    assert answer["Data"] == {"Echo": {"Name": "form", "Tags": {"k": "v"}}}


def test_form_encoded_body_with_bracketed_map_fields(serve, response_server: ResponseServer) -> None:
    server = serve()
    event = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "brackets"}))
    fields = {k: v for k, v in event.items() if not isinstance(v, dict)}
    fields["ResourceProperties[Name]"] = "brackets"
    reply = requests.post(server.url, data=fields, timeout=10)  # requests form-encodes a dict
    assert reply.status_code == 200, reply.text
    assert response_server.wait_for(event["RequestId"])["PhysicalResourceId"] == "echo-brackets"


def test_requests_that_are_not_ros_requests_get_400_naming_the_field(serve, response_server: ResponseServer) -> None:
    server = serve()
    reply = _post(server.url, {"hello": "world"})
    assert reply.status_code == 400
    assert reply.json()["Error"] == "NotARosRequest"
    assert "RequestType" in reply.json()["Field"] and "StackId" in reply.json()["Field"]
    no_url = make_event("Create", "Custom::Echo")
    del no_url["ResponseURL"], no_url["IntranetResponseURL"]
    reply = _post(server.url, no_url)
    assert reply.status_code == 400 and reply.json()["Field"] == "ResponseURL"
    bad_json = requests.post(server.url, data=b"{not json", headers={"Content-Type": "application/json"}, timeout=10)
    assert bad_json.status_code == 400 and bad_json.json()["Field"] == "body"
    array = _post(server.url, [1, 2])
    assert array.status_code == 400 and "JSON object" in array.json()["Message"]
    assert response_server.captures == []


def test_method_content_type_and_size_limits(serve, response_server: ResponseServer) -> None:
    server = serve(EndpointConfig(max_body=4096))
    assert requests.get(server.url, timeout=10).status_code == 405
    assert requests.get(server.url, timeout=10).headers["Allow"] == "POST"
    xml = requests.post(server.url, data=b"<a/>", headers={"Content-Type": "application/xml"}, timeout=10)
    assert xml.status_code == 415 and xml.json()["Field"] == "Content-Type"
    event = response_server.attach(make_event("Create", "Custom::Echo", {"Blob": "x" * 5000}))
    big = _post(server.url, event)
    assert big.status_code == 413 and big.json() == {"Error": "BodyTooLarge", "Field": "body", "Message": "must be at most 4096 bytes"}
    chunked = requests.post(server.url, data=iter([json.dumps(event).encode()]), timeout=10,
                            headers={"Content-Type": "application/json"})
    assert chunked.status_code == 413
    assert response_server.captures == []


def test_full_worker_pool_answers_500_and_the_same_request_is_accepted_later(serve, response_server: ResponseServer) -> None:
    server = serve(EndpointConfig(workers=1, backlog=0))
    slow = response_server.attach(make_event("Create", "Custom::Slow", {"Seconds": 5}))
    assert _post(server.url, slow).status_code == 200
    second = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "later"}))
    busy = _post(server.url, second)
    assert busy.status_code == 500 and busy.headers["Retry-After"] == "5"  # ROS retries after a 500
    assert busy.json()["Error"] == "Overloaded"
    http_providers.RELEASE.set()
    response_server.wait_for(slow["RequestId"])
    deadline = time.monotonic() + 5
    while (retry := _post(server.url, second)).status_code == 500 and time.monotonic() < deadline:
        time.sleep(0.02)  # the worker frees its slot just after delivering
    assert retry.status_code == 200
    assert response_server.wait_for(second["RequestId"])["Status"] == "SUCCESS"


def test_busy_workers_queue_requests_instead_of_refusing_them(serve, response_server: ResponseServer) -> None:
    """A plain `web:` Create is never retried by ROS: with every worker busy it is acknowledged and
    queued (no 5xx), then answered once a worker is free."""
    server = serve(EndpointConfig(workers=1))
    slow = response_server.attach(make_event("Create", "Custom::Slow", {"Seconds": 5}))
    assert _post(server.url, slow).status_code == 200
    queued = [response_server.attach(make_event("Create", "Custom::Echo", {"Name": f"q{i}"})) for i in range(20)]
    assert [_post(server.url, event).status_code for event in queued] == [200] * 20
    assert server.app.busy() == 21
    http_providers.RELEASE.set()
    for event in queued:
        assert response_server.wait_for(event["RequestId"])["Status"] == "SUCCESS"
    assert all(len(response_server.responses_for(e["RequestId"])) == 1 for e in [slow, *queued])


def test_a_request_that_waited_past_its_budget_is_answered_failed_once_and_never_run(
    serve, response_server: ResponseServer
) -> None:
    server = serve(EndpointConfig(workers=1, start_within=0.2))
    slow = response_server.attach(make_event("Create", "Custom::Slow", {"Seconds": 5}))
    assert _post(server.url, slow).status_code == 200
    # On a loaded machine the one worker may take the slow request later than the 0.2 s budget
    # (it would then expire instead): queue the late one only once the slow one runs.
    assert http_providers.STARTED.wait(5)
    late = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "late"}))
    assert _post(server.url, late).status_code == 200
    time.sleep(0.3)
    http_providers.RELEASE.set()
    body = response_server.wait_for(late["RequestId"])
    assert body["Status"] == "FAILED"
    assert body["Reason"].startswith("the endpoint was overloaded: the request waited ")
    assert "more than its 0.2 s budget, and was not started; retry the stack operation" in body["Reason"]
    assert body["PhysicalResourceId"] == CREATE_FAILED_MARKER  # the handler never ran: no id of its own
    assert response_server.wait_for(slow["RequestId"])["Status"] == "SUCCESS"
    time.sleep(0.2)  # a second answer would arrive now
    assert len(response_server.responses_for(late["RequestId"])) == 1
    assert response_server.violations == []


def test_inline_mode_answers_before_acknowledging(serve, response_server: ResponseServer) -> None:
    server = serve(EndpointConfig(inline=True, ack_status=202))
    event = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "inline"}))
    reply = _post(server.url, event)
    assert reply.status_code == 202
    assert response_server.responses_for(event["RequestId"])[0]["PhysicalResourceId"] == "echo-inline"


def test_stop_lets_accepted_requests_finish(serve, response_server: ResponseServer) -> None:
    server = serve(EndpointConfig(workers=2))
    events = [response_server.attach(make_event("Create", "Custom::Echo", {"Name": f"n{i}"})) for i in range(6)]
    for event in events:
        assert _post(server.url, event).status_code == 200
    server.stop()
    assert all(response_server.responses_for(e["RequestId"]) for e in events)


def test_handle_hook_receives_each_accepted_event_without_its_signature(serve, response_server: ResponseServer) -> None:
    seen: list[dict] = []
    server = serve(handle=seen.append)  # where a store-backed runner plugs in
    event = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "hook"}))
    assert _post(server.url, {**event, "Signature": {"Date": "x", "Value": "y"}}).status_code == 200
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [event]
    assert response_server.captures == []  # the hook, not the provider, ran


def test_decode_body_forms() -> None:
    import pytest

    from crhelper.transports.http import FORM_TYPE, HttpRefusal, decode_body

    decoded = decode_body(b"RequestId=r&Signature.Date=d&Signature.Value=v&ResourceProperties=%7B%22a%22%3A1%7D", FORM_TYPE)
    assert decoded == {"RequestId": "r", "Signature": {"Date": "d", "Value": "v"}, "ResourceProperties": {"a": 1}}
    assert decode_body(b"StackName=%7Bnot-a-map", FORM_TYPE) == {"StackName": "{not-a-map"}
    for bad, field in ((b"a=1&a=2", "a"), (b"P[x]=1&P[x]=2", "P[x]"), (b"P=1&P[x]=2", "P")):
        with pytest.raises(HttpRefusal) as caught:
            decode_body(bad, FORM_TYPE)
        assert caught.value.status == 400 and caught.value.field == field
    with pytest.raises(HttpRefusal, match="UTF-8"):
        decode_body(b"\xff", "application/json")
