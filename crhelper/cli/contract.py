"""`crhelper contract PROVIDER --type Custom::X --properties create.json`: the provider contract suite.

The parser is `crhelper.cli.parsers.contract`; the suite itself is `crhelper.contract`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence, TextIO

import yaml

from ..contract.suite import DEFAULT_BUDGET, ContractReport, run_contract
from .invoke import Refused, close_provider, load_named
from .parsers import RAW
from .parsers.contract import DESCRIPTION, EPILOG, add_arguments


def _properties(path: Path, flag: str) -> dict[str, Any]:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot be read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        # str(exc) quotes the offending line, which may hold a secret property value.
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ValueError(f"{flag} {path}: not valid JSON or YAML ({problem}{where})") from None
    if not isinstance(document, dict):
        raise ValueError(f"{flag} {path}: must be a map of ResourceProperties")
    return document


def print_table(report: ContractReport, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    print(f"contract: {report.provider} {report.resource_type}", file=out)
    width = max(len(c.name) for c in report.checks)
    for check in report.checks:
        print(f"  {check.verdict:<4}  {check.name:<{width}}  {check.detail}", file=out)
    failed = len(report.failures())
    print(f"{'PASSED' if report.passed else 'FAILED'}: {len(report.checks) - failed} of {len(report.checks)} checks "
          f"passed or skipped" + (f", {failed} failed" if failed else ""), file=out)


def _refuse(message: str, hint: str = "") -> int:
    print(f"crhelper contract: {message}", file=sys.stderr)
    if hint:
        print(f"  next: {hint}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    try:
        create = _properties(args.properties, "--properties")
        update = _properties(args.update, "--update") if args.update is not None else None
    except ValueError as exc:
        return _refuse(str(exc))
    if not args.resource_type.startswith("Custom::") and args.resource_type != "ALIYUN::ROS::CustomResource":
        return _refuse("--type must be Custom::<Name> or ALIYUN::ROS::CustomResource")
    os.environ.setdefault("CRHELPER_LOG_LEVEL", "DEBUG")  # every line the provider can log is checked
    try:
        provider, manifest = load_named(args.provider)  # a load failure in one line: file:line: Error, and next
    except Refused as refusal:
        return _refuse(refusal.problem, refusal.next_step)
    if manifest is not None and args.resource_type not in manifest.resource_types:
        return _refuse(f"provider {manifest.name} has no type {args.resource_type}",
                       f"--type one of {', '.join(manifest.resource_types)}")
    try:
        report = run_contract(provider, args.resource_type, create, update, secrets=args.secret,
                              budget=DEFAULT_BUDGET if args.budget is None else args.budget, name=args.provider)
    finally:
        close_provider(provider)  # stops the scheduler that ran its continuations
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print_table(report)
    return 0 if report.passed else 1


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m crhelper.cli.contract ...`: the same command without the `crhelper` front end."""
    parser = argparse.ArgumentParser(prog="crhelper contract", description=DESCRIPTION, epilog=EPILOG, formatter_class=RAW)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
