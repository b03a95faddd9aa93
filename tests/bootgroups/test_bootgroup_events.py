"""Spec §6 and the Marvin life-cycle tests 1-2: the events an Update's plan change records."""

from __future__ import annotations

from typing import Any

from bootgroup_fakes import members_of
from handlers.bootgroups import events as ev


def plan(*members: dict[str, Any]) -> Any:
    return members_of({"Members": list(members)})


def test_the_eleven_documented_types_and_the_reorder() -> None:
    assert len(ev.EVENT_TYPES) == 12 and ev.MEMBER_REORDER == "INSTANCE.BOOT.GROUP.MEMBER.REORDER"
    assert all(t.startswith("INSTANCE.BOOT.GROUP.") for t in ev.EVENT_TYPES)


def test_member_add_reorder_remove_and_rule_create_update_delete() -> None:
    ping = {"Type": "Ping", "Name": "p"}
    old = plan({"Instance": "a", "BootOrder": 0, "ReadinessRules": [ping, {"Type": "PortCheck", "Name": "db", "Details": {"port": 1}}]},
               {"Instance": "b", "BootOrder": 1, "ReadinessRules": [{"Type": "Ping"}]})
    new = plan({"Instance": "a", "BootOrder": 2, "ReadinessRules": [{**ping, "Enabled": False}]},
               {"Instance": "c", "BootOrder": 0})
    assert old[0].rules[0].enabled is True  # enabled defaults to true
    found = [(e.type, e.subject) for e in ev.plan_changes(old, new, 0.0)]
    assert found == [
        (ev.MEMBER_REORDER, "a"), (ev.MEMBER_ADD, "c"), (ev.MEMBER_REMOVE, "b"),
        (ev.RULE_UPDATE, "a/p"), (ev.RULE_DELETE, "a/db"), (ev.RULE_DELETE, "b/Ping-VirtualMachine-b"),
    ]
    assert ev.plan_changes(new, new, 0.0) == []


def test_an_event_reads_as_one_line() -> None:
    event = ev.Event(ev.START, 0.0, "tier 2 halted", ok=False, subject="shop")
    assert event.line() == "INSTANCE.BOOT.GROUP.START FAILED shop: tier 2 halted"
