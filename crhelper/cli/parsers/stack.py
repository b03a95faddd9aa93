"""`crhelper stack`: the parser (standard library only); the body is `crhelper.cli.stack`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from . import RAW, Body, add_command

if TYPE_CHECKING:
    from . import SubParsers

#: Exit codes: the operation completed, it failed (see the events), usage or validation error.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

DESCRIPTION = """\
Run ROS templates locally: every Custom::* / ALIYUN::ROS::CustomResource is sent to its provider
through the path its ServiceToken names, with fresh ResponseURLs on a local ResponseURL server that
checks every answer the way ROS does.

How ServiceTokens are reached:
  acs:fc:...:services/S/functions/F   the bound provider runs on a local Function Compute endpoint
                                      (real fc2 SDK, async invocation, fresh worker process)
  acs:fc:...:functions/F  (FC 3.0)    the bound provider runs in-process (fc2 cannot call FC 3.0)
  acs:mns:...:queues/Q | topics/T     sent / published through a local MNS endpoint, consumed by a
                                      QueueWorker running the bound provider
  web:URL | web[sync]:URL             POSTed to the URL for real (start it with `crhelper serve`)

Bind tokens to providers with -s TOKEN=MODULE:provider or a bindings file (--bindings FILE; a file
named <template>.bindings.yaml next to the template is used automatically):
  bindings:
    acs:fc:cn-hangzhou:123456789:services/demo/functions/greeting: ../samples/greeting.py:provider
  mode: endpoints          # or inprocess: run every bound provider in this process (fastest)
  faults: {duplicate: true, response_fail_first: 2, response_delay: 0.5, kill_provider: true}

A killed run leaves nothing behind: the FC workers it started die with it (even on SIGKILL), and
the next command (describe, list, events, update, delete) reports the stack *_FAILED with the reason
"interrupted: the crhelper process running this operation stopped before it finished":
  crhelper stack describe --stack demo --json      # status CREATE_FAILED after a killed create
  crhelper stack delete --stack demo               # then clean up what it created

A stack that cannot be deleted (a provider that keeps failing its Delete, a binding that is gone)
can always be removed, as with ROS DeleteStack RetainResources / RetainAllResources: the retained
resources get no Delete request and are reported DELETE_COMPLETE "retained ...":
  crhelper stack delete --stack demo --retain Greeting     # delete the rest, leave Greeting as it is
  crhelper stack delete --stack demo --retain-all          # forget the stack, send no request at all

Provider logs: every line a provider the emulator runs writes (prints, stderr, log records, the
traceback of a failure; FC workers, in-process providers, MNS queue workers) is shown under the
event table prefixed by its resource, and kept in $CRHELPER_HOME/logs/<stack>.jsonl:
  15:21:45.248  Greeting                 | step 1 of 3
  15:21:45.250  Greeting                 | WARNING mypkg: slow backend  attempt=2
  15:21:55.248  Greeting                 CREATE_IN_PROGRESS            still running: 10 s, 4 polls
The framework's own records show from CRHELPER_LOG_LEVEL (default WARNING); a resource in
progress for longer than CRHELPER_HEARTBEAT_INTERVAL seconds (default 10) gets a heartbeat line.
Under --json they go to stderr as JSON lines. Afterwards, or from another terminal:
  crhelper stack logs --stack demo [RESOURCE] [--follow]
  crhelper stack events --stack demo --follow

Exit codes: 0 the operation completed, 1 it failed (see the events), 2 usage or validation error.
With --json every outcome is one JSON document on stdout, errors too:
  {"error": {"kind": "template-invalid", "problem": "...", "next_step": "...", "errors": ["..."]}}
"""

EPILOG = """\
examples:
  crhelper stack create templates/demo.yaml --stack demo
  crhelper stack create templates/demo.yaml --stack demo -p Name=ros -p Times=3 --json
  crhelper stack create app.yaml --stack app -s 'acs:fc:cn-hangzhou:123456789:services/s/functions/f=mypkg.provider:provider'
  crhelper stack update templates/demo.yaml --stack demo -p Times=5
  crhelper stack update --stack demo --use-previous-parameters -p Times=5
  crhelper stack outputs --stack demo
  crhelper stack events --stack demo
  crhelper stack events --stack demo --follow          # from another terminal, while it runs
  crhelper stack logs --stack demo Greeting            # that resource's provider output
  crhelper stack delete --stack demo
  crhelper stack delete --stack demo --retain Greeting
  crhelper stack create templates/demo.yaml --stack flaky --duplicate --response-fail-first 2
