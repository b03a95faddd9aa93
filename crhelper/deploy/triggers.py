"""Bring a function's triggers to what a deploy wants, through one version's calls (`TriggerCalls`)."""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

from . import DeployError
from .plan import Step, TriggerSpec, foreign_conflicts, needs_replacing, plan_triggers


class TriggerCalls(Protocol):
    """The three trigger calls of one FC version, on one function."""

    def create(self, trigger: TriggerSpec) -> None: ...

    def update(self, trigger: TriggerSpec) -> None: ...

    def delete(self, name: str) -> None: ...


def sync_triggers(function: str, current: Sequence[Mapping[str, Any]], wanted: Sequence[TriggerSpec],
                  calls: TriggerCalls) -> list[Step]:
    """Create, update (or replace, when FC cannot change it in place) and prune; the steps taken.
    DeployError before any call when a wanted name belongs to a trigger deploy did not create."""
    foreign = foreign_conflicts(current, wanted)
    if foreign:
        raise DeployError(f"function {function} already has trigger(s) {', '.join(foreign)} that crhelper deploy did "
                          "not create", "delete or rename them, then deploy again")
    plan = plan_triggers(current, wanted)
    held = {str(t.get("triggerName")): t for t in current}
    steps = [Step("unchanged", "trigger", name) for name in plan.unchanged]
    for trigger in plan.update:
        if needs_replacing(held[trigger.name], trigger):
            calls.delete(trigger.name)
            calls.create(trigger)
            steps.append(Step("update", "trigger", trigger.name, "replaced: type or source changed"))
        else:
            calls.update(trigger)
            steps.append(Step("update", "trigger", trigger.name, "configuration"))
    for trigger in plan.create:
        calls.create(trigger)
        steps.append(Step("create", "trigger", trigger.name, trigger.trigger_type))
    for name in plan.delete:
        calls.delete(name)
        steps.append(Step("delete", "trigger", name, "no longer wanted"))
    return steps
