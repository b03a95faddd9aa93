"""`crhelper invoke`: the parser (standard library only); the body is `crhelper.cli.invoke`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from . import Body, add_command, provider_argument

if TYPE_CHECKING:
    from . import SubParsers

DESCRIPTION = (
    "Load the provider, send it the request from --event (its ResponseURLs are replaced by a local\n"
    "capturing server), and print the response body exactly as the provider sent it.\n"
    "The exit code is 0 for SUCCESS, 1 for FAILED, 2 when nothing valid was answered.\n\n"
    "With --timeout, a handler still running shortly before the timeout is answered FAILED\n"
    "\"timed out\" and the command exits right after that answer, without waiting for the handler.\n"
    "Each run has a private idempotency store, so the handler runs every time; set CRHELPER_STORE to\n"
    "share one between runs (a repeated RequestId is then a duplicate)."
)
EPILOG = (
    "examples:\n"
    "  crhelper invoke samples/greeting.py:provider --event samples/events/create.json\n"
    "  crhelper invoke samples/greeting.py:provider --event samples/events/create.json --timeout 3"
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
    parser.set_defaults(func=Body("crhelper.cli.invoke:run_and_exit"))
