"""`crhelper contract MODULE:provider --type Custom::X --properties create.json`: the provider contract suite."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from .suite import CHECKS, DEFAULT_BUDGET, ContractReport, run_contract

DESCRIPTION = (
    "Run the provider contract (adapted from `cfn test`) in-process against a local ResponseURL server: "
    + ", ".join(CHECKS)
    + ". Prints a PASS/FAIL table; exit 0 when every check passes, 1 when one fails, 2 on bad input."
)
EPILOG = """\
examples:
  crhelper contract samples/greeting.py:provider --type Custom::Greeting --properties create.json --update update.json
  crhelper contract handlers.routes.provider:provider --type Custom::App --properties app.json --json
  crhelper contract mypkg.db:provider --type Custom::Database --properties db.json --secret Password
Property files are JSON or YAML maps of ResourceProperties.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("contract", help="run the provider contract suite (create/update/delete rules ROS relies on)",
                                   description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("provider", help="package.module:provider or path/to/file.py:provider")
    parser.add_argument("--type", required=True, dest="resource_type", metavar="Custom::X", help="the ResourceType to test")
    parser.add_argument("--properties", required=True, type=Path, metavar="FILE", help="ResourceProperties for Create")
    parser.add_argument("--update", type=Path, default=None, metavar="FILE", help="changed ResourceProperties for Update")
    parser.add_argument("--secret", action="append", default=[], metavar="KEY",
                        help="a property (dotted path) whose value must never appear in logs; repeatable")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET, metavar="SECONDS",
                        help=f"longest a call may take (default {DEFAULT_BUDGET:g}, cfn test's limit for mutating calls)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _properties(path: Path, flag: str) -> dict[str, Any]:
    import yaml

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


def print_table(report: ContractReport, out: Any = None) -> None:
    out = out or sys.stdout
    print(f"contract: {report.provider} {report.resource_type}", file=out)
    width = max(len(c.name) for c in report.checks)
    for check in report.checks:
        print(f"  {check.verdict:<4}  {check.name:<{width}}  {check.detail}", file=out)
    failed = len(report.failures())
    print(f"{'PASSED' if report.passed else 'FAILED'}: {len(report.checks) - failed} of {len(report.checks)} checks "
          f"passed or skipped" + (f", {failed} failed" if failed else ""), file=out)


def run(args: argparse.Namespace) -> int:
    from ..cli.loading import provider_from_spec

    try:
        create = _properties(args.properties, "--properties")
        update = _properties(args.update, "--update") if args.update is not None else None
    except ValueError as exc:
        print(f"crhelper contract: {exc}", file=sys.stderr)
        return 2
    if not args.resource_type.startswith("Custom::") and args.resource_type != "ALIYUN::ROS::CustomResource":
        print("crhelper contract: --type must be Custom::<Name> or ALIYUN::ROS::CustomResource", file=sys.stderr)
        return 2
    os.environ.setdefault("CRHELPER_LOG_LEVEL", "DEBUG")  # every line the provider can log is checked
    try:
        provider = provider_from_spec(args.provider)
    except Exception as exc:  # noqa: BLE001 - any import-time failure is the provider's, reported not raised
        not_found = isinstance(exc, (ImportError, ValueError, FileNotFoundError))
        detail = str(exc) if not_found else f"{type(exc).__name__}: {exc}"
        hint = ("pass package.module:provider (importable from here) or path/to/file.py:provider" if not_found
                else "the provider's module raised while being imported; fix that error and run again")
        print(f"crhelper contract: cannot load {args.provider}: {detail}", file=sys.stderr)
        print(f"  next: {hint}", file=sys.stderr)
        return 2
    report = run_contract(provider, args.resource_type, create, update, secrets=args.secret, budget=args.budget,
                          name=args.provider)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print_table(report)
    return 0 if report.passed else 1


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m crhelper.contract.cli ...`: the same command without the `crhelper` front end."""
    parser = argparse.ArgumentParser(prog="crhelper contract", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
