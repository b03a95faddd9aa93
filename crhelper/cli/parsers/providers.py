"""`crhelper providers`: the parser (standard library only); the body is `crhelper.cli.providers`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import Body, add_command

if TYPE_CHECKING:
    from . import SubParsers

DESCRIPTION = (
    "List the installed providers (the crhelper.providers entry points and the built-in ones): their\n"
    "resource types, the spec that loads them, the extras they need, the environment variables they read\n"
    "and where their state lives. A provider's name stands for its spec in `crhelper contract`."
)
EPILOG = """\
examples:
  crhelper providers
  crhelper providers routes
  crhelper providers --json
  crhelper contract routes --type Custom::App --properties app.json
"""


def register(subparsers: SubParsers) -> None:
    parser = add_command(subparsers, "providers", "list the installed providers and what they need", DESCRIPTION, EPILOG)
    parser.add_argument("name", nargs="?", default=None, help="show one provider in full (its environment variables too)")
    parser.add_argument("--json", action="store_true", help="print the manifests as JSON")
    parser.set_defaults(func=Body("crhelper.cli.providers:run"))
