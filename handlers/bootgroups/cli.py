"""``crhelper bootgroups ...``: the operators' view of the boot-group provider's state, and start,
stop and reboot of a group outside a stack operation.

Registered through the ``crhelper.commands`` entry point. Importing this module costs only the
standard library (``crhelper --help`` builds every command's parser); the bodies are in
``handlers.bootgroups.commands``, imported when a sub-command runs.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from crhelper.cli.parsers import Body, add_command

if TYPE_CHECKING:
    from crhelper.cli.parsers import SubParsers

DESCRIPTION = """\
The Instance Boot Groups your stacks created (Custom::InstanceBootGroup), read from the provider's
own state: $CRHELPER_HOME/bootgroups/state.sqlite, or CRHELPER_BOOTGROUP_STORE. List them, show one
(members by tier with their readiness, the effective settings, the last run's timeline), read its
INSTANCE.BOOT.GROUP.* events, or start, stop and reboot it now through its backend with the same
engine the provider runs: the run and the readiness cache are stored back, so the next stack
operation sees them. A start prints its tier timeline as it goes.

Exit status: 0 done, 1 a halted start, a failed stop or a group busy with another operation,
2 a usage error (an unknown group, a bad setting), 130 interrupted (Ctrl-C). Each sub-command
has its own --help."""

EPILOG = """\
examples:
  crhelper bootgroups list
  crhelper bootgroups show tiers-tiers
  crhelper bootgroups stop tiers-tiers              # descending tiers, every failure listed
  crhelper bootgroups start tiers-tiers             # ascending tiers, readiness-gated, live timeline
  crhelper bootgroups reboot tiers-tiers --forced
  crhelper bootgroups events tiers-tiers --follow
  crhelper bootgroups list --json --home /tmp/demo-home
"""

LIST_DESCRIPTION = """\
One line per boot group: its name, backend, state (what its last run left it in, or the operation
running now), members, tiers (BootOrders ascending), the stack and resource that own it, and the
outcome of its last run."""
LIST_EPILOG = """\
examples:
  crhelper bootgroups list
  crhelper bootgroups list --json | jq '.Groups[].Name'
"""

SHOW_DESCRIPTION = """\
One boot group: its members tier by tier (ascending BootOrder) with their readiness (Ready,
NotReady, Error or Unknown, and what the last check saw) and each instance's power state, the
effective settings (the group's overrides over the defaults, and the global ones from the
environment), and the timeline of its last start, stop or reboot. Readiness comes from the stored
results, never a new check: an instance restarted outside the group since its last boot reads
Unknown ("not yet re-verified"), and one that is not Running reads NotReady unless
--ignore-instance-state. Reading writes nothing."""
SHOW_EPILOG = """\
examples:
  crhelper bootgroups show tiers-tiers
  crhelper bootgroups show tiers-tiers --json | jq '.Tiers[].Members[].Readiness'
  crhelper bootgroups show tiers-tiers --ignore-instance-state
"""

EVENTS_DESCRIPTION = """\
The group's INSTANCE.BOOT.GROUP.* events, oldest first: CREATE, UPDATE, DELETE, START, STOP,
REBOOT (FAILED when the run failed), MEMBER.ADD/REMOVE/REORDER and READINESS.RULE.*. With --follow,
new events are printed as they are recorded, and so is the timeline of a run in progress (a stack
operation or another crhelper bootgroups start), until Ctrl-C or the reader goes away."""
EVENTS_EPILOG = """\
examples:
  crhelper bootgroups events tiers-tiers
  crhelper bootgroups events tiers-tiers --count 5
  crhelper bootgroups events tiers-tiers --follow --json     # one JSON object per line
"""

START_DESCRIPTION = """\
Start the group now: tiers in ascending BootOrder, each tier's instances started together (up to
CRHELPER_BOOTGROUP_CHECK_CONCURRENCY), already Running instances left running, then polled every
CRHELPER_BOOTGROUP_POLL_INTERVAL seconds until each member is Ready; a member that is not Ready
within its attempts, or a tier past its deadline, halts the start without rollback. The timeline
prints as it goes: who was started when, each check with its result and attempt k/N, each retry
and reboot, each tier ready, the halt reason. Refused while a stack operation is running a step on
the group. Ctrl-C stops after the current round, stores what was done and leaves the instances as
they are (exit 130)."""
START_EPILOG = """\
examples:
  crhelper bootgroups start tiers-tiers
  CRHELPER_BOOTGROUP_POLL_INTERVAL=1 crhelper bootgroups start tiers-tiers
  crhelper bootgroups start tiers-tiers --json | jq .Reason
