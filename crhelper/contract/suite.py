"""The provider contract, adapted from CloudFormation's `cfn test` to ROS custom resources.

`run_contract(provider, "Custom::X", create_props, update_props)` sends one scripted sequence of
requests (Create, the same Create again, Update, the rollback Update, Delete, Delete again, Delete
after a failed Create, Delete of an unknown id), waiting for each answer through the continuations
of a long operation, and judges it against these checks:

  create-delete         Create answers SUCCESS with an id, Delete of that id answers SUCCESS
  create-duplicate      the same Create delivered twice: both SUCCESS with one id (one resource)
  update-keeps-id       Update with changed properties answers SUCCESS with the same id
  rollback-update       the Update ROS sends to roll back when this Update or a later resource's failed
                        (properties and OldResourceProperties swapped, the same id) answers SUCCESS with
                        that id and the Create's Data
  delete-twice          a second Delete of the same id still answers SUCCESS
  delete-failed-create  Delete of the id a failed Create answers with succeeds without calling the handler
                        (when that Create left nothing behind; see the README on failed Creates)
  delete-unknown        Delete of an id that never existed answers SUCCESS
  long-running          when the Create answers InProgress: exactly one answer, handler calls = polls + 1,
                        request.state and request.attempt carried from step to step (SKIP otherwise)
  response-limits       every answer passes the ResponseURL server's ROS rules (size, id, echo, Reason)
  no-secrets-in-logs    no ResponseURL, URL signature or secret property value in the provider's output
  time-budget           every call is answered within its budget
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..constants import CREATE_FAILED_MARKER
from ..provider import Provider
from ..response import InProgress
from .harness import Call, HandlerCall, Harness

CHECKS = (
    "create-delete", "create-duplicate", "update-keeps-id", "rollback-update", "delete-twice",
    "delete-failed-create", "delete-unknown", "long-running", "response-limits", "no-secrets-in-logs",
    "time-budget",
)
DEFAULT_BUDGET = 60.0
#: How long after a long operation's answer the suite listens for another one.
ANSWER_GRACE = 0.5


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    detail: str
    skipped: bool = False

    @property
    def verdict(self) -> str:
        return "SKIP" if self.skipped else ("PASS" if self.passed else "FAIL")


@dataclass
class ContractReport:
    provider: str
    resource_type: str
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed or c.skipped for c in self.checks)

    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if not (c.passed or c.skipped)]

    def check(self, name: str) -> CheckResult:
        return next(c for c in self.checks if c.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "type": self.resource_type, "passed": self.passed,
                "checks": [{**asdict(c), "verdict": c.verdict} for c in self.checks]}


def _success(call: Call | None, expected_id: str | None = None) -> str | None:
    """None if the call answered SUCCESS (with `expected_id` when given), else what went wrong."""
    if call is None:
        return "not run"
    if call.status != "SUCCESS":
        return call.summary()
    if not call.physical_id:
        return "SUCCESS without a PhysicalResourceId"
    if expected_id is not None and call.physical_id != expected_id:
        return f"PhysicalResourceId changed from {expected_id!r} to {call.physical_id!r}"
    return None


def _secret_values(names: Iterable[str], *maps: Mapping[str, Any] | None) -> dict[str, str]:
    """Dotted property paths -> their values (as text) in the create and update properties."""
    found: dict[str, str] = {}
    for name in names:
        for props in maps:
            value: Any = props
            for part in name.split("."):
                value = value.get(part) if isinstance(value, Mapping) else None
            if value is not None and str(value):
                found[f"{name}" if name not in found else f"{name} (update)"] = str(value)
    return found


def _long_running(h: Harness, created: Call, calls: list[HandlerCall]) -> CheckResult:
    """Judge the Create's long operation: one answer, calls = polls + 1, state and attempt carried."""
    name = "long-running"
    if not isinstance(h.provider, Provider):
        return CheckResult(name, True, "not a crhelper Provider: its continuations cannot be observed", skipped=True)
    if not created.in_progress:
        return CheckResult(name, True, "the Create was answered in its first call (no InProgress for these "
                                       "properties)", skipped=True)
    problems = []
    answers = [c for c in h.answers(created.request) if c.status == 200]
    polls = h.polls.polls(str(created.request.get("RequestId")))
    if not answers:
        problems.append(f"no answer within the time budget ({h.budget:g} s) after {polls} poll(s)")
    elif len(answers) > 1:
        problems.append(f"{len(answers)} answers reached the ResponseURL of one Create (exactly one is allowed; "
                        "ROS takes the first)")
    if not h.polls.visible():
        counted = "polls not counted: CRHELPER_LOG_LEVEL hides the framework's INFO records"
    elif len(calls) != polls + 1:
        counted = ""
        problems.append(f"{len(calls)} handler call(s) for {polls} poll(s); expected polls + 1 = {polls + 1}")
    else:
        counted = f"{len(calls)} handler calls for {polls} polls"
    problems.extend(_carried(calls))
    if problems:
        return CheckResult(name, False, "; ".join(problems))
    return CheckResult(name, True, f"answered once in {created.seconds:.2f} s: {counted}, state and attempt carried")


