"""`crhelper stack`: a local ROS. Deploy a template's custom resources through their real ServiceToken paths.

Stacks live in $CRHELPER_HOME/stacks.sqlite (default ~/.crhelper), so `create`, `describe`,
`update` and `delete` work across runs; the bindings a stack was created with are remembered too.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Sequence, TextIO

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
SUCCESS_STATUSES = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "DELETE_COMPLETE"})

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

Exit codes: 0 the operation completed, 1 it failed (see the events), 2 usage or validation error.
"""

EPILOG = """\
examples:
  crhelper stack create templates/demo.yaml --stack demo
  crhelper stack create templates/demo.yaml --stack demo -p Name=ros -p Times=3 --json
  crhelper stack create app.yaml --stack app -s 'acs:fc:cn-hangzhou:123456789:services/s/functions/f=mypkg.provider:provider'
  crhelper stack update templates/demo.yaml --stack demo -p Times=5
  crhelper stack outputs --stack demo
  crhelper stack events --stack demo
  crhelper stack delete --stack demo
  crhelper stack create templates/demo.yaml --stack flaky --duplicate --response-fail-first 2
"""


# ---------------------------------------------------------------------------------------- parser


def _common(parser: argparse.ArgumentParser, *, stack: bool = True) -> None:
    if stack:
        parser.add_argument("--stack", required=True, metavar="NAME", help="the stack name")
    parser.add_argument("--home", default=None, metavar="DIR", help="state directory (default $CRHELPER_HOME or ~/.crhelper)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")


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


def _template_options(parser: argparse.ArgumentParser, *, optional: bool = False) -> None:
    if optional:
        parser.add_argument("template", nargs="?", type=Path, default=None, help="new template (default: keep the current one)")
    else:
        parser.add_argument("template", type=Path, help="ROS template, YAML or JSON")
    parser.add_argument("-p", "--parameter", dest="parameters", action="append", default=[], metavar="Key=Value",
                        help="a template parameter; repeatable")
    parser.add_argument("--parameters", dest="parameter_file", type=Path, default=None, metavar="FILE",
                        help="parameters as a JSON/YAML map or the ROS list of {ParameterKey, ParameterValue}")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "stack", help="deploy ROS templates locally through their real ServiceToken paths",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_commands(parser)


