"""`crhelper invoke`: run one request locally and show the response exactly as it would be sent.

Every run has a fresh private store unless `--store URL` names one: a store shared between runs
answers a repeated request from its record (for 24 h), so a provider fixed since would seem to fail
still. A provider answering InProgress is continued in this process (the framework's in-process
scheduler, on the same store) and the command waits for the answer up to `--wait`, with a heartbeat
on stderr. The parser is `crhelper.cli.parsers.invoke`.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from ..config import DEFAULT_HEARTBEAT, HEARTBEAT_SETTING, ConfigError
from ..config import heartbeat_interval as configured_heartbeat
from ..constants import FAILED, SUCCESS
from ..contract.harness import PollCounter, await_answer, in_progress
from ..loading import describe_load_failure, load_provider
from ..local.response_server import ResponseServer
from ..provider import Provider
from ..store.url import SETTING as STORE_SETTING
from ..store.url import StoreConfigError, parse_store_url
from . import provider_spec
from .parsers.invoke import DEFAULT_WAIT

if TYPE_CHECKING:
    from ..manifest import ProviderManifest

#: The store of one invoke run unless --store names one.
PRIVATE_STORE = "sqlite://:memory:"
#: How continuations are run; invoke's are run here unless the environment says otherwise (with
#: --timeout the emulated Function Compute context has no endpoint to re-invoke).
REENTRY_SETTING = "CRHELPER_REENTRY"
LOCAL_REENTRY = "local"
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

    def __init__(self, problem: str, next_step: str = "", *, polls: int | None = 0, seconds: float | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.next_step = next_step
        self.polls = polls
        self.seconds = seconds


class Abandoned(Refused):
    """A long operation given up (past --wait, or Ctrl-C): the provider is not closed, since closing
    waits for a running step; `run_and_exit` ends the process instead."""


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
    polls: int | None = 0  #: continuation polls before the answer (None: the log level hides them)
    seconds: float | None = None  #: from the request to its answer (or to giving up)

    @property
    def status(self) -> str:
        """SUCCESS or FAILED as the response said, ERROR when nothing readable was answered."""
        if not isinstance(self.response, dict):
            return ERROR
        return SUCCESS if self.response.get("Status") == SUCCESS else FAILED

    @classmethod
    def refused(cls, refusal: Refused) -> "Invocation":
        return cls(EXIT_ERROR, problem=refusal.problem, next_step=refusal.next_step or None,
                   polls=refusal.polls, seconds=refusal.seconds)

    def to_dict(self) -> dict[str, Any]:
        error = None if self.problem is None else {"problem": self.problem, "next_step": self.next_step}
        return {"response": self.response,
                "outcome": {"status": self.status, "exit_code": self.exit_code, "method": self.method,
                            "bytes": len(self.raw.encode("utf-8")) if self.raw is not None else None,
                            "attempts": self.attempts, "violations": self.violations, "polls": self.polls,
                            "seconds": None if self.seconds is None else round(self.seconds, 3), "error": error}}


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
    polled = f", {invocation.polls} poll(s) in {invocation.seconds:.1f} s" if invocation.polls and invocation.seconds else ""
    print(f"crhelper invoke: {invocation.method} {len((invocation.raw or '').encode('utf-8'))} bytes after "
          f"{invocation.attempts} attempt(s){polled}", file=sys.stderr)
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


def load_named(text: str) -> tuple["Provider", "ProviderManifest | None"]:
    """The provider a command line names (a spec or an installed provider's name) and its manifest,
    or Refused with one line: what is wrong (file:line for an import error) and what to do."""
    try:
        spec, manifest = provider_spec.resolve(text)
    except Exception as exc:  # noqa: BLE001 - a spec error: reported, not raised
        raise Refused(*describe_load_failure(text, exc)) from None
    try:
        return load_provider(spec, cwd_importable=True), manifest
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the module's own failure at import, reported in one line
        problem, next_step = describe_load_failure(spec, exc)
        raise Refused(f"cannot load {text}: {problem}", next_step) from None


def close_provider(provider: Any) -> None:
    """Stop a crhelper Provider's scheduler (and store) once a command is done with it; a
    Provider-like object without `close` has nothing to stop."""
    close = getattr(provider, "close", None)
    if callable(close):
        close()


def heartbeat_interval(env: Mapping[str, str] | None = None) -> float:
    """CRHELPER_HEARTBEAT_INTERVAL (seconds between "in progress" lines), or Refused naming the rule."""
    try:
        return configured_heartbeat(env)
    except ConfigError as exc:
        raise Refused(str(exc), f"set {HEARTBEAT_SETTING} to a number of seconds, or unset it "
                                f"(default {DEFAULT_HEARTBEAT:g})") from None


def _progress(seconds: float, polls: int | None) -> str:
    """"12 s, 3 poll(s)": polls are counted from the framework's INFO records, so a log level above
    INFO leaves them out."""
    shown = f"{seconds:.1f}" if seconds < 10 else f"{seconds:.0f}"
    return f"{shown} s" + ("" if polls is None else f", {polls} poll(s)")


def _wait(args: argparse.Namespace) -> float:
    wait = getattr(args, "wait", DEFAULT_WAIT)
    if not (isinstance(wait, (int, float)) and math.isfinite(wait) and wait >= 0):
        raise Refused(f"--wait: must be a number of seconds, at least 0, got {wait!r}",
                      f"give --wait SECONDS, or leave it out (default {DEFAULT_WAIT:g})")
    return float(wait)


def _run(args: argparse.Namespace) -> Invocation:
    event = _read_event(args)
    wait = _wait(args)
    url = store_url(getattr(args, "store", None))
    interval = heartbeat_interval()
    previous = {name: os.environ.get(name) for name in (STORE_SETTING, REENTRY_SETTING)}
    if previous[STORE_SETTING] is not None and getattr(args, "store", None) is None:
        print(f"crhelper invoke: {STORE_SETTING} is not used: this run has a private store (--store URL shares one)",
              file=sys.stderr)
    os.environ[STORE_SETTING] = url
    if not previous[REENTRY_SETTING]:
        os.environ[REENTRY_SETTING] = LOCAL_REENTRY
    try:
        provider, _ = load_named(args.provider)
        close = True
        try:
            return _invoke(args, provider, event, wait, interval)
        except Abandoned:
            close = False
            raise
        finally:
            if close:
                close_provider(provider)
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _invoke(args: argparse.Namespace, provider: "Provider", event: dict[str, Any], wait: float,
            interval: float) -> Invocation:
    shared = getattr(args, "store", None) is not None
    with ResponseServer() as server, PollCounter().attached() as counter:
        server.attach(event, fail_first=args.fail_first)
        context = _Context(args.timeout) if args.timeout else None
        started = time.monotonic()
        if isinstance(provider, Provider):
            pending = in_progress(provider.process(event, context))
        else:  # a Provider-like object: one call, its answer is whatever reached the ResponseURL
            provider.handle(event, context)
            pending = False

        def polls() -> int | None:
            return counter.polls() if counter.visible() else None

        # Nothing sent and no error: this call's operation continues (it logged a poll), or the request
        # is a duplicate of one the --store holds, whose answer went to an earlier run's ResponseURL.
        if pending and (polls() == 0 or (polls() is None and shared)):
            pending = False

        def heartbeat() -> None:
            # One write, line and newline together: a provider's log line from another thread
            # cannot land between them (print writes the text and the end separately).
            sys.stderr.write(f"crhelper invoke: in progress, {_progress(time.monotonic() - started, polls())}\n")
            sys.stderr.flush()

        if pending:
            try:
                answered = await_answer(server, str(event.get("RequestId")), started + wait, tick=heartbeat, every=interval)
            except KeyboardInterrupt:
                raise Abandoned(
                    f"interrupted while the operation was in progress ({_progress(time.monotonic() - started, polls())}), "
                    "before its answer",
                    "the unfinished operation stays in the --store: give the event a new RequestId to start over"
                    if shared else "run again to start over (this run's private store is gone)",
                    polls=polls(), seconds=time.monotonic() - started) from None
            if not answered:
                raise Abandoned(
                    f"the operation was still in progress after --wait {wait:g} s "
                    f"({_progress(time.monotonic() - started, polls())}, no answer at the ResponseURL)",
                    "give --wait more seconds (the InProgress delays add up), or see on stderr why the handler "
                    "keeps returning InProgress", polls=polls(), seconds=time.monotonic() - started)
        seconds = time.monotonic() - started
        accepted = [c for c in server.captures if c.status == 200]
        violations = list(server.violations)
        if not accepted:
            return Invocation(EXIT_ERROR, attempts=len(server.captures), violations=violations,
                              polls=polls(), seconds=seconds,
                              problem="no response reached the ResponseURL",
                              next_step="see the log lines on stderr" + (
                                  "; a request already answered in the --store is a duplicate and is not answered "
                                  "again: give the event a new RequestId, or leave --store out" if shared else ""))
        capture = accepted[0]
        raw = capture.raw.decode("utf-8", errors="replace")
        body = capture.body if capture.body is not None else raw
        invocation = Invocation(EXIT_SUCCESS, response=body, raw=raw, method=capture.method,
                                attempts=len(server.captures), violations=violations, polls=polls(), seconds=seconds)
        if violations:
            invocation.exit_code = EXIT_ERROR
        elif invocation.status != SUCCESS:
            invocation.exit_code = EXIT_FAILED
        return invocation
