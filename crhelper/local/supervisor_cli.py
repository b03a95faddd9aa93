"""`crhelper supervisor`: see, stop and read the logs of the local processes that stand for resources.

The parser imports the standard library only (`crhelper --help` stays fast); the supervisor client
loads when a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from crhelper.local.supervisor import ProcessStatus, SupervisorClient

DESCRIPTION = (
    "Local backends (Instance Boot Groups, AppCenter clusters) run their instances and nodes as local "
    "processes owned by one supervisor daemon per CRHELPER_HOME. The daemon starts when a provider first "
    "needs it and exits once it owns nothing. These commands show what it runs, stop processes (SIGTERM to "
    "the process group, SIGKILL after --grace seconds) and print their captured output. Values of "
    "environment variables that look secret (*SECRET*, *TOKEN*, *PASSWORD*, *KEY*) are shown as ***."
)
EPILOG = """examples:
  crhelper supervisor status                          # every process of this CRHELPER_HOME
  crhelper supervisor status web-1                    # one, in detail
  crhelper supervisor status --owner <stack id>/Web --json
  crhelper supervisor stop web-1 --grace 5
  crhelper supervisor stop --owner <stack id>/Web --forget
  crhelper supervisor stop --all                      # everything, then the daemon
  crhelper supervisor logs web-1 --tail 50
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "supervisor", help="see and stop the local processes of local backends (instances, cluster nodes)",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(title="actions", metavar="<action>")
    parser.set_defaults(func=lambda args: _usage(parser))

    status = actions.add_parser(
        "status", help="list supervised processes, or show one", epilog=EPILOG,
        description="List the processes of this CRHELPER_HOME (name, state, pid, exit code, restarts, owner), "
                    "or show one in detail. Reads the state file when no daemon runs: it never starts one.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    status.add_argument("name", nargs="?", help="one process, in detail")
    status.add_argument("--owner", default=None, help="only the processes of this owner (e.g. <stack id>/<logical id>)")
    status.add_argument("--json", action="store_true", help="print JSON (a list, or one object with a name)")
    status.set_defaults(func=run, action="status")

    stop = actions.add_parser(
        "stop", help="stop processes by name, by owner, or all of them and the daemon", epilog=EPILOG,
        description="Stop processes: SIGTERM to each process group, SIGKILL to what is left after --grace "
                    "seconds. Several are stopped at once. --all also stops the daemon.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    stop.add_argument("names", nargs="*", metavar="name", help="processes to stop")
    stop.add_argument("--owner", default=None, help="stop every process of this owner")
    stop.add_argument("--all", action="store_true", help="stop every process of this CRHELPER_HOME and the daemon")
    stop.add_argument("--grace", type=float, default=None, metavar="S",
                      help="seconds between SIGTERM and SIGKILL (default CRHELPER_SUPERVISOR_GRACE, 10)")
    stop.add_argument("--forget", action="store_true", help="also drop their records (logs are kept)")
    stop.add_argument("--json", action="store_true", help="print the final statuses as JSON")
    stop.set_defaults(func=run, action="stop")

    logs = actions.add_parser(
        "logs", help="print a process's captured output (stdout and stderr)", epilog=EPILOG,
        description="Print the last lines of a process's log (its stdout and stderr, and a line per start).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    logs.add_argument("name", help="the process")
    logs.add_argument("--tail", type=int, default=100, metavar="N", help="how many lines (default 100)")
    logs.set_defaults(func=run, action="logs")


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from crhelper.config import ConfigError
    from crhelper.local.supervisor import SupervisorClient, SupervisorError

    try:
        client = SupervisorClient()
        if args.action == "status":
            return _status(client, args)
        if args.action == "stop":
            return _stop(client, args)
        return _logs(client, args)
    except (SupervisorError, ConfigError) as exc:
        print(f"crhelper supervisor: {exc}", file=sys.stderr)
        return 1


def _status(client: "SupervisorClient", args: argparse.Namespace) -> int:
    if args.name:
        one = client.status(args.name)
        if args.json:
            print(json.dumps(one.to_json(), indent=2))
        else:
            _print_detail(one)
        return 0
    statuses = client.list(owner=args.owner)
    if args.json:
        print(json.dumps([s.to_json() for s in statuses], indent=2))
    elif not statuses:
        print("no supervised processes" + (f" of owner {args.owner}" if args.owner else ""))
    else:
        _print_table(statuses)
    return 0


def _stop(client: "SupervisorClient", args: argparse.Namespace) -> int:
    chosen = sum((bool(args.names), args.owner is not None, args.all))
    if chosen != 1:
        print("crhelper supervisor stop: give names, --owner OWNER or --all (one of them)", file=sys.stderr)
        return 2
    if args.all:
        statuses = client.stop_all(grace=args.grace)
    elif args.owner is not None:
        statuses = client.stop_owner(args.owner, grace=args.grace, forget=args.forget)
    else:
        statuses = [client.stop(name, grace=args.grace, forget=args.forget) for name in args.names]
    if args.json:
        print(json.dumps([s.to_json() for s in statuses], indent=2))
        return 0
    for status in statuses:
        print(f"{status.name}: {status.state}{_exit_text(status)}")
    if args.all:
        print("supervisor daemon stopped")
    elif not statuses:
        print(f"no supervised processes of owner {args.owner}")
    return 0


def _logs(client: "SupervisorClient", args: argparse.Namespace) -> int:
    text = client.logs(args.name, tail=args.tail)
    sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
    return 0


def _exit_text(status: "ProcessStatus") -> str:
    if status.running:
        return f" (pid {status.pid})"
    return f" (exit code {status.exit_code})" if status.exit_code is not None else " (exit code unknown)"


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp)) if stamp else "-"


def _print_table(statuses: Sequence["ProcessStatus"]) -> None:
    rows = [("NAME", "STATE", "PID", "EXIT", "RESTARTS", "STARTED", "OWNER")]
    rows += [(s.name, s.state + ("*" if s.adopted else ""), str(s.pid or "-"),
              "-" if s.exit_code is None else str(s.exit_code), str(s.restarts), _when(s.started_at), s.owner or "-")
             for s in statuses]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    if any(s.adopted for s in statuses):
        print("* adopted by a new daemon after the previous one died: exit codes will be unknown")


def _print_detail(status: "ProcessStatus") -> None:
    detail: list[tuple[str, Any]] = [
        ("name", status.name), ("state", status.state + _exit_text(status)), ("owner", status.owner or "-"),
        ("argv", " ".join(status.argv)), ("cwd", status.cwd), ("ready", status.ready or "-"),
        ("started", _when(status.started_at)), ("ended", _when(status.ended_at)), ("restarts", status.restarts),
        ("log", status.log_path), ("note", status.note or "-"),
    ]
    for key, value in detail:
        print(f"{key + ':':<10}{value}")
    for key, value in sorted(status.env.items()):
        print(f"{'env:':<10}{key}={value}")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m crhelper.local.supervisor_cli ...`, the same as `crhelper supervisor ...`."""
    parser = argparse.ArgumentParser(prog="crhelper supervisor", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