def _carried(calls: list[HandlerCall]) -> list[str]:
    """What each call after the first got wrong: request.state not what the previous InProgress
    returned (compared as JSON, the form it is stored in), request.attempt not increasing."""
    problems: list[str] = []
    for number, (before, after) in enumerate(zip(calls, calls[1:]), start=2):
        if before.request is None or after.request is None:
            break  # a handler that takes no request can neither read nor be told its state
        if after.request.attempt <= before.request.attempt:
            problems.append(f"call {number} got request.attempt {after.request.attempt} after "
                            f"{before.request.attempt}")
        if isinstance(before.returned, InProgress):
            expected = json.loads(json.dumps(before.returned.state, default=str))
            if after.request.state != expected:  # values left out: the state may hold anything
                problems.append(f"call {number} got a request.state other than the one call {number - 1} returned "
                                f"in InProgress ({'None' if after.request.state is None else 'a different value'})")
    return problems


def _rollback(h: Harness, created: Call, updated: Call, physical_id: str, create_props: dict[str, Any],
              update_props: dict[str, Any]) -> tuple[CheckResult, bool]:
    """The rollback Update ROS sends when this Update or a later resource's failed: ResourceProperties
    are the Create's again, OldResourceProperties the Update's, the same id. ROS sends it to a
    resource whose own Update failed too. (the check, whether it answered SUCCESS)"""
    name = "rollback-update"
    after = "after the Update" if updated.status == "SUCCESS" else "after the failed Update"
    rollback = h.send("Update", create_props, physical_id, update_props)
    issue = _success(rollback, physical_id)
    if issue is not None:
        return CheckResult(name, False, f"the rollback Update (properties swapped back) {after}: {issue}"), \
            rollback.status == "SUCCESS"
    differences = _data_differences((created.answer or {}).get("Data") or {}, (rollback.answer or {}).get("Data") or {})
    if differences:
        return CheckResult(name, False, f"the rollback Update (properties swapped back) {after} answered Data other "
                                        "than the Create's: " + ", ".join(differences)), True
    return CheckResult(name, True, f"the rollback Update (properties swapped back) {after} kept {physical_id!r} "
                                   "and the Create's Data"), True


def _data_differences(expected: Any, got: Any) -> list[str]:
    """Which Data keys differ, by name only (values may be anything)."""
    if not isinstance(expected, Mapping) or not isinstance(got, Mapping):
        return ["Data"] if expected != got else []
    found = []
    for key in sorted(set(expected) | set(got), key=str):
        if key not in got:
            found.append(f"Data.{key} missing")
        elif key not in expected:
            found.append(f"Data.{key} added")
        elif expected[key] != got[key]:
            found.append(f"Data.{key} changed")
    return found


