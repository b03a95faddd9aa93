"""The bodies of ``crhelper appcenter ...`` (the parsers are in ``handlers.appcenter.cli``).

Exit status: 0 valid, 1 invalid (every problem printed), 2 unreadable package or usage error.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from typing import Any, Callable

from . import plan as plans
from .check import Checked, check_package, load_and_check
from .cluster import role_counts
from .problems import WARNING, PackageUnreadable, Problem

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
SET_OPTION = "--set"


class UsageError(Exception):
    """Something the caller got wrong on the command line (exit 2)."""


def _print_json(doc: Any) -> None:
    print(json.dumps(doc, indent=2, ensure_ascii=False))


def _command(body: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Unreadable packages and usage errors: one message (a JSON document under --json), exit 2."""

    @functools.wraps(body)
    def run(args: argparse.Namespace) -> int:
        try:
            return body(args)
        except (UsageError, PackageUnreadable) as exc:
            kind = "usage" if isinstance(exc, UsageError) else "unreadable package"
            if args.json:
                _print_json({"Valid": False, "Error": f"{kind}: {exc}"})
            else:
                print(f"crhelper appcenter: {kind}: {exc}", file=sys.stderr)
            return EXIT_USAGE

    return run


def _check(args: argparse.Namespace) -> Checked:
    """An author's check: a required entry without a default that no --set gives is a warning
    (the package is fine; deploying it needs that value)."""
    return load_and_check(args.package, dict(args.sets), zone=args.zone, resource_group=args.resource_group,
                          where=SET_OPTION, missing_required=WARNING)


def _problem_docs(problems: Any) -> list[dict[str, str]]:
    return [problem.to_json() for problem in problems]


def _print_problems(problems: list[Problem], stream: Any) -> None:
    for problem in problems:
        print(f"  {problem}", file=stream)


@_command
def validate(args: argparse.Namespace) -> int:
    checked = _check(args)
    roles = dict(role_counts(checked.cluster)) if checked.cluster is not None else {}
    if args.json:
        _print_json({"Valid": checked.ok, "Package": args.package.split("?", 1)[0],
                     "Problems": _problem_docs(checked.problems), "Roles": roles})
        return EXIT_OK if checked.ok else EXIT_INVALID
    if checked.ok:
        shown = ", ".join(f"{role} x{count}" for role, count in roles.items())
        print(f"valid: {args.package.split('?', 1)[0]} ({shown})")
        _print_problems(list(checked.problems), sys.stdout)
        return EXIT_OK
    errors = checked.errors
    print(f"invalid: {args.package.split('?', 1)[0]}: {len(errors)} problem(s)")
    _print_problems(list(checked.problems), sys.stdout)
    return EXIT_INVALID


def _invalid(args: argparse.Namespace, checked: Checked) -> int:
    """Problems where the command's output would be: JSON on stdout, else text on stderr."""
    if args.json:
        _print_json({"Valid": False, "Problems": _problem_docs(checked.problems)})
    else:
        print(f"crhelper appcenter: invalid package {args.package.split('?', 1)[0]}:", file=sys.stderr)
        _print_problems(list(checked.problems), sys.stderr)
    return EXIT_INVALID


@_command
def render(args: argparse.Namespace) -> int:
    checked = _check(args)
    if not checked.ok:
        return _invalid(args, checked)
    _print_json(checked.rendered)
    return EXIT_OK


def _make_plan(args: argparse.Namespace, checked: Checked) -> plans.Plan:
    cluster = checked.cluster
    assert cluster is not None
    operation = args.operation
    if operation in (plans.SCALE_OUT, plans.SCALE_IN):
        return (plans.plan_scale_out if operation == plans.SCALE_OUT else plans.plan_scale_in)(
            cluster, args.role, args.count)
    if operation == plans.CUSTOM:
        return plans.plan_service(cluster, args.service, args.role)
    simple: dict[str, Callable[[Any], plans.Plan]] = {
        plans.CREATE: plans.plan_create, plans.DELETE: plans.plan_delete, plans.START: plans.plan_start,
        plans.STOP: plans.plan_stop, plans.RESTART: plans.plan_restart, plans.UPGRADE: plans.plan_upgrade}
    return simple[operation](cluster)


