"""`crhelper contract`: the parser (standard library only); the body is `crhelper.cli.contract`.

The check names and the default budget are quoted from `crhelper.contract.suite`
(`tests/core/test_core_cli_shape.py` checks the quotes against it).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from . import Body, add_command

if TYPE_CHECKING:
    from . import SubParsers

SHOWN_CHECKS = (
    "create-delete", "create-duplicate", "update-keeps-id", "rollback-update", "delete-twice",
    "delete-failed-create", "delete-unknown", "long-running", "response-limits", "no-secrets-in-logs",
    "time-budget",
)
SHOWN_BUDGET = 60.0

DESCRIPTION = (
    "Run the provider contract (adapted from `cfn test`) in-process against a local ResponseURL server:\n"
    + ", ".join(SHOWN_CHECKS[:6]) + ",\n" + ", ".join(SHOWN_CHECKS[6:]) + ".\n\n"
    "Each call must be answered within --budget, the continuations of a handler returning InProgress\n"
    "included. rollback-update sends, after the Update, the Update ROS sends to roll back when that\n"
    "Update or a later resource's failed (ResourceProperties from --properties, OldResourceProperties\n"
    "from --update, the same id) and expects SUCCESS with that id and the Create's Data.\n"
    "long-running runs when the Create answers InProgress (SKIP otherwise): exactly one answer,\n"
    "handler calls = polls + 1, request.state and request.attempt carried from step to step.\n\n"
    "Prints a PASS/FAIL table; exit 0 when every check passes, 1 when one fails, 2 on bad input (a\n"
    "provider that fails to import is reported as file:line: Error with the next step). The provider\n"
    "is a spec or the name of an installed provider (`crhelper providers`), whose --type must then be\n"
    "one of its resource types."
)
EPILOG = """\
examples:
  crhelper contract samples/greeting.py:provider --type Custom::Greeting --properties create.json --update update.json
  crhelper contract handlers.routes.provider:provider --type Custom::App --properties app.json --json
  crhelper contract routes --type Custom::App --properties app.json
  crhelper contract mypkg.db:provider --type Custom::Database --properties db.json --secret Password
Property files are JSON or YAML maps of ResourceProperties.
"""


def register(subparsers: SubParsers) -> None:
    add_arguments(add_command(subparsers, "contract", "run the provider contract suite (create/update/delete rules ROS relies on)",
                              DESCRIPTION, EPILOG))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("provider", help="package.module:provider, path/to/file.py:provider, or an installed provider's name")
    parser.add_argument("--type", required=True, dest="resource_type", metavar="Custom::X", help="the ResourceType to test")
    parser.add_argument("--properties", required=True, type=Path, metavar="FILE", help="ResourceProperties for Create")
    parser.add_argument("--update", type=Path, default=None, metavar="FILE", help="changed ResourceProperties for Update")
    parser.add_argument("--secret", action="append", default=[], metavar="KEY",
                        help="a property (dotted path) whose value must never appear in logs; repeatable")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help=f"longest a call may take (default {SHOWN_BUDGET:g}, cfn test's limit for mutating calls)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=Body("crhelper.cli.contract:run"))
