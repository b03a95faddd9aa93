"""`crhelper stack`: a local ROS. Deploy a template's custom resources through their real ServiceToken paths.

Stacks live in $CRHELPER_HOME/stacks.sqlite (default ~/.crhelper), so `create`, `describe`,
`update` and `delete` work across runs; the bindings a stack was created with are remembered too.
The emulator does the work (`StackEmulator.prepare` then `run`); this module reads the command
line, sets delivery up and prints. The parser is `crhelper.cli.parsers.stack`.

While an operation runs, the terminal shows its events, its providers' own output (one
`ProviderLogs` sink per operation, kept in `<home>/logs/<stack>.jsonl` for `stack logs`) and a
heartbeat line for each resource in progress longer than CRHELPER_HEARTBEAT_INTERVAL, all under one
print lock so lines never interleave.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Sequence, TextIO

from .. import paths
from ..emulator import (
    EmulatorError,
    Operation,
    PreparedOperation,
    StackDescription,
    StackEmulator,
    StackEvent,
    StackNotFoundError,
    StackStateError,
    TemplateValidationError,
    UnknownResourceError,
    load_parameter_file,
    parse_key_values,
)
from ..config import HEARTBEAT_SETTING, ConfigError, heartbeat_interval
from ..constants import TEMPLATE_DIR_ENV
from ..emulator.delivery import StackDelivery
from ..emulator.delivery_bindings import (
    BindingError,
    Bindings,
    default_bindings_path,
    load_bindings,
    remember_bindings,
    remembered_bindings,
)
from ..emulator.model import STACK_RESOURCE_TYPE, utc_now
from ..emulator.provider_logs import (
    LOG_LEVEL_ENV,
    RESOURCE_WIDTH,
    LogRecord,
    ProviderLogs,
    follow_interval,
    follow_records,
    level_number,
    log_path,
    provider_level,
    read_records,
    render,
    terminal_level,
)
from ..loading import import_from_cwd
from ..signals import on_signals
from ..errors import error_document
from .parsers.stack import EXIT_FAILED, EXIT_OK, EXIT_USAGE, build_parser

SUCCESS_STATUSES = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "DELETE_COMPLETE"})


# ---------------------------------------------------------------------------------------- output


class Printer:
    """Live text output: one line per event as it happens (or nothing in --json mode), and with
    `heartbeat` seconds a line per interval for each resource still in progress (`polls` says how
    many steps its provider reported; None: not known on its path, elapsed time only)."""

    def __init__(
        self, json_mode: bool, out: TextIO | None = None, *, lock: "threading.RLock | None" = None,
        heartbeat: float | None = None, polls: Callable[[str], int | None] | None = None,
    ) -> None:
        self.json_mode = json_mode
        self.out = out or sys.stdout
        self.events: list[dict[str, Any]] = []
        self.lock = lock or threading.RLock()
        self._heartbeat = heartbeat
        self._polls = polls or (lambda resource: None)
        #: logical id -> (status, monotonic start, heartbeat lines printed, polls before this phase)
        self._running: dict[str, tuple[str, float, int, int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def event(self, event: StackEvent) -> None:
        self.events.append(event.to_dict())
        if event.resource_type != STACK_RESOURCE_TYPE:
            with self.lock:
                if event.status.endswith("_IN_PROGRESS"):
                    self._running[event.logical_id] = (event.status, time.monotonic(), 0, self._polls(event.logical_id) or 0)
                else:
                    self._running.pop(event.logical_id, None)
        if self.json_mode:
            return
        self._line(event.timestamp, event.logical_id, event.status, event.reason)

    def _line(self, timestamp: str, name: str, status: str, reason: str) -> None:
        reason = f"  {reason}" if reason else ""
        with self.lock:
            print(f"{timestamp[11:23]}  {name:<{RESOURCE_WIDTH}} {status:<28}{reason}", file=self.out, flush=True)

    # ---------------------------------------------------------------- heartbeat

    def __enter__(self) -> "Printer":
        if self._heartbeat is not None and not self.json_mode:
            self._thread = threading.Thread(target=self._beat, name="crhelper-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)

    def _beat(self) -> None:
        assert self._heartbeat is not None
        interval = self._heartbeat
        while not self._stop.wait(min(1.0, max(0.02, interval / 5))):
            now = time.monotonic()
            with self.lock:
                for name, (status, since, beats, base) in list(self._running.items()):
                    due = int((now - since) / interval)
                    if due <= beats:
                        continue
                    self._running[name] = (status, since, due, base)
                    polls = self._polls(name)
                    counted = "" if polls is None else f", {_plural(polls - base, 'poll')}"
                    self._line(utc_now(), name, status, f"still running: {_duration(now - since)}{counted}")


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _error(args: argparse.Namespace, kind: str, message: str, hint: str = "", **extra: Any) -> int:
    """A refused command: text on stderr, or under --json the error document on stdout."""
    if getattr(args, "json", False):
        document = error_document(kind, message, hint, **extra)
        if getattr(args, "func", None) is not None and _command_name(args) == "validate":
            document = {"valid": False, **document}
        _dump(document)
        return EXIT_USAGE
    print(f"crhelper stack: {message}", file=sys.stderr)
    if hint:
        print(f"  next: {hint}", file=sys.stderr)
    return EXIT_USAGE


def _command_name(args: argparse.Namespace) -> str:
    return str(getattr(args.func, "target", "")).rpartition(":")[2]


def _print_outputs(outputs: dict[str, Any], out: TextIO) -> None:
    if not outputs:
        return
    print("Outputs:", file=out)
    width = max(len(k) for k in outputs)
    for key, value in outputs.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        print(f"  {key:<{width}} = {shown}", file=out)


def _failure_hint(description: StackDescription, operation: str) -> str:
    name = description.name
    if operation == "delete":
        failed = [r.logical_id for r in description.resources if r.status == "DELETE_FAILED"]
        retain = f" --retain {' '.join(failed)}" if failed else " --retain-all"
        return (f"fix the provider, then run `crhelper stack delete --stack {name}` again; or leave what failed "
                f"as it is and delete the rest: `crhelper stack delete --stack {name}{retain}`")
    if description.status.endswith("ROLLBACK_FAILED"):
        return (f"the rollback failed too (see `crhelper stack describe --stack {name}`); fix the provider, "
                f"then run `crhelper stack delete --stack {name}`")
    if description.status.startswith(("CREATE_FAILED", "UPDATE_FAILED")):
        return (f"inspect with `crhelper stack describe --stack {name}`; "
                f"remove it with `crhelper stack delete --stack {name}`")
    if description.status == "CREATE_ROLLBACK_COMPLETE":
        # ROS cannot update or re-create over a rolled-back create: the stack must be deleted first.
        return (f"fix the provider or template, then run `crhelper stack delete --stack {name}` "
                "and `crhelper stack create` again (the stack was rolled back)")
    return f"fix the provider or template, then run `crhelper stack {operation}` again (the stack was rolled back)"


def _finish(description: StackDescription, printer: Printer, operation: str) -> int:
    ok = description.status in SUCCESS_STATUSES
    if printer.json_mode:
        document = {"Stack": description.to_dict(), "Outputs": description.output_values(), "Events": printer.events}
        print(json.dumps(document, indent=2, ensure_ascii=False, default=str))
        return EXIT_OK if ok else EXIT_FAILED
    out = printer.out
    if ok:
        print(f"stack {description.name}: {description.status}", file=out)
        _print_outputs(description.output_values(), out)
        return EXIT_OK
    print(f"stack {description.name}: {description.status}: {description.status_reason}", file=out)
    print(f"  next: {_failure_hint(description, operation)}", file=out)
    return EXIT_FAILED


def state_hint(error: StackStateError) -> str:
    """The next step for a refused operation, from the error's fields."""
    name, steps = error.stack, error.next_operations
    delete = f"`crhelper stack delete --stack {name}`"
    if error.kind == StackStateError.BUSY:
        return (f"another crhelper process is running an operation on it; follow it with "
                f"`crhelper stack events --stack {name} --follow` (its events) and "
                f"`crhelper stack logs --stack {name} --follow` (its providers' output)")
    if error.kind == StackStateError.EXISTS:
        return f"`crhelper stack update ... --stack {name}`, or {delete} first" if "update" in steps else f"{delete} first"
    if error.kind == StackStateError.NOT_UPDATABLE:
        return f"{delete} first, then `crhelper stack create` it again"
    if error.kind == StackStateError.CHANGED:
        return f"run `crhelper stack {steps[0]}` again" if steps else ""
    return ""


