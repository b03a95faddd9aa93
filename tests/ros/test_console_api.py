"""The console's hook (`handle_console`) over a real `LocalStacks`: its gate (Host, token, cookie,
mutations), its JSON views (list, one stack's view with new events, graph, provider logs), and
create / update / delete as the page drives them. The page itself runs in test_console_browser.py."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from crhelper.ros.console import handle_console, views
from crhelper.ros.stacks import LocalStacks
from crhelper.servers import ApiResponse

TOKEN = "console-token-for-tests_0123456789"
HOST = "127.0.0.1:8080"
SECRET = "s3cr3t-NoEcho-value"

QUEUES = """\
ROSTemplateFormatVersion: '2015-09-01'
Description: Two local MNS queues, the second after the first
Parameters:
  Prefix: {Type: String, Default: demo, Description: Queue name prefix}
  Secret: {Type: String, NoEcho: true, Default: hush}
  Size: {Type: Number, Default: 1024, AllowedValues: [1024, 2048]}
Resources:
  Jobs:
    Type: ALIYUN::MNS::Queue
    Properties: {QueueName: {'Fn::Sub': '${Prefix}-jobs'}}
  Results:
    Type: ALIYUN::MNS::Queue
    DependsOn: Jobs
    Properties: {QueueName: {'Fn::Sub': '${Prefix}-results'}}
Outputs:
  JobsQueue: {Value: {'Fn::GetAtt': [Jobs, QueueName]}, Description: the jobs queue}
"""

CHATTY_PROVIDER = '''\
from crhelper import Provider, Result
provider = Provider()

@provider.create("Custom::Chatty")
def create(props, request):
    print("hello from " + props["Name"], flush=True)
    return Result(physical_id="chatty-" + props["Name"], data={"Name": props["Name"]})

@provider.delete("Custom::Chatty")
def delete(props, request):
    return None
'''
CHATTY_TOKEN = "acs:fc:cn-hangzhou:123456789:services/tests/functions/chatty"


@pytest.fixture
def stacks(tmp_path: Path) -> Iterator[LocalStacks]:
    with LocalStacks(home=str(tmp_path / "home")) as local:
        yield local


def call(stacks: LocalStacks, method: str, path: str, *, query: dict[str, list[str]] | None = None,
         headers: dict[str, str] | None = None, body: Any = None, token: str | None = TOKEN) -> ApiResponse:
    """One request as the server hands it over: the page's headers unless a test says otherwise."""
    sent = {"Host": HOST}
    if token is not None and path.startswith("/console/api/"):
        sent["X-Console-Token"] = token
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode()
        sent["Content-Type"] = "application/json"
    sent.update(headers or {})
    return handle_console(method, path, query or {}, sent, body or b"", stacks, TOKEN)


def data(response: ApiResponse, status: int = 200) -> Any:
    assert response.status == status, response.body[:500]
    assert response.headers["Content-Type"].startswith("application/json")
    return json.loads(response.body)


def ros_error(response: ApiResponse, status: int, code: str) -> str:
    answer = data(response, status)
    assert answer["Code"] == code and answer["RequestId"], answer
    return str(answer["Message"])


def settle(stacks: LocalStacks, stack_id: str, timeout: float = 30) -> dict[str, Any]:
    """Poll the console's view (as the page does) until the stack's operation ended."""
    deadline = time.monotonic() + timeout
    while True:
        view = data(call(stacks, "GET", f"/console/api/stacks/{stack_id}/view"))
        if not view["Stack"]["Status"].endswith("IN_PROGRESS"):
            return view
        assert time.monotonic() < deadline, view["Stack"]
        time.sleep(0.02)


def create(stacks: LocalStacks, name: str = "queues", **parameters: str) -> str:
    answer = data(call(stacks, "POST", "/console/api/stacks",
                       body={"StackName": name, "TemplateBody": QUEUES, "Parameters": parameters}))
    return str(answer["StackId"])


def idle(stacks: LocalStacks, stack_id: str) -> None:
    """Wait until the facade has no operation running on the stack (its thread ended)."""
    deadline = time.monotonic() + 10
    while stacks.running_action(stack_id) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.01)


