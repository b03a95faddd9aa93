"""`crhelper invoke`: the parser (standard library only); the body is `crhelper.cli.invoke`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from . import Body, add_command, provider_argument

if TYPE_CHECKING:
    from . import SubParsers

#: How long invoke waits for a long operation's answer unless --wait says otherwise.
DEFAULT_WAIT = 3600.0
DESCRIPTION = (
    "Load the provider, send it the request from --event (its ResponseURLs are replaced by a local\n"
    "capturing server), and print the response body exactly as the provider sent it.\n"
    "The exit code is 0 for SUCCESS, 1 for FAILED, 2 when nothing valid was answered (the provider\n"
    "cannot be loaded, e.g. a syntax error, reported as file:line and the error; an unreadable event;\n"
    "no response; a protocol violation).\n\n"
    "With --timeout, a handler still running shortly before the timeout is answered FAILED\n"
    "\"timed out\" and the command exits right after that answer, without waiting for the handler.\n"
    "Each run has a fresh private idempotency store, so the handler runs every time (CRHELPER_STORE\n"
    "is not used); --store URL shares one between runs: a repeated RequestId is then a duplicate,\n"
    "answered from the store's record for 24 h.\n\n"
    "A handler returning InProgress is called again in this process, with request.state, until it\n"
    "answers; the command waits up to --wait seconds (default %(wait)s), printing\n"
    "\"crhelper invoke: in progress, 12 s, 3 poll(s)\" on stderr every CRHELPER_HEARTBEAT_INTERVAL\n"
    "seconds (default 10). Past --wait, or on Ctrl-C, it exits 2 saying what to do.\n\n"
    "PROVIDER path/to/file.py means path/to/file.py:provider.\n"
    "With --json, stdout is one JSON document: {\"response\": the body as sent (null if none),\n"
    "\"outcome\": {status SUCCESS|FAILED|ERROR, exit_code, method, bytes, attempts, violations,\n"
    "polls, seconds, error: null or {problem, next_step}}}, for errors too."
) % {"wait": f"{DEFAULT_WAIT:g}"}
EPILOG = (
    "examples:\n"
    "  crhelper invoke samples/greeting.py:provider --event samples/events/create.json\n"
    "  crhelper invoke samples/greeting.py --event samples/events/update.json --json\n"
    "  crhelper invoke samples/greeting.py:provider --event samples/events/create.json --timeout 3\n"
    "  crhelper invoke samples.greeting:provider --event samples/events/create.json --store sqlite:///invoke.db\n"
    "  crhelper invoke mypkg/cluster.py --event create.json --wait 600     # a long operation, up to 10 minutes"
)


def register(subparsers: SubParsers) -> None:
    add_arguments(add_command(subparsers, "invoke", "run one request against a provider, with a built-in ResponseURL server",
                              DESCRIPTION, EPILOG))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    provider_argument(parser)
    parser.add_argument("--event", required=True, type=Path, help="a ROS request as JSON (see samples/events/)")
    parser.add_argument("--timeout", type=float, default=None, help="act as a Function Compute function with this timeout (s)")
    parser.add_argument("--fail-first", type=int, default=0, metavar="N", help="the ResponseURL answers 500 to the first N attempts")
    parser.add_argument("--check", action="store_true", help="also print ROS protocol violations found in the response")
    parser.add_argument("--store", metavar="URL", default=None,
                        help="the idempotency store to use, shared between runs (sqlite:///<path>, s3://..., none); "
                             "default: a fresh private store per run")
    parser.add_argument("--wait", type=float, default=DEFAULT_WAIT, metavar="SECONDS",
                        help=f"how long to wait for the answer of a handler returning InProgress (default {DEFAULT_WAIT:g}); "
                             "exit 2 past it")
    parser.add_argument("--json", action="store_true",
                        help="print the response and the outcome as one JSON document (errors too)")
    parser.set_defaults(func=Body("crhelper.cli.invoke:run_and_exit"))