# ---------------------------------------------------------------------------------------- inputs


class _UsageError(Exception):
    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


def _emulator(args: argparse.Namespace) -> StackEmulator:
    """The emulator on --home; providers (in-process and FC workers) keep their state there too."""
    if args.home:
        os.environ[paths.HOME_ENV] = str(Path(args.home).expanduser().resolve())
    return StackEmulator(paths.home())


@contextmanager
def _provider_log_level(level: str) -> Iterator[None]:
    """Providers run at `level` while the operation runs (their framework records reach the log
    sink, which keeps the terminal to CRHELPER_LOG_LEVEL); the variable is restored afterwards."""
    before = os.environ.get(LOG_LEVEL_ENV)
    os.environ[LOG_LEVEL_ENV] = level
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(LOG_LEVEL_ENV, None)
        else:
            os.environ[LOG_LEVEL_ENV] = before


def _heartbeat_interval() -> float:
    try:
        return heartbeat_interval()
    except ConfigError as exc:
        raise _UsageError(str(exc), f"set {HEARTBEAT_SETTING} to a number of seconds, or unset it") from None


def _read_template(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise _UsageError(f"cannot read template {path}: {exc.strerror}", "check the path; templates/demo.yaml is an example") from None


def _parameters(args: argparse.Namespace) -> dict[str, Any]:
    values: dict[str, Any] = {}
    try:
        if args.parameter_file is not None:
            try:
                text = args.parameter_file.read_text(encoding="utf-8")
            except OSError as exc:
                raise _UsageError(f"cannot read --parameters {args.parameter_file}: {exc.strerror}") from None
            values.update(load_parameter_file(text))
        values.update(parse_key_values(args.parameters))
    except ValueError as exc:
        raise _UsageError(str(exc), "pass parameters as -p Key=Value or --parameters FILE") from None
    return values


def _bindings(args: argparse.Namespace, home: Path, template: Path | None) -> Bindings:
    bindings = remembered_bindings(home, args.stack) if args.stack else Bindings()
    source = args.bindings or (default_bindings_path(template) if template is not None else None)
    if source is not None:
        loaded = load_bindings(source)
        bindings = dataclasses.replace(loaded, providers={**bindings.providers, **loaded.providers},
                                       environment={**bindings.environment, **loaded.environment})
    bindings = bindings.with_flags(args.bind)
    if args.in_process:
        bindings = dataclasses.replace(bindings, mode="inprocess")
    faults = bindings.faults.merged(
        duplicate=args.duplicate, response_fail_first=args.response_fail_first,
        response_fail_status=args.response_fail_status, response_delay=args.response_delay,
        kill_provider=args.kill_provider, kill_provider_after=args.kill_provider_after,
    )
    return dataclasses.replace(bindings, faults=faults)


def _check_bound(prepared: PreparedOperation, bindings: Bindings) -> None:
    missing = bindings.unbound(prepared.service_tokens)
    if missing:
        lines = [f"{token} (used by {', '.join(names)})" for token, names in missing.items()]
        first = next(iter(missing))
        raise _UsageError(
            "no provider is bound to ServiceToken " + "; ".join(lines),
            f"add -s '{first}=package.module:provider', or list it under 'bindings:' in a bindings file "
            "(<template>.bindings.yaml next to the template is read automatically)",
        )


# ---------------------------------------------------------------------------------------- commands


def _template_hint(args: argparse.Namespace) -> str:
    hint = "fix the template or parameters; `crhelper stack validate TEMPLATE` checks without running"
    if getattr(args, "use_previous_parameters", None) is False:
        hint += ("; parameters not given take the template's defaults: pass them with -p, or "
                 "--use-previous-parameters to keep the stack's current values")
    return hint


def _guarded(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn every expected problem into a message with a next step and exit code 2 (JSON under --json)."""

    def command(args: argparse.Namespace) -> int:
        try:
            return int(run(args))
        except _UsageError as exc:
            return _error(args, "usage", str(exc), exc.hint)
        except TemplateValidationError as exc:
            return _error(args, "template-invalid", str(exc), _template_hint(args), errors=exc.errors)
        except StackNotFoundError as exc:
            return _error(args, "stack-not-found", str(exc), "`crhelper stack list` shows the local stacks")
        except StackStateError as exc:
            return _error(args, f"stack-{exc.kind}", str(exc), state_hint(exc))
        except UnknownResourceError as exc:
            return _error(args, "unknown-resource", str(exc),
                          f"name resources by logical id; `crhelper stack describe --stack {exc.stack}` lists them")
        except BindingError as exc:
            return _error(args, "bindings", str(exc), "see `crhelper stack --help` for the bindings format")
        except EmulatorError as exc:
            return _error(args, "emulator", str(exc))

    command.__name__ = command.__qualname__ = run.__name__
    command.__doc__ = run.__doc__
    return command


@contextmanager
def _template_dir(folder: str | None) -> Iterator[None]:
    """The template's folder for the providers run in this process, for this operation only (the
    emulated FC functions get it through the bindings' environment)."""
    before = os.environ.get(TEMPLATE_DIR_ENV)
    if folder is not None:
        os.environ[TEMPLATE_DIR_ENV] = folder
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(TEMPLATE_DIR_ENV, None)
        else:
            os.environ[TEMPLATE_DIR_ENV] = before


@contextmanager
def _terminations_interrupt() -> Iterator[None]:
    """SIGTERM / SIGHUP end a running operation the way Ctrl-C does: the stack is marked FAILED
    (instead of staying *_IN_PROGRESS, which no command accepts) and the local endpoints stop."""

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    with on_signals(stop, (signal.SIGTERM, signal.SIGHUP)):
        yield


def _deploy(args: argparse.Namespace, emulator: StackEmulator, prepared: PreparedOperation, template: Path | None) -> int:
    """Bind, deliver and report one prepared operation: the part create, update and delete share."""
    home = emulator.store.home
    bindings = _bindings(args, home, template)
    folder = str(template.resolve().parent) if template is not None else None
    if folder is not None:  # providers resolve the template's relative paths against its folder
        bindings = dataclasses.replace(bindings, environment={TEMPLATE_DIR_ENV: folder, **bindings.environment})
    if prepared.operation != "delete":  # a delete calls the tokens its resources were created with
        _check_bound(prepared, bindings)
        remember_bindings(home, prepared.name, bindings)
    import_from_cwd()  # bound module specs resolve from here, in this process and in the FC workers it starts
    heartbeat = _heartbeat_interval()
    terminal = terminal_level(os.environ)
    lock = threading.RLock()
    logs = ProviderLogs(prepared.name, home, out=sys.stdout, err=sys.stderr, json_mode=args.json, level=terminal, lock=lock)
    printer = Printer(args.json, sys.stdout, lock=lock, heartbeat=heartbeat, polls=logs.polls)
    with _terminations_interrupt(), _provider_log_level(provider_level(terminal)), _template_dir(folder), logs, \
            printer, logs.capture(), \
            StackDelivery(bindings, region=emulator.region, account_id=emulator.account_id,
                          http_configs=prepared.http_configs, logs=logs) as deliver:
        description = emulator.run(prepared, deliver, disable_rollback=getattr(args, "disable_rollback", False),
                                   on_event=printer.event)
    return _finish(description, printer, prepared.operation)


def _from_template(operation: Operation, args: argparse.Namespace) -> int:
    """A create, or an update (whose template is optional: it keeps the current one)."""
    text = _read_template(args.template) if args.template is not None else None
    parameters = _parameters(args)
    with _emulator(args) as emulator:
        prepared = emulator.prepare(operation, args.stack, text, parameters,
                                    use_previous_parameters=getattr(args, "use_previous_parameters", False),
                                    parallelism=getattr(args, "parallelism", None))
        return _deploy(args, emulator, prepared, args.template)


@_guarded
def create(args: argparse.Namespace) -> int:
    return _from_template("create", args)


@_guarded
def update(args: argparse.Namespace) -> int:
    return _from_template("update", args)


@_guarded
def delete(args: argparse.Namespace) -> int:
    with _emulator(args) as emulator:
        prepared = emulator.prepare("delete", args.stack, retain=args.retain, retain_all=args.retain_all)
        return _deploy(args, emulator, prepared, None)


def _dump(document: Any) -> None:
    print(json.dumps(document, indent=2, ensure_ascii=False, default=str))


@_guarded
def describe(args: argparse.Namespace) -> int:
    with _emulator(args) as emulator:
        description = emulator.describe(args.stack)
    if args.json:
        _dump(description.to_dict())
        return EXIT_OK
    print(f"Stack      {description.name}  ({description.stack_id})")
    print(f"Status     {description.status}" + (f": {description.status_reason}" if description.status_reason else ""))
    print(f"Region     {description.region}   created {description.created_at}   updated {description.updated_at}")
    if description.parameters:
        print("Parameters:")
        for key, value in description.parameters.items():
            print(f"  {key} = {value}")
    print("Resources:")
    for resource in description.resources:
        reason = f"  {resource.status_reason}" if resource.status_reason else ""
        print(f"  {resource.logical_id:<20} {resource.resource_type:<24} {resource.status:<20} {resource.physical_id or '-'}{reason}")
    _print_outputs(description.output_values(), sys.stdout)
    return EXIT_OK


@_guarded
def events(args: argparse.Namespace) -> int:
    with _emulator(args) as emulator:
        if getattr(args, "follow", False):
            return _follow_events(args, emulator)
        found = emulator.events(args.stack)
    if args.json:
        _dump([e.to_dict() for e in found])
        return EXIT_OK
    printer = Printer(False)
    for event in found:
        printer.event(event)
    return EXIT_OK


def _follow_events(args: argparse.Namespace, emulator: StackEmulator) -> int:
    """Print the stack's events, then new ones as another process's operation appends them, until the
    stack leaves *_IN_PROGRESS (one JSON object per line under --json); Ctrl-C stops following."""
    interval = _follow_interval()
    printer = Printer(False)
    shown, stack_id = 0, None
    try:
        while True:
            record = emulator.settled_record(args.stack)  # a dead owner's operation is marked interrupted
            if record is None:
                raise StackNotFoundError(args.stack)
            if record.stack_id != stack_id:  # (re-)created meanwhile: its history starts anew
                shown, stack_id = 0, record.stack_id
            found = emulator.store.events(record.stack_id)
            for event in found[shown:]:
                if args.json:
                    print(json.dumps(event.to_dict(), ensure_ascii=False), flush=True)
                else:
                    printer.event(event)
            shown = len(found)
            if not record.status.endswith("_IN_PROGRESS"):
                return EXIT_OK
            time.sleep(interval)
    except KeyboardInterrupt:
        return EXIT_OK


def _follow_interval() -> float:
    try:
        return follow_interval(os.environ)
    except ConfigError as exc:
        raise _UsageError(str(exc), "set CRHELPER_FOLLOW_INTERVAL to a number of seconds, or unset it") from None


@_guarded
def logs(args: argparse.Namespace) -> int:
    """Replay the provider logs kept for a stack (`--follow`: and what its running operation adds)."""
    level = level_number(args.level or terminal_level(os.environ))
    with _emulator(args) as emulator:
        home = emulator.store.home
        if not read_records(home, args.stack) and not log_path(home, args.stack).exists() \
                and emulator.store.load(args.stack) is None:
            raise StackNotFoundError(args.stack)
        if args.follow:
            records: Iterator[LogRecord] = follow_records(home, args.stack, lambda: emulator.store.operation_live(args.stack),
                                                          _follow_interval())
        else:
            records = iter(read_records(home, args.stack))
        shown, resources = 0, set()
        try:
            for record in records:
                resources.add(record.resource)
                if args.resource and record.resource != args.resource:
                    continue
                if record.from_framework and level_number(record.level, logging.INFO) < level:
                    continue
                shown += 1
                print(record.to_json() if args.json else "\n".join(render(record)), flush=True)
        except KeyboardInterrupt:
            return EXIT_OK
    if not shown and not args.json:
        known = ", ".join(sorted(r for r in resources if r)) or "none"
        which = f" for resource {args.resource}" if args.resource else ""
        print(f"crhelper stack: no provider log lines{which} at {logging.getLevelName(level)} or above "
              f"(resources with lines: {known}; --level INFO shows the framework's own records)", file=sys.stderr)
    return EXIT_OK



@_guarded
def outputs(args: argparse.Namespace) -> int:
    with _emulator(args) as emulator:
        values = emulator.outputs(args.stack)
    if args.json:
        _dump(values)
    else:
        _print_outputs(values, sys.stdout)
    return EXIT_OK


@_guarded
def list_stacks(args: argparse.Namespace) -> int:
    with _emulator(args) as emulator:
        stacks = emulator.list_stacks()
    if args.json:
        _dump([{"name": s.name, "status": s.status, "stack_id": s.stack_id, "updated_at": s.updated_at} for s in stacks])
        return EXIT_OK
    if not stacks:
        print("no local stacks; create one with: crhelper stack create templates/demo.yaml --stack demo")
    for s in stacks:
        print(f"{s.name:<24} {s.status:<28} {s.updated_at}")
    return EXIT_OK


@_guarded
def validate(args: argparse.Namespace) -> int:
    text = _read_template(args.template)
    parameters = _parameters(args)
    with _emulator(args) as emulator:
        emulator.validate(text, parameters)
    if args.json:
        _dump({"valid": True})
    else:
        print(f"{args.template}: valid")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m crhelper.cli.stack ...`: the same command without the `crhelper` front end."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
