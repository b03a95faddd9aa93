"""Spec §1, §2.1, §5 and test cases 10 and 11: every rule with an error naming the property path
and the rule, all problems at once."""

from __future__ import annotations

from typing import Any

import pytest

from crhelper.errors import PropertiesError
from handlers.bootgroups.model import InstanceBootGroupProps, LocalInstanceProps
from handlers.bootgroups.validation import (
    Context, check_group, check_local_instance, check_update, group_item, instance_item, validate_group,
)


def problems(props: dict[str, Any], **context: Any) -> dict[str, str]:
    checked = check_group(InstanceBootGroupProps.model_validate({"Name": "g", **props}), Context(**context))
    return {p.path: p.rule for p in checked.problems}


def vm(name: str, order: int = 0, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"Instance": name, "BootOrder": order, "ReadinessRules": list(rules)}


def group(name: str, instances: list[str], order: int = 0, *rules: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"InstanceGroup": {"Name": name, "Instances": instances}, "BootOrder": order,
            "ReadinessRules": list(rules), **extra}


@pytest.mark.parametrize("details, path, rule", [
    ({}, "Members[0].ReadinessRules[0].Details.port", "is required for PortCheck"),
    ({"port": 0}, "Members[0].ReadinessRules[0].Details.port", "must be an integer 1-65535"),
    ({"port": "65536"}, "Members[0].ReadinessRules[0].Details.port", "must be an integer 1-65535"),
    ({"port": 80, "protocol": "udp"}, "Members[0].ReadinessRules[0].Details.protocol", "only tcp is supported"),
    ({"port": 80, "prot": "tcp"}, "Members[0].ReadinessRules[0].Details.prot", "is not a detail of PortCheck"),
])
def test_portcheck_details(details: dict[str, Any], path: str, rule: str) -> None:
    found = problems({"Members": [vm("i-1", 0, {"Type": "PortCheck", "Details": details})]})
    assert path in found and found[path].startswith(rule)


def test_portcheck_accepts_a_string_port_and_tcp_in_any_case() -> None:
    checked = validate_group(InstanceBootGroupProps.model_validate(
        {"Name": "g", "Members": [vm("i-1", 0, {"Type": "portcheck", "Details": {"port": "5432", "protocol": "TCP"}})]}))
    rule = checked.members[0].rules[0]
    assert (rule.type, rule.details, rule.enabled, rule.name) == (
        "PortCheck", {"port": "5432", "protocol": "tcp"}, True, "PortCheck-VirtualMachine-i-1")


def test_singletons_and_one_portcheck_per_port() -> None:
    found = problems({"Members": [vm("i-1", 0, {"Type": "Ping"}, {"Type": "Ping"},
                                     {"Type": "PortCheck", "Details": {"port": 80}},
                                     {"Type": "PortCheck", "Details": {"port": 443}},
                                     {"Type": "PortCheck", "Details": {"port": 80}})]})
    assert "a second Ping rule on this item" in found["Members[0].ReadinessRules[1].Type"]
    assert "already has a PortCheck" in found["Members[0].ReadinessRules[4].Details.port"]
    assert len(found) == 2


def test_memberquorum_only_on_groups_and_guest_agent_only_on_kvm() -> None:
    found = problems({"Members": [
        vm("i-1", 0, {"Type": "MemberQuorum", "Details": {"thresholdtype": "COUNT", "thresholdvalue": 1}}),
        vm("i-2", 0, {"Type": "GuestAgentLiveness"}),
        group("web", ["w1"], 1, {"Type": "GuestAgentLiveness"}),  # a group rule cannot be checked at creation
    ]}, has_guest_agent=lambda name: name != "i-2" and name != "w1")
    assert found["Members[0].ReadinessRules[0].Type"] == "MemberQuorum is valid on an InstanceGroup member only"
    assert "GuestAgentLiveness needs a KVM instance" in found["Members[1].ReadinessRules[0].Type"]
    assert len(found) == 2


def test_a_rule_on_an_instance_outside_the_group_and_custom_script_are_refused() -> None:
    found = problems({"Members": [group("web", ["w1"], 0, {"Type": "CustomScript"},
                                        InstanceRules={"w9": [{"Type": "Ping"}]})]})
    assert "is not in instance group 'web'" in found["Members[0].InstanceRules.w9"]
    assert "CustomScript is reserved" in found["Members[0].ReadinessRules[0].Type"]


@pytest.mark.parametrize("details", [
    {"thresholdtype": "percentage", "thresholdvalue": "75"},
    {"threshold_type": "PERCENTAGE", "threshold_value": 75},
    {"thresholdtype": "PERCENTAGE", "threshold_type": "percentage", "thresholdvalue": "75"},
])
def test_both_quorum_spellings_are_accepted_and_stored_documented(details: dict[str, Any]) -> None:
    checked = validate_group(InstanceBootGroupProps.model_validate(
        {"Name": "g", "Members": [group("web", ["a", "b"], 0, {"Type": "MemberQuorum", "Details": details})]}))
    assert checked.members[0].rules[0].details == {"thresholdtype": "PERCENTAGE", "thresholdvalue": "75"}