"""


class JsonErrorsParser(argparse.ArgumentParser):
    """A sub-command parser whose own errors (a missing --stack, a bad number) come as the same
    JSON error document as every other error when the command line asks for --json."""

    json_requested = False

    # argparse calls this with the sub-command's own arguments: the one place that sees them before error().
    def parse_known_args(  # type: ignore[override]  # one signature for typeshed's overloads
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        self.json_requested = "--json" in (sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        if not self.json_requested:
            super().error(message)
        from ...errors import error_document  # the error path alone: parsers import no core module

        print(json.dumps(error_document("usage", message, f"see `{self.prog} --help`"), indent=2))
        sys.exit(EXIT_USAGE)


def _common(parser: argparse.ArgumentParser, *, stack: bool = True,
            json_help: str = "print one JSON document instead of text") -> None:
    if stack:
        parser.add_argument("--stack", required=True, metavar="NAME", help="the stack name")
    parser.add_argument("--home", default=None, metavar="DIR", help="state directory (default $CRHELPER_HOME or ~/.crhelper)")
    parser.add_argument("--json", action="store_true", help=json_help)


def _delivery_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("delivery")
    group.add_argument("-s", "--service-token", dest="bind", action="append", default=[], metavar="TOKEN=MODULE:provider",
                       help="bind a ServiceToken to a provider (package.module:provider or path/file.py:provider); repeatable")
    group.add_argument("--bindings", type=Path, default=None, metavar="FILE",
                       help="bindings file (YAML/JSON); default: <template>.bindings.yaml next to the template, "
                            "then the bindings the stack was created with")
    group.add_argument("--in-process", action="store_true", help="run every bound provider in this process (mode: inprocess)")
    faults = parser.add_argument_group("fault injection")
    faults.add_argument("--duplicate", action="store_true", default=None, help="deliver every request twice (same RequestId)")
    faults.add_argument("--response-fail-first", type=int, default=None, metavar="N",
                        help="the ResponseURL answers the first N attempts with an error status")
    faults.add_argument("--response-fail-status", type=int, default=None, metavar="STATUS", help="that error status (default 500)")
    faults.add_argument("--response-delay", type=float, default=None, metavar="SECONDS", help="the ResponseURL answers this slowly")
    faults.add_argument("--kill-provider", action="store_true", default=None,
                        help="FC 2.0 tokens: SIGKILL the function's worker on the first attempt of each request (FC retries it); "
                             "other tokens are delivered normally")
    faults.add_argument("--kill-provider-after", type=float, default=None, metavar="SECONDS",
                        help="with --kill-provider: kill this many seconds into the handler (mid-request) instead of at entry")


def _parallelism(text: str) -> int:
    """--parallelism: a whole number >= 0 (ROS Parallelism), checked before anything runs."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0 (0 means no limit), got {text!r}")
    return value


def _parallelism_option(parser: argparse.ArgumentParser, default_help: str) -> None:
    parser.add_argument("--parallelism", type=_parallelism, default=None, metavar="N",
                        help=f"at most N resource requests at once (ROS Parallelism); 0 means no limit; {default_help}. "
                             "The stack keeps it for its later updates and its delete. "
                             "Example: --parallelism 10")


def _template_options(parser: argparse.ArgumentParser, *, optional: bool = False) -> None:
    if optional:
        parser.add_argument("template", nargs="?", type=Path, default=None, help="new template (default: keep the current one)")
    else:
        parser.add_argument("template", type=Path, help="ROS template, YAML or JSON")
    parser.add_argument("-p", "--parameter", dest="parameters", action="append", default=[], metavar="Key=Value",
                        help="a template parameter; repeatable")
    parser.add_argument("--parameters", dest="parameter_file", type=Path, default=None, metavar="FILE",
                        help="parameters as a JSON/YAML map or the ROS list of {ParameterKey, ParameterValue}")


def register(subparsers: SubParsers) -> None:
    add_commands(add_command(subparsers, "stack", "deploy ROS templates locally through their real ServiceToken paths",
                             DESCRIPTION, EPILOG))


