"""The local ROS 2019-09-10 API driven by the official SDK (alibabacloud-ros20190910) over real HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from alibabacloud_ros20190910 import models as m
from alibabacloud_tea_openapi.exceptions import ClientException

from crhelper.ros.server import LocalRos
from ros_support import PROVIDERS, REGION, REPO, TOKEN, echo_template, wait_until

pytestmark = pytest.mark.slow


def _status(client: Any, stack_id: str) -> str:
    return str(client.get_stack(m.GetStackRequest(region_id=REGION, stack_id=stack_id)).body.status)


def _settled(client: Any, stack_id: str) -> str:
    def settled() -> str | None:
        status = _status(client, stack_id)
        return None if status.endswith("IN_PROGRESS") else status

    return str(wait_until(settled))


def _create(client: Any, name: str, template: str, **kw: Any) -> str:
    parameters = [m.CreateStackRequestParameters(parameter_key=k, parameter_value=v)
                  for k, v in kw.pop("parameters", {}).items()]
    request = m.CreateStackRequest(region_id=REGION, stack_name=name, template_body=template, parameters=parameters, **kw)
    return str(client.create_stack(request).body.stack_id)


def test_create_with_parameters_runs_in_the_background_and_polls_to_create_complete(ros: LocalRos) -> None:
    client = ros.client()
    template = echo_template({"Slow": {"Name": {"Ref": "Who"}, "CreateSleep": 0.4}, "Other": {"Name": "b"}},
                             parameters={"Who": {"Type": "String"}, "Secret": {"Type": "String", "NoEcho": True},
                                         "Times": {"Type": "Number", "Default": 2}},
                             Description="two echoes")
    stack_id = _create(client, "api-create", template, parameters={"Who": "ada", "Secret": "s3cr3t"},
                       timeout_in_minutes=15, disable_rollback=True, tags=[m.CreateStackRequestTags(key="team", value="a")])
    assert _status(client, stack_id) == "CREATE_IN_PROGRESS"  # CreateStack returned before the 0.4 s resource
    assert _settled(client, stack_id) == "CREATE_COMPLETE"
    body = client.get_stack(m.GetStackRequest(region_id=REGION, stack_id=stack_id)).body
    assert body.stack_name == "api-create" and body.stack_id == stack_id
    assert body.status_reason == "Stack CREATE completed successfully"
    assert body.disable_rollback is True and body.timeout_in_minutes == 15
    assert body.template_description == "two echoes"
    assert [(t.key, t.value) for t in body.tags] == [("team", "a")]
    values = {p.parameter_key: p.parameter_value for p in body.parameters}
    assert values["Who"] == "ada" and values["Times"] == "2" and values["Secret"] != "s3cr3t"
    assert set(values["Secret"]) == {"*"}
    assert values["ALIYUN::StackId"] == stack_id and values["ALIYUN::Region"] == REGION
    assert {o["OutputKey"]: o["OutputValue"] for o in body.outputs} == {"SlowName": "ada", "OtherName": "b"}
    assert len(body.create_time) == 19 and body.create_time[10] == "T"  # UTC, no zone letter, as ROS answers
    hidden = client.get_stack(m.GetStackRequest(region_id=REGION, stack_id=stack_id, output_option="Disabled")).body
    assert hidden.outputs is None


def test_events_and_resources_page_with_total_counts(ros: LocalRos) -> None:
    client = ros.client()
    names = [f"R{i}" for i in range(5)]
    stack_id = _create(client, "api-pages", echo_template({n: {"Name": n.lower()} for n in names}))
    assert _settled(client, stack_id) == "CREATE_COMPLETE"
    seen: list[Any] = []
    for page in (1, 2, 3, 4, 5):
        body = client.list_stack_events(m.ListStackEventsRequest(region_id=REGION, stack_id=stack_id,
                                                                 page_number=page, page_size=3)).body
        assert body.total_count == 12 and body.page_number == page and body.page_size == 3
        seen.extend(body.events)
    assert len(seen) == 12 and len({e.event_id for e in seen}) == 12
    assert seen[0].logical_resource_id == "api-pages" and seen[0].status == "CREATE_COMPLETE"  # newest first
    assert seen[-1].status == "CREATE_IN_PROGRESS" and seen[-1].resource_type == "ALIYUN::ROS::Stack"
    only = client.list_stack_events(m.ListStackEventsRequest(region_id=REGION, stack_id=stack_id,
                                                             logical_resource_id=["R3"], status=["CREATE_COMPLETE"])).body
    assert [(e.logical_resource_id, e.physical_resource_id) for e in only.events] == [("R3", "echo-r3")]
    resources = client.list_stack_resources(m.ListStackResourcesRequest(region_id=REGION, stack_id=stack_id)).body
    assert [(r.logical_resource_id, r.status) for r in resources.resources] == [(n, "CREATE_COMPLETE") for n in names]
    one = client.get_stack_resource(m.GetStackResourceRequest(region_id=REGION, stack_id=stack_id,
                                                              logical_resource_id="R1", show_resource_attributes=True)).body
    assert one.physical_resource_id == "echo-r1" and one.resource_type == "Custom::Echo"
    assert {"Key": "Name", "Value": "r1"} in one.resource_attributes
    with pytest.raises(ClientException) as missing:
        client.get_stack_resource(m.GetStackResourceRequest(region_id=REGION, stack_id=stack_id, logical_resource_id="Nope"))
    assert (missing.value.code, missing.value.status_code) == ("ResourceNotFound", 404)
    listed = client.list_stacks(m.ListStacksRequest(region_id=REGION, page_size=50)).body
    assert listed.total_count == 1 and listed.stacks[0].stack_id == stack_id


def test_update_follows_use_previous_parameters(ros: LocalRos) -> None:
    client = ros.client()
    parameters = {"Who": {"Type": "String", "Default": "nobody"}}
    stack_id = _create(client, "api-update", echo_template({"E": {"Name": {"Ref": "Who"}}}, parameters),
                       parameters={"Who": "ada"})
    assert _settled(client, stack_id) == "CREATE_COMPLETE"

    def update(**kw: Any) -> None:
        client.update_stack(m.UpdateStackRequest(region_id=REGION, stack_id=stack_id, **kw))
        assert _settled(client, stack_id) == "UPDATE_COMPLETE"

    def output() -> str:
        body = client.get_stack(m.GetStackRequest(region_id=REGION, stack_id=stack_id)).body
        return str(body.outputs[0]["OutputValue"])

    update(template_body=echo_template({"E": {"Name": {"Ref": "Who"}, "Extra": 1}}, parameters),
           use_previous_parameters=True)
    assert output() == "ada"
    update(template_body=echo_template({"E": {"Name": {"Ref": "Who"}, "Extra": 2}}, parameters))
    assert output() == "nobody"  # not given, not previous: the template's default, as ROS does
    update(parameters=[m.UpdateStackRequestParameters(parameter_key="Who", parameter_value="grace")])
    assert output() == "grace"  # no TemplateBody: the current template stays
    with pytest.raises(ClientException) as caught:  # nothing would change: ROS refuses (UpdateStackRequest.dry_run docs)
        client.update_stack(m.UpdateStackRequest(region_id=REGION, stack_id=stack_id, use_previous_parameters=True))
    assert (caught.value.code, caught.value.status_code) == ("NotSupported", 400)


def test_delete_with_retention_sends_no_delete_to_retained_resources(ros: LocalRos) -> None:
    client = ros.client()
    stack_id = _create(client, "api-delete", echo_template({"Kept": {"Name": "k", "FailDelete": "would fail"},
                                                            "Gone": {"Name": "g"}}))
    assert _settled(client, stack_id) == "CREATE_COMPLETE"
    client.delete_stack(m.DeleteStackRequest(region_id=REGION, stack_id=stack_id, retain_resources=["Kept"]))
    assert _settled(client, stack_id) == "DELETE_COMPLETE"  # Kept's provider would have failed a Delete
    resources = client.list_stack_resources(m.ListStackResourcesRequest(region_id=REGION, stack_id=stack_id)).body
    reasons = {r.logical_resource_id: r.status_reason for r in resources.resources}
    assert "RetainResources" in reasons["Kept"] and "RetainResources" not in reasons["Gone"]
    assert client.list_stacks(m.ListStacksRequest(region_id=REGION)).body.total_count == 0  # deleted ones hidden
    deleted = client.list_stacks(m.ListStacksRequest(region_id=REGION, status=["DELETE_COMPLETE"])).body
    assert [s.stack_id for s in deleted.stacks] == [stack_id]

    other = _create(client, "api-delete-all", echo_template({"A": {"Name": "a", "FailDelete": "x"},
                                                             "B": {"Name": "b", "FailDelete": "y"}}))
    assert _settled(client, other) == "CREATE_COMPLETE"
    client.delete_stack(m.DeleteStackRequest(region_id=REGION, stack_id=other, retain_all_resources=True))
    assert _settled(client, other) == "DELETE_COMPLETE"


def test_refusals_raise_the_sdks_exception_with_ros_codes(ros: LocalRos) -> None:
    client = ros.client()

    def refused(call: Any, *args: Any) -> tuple[str, int]:
        with pytest.raises(ClientException) as caught:
            call(*args)
        assert caught.value.data["RequestId"] and caught.value.data["HostId"]
        return caught.value.code, caught.value.status_code

    assert refused(client.get_stack, m.GetStackRequest(region_id=REGION, stack_id="no-such-stack")) \
        == ("StackNotFound", 404)
    stack_id = _create(client, "api-errors", echo_template({"Slow": {"Name": "s", "CreateSleep": 1.0}}))
    again = m.CreateStackRequest(region_id=REGION, stack_name="api-errors", template_body=echo_template())
    assert refused(client.create_stack, again) == ("StackExists", 409)
    busy = m.UpdateStackRequest(region_id=REGION, stack_id=stack_id, template_body=echo_template())
    assert refused(client.update_stack, busy) == ("ActionInProgress", 409)
    assert refused(client.delete_stack, m.DeleteStackRequest(region_id=REGION, stack_id=stack_id)) \
        == ("ActionInProgress", 409)
    bad = m.CreateStackRequest(region_id=REGION, stack_name="api-bad", template_body=echo_template(
        {"E": {"Name": {"Ref": "N"}}}, {"N": {"Type": "Number", "MaxValue": 3}}),
        parameters=[m.CreateStackRequestParameters(parameter_key="N", parameter_value="9")])
    assert refused(client.create_stack, bad) == ("StackValidationFailed", 400)
    assert refused(client.create_stack, m.CreateStackRequest(region_id=REGION, stack_name="api-short",
                                                             template_body=echo_template(), timeout_in_minutes=5)) \
        == ("InvalidParameter", 400)
    unbound = json.dumps({"ROSTemplateFormatVersion": "2015-09-01", "Resources": {"X": {"Type": "Custom::X", "Properties": {
        "ServiceToken": "acs:fc:cn-hangzhou:123456789:services/none/functions/none"}}}})
    assert refused(client.create_stack, m.CreateStackRequest(region_id=REGION, stack_name="api-unbound",
                                                             template_body=unbound)) == ("StackValidationFailed", 400)
    assert refused(client.get_stack, m.GetStackRequest(region_id="cn-beijing", stack_id=stack_id)) == ("InvalidParameter", 400)
    assert _settled(client, stack_id) == "CREATE_COMPLETE"


def test_client_token_makes_create_idempotent(ros: LocalRos) -> None:
    client = ros.client()
    template = echo_template()
    first = _create(client, "api-token", template, client_token="token-1")
    assert _create(client, "api-token", template, client_token="token-1") == first  # an SDK retry: same stack
    with pytest.raises(ClientException) as caught:
        _create(client, "api-token", echo_template({"Other": {"Name": "x"}}), client_token="token-1")
    assert caught.value.code == "InvalidIdempotenceParameter"
    assert _settled(client, first) == "CREATE_COMPLETE"


def test_templates_validate_preview_and_come_back(ros: LocalRos) -> None:
    client = ros.client()
    template = echo_template({"E": {"Name": {"Ref": "Who"}}}, {"Who": {"Type": "String", "Default": "x",
                                                                      "Description": "who"}}, Description="d")
    checked = client.validate_template(m.ValidateTemplateRequest(region_id=REGION, template_body=template)).body
    assert checked.description == "d"
    assert checked.parameters[0]["ParameterKey"] == "Who" and checked.parameters[0]["DefaultValue"] == "x"
    assert [o.output_key for o in checked.outputs] == ["EName"]
    with pytest.raises(ClientException) as caught:
        client.validate_template(m.ValidateTemplateRequest(region_id=REGION, template_body="Resources: [1"))
    assert caught.value.code == "StackValidationFailed"
    preview = client.preview_stack(m.PreviewStackRequest(region_id=REGION, stack_name="p", template_body=template)).body
    assert [(r.logical_resource_id, r.resource_type) for r in preview.stack.resources] == [("E", "Custom::Echo")]
    stack_id = _create(client, "api-template", template)
    got = client.get_template(m.GetTemplateRequest(region_id=REGION, stack_id=stack_id)).body
    assert got.template_body == template
    regions = client.describe_regions(m.DescribeRegionsRequest()).body
    assert [r.region_id for r in regions.regions] == [REGION]
    assert _settled(client, stack_id) == "CREATE_COMPLETE"


def test_a_bad_signature_is_refused(ros: LocalRos) -> None:
    wrong = ros.client(access_key_secret="not-the-secret")
    with pytest.raises(ClientException) as caught:
        wrong.list_stacks(m.ListStacksRequest(region_id=REGION))
    assert caught.value.code == "SignatureDoesNotMatch" and caught.value.status_code == 400
    unknown = ros.client(access_key_id="LTAIunknown")
    with pytest.raises(ClientException) as caught:
        unknown.list_stacks(m.ListStacksRequest(region_id=REGION))
    assert caught.value.code == "InvalidAccessKeyId.NotFound"


def test_stacks_are_shared_with_crhelper_stack(ros: LocalRos, home: Any, tmp_path: Any) -> None:
    client = ros.client()
    stack_id = _create(client, "from-api", echo_template())
    assert _settled(client, stack_id) == "CREATE_COMPLETE"
    env = {**os.environ, "CRHELPER_HOME": str(home)}
    listed = subprocess.run([sys.executable, "-m", "crhelper.cli.stack", "list", "--json"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert [(s["name"], s["stack_id"], s["status"]) for s in json.loads(listed.stdout)] \
        == [("from-api", stack_id, "CREATE_COMPLETE")]
    template = tmp_path / "cli.json"
    template.write_text(echo_template({"C": {"Name": "c"}}))
    made = subprocess.run([sys.executable, "-m", "crhelper.cli.stack", "create", str(template), "--stack", "from-cli",
                           "--in-process", "-s", f"{TOKEN}={PROVIDERS}:provider", "--json"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    names = {s.stack_name: s.status for s in client.list_stacks(m.ListStacksRequest(region_id=REGION)).body.stacks}
    assert names == {"from-api": "CREATE_COMPLETE", "from-cli": "CREATE_COMPLETE"}
    cli_id = json.loads(made.stdout)["Stack"]["stack_id"]
    client.delete_stack(m.DeleteStackRequest(region_id=REGION, stack_id=cli_id))  # the remembered bindings reach C
    assert _settled(client, cli_id) == "DELETE_COMPLETE"