# ------------------------------------------------------------------------------ the gate (quick)


def test_the_page_needs_the_token_and_turns_it_into_a_strict_httponly_cookie(stacks: LocalStacks) -> None:
    refused = call(stacks, "GET", "/")
    assert refused.status == 401 and b"?token=" in refused.body and "Set-Cookie" not in refused.headers
    assert call(stacks, "GET", "/", query={"token": ["wrong"]}).status == 401
    page = call(stacks, "GET", "/", query={"token": [TOKEN]})
    assert page.status == 200 and page.headers["Content-Type"].startswith("text/html")
    cookie = page.headers["Set-Cookie"]
    assert cookie.startswith("crhelper_console_8080=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert TOKEN.encode() not in page.body  # the page itself carries no secret
    again = call(stacks, "GET", "/", headers={"Cookie": cookie.split(";")[0]})
    assert again.status == 200 and "Set-Cookie" not in again.headers
    assert call(stacks, "GET", "/", headers={"Cookie": f"crhelper_console_8080=x{TOKEN}"}).status == 401


def test_static_assets_are_a_fixed_set_served_with_their_types_behind_the_cookie(stacks: LocalStacks) -> None:
    cookie = {"Cookie": f"crhelper_console_8080={TOKEN}"}
    script = call(stacks, "GET", "/static/console.js", headers=cookie)
    assert script.status == 200 and script.headers["Content-Type"].startswith("text/javascript")
    assert call(stacks, "GET", "/static/console.css", headers=cookie).headers["Content-Type"].startswith("text/css")
    assert call(stacks, "GET", "/static/console.js").status == 401
    for path in ("/static/../__init__.py", "/static/guard.py", "/static/", "/nothing-here"):
        assert call(stacks, "GET", path, headers=cookie).status == 404, path
    page = call(stacks, "GET", "/", headers=cookie)
    for header in ("Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options", "Referrer-Policy"):
        assert header in page.headers


def test_every_page_asset_the_html_names_is_served(stacks: LocalStacks) -> None:
    cookie = {"Cookie": f"crhelper_console_8080={TOKEN}"}
    html = call(stacks, "GET", "/", headers=cookie).body.decode()
    names = [part.split('"')[0] for part in html.split('"/static/')[1:]]
    assert sorted(names) == ["console.css", "console.js"]
    assert all(call(stacks, "GET", f"/static/{name}", headers=cookie).status == 200 for name in names)


def test_the_script_puts_server_text_in_as_text_only() -> None:
    """Stack names, reasons, outputs and provider logs are the server's text: the page never
    parses them as HTML or code (with the CSP, a template cannot inject script into the console)."""
    from importlib import resources

    script = resources.files("crhelper.ros.console").joinpath("static/console.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in script, sink


@pytest.mark.parametrize("host", ["evil.example:8080", "127.0.0.1.nip.io:8080", ""])
def test_a_foreign_host_is_refused_as_dns_rebinding_even_with_the_token(stacks: LocalStacks, host: str) -> None:
    page = call(stacks, "GET", "/", query={"token": [TOKEN]}, headers={"Host": host})
    assert page.status == 403 and "Set-Cookie" not in page.headers
    assert "loopback" in ros_error(call(stacks, "GET", "/console/api/stacks", headers={"Host": host}), 403, "Forbidden.Host")


def test_json_calls_need_the_token_header_and_the_cookie_alone_buys_only_the_session(stacks: LocalStacks) -> None:
    cookie = {"Cookie": f"crhelper_console_8080={TOKEN}"}
    assert "X-Console-Token" in ros_error(call(stacks, "GET", "/console/api/stacks", token=None), 401, "InvalidConsoleToken")
    ros_error(call(stacks, "GET", "/console/api/stacks", token="wrong"), 401, "InvalidConsoleToken")
    ros_error(call(stacks, "GET", "/console/api/stacks", token=None, headers=cookie), 401, "InvalidConsoleToken")
    assert data(call(stacks, "GET", "/console/api/session", token=None, headers=cookie)) == {"Token": TOKEN}
    ros_error(call(stacks, "GET", "/console/api/session", token=None), 401, "InvalidConsoleToken")
    ros_error(call(stacks, "GET", "/console/api/session", token=None,
                   headers={"Cookie": f"crhelper_console_9090={TOKEN}"}), 401, "InvalidConsoleToken")
    ros_error(call(stacks, "POST", "/console/api/session", headers=cookie), 405, "MethodNotAllowed")


def test_changes_are_post_only_with_a_json_body_from_the_consoles_own_origin(stacks: LocalStacks) -> None:
    body = {"StackName": "s", "TemplateBody": QUEUES}
    assert "POST" in ros_error(call(stacks, "GET", "/console/api/stacks/s/delete"), 405, "MethodNotAllowed")
    ros_error(call(stacks, "PUT", "/console/api/stacks", body=body), 405, "MethodNotAllowed")
    form = call(stacks, "POST", "/console/api/stacks", body=b"StackName=s",
                headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert "application/json" in ros_error(form, 415, "UnsupportedMediaType")
    ros_error(call(stacks, "POST", "/console/api/stacks", body=body, headers={"Origin": "http://evil.example"}),
              403, "Forbidden.Origin")
    ros_error(call(stacks, "POST", "/console/api/stacks", body=body, headers={"Sec-Fetch-Site": "cross-site"}),
              403, "Forbidden.Origin")
    ros_error(call(stacks, "GET", "/console/api/nothing"), 404, "NotFound")
    assert stacks.list() == []  # nothing refused above changed anything


def test_bad_input_names_the_field_and_the_rule(stacks: LocalStacks) -> None:
    assert "StackName: required" in ros_error(call(stacks, "POST", "/console/api/stacks", body={"TemplateBody": QUEUES}),
                                              400, "InvalidParameter")
    assert "not valid JSON" in ros_error(call(stacks, "POST", "/console/api/stacks", body=b"{",
                                              headers={"Content-Type": "application/json"}), 400, "InvalidParameter")
    assert "TimeoutInMinutes" in ros_error(call(stacks, "POST", "/console/api/stacks", body={
        "StackName": "s", "TemplateBody": QUEUES, "TimeoutInMinutes": 5}), 400, "InvalidParameter")
    assert "Parameters.Prefix: must be a string" in ros_error(call(stacks, "POST", "/console/api/stacks", body={
        "StackName": "s", "TemplateBody": QUEUES, "Parameters": {"Prefix": None}}), 400, "InvalidParameter")
    assert "events" in ros_error(call(stacks, "GET", "/console/api/stacks/x/view", query={"events": ["-1"]}),
                                 400, "InvalidParameter")
    assert "include: unknown part 'outputs'" in ros_error(call(stacks, "GET", "/console/api/stacks/x/view",
                                                               query={"include": ["events,outputs"]}), 400, "InvalidParameter")


def test_ros_errors_keep_their_code_and_status(stacks: LocalStacks) -> None:
    assert "nope" in ros_error(call(stacks, "GET", "/console/api/stacks/nope/view"), 404, "StackNotFound")
    ros_error(call(stacks, "POST", "/console/api/validate", body={"TemplateBody": "Resources: 3"}), 400,
              "StackValidationFailed")


def test_validate_gives_the_parameters_form_its_fields(stacks: LocalStacks) -> None:
    answer = data(call(stacks, "POST", "/console/api/validate", body={"TemplateBody": QUEUES}))
    fields = {p["ParameterKey"]: p for p in answer["Parameters"]}
    assert fields["Secret"]["NoEcho"] is True and fields["Size"]["AllowedValues"] == ["1024", "2048"]
    assert fields["Prefix"]["DefaultValue"] == "demo" and answer["Description"].startswith("Two local")


# ------------------------------------------------------------------------------ stacks through the views


@pytest.mark.slow
def test_create_watch_update_and_delete_as_the_page_does(stacks: LocalStacks) -> None:
    stack_id = create(stacks, Prefix="web", Secret=SECRET)
    listed = data(call(stacks, "GET", "/console/api/stacks"))
    assert [s["StackId"] for s in listed["Stacks"]] == [stack_id] and isinstance(listed["Version"], int)
    view = settle(stacks, stack_id)
    assert view["Stack"]["Status"] == "CREATE_COMPLETE", view["Stack"]
    assert {o["OutputKey"]: o["OutputValue"] for o in view["Stack"]["Outputs"]} == {"JobsQueue": "web-jobs"}
    assert view["Dependencies"] == {"Jobs": [], "Results": ["Jobs"]}
    assert [r["Status"] for r in view["Resources"]] == ["CREATE_COMPLETE", "CREATE_COMPLETE"]
    shown = view["EventCount"]
    assert len(view["Events"]) == shown and view["Events"][-1]["Status"] == "CREATE_COMPLETE"
    assert data(call(stacks, "GET", f"/console/api/stacks/{stack_id}/view", query={"events": [str(shown)]}))["Events"] == []
    only_stack = data(call(stacks, "GET", f"/console/api/stacks/{stack_id}/view", query={"include": ["stack"]}))
    assert sorted(only_stack) == ["Stack", "Version"]  # a tab that shows only the stack reads only the stack
    only_events = data(call(stacks, "GET", f"/console/api/stacks/{stack_id}/view", query={"include": ["events"]}))
    assert sorted(only_events) == ["EventCount", "Events", "EventsReset", "Stack", "Version"]
    idle(stacks, stack_id)

    data(call(stacks, "POST", f"/console/api/stacks/{stack_id}/update",
              body={"Parameters": {"Prefix": "api"}, "UsePreviousParameters": True}))
    view = settle(stacks, stack_id)
    assert view["Stack"]["Status"] == "UPDATE_COMPLETE", view["Stack"]
    assert view["Stack"]["Outputs"][0]["OutputValue"] == "api-jobs"
    newer = data(call(stacks, "GET", f"/console/api/stacks/{stack_id}/view", query={"events": [str(shown)]}))
    assert newer["Events"] and all(e["Status"].startswith("UPDATE") or "DELETE" in e["Status"] for e in newer["Events"])
    idle(stacks, stack_id)

    every = [call(stacks, "GET", f"/console/api/stacks/{stack_id}{tail}").body for tail in
             ("", "/view", "/events", "/resources", "/dependencies", "/resources/Jobs/logs")]
    every.append(call(stacks, "GET", "/console/api/stacks").body)
    assert all(SECRET.encode() not in body for body in every)  # NoEcho: masked everywhere the page reads
    parameters = {p["ParameterKey"]: p["ParameterValue"] for p in data(call(stacks, "GET", f"/console/api/stacks/{stack_id}"))["Stack"]["Parameters"]}
    assert parameters["Secret"].strip("*") == "" and parameters["Prefix"] == "api"

    data(call(stacks, "POST", f"/console/api/stacks/{stack_id}/delete", body={"RetainResources": ["Results"]}))
    view = settle(stacks, stack_id)
    assert view["Stack"]["Status"] == "DELETE_COMPLETE", view["Stack"]
    assert data(call(stacks, "GET", "/console/api/stacks"))["Stacks"] == []


@pytest.mark.slow
def test_a_second_operation_while_one_runs_is_refused_with_ros_error(stacks: LocalStacks) -> None:
    stack_id = create(stacks)
    settle(stacks, stack_id)
    idle(stacks, stack_id)
    ros_error(call(stacks, "POST", "/console/api/stacks", body={"StackName": "queues", "TemplateBody": QUEUES}),
              409, "StackExists")
    assert "RetainResources" in ros_error(call(stacks, "POST", f"/console/api/stacks/{stack_id}/delete",
                                               body={"RetainResources": "Jobs"}), 400, "InvalidParameter")


@pytest.mark.slow
def test_a_long_poll_answers_as_soon_as_something_changes(stacks: LocalStacks) -> None:
    first = data(call(stacks, "GET", "/console/api/stacks"))
    started = time.monotonic()
    quiet = data(call(stacks, "GET", "/console/api/stacks", query={"since": [str(first["Version"])]}))
    waited = time.monotonic() - started
    assert views.LONG_POLL_SECONDS * 0.9 <= waited < views.LONG_POLL_SECONDS + 2 and quiet["Stacks"] == []

    answered: dict[str, Any] = {}

    def poll() -> None:
        answered.update(data(call(stacks, "GET", "/console/api/stacks", query={"since": [str(quiet["Version"])]})))
        answered["at"] = time.monotonic()

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(0.2)
    asked = time.monotonic()
    stack_id = create(stacks)
    poller.join(5)
    assert answered["Version"] > quiet["Version"] and [s["StackId"] for s in answered["Stacks"]] == [stack_id]
    assert answered["at"] - asked < views.LONG_POLL_SECONDS * 0.8, "the change did not end the wait"
    settle(stacks, stack_id)
    assert "since" in ros_error(call(stacks, "GET", "/console/api/stacks", query={"since": ["x"]}), 400, "InvalidParameter")


@pytest.mark.slow
def test_each_resources_provider_logs_are_its_own(tmp_path: Path) -> None:
    provider = tmp_path / "chatty.py"
    provider.write_text(CHATTY_PROVIDER)
    bindings = tmp_path / "bindings.yaml"
    bindings.write_text(f"bindings:\n  {CHATTY_TOKEN}: {provider}:provider\n")
    template = json.dumps({"ROSTemplateFormatVersion": "2015-09-01", "Resources": {
        name: {"Type": "Custom::Chatty", "Properties": {"ServiceToken": CHATTY_TOKEN, "Parameters": {"Name": name.lower()}}}
        for name in ("Alpha", "Beta")}})
    with LocalStacks(home=str(tmp_path / "home"), bindings=str(bindings)) as local:
        answer = data(call(local, "POST", "/console/api/stacks", body={"StackName": "chat", "TemplateBody": template}))
        view = settle(local, answer["StackId"])
        assert view["Stack"]["Status"] == "CREATE_COMPLETE", view["Stack"]
        alpha = data(call(local, "GET", f"/console/api/stacks/{answer['StackId']}/resources/Alpha/logs"))
        beta = data(call(local, "GET", f"/console/api/stacks/{answer['StackId']}/resources/Beta/logs"))
        assert any("hello from alpha" in line for line in alpha["Lines"]), alpha
        assert not any("hello from alpha" in line for line in beta["Lines"]) and any("hello from beta" in line for line in beta["Lines"])
        idle(local, answer["StackId"])


# ------------------------------------------------------------------------------ over HTTP, through LocalRos


@pytest.mark.slow
def test_over_http_the_token_url_sets_the_cookie_and_json_goes_with_the_header(tmp_path: Path) -> None:
    import http.client

    import requests

    from crhelper.ros.server import LocalRos

    with LocalRos(home=str(tmp_path / "home")) as ros:
        session = requests.Session()
        page = session.get(ros.console_url, timeout=10)
        assert page.status_code == 200 and "text/html" in page.headers["Content-Type"]
        assert "httponly" in page.headers["Set-Cookie"].lower() and "samesite=strict" in page.headers["Set-Cookie"].lower()
        base = ros.console_url.split("?")[0]
        assert session.get(base + "static/console.js", timeout=10).status_code == 200  # the cookie alone serves assets
        assert session.get(base + "console/api/stacks", timeout=10).json()["Code"] == "InvalidConsoleToken"
        token = session.get(base + "console/api/session", timeout=10).json()["Token"]
        assert token == ros.console_token
        created = session.post(base + "console/api/stacks", headers={"X-Console-Token": token},
                               json={"StackName": "over-http", "TemplateBody": QUEUES}, timeout=10)
        assert created.status_code == 200, created.text
        assert [s["StackName"] for s in ros.stacks.list()] == ["over-http"]
        idle(ros.stacks, created.json()["StackId"])

        # DNS rebinding: the browser reached us through another name; the Host header says so
        host, port = ros.endpoint.split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        connection.request("GET", "/console/api/stacks", headers={"Host": f"rebind.example:{port}",
                                                                  "X-Console-Token": token})
        refused = connection.getresponse()
        assert refused.status == 403 and b"Forbidden.Host" in refused.read()
        connection.close()