def run_contract(
    provider: Any,
    resource_type: str,
    properties: Mapping[str, Any],
    update: Mapping[str, Any] | None = None,
    *,
    secrets: Iterable[str] = (),
    budget: float = DEFAULT_BUDGET,
    name: str | None = None,
) -> ContractReport:
    """Run the whole contract against a provider object (anything with `handle(event)`)."""
    report = ContractReport(name or type(provider).__name__, resource_type)
    create_props, update_props = dict(properties), dict(update) if update is not None else None
    add = report.checks.append
    with Harness(provider, resource_type, budget=budget) as h:
        with h.observing("Create") as create_calls:
            created = h.send("Create", create_props)
            if created.in_progress and created.answer is not None:
                time.sleep(ANSWER_GRACE)  # a second answer from a continuation would arrive now
        add(_long_running(h, created, create_calls))
        problem = _success(created)
        physical_id = created.physical_id if problem is None else None

        if physical_id is None:
            add(CheckResult("create-duplicate", False, f"Create failed: {problem}"))
            duplicate = None
        else:
            duplicate = h.deliver(created.request)
            again = _success(duplicate, physical_id)
            different = [v for v in duplicate.violations if "second, different response" in v]
            detail = again or (different[0] if different else f"both answered {physical_id!r}")
            add(CheckResult("create-duplicate", again is None and not different, detail))

        current = create_props
        if update_props is None:
            add(CheckResult("update-keeps-id", True, "no --update properties given", skipped=True))
            add(CheckResult("rollback-update", True, "no --update properties given", skipped=True))
        elif physical_id is None:
            add(CheckResult("update-keeps-id", False, f"Create failed: {problem}"))
            add(CheckResult("rollback-update", False, f"Create failed: {problem}"))
        else:
            updated = h.send("Update", update_props, physical_id, create_props)
            issue = _success(updated, physical_id)
            add(CheckResult("update-keeps-id", issue is None, issue or f"kept {physical_id!r} in {updated.seconds:.2f} s"))
            rollback, rolled_back = _rollback(h, created, updated, physical_id, create_props, update_props)
            add(rollback)
            current = create_props if rolled_back else update_props

        if physical_id is None:
            report.checks.insert(0, CheckResult("create-delete", False, f"Create: {problem}"))
            add(CheckResult("delete-twice", False, f"Create failed: {problem}"))
        else:
            deleted = h.send("Delete", current, physical_id)
            issue = _success(deleted, physical_id)
            detail = f"Delete: {issue}" if issue else f"created and deleted {physical_id!r}"
            report.checks.insert(0, CheckResult("create-delete", issue is None, detail))
            second = h.send("Delete", current, physical_id)
            issue = _success(second, physical_id)
            add(CheckResult("delete-twice", issue is None, issue or "second Delete answered SUCCESS"))

        with h.observing("Delete") as calls:
            marker = h.send("Delete", create_props, CREATE_FAILED_MARKER)
        issue = _success(marker, CREATE_FAILED_MARKER)
        if issue is None and calls:
            issue = f"the Delete handler ran {len(calls)} time(s) for a resource that was never created"
        add(CheckResult("delete-failed-create", issue is None, issue or (
            "answered SUCCESS without calling the handler (no failed Create of this resource left anything behind)")))

        unknown_id = f"contract-unknown-{uuid.uuid4().hex[:12]}"
        unknown = h.send("Delete", create_props, unknown_id)
        issue = _success(unknown, unknown_id)
        add(CheckResult("delete-unknown", issue is None, issue or f"Delete of {unknown_id!r} answered SUCCESS"))

        broken = [(c, v) for c in h.calls for v in c.violations if "second, different response" not in v]
        detail = "; ".join(f"{c.request['RequestType']}: {v}" for c, v in broken[:3])
        add(CheckResult("response-limits", not broken, detail or f"{len(h.calls)} answers within ROS's rules"))

        leaks = h.leaked(_secret_values(secrets, create_props, update_props))
        add(CheckResult("no-secrets-in-logs", not leaks,
                        ("found " + ", ".join(leaks)) if leaks else f"{len(h.output.getvalue().splitlines())} log lines clean"))

        slow = [c for c in h.calls if not c.finished]
        slowest = max((c.seconds for c in h.calls), default=0.0)
        add(CheckResult("time-budget", not slow,
                        (f"{len(slow)} call(s) still running after {budget:g} s: "
                         + ", ".join(c.request["RequestType"] for c in slow)) if slow
                        else f"slowest call {slowest:.2f} s (budget {budget:g} s)"))
    order = {n: i for i, n in enumerate(CHECKS)}
    report.checks.sort(key=lambda c: order[c.name])
    return report
