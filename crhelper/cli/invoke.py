"""`crhelper invoke`: run one request locally and show the response exactly as it would be sent."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

from ..constants import SUCCESS
from .loading import provider_from_spec


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "invoke",
        help="run one request against a provider, with a built-in ResponseURL server",
        description=(
            "Load the provider, send it the request from --event (its ResponseURLs are replaced by a local\n"
            "capturing server), and print the response body exactly as the provider sent it.\n"
            "The exit code is 0 for SUCCESS, 1 for FAILED, 2 when nothing valid was answered.\n\n"
            "With --timeout, a handler still running shortly before the timeout is answered FAILED\n"
            "\"timed out\" and the command exits right after that answer, without waiting for the handler.\n"
            "Each run has a private idempotency store, so the handler runs every time; set CRHELPER_STORE to\n"
            "share one between runs (a repeated RequestId is then a duplicate)."
        ),
        epilog=(
            "examples:\n"
            "  crhelper invoke samples/greeting.py:provider --event samples/events/create.json\n"
            "  crhelper invoke samples/greeting.py:provider --event samples/events/create.json --timeout 3"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("provider", help="the provider: package.module:provider or path/to/file.py:provider")
    parser.add_argument("--event", required=True, type=Path, help="a ROS request as JSON (see samples/events/)")
    parser.add_argument("--timeout", type=float, default=None, help="act as a Function Compute function with this timeout (s)")
    parser.add_argument("--fail-first", type=int, default=0, metavar="N", help="the ResponseURL answers 500 to the first N attempts")
    parser.add_argument("--check", action="store_true", help="also print ROS protocol violations found in the response")
    parser.set_defaults(func=run_and_exit)


#: The store of one invoke run when CRHELPER_STORE is not set.
PRIVATE_STORE = "sqlite://:memory:"


class _Context:
    """The parts of a Function Compute context the framework reads."""

    def __init__(self, timeout: float) -> None:
        self.request_id = "local-invoke"
        self.function = type("Function", (), {"timeout": timeout, "name": "local", "handler": "index.handler"})()


def _handler_threads_alive() -> bool:
    """Whether a non-daemon thread besides the main one is alive: with --timeout the handler runs in
    such a thread (the runtime's pool), and the interpreter would join it at exit, i.e. wait for
    a handler that was already answered FAILED "timed out"."""
    main = threading.main_thread()
    return any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate())


def run_and_exit(args: argparse.Namespace) -> int:
    """The command line entry: `run`, then end the process at once if a handler thread still runs.

    The answer has been delivered and printed by then; only the late handler would be waited
    for, and its result is dropped anyway. In-process callers use `run`, which never exits.
    """
    code = run(args)
    if _handler_threads_alive():
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe or stream: nothing left to save
                pass
        os._exit(code)
    return code


def run(args: argparse.Namespace) -> int:
    from ..local.response_server import ResponseServer

    try:
        event: Any = json.loads(args.event.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"crhelper invoke: cannot read --event {args.event}: {exc}", file=sys.stderr)
        return 2
    provider = provider_from_spec(args.provider)
    # Each invoke runs the handler: a private store, unless CRHELPER_STORE asks to share one (then a
    # repeated request is a duplicate, answered from the store only if its first answer was lost).
    private = not os.environ.get("CRHELPER_STORE")
    if private:
        os.environ["CRHELPER_STORE"] = PRIVATE_STORE
    try:
        return _invoke(args, provider, event)
    finally:
        if private:
            os.environ.pop("CRHELPER_STORE", None)
            close = getattr(provider, "close", None)
            if callable(close):
                close()


def _invoke(args: argparse.Namespace, provider: Any, event: Any) -> int:
    from ..local.response_server import ResponseServer

    with ResponseServer() as server:
        if isinstance(event, dict):
            server.attach(event, fail_first=args.fail_first)
        provider.handle(event, _Context(args.timeout) if args.timeout else None)
        accepted = [c for c in server.captures if c.status == 200]
        if not accepted:
            print("crhelper invoke: no response reached the ResponseURL (see the log lines above)", file=sys.stderr)
            return 2
        capture = accepted[0]
        sys.stdout.write(capture.raw.decode("utf-8") + "\n")
        attempts = len(server.captures)
        print(
            f"crhelper invoke: {capture.method} {len(capture.raw)} bytes after {attempts} attempt(s)",
            file=sys.stderr,
        )
        if args.check or server.violations:
            for problem in server.violations:
                print(f"violation: {problem}", file=sys.stderr)
        if server.violations:
            return 2
        return 0 if (capture.body or {}).get("Status") == SUCCESS else 1