"""

STOP_DESCRIPTION = """\
Stop the group now: tiers in descending BootOrder, already Stopped instances skipped; a failure is
reported and the remaining tiers are still stopped, and every failure is listed at the end
(exit 1). --forced powers instances off instead of asking them to shut down."""
STOP_EPILOG = """\
examples:
  crhelper bootgroups stop tiers-tiers
  crhelper bootgroups stop tiers-tiers --forced
"""

REBOOT_DESCRIPTION = """\
Reboot the group now: the stop (descending tiers), then the start (ascending tiers, readiness-gated),
with the timeline of both."""
REBOOT_EPILOG = """\
examples:
  crhelper bootgroups reboot tiers-tiers
  crhelper bootgroups reboot tiers-tiers --forced --json
"""


def _common(parser: argparse.ArgumentParser, json_help: str = "print one JSON document instead of text") -> None:
    parser.add_argument("--home", default=None, metavar="DIR",
                        help="state directory (default $CRHELPER_HOME or ~/.crhelper)")
    parser.add_argument("--json", action="store_true", help=json_help)


def _named(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="the boot group's Name (see `crhelper bootgroups list`)")


def register(subparsers: "SubParsers") -> None:
    """Add the ``bootgroups`` command and its sub-commands."""
    group = add_command(subparsers, "bootgroups", "list, show, start, stop and reboot Instance Boot Groups",
                        DESCRIPTION, EPILOG)

    def usage(args: argparse.Namespace) -> int:
        group.print_help()
        return 2

    group.set_defaults(func=usage)
    sub = group.add_subparsers(dest="bootgroups_command", title="sub-commands", metavar="<sub-command>")

    listed = add_command(sub, "list", "every boot group with its state and last run", LIST_DESCRIPTION, LIST_EPILOG)
    _common(listed)
    listed.set_defaults(func=Body("handlers.bootgroups.commands:list_groups"))

    show = add_command(sub, "show", "one group: members by tier with readiness, settings, last timeline",
                SHOW_DESCRIPTION, SHOW_EPILOG)
    _named(show)
    show.add_argument("--ignore-instance-state", action="store_true",
                      help="show each instance's cached readiness even when it is not Running "
                           "(by default a stopped instance reads NotReady)")
    _common(show)
    show.set_defaults(func=Body("handlers.bootgroups.commands:show"))

    events = add_command(sub, "events", "the group's INSTANCE.BOOT.GROUP.* events; --follow keeps printing",
                  EVENTS_DESCRIPTION, EVENTS_EPILOG)
    _named(events)
    events.add_argument("--follow", action="store_true",
                        help="keep printing new events and the timeline of a run in progress")
    events.add_argument("--count", type=int, default=None, metavar="N",
                        help="only the last N past events (default: all kept, up to 1,000; 0: only new ones)")
    events.add_argument("--interval", type=float, default=0.5, metavar="SECONDS",
                        help="with --follow: seconds between reads of the state (default 0.5)")
    _common(events, "one JSON document (with --follow: one JSON object per line)")
    events.set_defaults(func=Body("handlers.bootgroups.commands:events"))

    for name, summary, description, epilog in (
            ("start", "start the tiers in ascending order, readiness-gated, with a live timeline",
             START_DESCRIPTION, START_EPILOG),
            ("stop", "stop the tiers in descending order, listing every failure", STOP_DESCRIPTION, STOP_EPILOG),
            ("reboot", "stop, then start, with a live timeline", REBOOT_DESCRIPTION, REBOOT_EPILOG)):
        operation = add_command(sub, name, summary, description, epilog)
        _named(operation)
        if name != "start":
            operation.add_argument("--forced", action="store_true",
                                   help="power the instances off (a forced stop) instead of a clean shutdown")
        _common(operation, "no live timeline; print one JSON document with the outcome and the whole timeline")
        operation.set_defaults(func=Body("handlers.bootgroups.commands:run_operation"), operation=name)