def add_commands(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(title="commands", metavar="<command>")
    raw = argparse.RawDescriptionHelpFormatter

    create = commands.add_parser("create", help="create a stack and wait for it", formatter_class=raw,
                                 description="Create a stack: every resource gets a Create request; on failure the "
                                             "created ones are rolled back unless --disable-rollback.",
                                 epilog="example: crhelper stack create templates/demo.yaml --stack demo -p Name=ros")
    _template_options(create)
    _common(create)
    create.add_argument("--disable-rollback", action="store_true", help="keep what was created when a resource fails")
    _delivery_options(create)
    create.set_defaults(func=run_create)

    update = commands.add_parser("update", help="update a stack to a new template and/or parameters", formatter_class=raw,
                                 description="Update: changed resources get Update (with OldResourceProperties), added ones "
                                             "Create, removed ones Delete; a failure rolls back with the old properties.",
                                 epilog="example: crhelper stack update templates/demo.yaml --stack demo -p Times=5")
    _template_options(update, optional=True)
    _common(update)
    update.add_argument("--disable-rollback", action="store_true", help="do not roll back a failed update")
    _delivery_options(update)
    update.set_defaults(func=run_update)

    delete = commands.add_parser("delete", help="delete a stack (DeletionPolicy Retain resources get no request)",
                                 epilog="example: crhelper stack delete --stack demo")
    _common(delete)
    _delivery_options(delete)
    delete.set_defaults(func=run_delete)

    for name, func, text in (
        ("describe", run_describe, "status, parameters, resources and outputs of a stack"),
        ("events", run_events, "every event of a stack, oldest first"),
        ("outputs", run_outputs, "the resolved outputs of a stack"),
    ):
        sub = commands.add_parser(name, help=text, epilog=f"example: crhelper stack {name} --stack demo")
        _common(sub)
        sub.set_defaults(func=func)

    listing = commands.add_parser("list", help="all local stacks", epilog="example: crhelper stack list --json")
    _common(listing, stack=False)
    listing.set_defaults(func=run_list)

    validate = commands.add_parser("validate", help="check a template and parameters without running anything",
                                   epilog="example: crhelper stack validate templates/demo.yaml -p Name=ros")
    _template_options(validate)
    _common(validate, stack=False)
    validate.set_defaults(func=run_validate)
    parser.set_defaults(func=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


# ---------------------------------------------------------------------------------------- output


class Printer:
    """Live text output: one line per event as it happens (or nothing in --json mode)."""

    def __init__(self, json_mode: bool, out: TextIO | None = None) -> None:
        self.json_mode = json_mode
        self.out = out or sys.stdout
        self.events: list[dict[str, Any]] = []

    def event(self, event: Any) -> None:
        self.events.append(event.to_dict())
        if self.json_mode:
            return
        time_part = event.timestamp[11:23]
        reason = f"  {event.reason}" if event.reason else ""
        print(f"{time_part}  {event.logical_id:<24} {event.status:<28}{reason}", file=self.out, flush=True)


def _error(message: str, hint: str = "") -> int:
    print(f"crhelper stack: {message}", file=sys.stderr)
    if hint:
        print(f"  next: {hint}", file=sys.stderr)
    return EXIT_USAGE


def _print_outputs(outputs: dict[str, Any], out: TextIO) -> None:
    if not outputs:
        return
    print("Outputs:", file=out)
    width = max(len(k) for k in outputs)
    for key, value in outputs.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        print(f"  {key:<{width}} = {shown}", file=out)


def _finish(description: Any, printer: Printer, operation: str) -> int:
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
    name = description.name
    if operation == "delete":
        hint = f"fix the provider, then run `crhelper stack delete --stack {name}` again"
    elif description.status.endswith("ROLLBACK_FAILED"):
        hint = (f"the rollback failed too (see `crhelper stack describe --stack {name}`); fix the provider, "
                f"then run `crhelper stack delete --stack {name}`")
    elif description.status.startswith(("CREATE_FAILED", "UPDATE_FAILED")):
        hint = (f"inspect with `crhelper stack describe --stack {name}`; "
                f"remove it with `crhelper stack delete --stack {name}`")
    elif description.status == "CREATE_ROLLBACK_COMPLETE":
        # ROS cannot update or re-create over a rolled-back create: the stack must be deleted first.
        hint = (f"fix the provider or template, then run `crhelper stack delete --stack {name}` "
                "and `crhelper stack create` again (the stack was rolled back)")
    else:
        hint = f"fix the provider or template, then run `crhelper stack {operation}` again (the stack was rolled back)"
    print(f"  next: {hint}", file=out)
    return EXIT_FAILED


# ---------------------------------------------------------------------------------------- inputs


def _emulator(args: argparse.Namespace) -> Any:
    """The emulator on --home; providers (in-process and FC workers) keep their state there too."""
    import os

    from ..emulator import StackEmulator

    if args.home:
        os.environ["CRHELPER_HOME"] = str(Path(args.home).expanduser().resolve())
    # Provider INFO lines would bury the event lines; CRHELPER_LOG_LEVEL still wins when set.
    os.environ.setdefault("CRHELPER_LOG_LEVEL", "WARNING")
    return StackEmulator(args.home)


def _read_template(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise _UsageError(f"cannot read template {path}: {exc.strerror}", "check the path; templates/demo.yaml is an example") from None


class _UsageError(Exception):
    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


def _parameters(args: argparse.Namespace) -> dict[str, Any]:
    from ..emulator import load_parameter_file, parse_key_values

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


def _bindings(args: argparse.Namespace, home: Path, template: Path | None) -> Any:
    from ..emulator.delivery_bindings import Bindings, default_bindings_path, load_bindings, remembered_bindings

    bindings = remembered_bindings(home, args.stack) if args.stack else Bindings()
    source = args.bindings or (default_bindings_path(template) if template is not None else None)
    if source is not None:
        loaded = load_bindings(source)
        bindings = dataclasses.replace(loaded, providers={**bindings.providers, **loaded.providers})
    bindings = bindings.with_flags(args.bind)
    if args.in_process:
        bindings = dataclasses.replace(bindings, mode="inprocess")
    faults = bindings.faults.merged(
        duplicate=args.duplicate, response_fail_first=args.response_fail_first,
        response_fail_status=args.response_fail_status, response_delay=args.response_delay,
        kill_provider=args.kill_provider, kill_provider_after=args.kill_provider_after,
    )
    return dataclasses.replace(bindings, faults=faults)


def unbound_tokens(template_text: str, parameters: dict[str, Any], bindings: Any, region: str, account_id: str) -> dict[str, list[str]]:
    """FC/MNS ServiceTokens that resolve without running anything but have no provider: token -> resources."""
    from ..emulator.plan import StackIdentity, build_plan
    from ..emulator.template import load_template

    plan = build_plan(load_template(template_text), parameters, StackIdentity("check", "check", region, account_id))
    missing: dict[str, list[str]] = {}
    for name, spec in plan.resources.items():
        token = plan.evaluate(spec.service_token, f"Resources.{name}.Properties.ServiceToken", lambda _: None, dry_run=True)
        if isinstance(token, str) and token.startswith("acs:") and bindings.provider_for(token) is None:
            missing.setdefault(token, []).append(name)
    return missing


def _check_bound(template_text: str, parameters: dict[str, Any], bindings: Any, emulator: Any) -> None:
    missing = unbound_tokens(template_text, parameters, bindings, emulator.region, emulator.account_id)
    if missing:
        lines = [f"{token} (used by {', '.join(names)})" for token, names in missing.items()]
        first = next(iter(missing))
        raise _UsageError(
            "no provider is bound to ServiceToken " + "; ".join(lines),
            f"add -s '{first}=package.module:provider', or list it under 'bindings:' in a bindings file "
            "(<template>.bindings.yaml next to the template is read automatically)",
        )


# ---------------------------------------------------------------------------------------- commands


def _guard(run: Any, args: argparse.Namespace) -> int:
    """Turn every expected problem into a message with a next step and exit code 2."""
    from ..emulator import EmulatorError, StackNotFoundError, StackStateError, TemplateValidationError
    from ..emulator.delivery_bindings import BindingError

    try:
        return int(run(args))
    except _UsageError as exc:
        return _error(str(exc), exc.hint)
    except TemplateValidationError as exc:
        return _error(str(exc), "fix the template or parameters; `crhelper stack validate TEMPLATE` checks without running")
    except StackNotFoundError as exc:
        return _error(str(exc), "`crhelper stack list` shows the local stacks")
    except StackStateError as exc:
        name = getattr(args, "stack", "NAME")
        hint = ""
        if "is busy" in str(exc) or "_IN_PROGRESS" in str(exc):
            hint = f"another crhelper process is running an operation on it; follow it with `crhelper stack events --stack {name}`"
        elif "already exists" in str(exc) or "cannot be updated" in str(exc):
            hint = f"`crhelper stack delete --stack {name}` first, then `crhelper stack create` it again"
        return _error(str(exc), hint)
    except BindingError as exc:
        return _error(str(exc), "see `crhelper stack --help` for the bindings format")
    except EmulatorError as exc:
        return _error(str(exc))


def run_create(args: argparse.Namespace) -> int:
    return _guard(_create, args)


def run_update(args: argparse.Namespace) -> int:
    return _guard(_update, args)


def run_delete(args: argparse.Namespace) -> int:
    return _guard(_delete, args)


def run_describe(args: argparse.Namespace) -> int:
    return _guard(_describe, args)


def run_events(args: argparse.Namespace) -> int:
    return _guard(_events, args)


def run_outputs(args: argparse.Namespace) -> int:
    return _guard(_outputs, args)


def run_list(args: argparse.Namespace) -> int:
    return _guard(_list, args)


def run_validate(args: argparse.Namespace) -> int:
    return _guard(_validate, args)


def _http_configs(text: str, parameters: dict[str, Any], name: str, emulator: Any) -> dict[str, Any]:
    from ..emulator.delivery_http_config import resolve_http_configs

    return resolve_http_configs(text, parameters, stack_name=name, region=emulator.region, account_id=emulator.account_id)


def _create(args: argparse.Namespace) -> int:
    from ..emulator.delivery import StackDelivery
    from ..emulator.delivery_bindings import remember_bindings
    from ..emulator.emulator import UPDATABLE_STATUSES

    text = _read_template(args.template)
    parameters = _parameters(args)
    printer = Printer(args.json)
    with _emulator(args) as emulator:
        home = emulator.store.home
        existing = emulator.settled_record(args.stack)
        if existing is not None and existing.status != "DELETE_COMPLETE":
            delete_first = f"`crhelper stack delete --stack {args.stack}` first"
            raise _UsageError(f"stack '{args.stack}' already exists (status {existing.status})",
                              f"`crhelper stack update ... --stack {args.stack}`, or {delete_first}"
                              if existing.status in UPDATABLE_STATUSES else delete_first)
        bindings = _bindings(args, home, args.template)
        emulator.validate(text, parameters, args.stack)
        _check_bound(text, parameters, bindings, emulator)
        remember_bindings(home, args.stack, bindings)
        configs = _http_configs(text, parameters, args.stack, emulator)
        with _terminations_interrupt(), \
                StackDelivery(bindings, region=emulator.region, account_id=emulator.account_id, http_configs=configs) as deliver:
            description = emulator.create(args.stack, text, parameters, deliver,
                                          disable_rollback=args.disable_rollback, on_event=printer.event)
    return _finish(description, printer, "create")


def _update(args: argparse.Namespace) -> int:
    from ..emulator.delivery import StackDelivery
    from ..emulator.delivery_bindings import remember_bindings
    from ..emulator.template import load_template

    given = _parameters(args)
    printer = Printer(args.json)
    with _emulator(args) as emulator:
        record = emulator.store.load(args.stack)
        if record is None:
            from ..emulator import StackNotFoundError

            raise StackNotFoundError(args.stack)
        text = _read_template(args.template) if args.template is not None else record.template_text
        # Previous values carry over only for parameters the (new) template still declares.
        declared = load_template(text).parameters
        parameters = {k: v for k, v in record.parameters.items() if k in declared and k not in given}
        parameters.update(given)
        bindings = _bindings(args, emulator.store.home, args.template)
        emulator.validate(text, parameters, args.stack)
        _check_bound(text, parameters, bindings, emulator)
        remember_bindings(emulator.store.home, args.stack, bindings)
        configs = _http_configs(text, parameters, args.stack, emulator)
        with _terminations_interrupt(), \
                StackDelivery(bindings, region=emulator.region, account_id=emulator.account_id, http_configs=configs) as deliver:
            description = emulator.update(args.stack, text if args.template is not None else None, given, deliver,
                                          disable_rollback=args.disable_rollback, on_event=printer.event)
    return _finish(description, printer, "update")


def _delete(args: argparse.Namespace) -> int:
    from ..emulator.delivery import StackDelivery

    printer = Printer(args.json)
    with _emulator(args) as emulator:
        record = emulator.store.load(args.stack)
        if record is None:
            from ..emulator import StackNotFoundError

            raise StackNotFoundError(args.stack)
        bindings = _bindings(args, emulator.store.home, None)
        configs = _http_configs(record.template_text, record.parameters, args.stack, emulator)
        with _terminations_interrupt(), \
                StackDelivery(bindings, region=emulator.region, account_id=emulator.account_id, http_configs=configs) as deliver:
            description = emulator.delete(args.stack, deliver, on_event=printer.event)
    return _finish(description, printer, "delete")


@contextlib.contextmanager
def _terminations_interrupt() -> Iterator[None]:
    """SIGTERM / SIGHUP end a running operation the way Ctrl-C does: the stack is marked FAILED
    (instead of staying *_IN_PROGRESS, which no command accepts) and the local endpoints stop."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _dump(document: Any) -> None:
    print(json.dumps(document, indent=2, ensure_ascii=False, default=str))


def _describe(args: argparse.Namespace) -> int:
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


def _events(args: argparse.Namespace) -> int:
    with _emulator(args) as emulator:
        events = emulator.events(args.stack)
    if args.json:
        _dump([e.to_dict() for e in events])
        return EXIT_OK
    printer = Printer(False)
    for event in events:
        printer.event(event)
    return EXIT_OK


def _outputs(args: argparse.Namespace) -> int:
    with _emulator(args) as emulator:
        outputs = emulator.outputs(args.stack)
    if args.json:
        _dump(outputs)
    else:
        _print_outputs(outputs, sys.stdout)
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
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


def _validate(args: argparse.Namespace) -> int:
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
    parser = argparse.ArgumentParser(prog="crhelper stack", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_commands(parser)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
