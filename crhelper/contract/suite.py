"""The provider contract, adapted from CloudFormation's `cfn test` to ROS custom resources.

`run_contract(provider, "Custom::X", create_props, update_props)` sends one scripted sequence of
requests (Create, the same Create again, Update, Delete, Delete again, Delete after a failed
Create, Delete of an unknown id) and judges it against these checks:

  create-delete         Create answers SUCCESS with an id, Delete of that id answers SUCCESS
  create-duplicate      the same Create delivered twice: both SUCCESS with one id (one resource)
  update-keeps-id       Update with changed properties answers SUCCESS with the same id
  delete-twice          a second Delete of the same id still answers SUCCESS
  delete-failed-create  Delete of the id a failed Create answers with succeeds without calling the handler
                        (when that Create left nothing behind; see the README on failed Creates)
  delete-unknown        Delete of an id that never existed answers SUCCESS
  response-limits       every answer passes the ResponseURL server's ROS rules (size, id, echo, Reason)
  no-secrets-in-logs    no ResponseURL, URL signature or secret property value in the provider's output
  time-budget           every call returns within its budget
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..constants import CREATE_FAILED_MARKER
from .harness import Call, Harness

CHECKS = (
    "create-delete", "create-duplicate", "update-keeps-id", "delete-twice", "delete-failed-create",
    "delete-unknown", "response-limits", "no-secrets-in-logs", "time-budget",
)
DEFAULT_BUDGET = 60.0


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
        created = h.send("Create", create_props)
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

        if update_props is None:
            add(CheckResult("update-keeps-id", True, "no --update properties given", skipped=True))
        elif physical_id is None:
            add(CheckResult("update-keeps-id", False, f"Create failed: {problem}"))
        else:
            updated = h.send("Update", update_props, physical_id, create_props)
            issue = _success(updated, physical_id)
            add(CheckResult("update-keeps-id", issue is None, issue or f"kept {physical_id!r} in {updated.seconds:.2f} s"))

        current = update_props if update_props is not None and physical_id is not None else create_props
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

        with h.counting("Delete") as calls:
            marker = h.send("Delete", create_props, CREATE_FAILED_MARKER)
        issue = _success(marker, CREATE_FAILED_MARKER)
        if issue is None and calls[0]:
            issue = f"the Delete handler ran {calls[0]} time(s) for a resource that was never created"
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
