"""What the AppCluster `ecs` backend needs of the endpoint, over a real socket without the SDK
(quick: no command runs, the instances are Stopped, so RunCommand's targets end Aborted):
ModifyInstanceSpec and ReplaceSystemDisk only while Stopped and without RegionId, RunCommand's ClientToken (a retry makes
nothing new, other parameters are refused) and its tags, which DescribeInvocations and
DescribeInvocationResults filter on."""

from __future__ import annotations

from typing import Any, Mapping

from ecs_support import REGION, acs3_request, send

from crhelper.local.ecs_server import LocalECS


def call(ecs: LocalECS, action: str, params: Mapping[str, str]) -> tuple[int, Any]:
    status, _, body = send(ecs.endpoint, acs3_request(ecs.endpoint, action, params, ecs.access_key_id,
                                                      ecs.access_key_secret))
    return status, body


def test_modify_instance_spec_changes_the_type_of_a_stopped_instance_only(ecs: LocalECS) -> None:
    stopped, running = ecs.add_instance("a"), ecs.add_instance("b", status="Running")
    status, body = call(ecs, "ModifyInstanceSpec", {"InstanceId": running, "InstanceType": "ecs.g7.large"})
    assert (status, body["Code"]) == (403, "IncorrectInstanceStatus") and "Stopped" in body["Message"]
    status, body = call(ecs, "ModifyInstanceSpec", {"InstanceId": stopped})
    assert (status, body["Code"]) == (400, "MissingParameter") and "InstanceType" in body["Message"]
    status, body = call(ecs, "ModifyInstanceSpec", {"InstanceId": stopped, "InstanceType": "ecs.g7.large",
                                                    "DryRun": "true"})
    assert (status, body["Code"]) == (400, "DryRunOperation")
    assert ecs.instance(stopped).instance_type == "ecs.local.small"
    status, body = call(ecs, "ModifyInstanceSpec", {"InstanceId": stopped, "InstanceType": "ecs.g7.large"})  # no RegionId
    assert status == 200 and body["RequestId"], body
    assert ecs.instance(stopped).instance_type == "ecs.g7.large"
    assert ecs.instance(running).instance_type == "ecs.local.small"
    status, body = call(ecs, "ModifyInstanceSpec", {"InstanceId": "i-nope", "InstanceType": "x", "RegionId": REGION})
    assert (status, body["Code"]) == (404, "InvalidInstanceId.NotFound")


def test_replace_system_disk_gives_a_stopped_instance_its_new_image(ecs: LocalECS) -> None:
    stopped, running = ecs.add_instance("a"), ecs.add_instance("b", status="Running")
    status, body = call(ecs, "ReplaceSystemDisk", {"InstanceId": running, "ImageId": "m-new"})
    assert (status, body["Code"]) == (403, "IncorrectInstanceStatus") and "ReplaceSystemDisk" in body["Message"]
    status, body = call(ecs, "ReplaceSystemDisk", {"InstanceId": stopped, "ImageId": "m-new"})
    assert status == 200 and body["DiskId"].startswith("d-"), body
    assert (ecs.instance(stopped).image_id, ecs.instance(running).image_id) == ("m-new", "local_linux_x64")
    status, body = call(ecs, "DescribeInstances", {"RegionId": REGION, "InstanceIds": f'["{stopped}"]'})
    assert body["Instances"]["Instance"][0]["ImageId"] == "m-new"


def _run(ecs: LocalECS, instance_id: str, content: str, **extra: str) -> tuple[int, Any]:
    return call(ecs, "RunCommand", {"RegionId": REGION, "Type": "RunShellScript", "InstanceId.1": instance_id,
                                    "CommandContent": content, **extra})


def test_run_command_client_token_runs_once_and_refuses_other_parameters(ecs: LocalECS) -> None:
    node = ecs.add_instance("n")
    status, first = _run(ecs, node, "echo one", ClientToken="cl-1:init:0")
    assert status == 200, first
    status, again = _run(ecs, node, "echo one", ClientToken="cl-1:init:0")
    assert status == 200 and (again["InvokeId"], again["CommandId"]) == (first["InvokeId"], first["CommandId"])
    assert len(ecs.fleet.invocations) == 1
    status, other = _run(ecs, node, "echo two", ClientToken="cl-1:init:0")
    assert (status, other["Code"]) == (400, "IdempotentParameterMismatch")
    status, fresh = _run(ecs, node, "echo one", ClientToken="cl-1:init:1")
    assert status == 200 and fresh["InvokeId"] != first["InvokeId"]
    status, untokened = _run(ecs, node, "echo one")
    assert status == 200 and untokened["InvokeId"] not in (first["InvokeId"], fresh["InvokeId"])
    assert len(ecs.fleet.invocations) == 3
    assert ecs.invocation(first["InvokeId"]).targets[node].status == "Aborted"  # a Stopped instance runs nothing


def test_invocations_carry_their_tags_and_are_filtered_by_them(ecs: LocalECS) -> None:
    node = ecs.add_instance("n")
    tagged = {"Tag.1.Key": "appcenter:cluster", "Tag.1.Value": "cl-1", "Tag.2.Key": "appcenter:invocation",
              "Tag.2.Value": "create-init"}
    _, mine = _run(ecs, node, "echo mine", **tagged)
    _, other = _run(ecs, node, "echo other", **{**tagged, "Tag.2.Value": "create-start"})
    _run(ecs, node, "echo untagged")
    status, body = call(ecs, "DescribeInvocations", {"RegionId": REGION, **tagged})
    assert status == 200, body
    rows = body["Invocations"]["Invocation"]
    assert [row["InvokeId"] for row in rows] == [mine["InvokeId"]]
    assert {(t["TagKey"], t["TagValue"]) for t in rows[0]["Tags"]["Tag"]} == {
        ("appcenter:cluster", "cl-1"), ("appcenter:invocation", "create-init")}
    status, body = call(ecs, "DescribeInvocations", {"RegionId": REGION, "Tag.1.Key": "appcenter:cluster"})
    assert {row["InvokeId"] for row in body["Invocations"]["Invocation"]} == {mine["InvokeId"], other["InvokeId"]}
    status, body = call(ecs, "DescribeInvocationResults", {"RegionId": REGION, "Tag.1.Key": "appcenter:invocation",
                                                           "Tag.1.Value": "create-start"})
    assert status == 200, body
    assert [row["InvokeId"] for row in body["Invocation"]["InvocationResults"]["InvocationResult"]] == [other["InvokeId"]]
    status, body = _run(ecs, node, "echo x", **{"Tag.1.Key": "acs:system", "Tag.1.Value": "v"})
    assert (status, body["Code"]) == (400, "InvalidTagKey.Malformed") and "Tag.1.Key" in body["Message"]
