"""`crhelper stack`: a local ROS. Deploy a template's custom resources through their real ServiceToken paths.

Stacks live in $CRHELPER_HOME/stacks.sqlite (default ~/.crhelper), so `create`, `describe`,
`update` and `delete` work across runs; the bindings a stack was created with are remembered too.
The emulator does the work (`StackEmulator.prepare` then `run`); this module reads the command
line, sets delivery up and prints. The parser is `crhelper.cli.parsers.stack`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
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
from ..emulator.delivery import StackDelivery
from ..emulator.delivery_bindings import (
    BindingError,
    Bindings,
    default_bindings_path,
    load_bindings,
    remember_bindings,
    remembered_bindings,
)
from ..loading import import_from_cwd
from ..signals import on_signals
from .parsers.stack import EXIT_FAILED, EXIT_OK, EXIT_USAGE, build_parser, error_document

SUCCESS_STATUSES = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "DELETE_COMPLETE"})


# ---------------------------------------------------------------------------------------- output


class Printer:
    """Live text output: one line per event as it happens (or nothing in --json mode)."""

    def __init__(self, json_mode: bool, out: TextIO | None = None) -> None:
        self.json_mode = json_mode
        self.out = out or sys.stdout
        self.events: list[dict[str, Any]] = []

    def event(self, event: StackEvent) -> None:
        self.events.append(event.to_dict())
        if self.json_mode:
            return
        time_part = event.timestamp[11:23]
        reason = f"  {event.reason}" if event.reason else ""
        print(f"{time_part}  {event.logical_id:<24} {event.status:<28}{reason}", file=self.out, flush=True)


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
        return f"another crhelper process is running an operation on it; follow it with `crhelper stack events --stack {name}`"
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
    # Provider INFO lines would bury the event lines; CRHELPER_LOG_LEVEL still wins when set.
    os.environ.setdefault("CRHELPER_LOG_LEVEL", "WARNING")
    return StackEmulator(paths.home())


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
    if prepared.operation != "delete":  # a delete calls the tokens its resources were created with
        _check_bound(prepared, bindings)
        remember_bindings(home, prepared.name, bindings)
    import_from_cwd()  # bound module specs resolve from here, in this process and in the FC workers it starts
    printer = Printer(args.json)
    with _terminations_interrupt(), StackDelivery(bindings, region=emulator.region, account_id=emulator.account_id,
                                                  http_configs=prepared.http_configs) as deliver:
        description = emulator.run(prepared, deliver, disable_rollback=getattr(args, "disable_rollback", False),
                                   on_event=printer.event)
    return _finish(description, printer, prepared.operation)


def _from_template(operation: Operation, args: argparse.Namespace) -> int:
    """A create, or an update (whose template is optional: it keeps the current one)."""
    text = _read_template(args.template) if args.template is not None else None
    parameters = _parameters(args)
    with _emulator(args) as emulator:
        prepared = emulator.prepare(operation, args.stack, text, parameters,
                                    use_previous_parameters=getattr(args, "use_previous_parameters", False))
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
        found = emulator.events(args.stack)
    if args.json:
        _dump([e.to_dict() for e in found])
        return EXIT_OK
    printer = Printer(False)
    for event in found:
        printer.event(event)
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
