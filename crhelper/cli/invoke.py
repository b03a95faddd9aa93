"""`crhelper invoke`: run one request locally and show the response exactly as it would be sent.

The parser is `crhelper.cli.parsers.invoke`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from ..constants import SUCCESS
from ..local.response_server import ResponseServer
from . import provider_spec

if TYPE_CHECKING:
    from ..provider import Provider

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
    try:
        event: Any = json.loads(args.event.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"crhelper invoke: cannot read --event {args.event}: {exc}", file=sys.stderr)
        return 2
    provider = provider_spec.load(args.provider)
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
            provider.close()


def _invoke(args: argparse.Namespace, provider: "Provider", event: Any) -> int:
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
        print(f"crhelper invoke: {capture.method} {len(capture.raw)} bytes after {attempts} attempt(s)", file=sys.stderr)
        if args.check or server.violations:
            for problem in server.violations:
                print(f"violation: {problem}", file=sys.stderr)
        if server.violations:
            return 2
        return 0 if (capture.body or {}).get("Status") == SUCCESS else 1
