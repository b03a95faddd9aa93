"""Each delivery path end to end: local FC (real fc2 and FC 3.0 SDKs, async), MNS queue and topic,
web async and sync against a real waitress server, signing with HttpConfig.SignKey, protocol violations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest
from stack_support import FC2, FC3, QUEUE, TOPIC, echo_template, spec

from crhelper.cli.serve import BackgroundServer
from crhelper.emulator import StackEmulator
from crhelper.emulator.delivery import StackDelivery
from crhelper.emulator.delivery_bindings import Bindings
from crhelper.transports.http import wsgi_app
from crhelper.transports.http_config import EndpointConfig


@pytest.fixture
def emulator(home: Path) -> Iterator[StackEmulator]:
    with StackEmulator(home) as instance:
        yield instance


def bound(token: str, attribute: str = "provider", **options: Any) -> Bindings:
    return Bindings(**options).with_flags([f"{token}={spec(attribute)}"])


@pytest.mark.slow
def test_fc2_token_runs_through_local_fc_with_async_fc2_invocations(emulator: StackEmulator) -> None:
    with StackDelivery(bound(FC2)) as deliver:
        created = emulator.create("fc", echo_template(FC2), {}, deliver)
        deleted = emulator.delete("fc", deliver)
        assert deliver.fc.fc.wait_idle(5)  # the worker settles just after its answer arrived
        records = deliver.fc.fc.records
    assert created.status == "CREATE_COMPLETE", created.status_reason
    assert created.output_values() == {"EchoName": "one"}
    assert deleted.status == "DELETE_COMPLETE"
    assert [d.route for d in deliver.delivered] == ["fc", "fc"]
    assert [(r.service, r.function, r.invocation_type, r.status) for r in records] == [("tests", "echo", "Async", "succeeded")] * 2


@pytest.mark.slow
def test_fc3_token_runs_through_local_fc_with_the_fc3_sdk(emulator: StackEmulator) -> None:
    with StackDelivery(bound(FC3)) as deliver:
        created = emulator.create("fc3", echo_template(FC3), {}, deliver)
        assert deliver.fc.fc.wait_idle(5)
        records = deliver.fc.fc.records
    assert created.status == "CREATE_COMPLETE", created.status_reason
    assert [(d.route, d.request_type, d.status) for d in deliver.delivered] == [("fc", "Create", "SUCCESS")]
    # an FC 3.0 function: no service
    assert [(r.service, r.function, r.invocation_type, r.status) for r in records] == [("", "echo", "Async", "succeeded")]


def test_mode_inprocess_skips_the_local_endpoints(emulator: StackEmulator) -> None:
    with StackDelivery(bound(FC2, mode="inprocess")) as deliver:
        created = emulator.create("quick", echo_template(FC2), {}, deliver)
    assert created.status == "CREATE_COMPLETE"
    assert deliver.delivered[0].route == "inprocess"


@pytest.mark.parametrize("token", [QUEUE, TOPIC, QUEUE.replace(":queues/", ":/queues/")], ids=["queue", "topic", "queue-slash"])
@pytest.mark.slow
def test_mns_tokens_travel_through_local_mns(emulator: StackEmulator, token: str) -> None:
    bindings = Bindings().with_flags([f"{QUEUE}={spec()}", f"{TOPIC}={spec()}"])
    with StackDelivery(bindings) as deliver:
        created = emulator.create("mns", echo_template(token, {"A": {"Name": "a"}, "B": {"Name": "b"}}), {}, deliver)
        queues = [q.rsplit("/", 1)[-1] for q in deliver.mns.mns.account().list_queue()[0]]
    assert created.status == "CREATE_COMPLETE", created.status_reason
    assert created.output_values() == {"AName": "a", "BName": "b"}
    assert {d.route for d in deliver.delivered} == {"mns"}
    assert queues == (["echo-requests-ros-emulator"] if token == TOPIC else ["echo-requests"])


@pytest.fixture
def web_server() -> Iterator[Any]:
    from stack_providers import provider

    servers: list[BackgroundServer] = []

    def start(config: EndpointConfig | None = None) -> BackgroundServer:
        server = BackgroundServer(wsgi_app(provider, config=config or EndpointConfig())).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.mark.parametrize("prefix,route", [("web", "web"), ("web[sync]", "web-sync")])
def test_web_tokens_are_posted_for_real(emulator: StackEmulator, web_server: Any, prefix: str, route: str) -> None:
    server = web_server()
    path = "/sync" if "sync" in prefix else "/"
    token = f"{prefix}:{server.url}{path}"
    with StackDelivery(Bindings()) as deliver:
        created = emulator.create("web", echo_template(token), {}, deliver)
        deleted = emulator.delete("web", deliver)
    assert created.status == "CREATE_COMPLETE", created.status_reason
    assert deleted.status == "DELETE_COMPLETE", deleted.status_reason
    assert [(d.route, d.request_type, d.status) for d in deliver.delivered] == [(route, "Create", "SUCCESS"), (route, "Delete", "SUCCESS")]


def test_web_requests_are_signed_with_the_templates_sign_key(emulator: StackEmulator, web_server: Any) -> None:
    server = web_server(EndpointConfig(sign_key="s3cr3t-key"))
    token = f"web:{server.url}/"

    def template(key: Any) -> str:
        document = json.loads(echo_template(token, Parameters={"Key": {"Type": "String", "NoEcho": True}}))
        document["Resources"]["Echo"]["Properties"]["HttpConfig"] = {"SignKey": key}
        return json.dumps(document)

    signed = template({"Ref": "Key"})
    configs = emulator.prepare("create", "signed", signed, {"Key": "s3cr3t-key"}).http_configs
    assert configs == {"Echo": {"SignKey": "s3cr3t-key"}}
    with StackDelivery(Bindings(), http_configs=configs) as deliver:
        assert emulator.create("signed", signed, {"Key": "s3cr3t-key"}, deliver).status == "CREATE_COMPLETE"
    wrong = template("another-key")
    configs = emulator.prepare("create", "wrong", wrong, {"Key": "x"}).http_configs
    with StackDelivery(Bindings(), http_configs=configs) as deliver:
        refused = emulator.create("wrong", wrong, {"Key": "x"}, deliver, disable_rollback=True)
    assert refused.status == "CREATE_FAILED"
    reason = refused.resources[0].status_reason
    assert reason.startswith("web endpoint answered HTTP 401") and "Signature" in reason


def test_unbound_token_fails_the_resource_with_what_to_do(emulator: StackEmulator) -> None:
    with StackDelivery(Bindings()) as deliver:
        failed = emulator.create("unbound", echo_template(FC2), {}, deliver, disable_rollback=True)
    assert failed.resources[0].status_reason == (
        f"no provider is bound to ServiceToken {FC2}; bind one with -s '{FC2}=package.module:provider' or in a bindings file"
    )


@pytest.mark.parametrize("rule,message", [
    ("no-echo", "LogicalResourceId must echo the request's value"),
    ("big-data", "body is 5"),
])
def test_protocol_violations_fail_the_resource_with_the_servers_message(emulator: StackEmulator, rule: str, message: str) -> None:
    with StackDelivery(bound(FC3, "rogue", mode="inprocess")) as deliver:
        failed = emulator.create("rogue", echo_template(FC3, {"Echo": {"Break": rule}}), {}, deliver, disable_rollback=True)
    reason = failed.resources[0].status_reason
    assert failed.status == "CREATE_FAILED"
    assert reason.startswith("the Create response broke the ROS protocol: ")
    assert message in reason


@pytest.mark.parametrize("source,kind", [("x = (\n", "SyntaxError"), ("raise RuntimeError('boom at import')\n", "RuntimeError")])
def test_a_provider_that_fails_to_load_is_named_in_the_reason(emulator: StackEmulator, tmp_path: Path,
                                                               source: str, kind: str) -> None:
    broken = tmp_path / "broken_provider.py"
    broken.write_text(source)
    bindings = Bindings(mode="inprocess").with_flags([f"{FC3}={broken}:provider"])
    with StackDelivery(bindings) as deliver:
        failed = emulator.create("broken", echo_template(FC3), {}, deliver, disable_rollback=True)
    reason = failed.resources[0].status_reason
    assert failed.status == "CREATE_FAILED"
    assert reason.startswith(f"provider {broken}:provider could not be loaded: {kind}: "), reason
    assert "-s TOKEN=MODULE:provider" in reason


def test_a_provider_error_quoting_its_event_keeps_the_response_url_out_of_events(emulator: StackEmulator) -> None:
    events: list[Any] = []
    with StackDelivery(bound(FC3, "rogue", mode="inprocess")) as deliver:
        failed = emulator.create("quoting", echo_template(FC3, {"Echo": {"Break": "raise-with-event"}}), {}, deliver,
                                 disable_rollback=True, on_event=events.append)
    reason = failed.resources[0].status_reason
    assert reason.startswith("cannot handle {"), reason
    assert "/ros/public/" in reason and "?<redacted>" in reason
    assert all("Signature=" not in repr(e) for e in events + emulator.events("quoting"))
    assert "Signature=" not in repr(emulator.describe("quoting"))
