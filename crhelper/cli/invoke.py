"""`crhelper invoke`: run one request locally and show the response exactly as it would be sent.

Every run has a fresh private store unless `--store URL` names one: a store shared between runs
answers a repeated request from its record (for 24 h), so a provider fixed since would seem to fail
still. The parser is `crhelper.cli.parsers.invoke`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..constants import FAILED, SUCCESS
from ..loading import describe_load_failure, load_provider
from ..local.response_server import ResponseServer
from ..store.url import SETTING as STORE_SETTING
from ..store.url import StoreConfigError, parse_store_url
from . import provider_spec

if TYPE_CHECKING:
    from ..provider import Provider

#: The store of one invoke run unless --store names one.
PRIVATE_STORE = "sqlite://:memory:"
#: The store value that turns idempotency and long-running support off.
NO_STORE = "none"
#: The exit codes `crhelper invoke --help` promises.
EXIT_SUCCESS, EXIT_FAILED, EXIT_ERROR = 0, 1, 2
#: The outcome of a run that produced no valid response.
ERROR = "ERROR"


class _Context:
    """The parts of a Function Compute context the framework reads."""

    def __init__(self, timeout: float) -> None:
        self.request_id = "local-invoke"
        self.function = type("Function", (), {"timeout": timeout, "name": "local", "handler": "index.handler"})()


class Refused(Exception):
    """A run that cannot produce a response: `problem` says what, `next_step` what to do."""

    def __init__(self, problem: str, next_step: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.next_step = next_step


@dataclass
class Invocation:
    """What one run produced, printed as text or as one JSON document (`--json`)."""

    exit_code: int
    response: Any = None  #: the accepted response body (its text when it is not JSON)
    raw: str | None = None
    method: str | None = None
    attempts: int = 0
    violations: list[str] = field(default_factory=list)
    problem: str | None = None
    next_step: str | None = None

    @property
    def status(self) -> str:
        """SUCCESS or FAILED as the response said, ERROR when nothing readable was answered."""
        if not isinstance(self.response, dict):
            return ERROR
        return SUCCESS if self.response.get("Status") == SUCCESS else FAILED

    @classmethod
    def refused(cls, refusal: Refused) -> "Invocation":
        return cls(EXIT_ERROR, problem=refusal.problem, next_step=refusal.next_step or None)

    def to_dict(self) -> dict[str, Any]:
        error = None if self.problem is None else {"problem": self.problem, "next_step": self.next_step}
        return {"response": self.response,
                "outcome": {"status": self.status, "exit_code": self.exit_code, "method": self.method,
                            "bytes": len(self.raw.encode("utf-8")) if self.raw is not None else None,
                            "attempts": self.attempts, "violations": self.violations, "error": error}}


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
        invocation = _run(args)
    except Refused as refusal:
        invocation = Invocation.refused(refusal)
    _print(invocation, args)
    return invocation.exit_code


def _print(invocation: Invocation, args: argparse.Namespace) -> None:
    if getattr(args, "json", False):
        print(json.dumps(invocation.to_dict(), indent=2, ensure_ascii=False))
        return
    if invocation.problem is not None:
        next_step = f"; next: {invocation.next_step}" if invocation.next_step else ""
        print(f"crhelper invoke: {invocation.problem}{next_step}", file=sys.stderr)
        return
    sys.stdout.write(f"{invocation.raw}\n")
    print(f"crhelper invoke: {invocation.method} {len((invocation.raw or '').encode('utf-8'))} bytes after "
          f"{invocation.attempts} attempt(s)", file=sys.stderr)
    if args.check or invocation.violations:
        for problem in invocation.violations:
            print(f"violation: {problem}", file=sys.stderr)


def _read_event(args: argparse.Namespace) -> dict[str, Any]:
    try:
        event: Any = json.loads(args.event.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Refused(f"cannot read --event {args.event}: {exc}",
                      "give a JSON file holding one ROS request (see samples/events/)") from None
    if not isinstance(event, dict):
        raise Refused(f"--event {args.event}: must be a JSON object (one ROS request), not a {type(event).__name__}",
                      "see samples/events/create.json")
    return event


def store_url(given: str | None) -> str:
    """The store of this run: the private one, or --store checked as CRHELPER_STORE would be."""
    if given is None:
        return PRIVATE_STORE
    value = given.strip()
    if value != NO_STORE:
        try:
            parse_store_url(value)
        except StoreConfigError as exc:
            raise Refused(str(exc).replace(STORE_SETTING, "--store", 1),
                          f"give sqlite:///<path>, s3://<bucket>/<prefix>?endpoint=..., {NO_STORE}, "
                          "or leave --store out for a private store") from None
    return value


def _load(text: str) -> "Provider":
    """The provider, or Refused with one line: what is wrong (file:line for an import error) and what to do."""
    try:
        spec, _ = provider_spec.resolve(text)
    except Exception as exc:  # noqa: BLE001 - a spec error: reported, not raised
        raise Refused(*describe_load_failure(text, exc)) from None
    try:
        return load_provider(spec, cwd_importable=True)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the module's own failure at import, reported in one line
        problem, next_step = describe_load_failure(spec, exc)
        raise Refused(f"cannot load {text}: {problem}", next_step) from None


def _run(args: argparse.Namespace) -> Invocation:
    event = _read_event(args)
    url = store_url(getattr(args, "store", None))
    previous = os.environ.get(STORE_SETTING)
    if previous is not None and getattr(args, "store", None) is None:
        print(f"crhelper invoke: {STORE_SETTING} is not used: this run has a private store (--store URL shares one)",
              file=sys.stderr)
    os.environ[STORE_SETTING] = url
    try:
        provider = _load(args.provider)
        try:
            return _invoke(args, provider, event)
        finally:
            provider.close()
    finally:
        if previous is None:
            os.environ.pop(STORE_SETTING, None)
        else:
            os.environ[STORE_SETTING] = previous


def _invoke(args: argparse.Namespace, provider: "Provider", event: dict[str, Any]) -> Invocation:
    with ResponseServer() as server:
        server.attach(event, fail_first=args.fail_first)
        provider.handle(event, _Context(args.timeout) if args.timeout else None)
        accepted = [c for c in server.captures if c.status == 200]
        violations = list(server.violations)
        if not accepted:
            shared = getattr(args, "store", None) is not None
            return Invocation(EXIT_ERROR, attempts=len(server.captures), violations=violations,
                              problem="no response reached the ResponseURL",
                              next_step="see the log lines on stderr" + (
                                  "; a request already answered in the --store is a duplicate and is not answered "
                                  "again: give the event a new RequestId, or leave --store out" if shared else ""))
        capture = accepted[0]
        raw = capture.raw.decode("utf-8", errors="replace")
        body = capture.body if capture.body is not None else raw
        invocation = Invocation(EXIT_SUCCESS, response=body, raw=raw, method=capture.method,
                                attempts=len(server.captures), violations=violations)
        if violations:
            invocation.exit_code = EXIT_ERROR
        elif invocation.status != SUCCESS:
            invocation.exit_code = EXIT_FAILED
        return invocation