def test_quorum_details_that_disagree_or_do_not_parse() -> None:
    found = problems({"Members": [
        group("a", ["a1"], 0, {"Type": "MemberQuorum", "Details": {"thresholdtype": "COUNT", "threshold_type": "PERCENTAGE",
                                                                   "thresholdvalue": 1}}),
        group("b", ["b1"], 0, {"Type": "MemberQuorum", "Details": {"thresholdtype": "COUNT", "thresholdvalue": "1.5"}}),
        group("c", ["c1"], 0, {"Type": "MemberQuorum", "Details": {"thresholdtype": "MOST"}}),
    ]})
    assert "disagrees with thresholdtype" in found["Members[0].ReadinessRules[0].Details.threshold_type"]
    assert found["Members[1].ReadinessRules[0].Details.thresholdvalue"] == "must be a whole number ≥ 0 for COUNT"
    assert found["Members[2].ReadinessRules[0].Details.thresholdtype"] == "must be COUNT or PERCENTAGE"
    assert "is required" in found["Members[2].ReadinessRules[0].Details.thresholdvalue"]


def test_an_instance_in_two_boot_groups_is_refused() -> None:  # Marvin test 5
    found = problems({"Members": [vm("i-1"), group("web", ["w1"], 1)]},
                     claims={instance_item("i-1"): "other", instance_item("w1"): "third"})
    assert "already a member of boot group 'other'" in found["Members[0].Instance"]
    assert "already a member of boot group 'third'" in found["Members[1].InstanceGroup"]


def test_an_instance_whose_group_is_a_member_is_refused() -> None:
    here = problems({"Members": [group("web", ["w1", "w2"], 1), vm("w2", 2)]})
    assert "already a member of this boot group (Members[0].InstanceGroup)" in here["Members[1].Instance"]
    elsewhere = problems({"Members": [vm("w1")]}, claims={group_item("web"): "other"}, instance_groups={"w1": "web"})
    assert "a member of boot group 'other'" in elsewhere["Members[0].Instance"]


def test_member_limits_orders_and_exactly_one_id() -> None:
    found = problems({"Members": [vm(f"i-{n}") for n in range(10)]
                      + [{"BootOrder": -1, "Instance": "x", "InstanceGroup": {"Name": "y", "Instances": []}},
                         {"BootOrder": 0}]})
    assert found["Members"].startswith("12 members, but a boot group holds at most 10")
    assert found["Members[10].BootOrder"].startswith("must be an integer ≥ 0")
    assert found["Members[10]"] == found["Members[11]"] == "give exactly one of Instance and InstanceGroup"
    assert problems({"Members": [vm(f"i-{n}") for n in range(10)]}) == {}


def test_every_problem_is_reported_in_one_reason_without_values() -> None:
    props = InstanceBootGroupProps.model_validate({"Name": "g", "Backend": "nope", "DesiredState": "Paused", "Members": [
        vm("secret-ish", -3, {"Type": "Ping"}, {"Type": "Ping"})]})
    with pytest.raises(PropertiesError) as info:
        validate_group(props)
    reason = info.value.reason
    for path in ("Backend", "DesiredState", "Members[0].BootOrder", "Members[0].ReadinessRules[1].Type"):
        assert f"ResourceProperties.{path}:" in reason
    assert "nope" not in reason and "Paused" not in reason
    assert "ResourceProperties.Backend" in info.value.fields


def test_names_are_unique_per_owner_and_generated_names_do_not_collide() -> None:
    assert "already named 'g'" in problems({}, taken_names=["g"])["Name"]
    checked = validate_group(InstanceBootGroupProps.model_validate({"Name": "g", "Members": [vm(
        "i-1", 0, {"Type": "PortCheck", "Details": {"port": 1}}, {"Type": "PortCheck", "Details": {"port": 2}},
        {"Type": "Ping", "Name": "p"})]}))
    assert [r.name for r in checked.members[0].rules] == ["PortCheck-VirtualMachine-i-1", "PortCheck-VirtualMachine-i-1-2", "p"]


def test_tag_is_for_ecs_and_id_for_cloudstack() -> None:
    tag = {"InstanceGroup": {"Name": "web", "Tag": {"Key": "tier", "Value": "web"}}, "BootOrder": 0}
    assert "ecs backend only" in problems({"Members": [tag]})["Members[0].InstanceGroup.Tag"]
    assert problems({"Backend": "ecs", "Members": [tag]}) == {}
    by_id = {"InstanceGroup": {"Id": "ig-1"}, "BootOrder": 0}
    assert problems({"Backend": "cloudstack", "Members": [by_id]}) == {}


def test_a_rules_type_cannot_change_on_update() -> None:
    def plan(kind: str) -> Any:
        return validate_group(InstanceBootGroupProps.model_validate(
            {"Name": "g", "Members": [vm("i-1", 0, {"Type": kind, "Name": "r", "Details": {"port": 1} if kind == "PortCheck" else {}})]})).members
    found = check_update(plan("Ping"), plan("PortCheck"))
    assert [str(p) for p in found] == ["Members[0]: rule 'r' is a Ping rule; a rule's type cannot change (remove it and add one under another Name)"]


def test_local_instance_rules() -> None:
    found = {p.path: p.rule for p in check_local_instance(LocalInstanceProps.model_validate(
        {"Command": [], "Host": " ", "Ports": [80, 80, 70000], "Environment": {"A=B": "x"}}))}
    assert set(found) == {"Command", "Host", "Ports[1]", "Ports[2]", "Environment.A=B"}
    assert check_local_instance(LocalInstanceProps.model_validate({"Command": "python3 -m http.server", "Ports": [8000]})) == []