def add_commands(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(title="commands", metavar="<command>", parser_class=JsonErrorsParser)

    create = commands.add_parser("create", help="create a stack and wait for it", formatter_class=RAW,
                                 description="Create a stack: every resource gets a Create request; on failure the "
                                             "created ones are rolled back unless --disable-rollback.",
                                 epilog="examples:\n"
                                        "  crhelper stack create templates/demo.yaml --stack demo -p Name=ros\n"
                                        "  crhelper stack create big.yaml --stack big --parallelism 10   # 10 requests at a time")
    _template_options(create)
    _common(create)
    create.add_argument("--disable-rollback", action="store_true", help="keep what was created when a resource fails")
    _parallelism_option(create, "default: no limit, as in ROS")
    _delivery_options(create)
    create.set_defaults(func=Body("crhelper.cli.stack:create"))

    update = commands.add_parser("update", help="update a stack to a new template and/or parameters", formatter_class=RAW,
                                 description="Update: changed resources get Update (with OldResourceProperties), added ones "
                                             "Create, removed ones Delete; a failure rolls back with the old properties.",
                                 epilog="examples:\n"
                                        "  crhelper stack update templates/demo.yaml --stack demo -p Times=5\n"
                                        "  crhelper stack update --stack demo --use-previous-parameters -p Times=5\n"
                                        "  crhelper stack update --stack big --parallelism 0      # lift the stack's limit")
    _template_options(update, optional=True)
    _common(update)
    update.add_argument("--use-previous-parameters", action="store_true",
                        help="parameters not given keep the stack's current values (ROS UsePreviousParameters); "
                             "without it they take the template's defaults, as in ROS")
    update.add_argument("--disable-rollback", action="store_true", help="do not roll back a failed update")
    _parallelism_option(update, "default: the stack's own (set by create or an earlier update)")
    _delivery_options(update)
    update.set_defaults(func=Body("crhelper.cli.stack:update"))

    delete = commands.add_parser(
        "delete", help="delete a stack (DeletionPolicy Retain resources get no request)", formatter_class=RAW,
        description="Delete a stack: every resource gets a Delete request, dependents first.\n"
                    "Resources with DeletionPolicy Retain, and those kept with --retain or --retain-all\n"
                    "(ROS RetainResources / RetainAllResources), get none and are reported\n"
                    "DELETE_COMPLETE \"retained ...\": a stack in DELETE_FAILED can always be deleted this way.",
        epilog="examples:\n"
               "  crhelper stack delete --stack demo\n"
               "  crhelper stack delete --stack demo --retain Greeting       # after Greeting's Delete failed\n"
               "  crhelper stack delete --stack demo --retain App WebRoute   # several resources\n"
               "  crhelper stack delete --stack demo --retain-all            # send no Delete at all")
    _common(delete)
    retain = delete.add_mutually_exclusive_group()
    retain.add_argument("--retain", nargs="+", action="extend", default=[], metavar="RESOURCE",
                        help="logical ids of resources to leave as they are (no Delete request); repeatable")
    retain.add_argument("--retain-all", action="store_true", help="leave every resource as it is and forget the stack")
    _delivery_options(delete)
    delete.set_defaults(func=Body("crhelper.cli.stack:delete"))

    events = commands.add_parser(
        "events", help="every event of a stack, oldest first (--follow: while it runs)", formatter_class=RAW,
        description="Every event of a stack, oldest first. With --follow, keep printing the events another\n"
                    "crhelper process's running operation appends, until the stack leaves *_IN_PROGRESS\n"
                    "(checked every CRHELPER_FOLLOW_INTERVAL seconds, default 0.2); Ctrl-C stops following.",
        epilog="examples:\n"
               "  crhelper stack events --stack demo\n"
               "  crhelper stack events --stack demo --follow          # while `stack create` runs elsewhere\n"
               "  crhelper stack events --stack demo --follow --json   # one JSON object per line")
    _common(events, json_help="print one JSON document instead of text (with --follow: one JSON object per event line)")
    events.add_argument("--follow", action="store_true",
                        help="keep printing new events until the operation in progress ends (--json: JSON lines)")
    events.set_defaults(func=Body("crhelper.cli.stack:events"))

    logs = commands.add_parser(
        "logs", help="replay the provider logs of a stack (--follow: while it runs)", formatter_class=RAW,
        description="Replay what the stack's providers wrote during its operations (prints, stderr, log\n"
                    "records, tracebacks), as the terminal showed it, from $CRHELPER_HOME/logs/<stack>.jsonl.\n"
                    "The framework's own records show from --level (default CRHELPER_LOG_LEVEL, else WARNING).\n"
                    "With --follow, keep printing what a running operation adds until it ends; Ctrl-C stops.",
        epilog="examples:\n"
               "  crhelper stack logs --stack demo\n"
               "  crhelper stack logs --stack demo Greeting             # one resource\n"
               "  crhelper stack logs --stack demo --follow             # while `stack create` runs elsewhere\n"
               "  crhelper stack logs --stack demo --level INFO --json  # every record, one JSON object per line")
    logs.add_argument("resource", nargs="?", default=None, metavar="RESOURCE",
                      help="only the lines of this resource (logical id)")
    _common(logs, json_help="print the records as kept, one JSON object per line")
    logs.add_argument("--follow", action="store_true", help="keep printing new lines until the operation in progress ends")
    logs.add_argument("--level", default=None, type=str.upper, choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
                      help="show the framework's own records from this level (default CRHELPER_LOG_LEVEL, else WARNING); "
                           "the providers' own output is always shown")
    logs.set_defaults(func=Body("crhelper.cli.stack:logs"))

    for name, text in (
        ("describe", "status, parameters, resources and outputs of a stack"),
        ("outputs", "the resolved outputs of a stack"),
    ):
        sub = commands.add_parser(name, help=text, epilog=f"example: crhelper stack {name} --stack demo")
        _common(sub)
        sub.set_defaults(func=Body(f"crhelper.cli.stack:{name}"))

    listing = commands.add_parser("list", help="all local stacks", epilog="example: crhelper stack list --json")
    _common(listing, stack=False)
    listing.set_defaults(func=Body("crhelper.cli.stack:list_stacks"))

    validate = commands.add_parser("validate", help="check a template and parameters without running anything",
                                   epilog="example: crhelper stack validate templates/demo.yaml -p Name=ros")
    _template_options(validate)
    _common(validate, stack=False)
    validate.set_defaults(func=Body("crhelper.cli.stack:validate"))
    parser.set_defaults(func=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    """`python -m crhelper.cli.stack`: the same command without the `crhelper` front end."""
    parser = argparse.ArgumentParser(prog="crhelper stack", description=DESCRIPTION, epilog=EPILOG, formatter_class=RAW)
    add_commands(parser)
    return parser