def _usage_of_plan(args: argparse.Namespace) -> None:
    scaling = args.operation in (plans.SCALE_OUT, plans.SCALE_IN)
    if scaling and (args.role is None or args.count is None):
        raise UsageError(f"--operation {args.operation} needs --role ROLE and --count N")
    if scaling and args.count < 1:
        raise UsageError("--count is how many nodes to add or remove: at least 1")
    if args.operation == plans.CUSTOM and not args.service:
        raise UsageError("--operation custom needs --service NAME")
    if not scaling and args.count is not None:
        raise UsageError(f"--count applies to scale-out and scale-in, not {args.operation}")


def _scaled_check(args: argparse.Namespace, checked: Checked) -> Checked:
    """The values after the scaling (the new count must pass the form's rules, e.g. its range)."""
    assert checked.config is not None and checked.cluster is not None and checked.values is not None
    path = f"cluster.{args.role}.count"
    if path not in checked.config.items or checked.package is None:
        return checked
    current = checked.cluster.node(args.role).count
    new = current + args.count if args.operation == plans.SCALE_OUT else current - args.count
    inputs = {**dict(args.sets), path: str(new)}
    return check_package(checked.package, inputs, zone=args.zone, resource_group=args.resource_group,
                         previous=checked.values.values, creating=False, where=SET_OPTION,
                         missing_required=WARNING)


def _notes(step: plans.Step) -> str:
    notes = [f"timeout {step.timeout}s"] if step.kind == "service" and step.timeout is not None else []
    notes += [note for flag, note in ((step.pre_check, "pre_check"), (step.blocking, "blocking"),
                                      (step.allow_force is False, "force refused")) if flag]
    return f"  [{', '.join(notes)}]" if notes else ""


def _print_plan(plan: plans.Plan) -> None:
    before = sum(len(nodes) for nodes in plan.before.values())
    after = sum(len(nodes) for nodes in plan.after.values())
    print(f"plan {plan.operation}: {len(plan.stages)} stage(s); nodes {before} -> {after}")
    for index, stage in enumerate(plan.stages, 1):
        if len(stage.steps) == 1 and stage.steps[0].kind == "action":
            nodes = " ".join(stage.steps[0].nodes)
            print(f"{index:>3}. {stage.label}" + (f": {nodes}" if nodes else ""))
            continue
        print(f"{index:>3}. {stage.label}" + ("  (parallel)" if len(stage.steps) > 1 else ""))
        for step in stage.steps:
            who = f"{step.role}: " if step.role else ""
            print(f"       {who}{step.name} on {' '.join(step.nodes) or '-'}{_notes(step)}")
    if plan.on_abort:
        print("  on abort: " + ", then ".join(stage.label for stage in plan.on_abort))


@_command
def plan(args: argparse.Namespace) -> int:
    _usage_of_plan(args)
    checked = _check(args)
    if not checked.ok:
        return _invalid(args, checked)
    assert checked.cluster is not None
    if args.role is not None and args.role not in checked.cluster.roles:
        raise UsageError(f"no role {args.role}; roles: {', '.join(checked.cluster.roles)}")
    try:
        made = _make_plan(args, checked)  # first: its own message for a count beyond the role's nodes
    except plans.CountError as exc:
        raise UsageError(f"--count: {exc}") from None
    except plans.PlanError as exc:
        return _invalid(args, Checked(checked.package, problems=(Problem(f"--operation {args.operation}", str(exc)),)))
    if args.operation in (plans.SCALE_OUT, plans.SCALE_IN):
        scaled = _scaled_check(args, checked)
        if not scaled.ok:
            return _invalid(args, scaled)
    if args.json:
        _print_json(made.to_json())
    else:
        _print_plan(made)
    return EXIT_OK
