"""The bodies of ``crhelper bootgroups ...`` (the parsers are in ``handlers.bootgroups.cli``).

They read the provider's own state (`provider.group_store`), and `start`/`stop`/`reboot` run the
engine on the group's stored plan through its backend the way a stack step does: the run begins
with the provider's `begin_run` (the outside-restart reset of the cache included), is
checkpointed into the group after every round, and ends with the provider's `converge`
bookkeeping (events, cache, power changes, last result), so the next stack operation sees it.

A run carries the key of its owner (`GroupRecord.run_id`): `<request id>:<create|update|delete>`
for a stack step, `cli:<operation>:<time>@<holder identity>` for this command. A group whose
unfinished run belongs to a live owner is refused: a command run whose process is provably gone
(`crhelper.holder.is_dead`), or any run without progress for longer than one round can take,
counts as abandoned and may be taken over.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Mapping, cast

import crhelper.holder as holder
import crhelper.paths as paths
from crhelper.errors import Failure, error_document
from crhelper.operations.budget import Budget, Memory
from crhelper.signals import on_signals

from . import engine, events as ev
from .backend_for import BackendUnavailable, Wiring, make_backend
from .backends import RUNNING, BootBackend, CheckResult, VmState
from .model import INSTANCE_GROUP, UNKNOWN, GroupRef, MemberSpec, tiers_of
from .provider import begin_run, converge, group_store, known_boots, read_states
from .readiness import cache_as_read, member_status
from .settings import GlobalSettings, tier_deadline
from .state import GroupRecord, GroupStore

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: The run key prefix of runs this command owns.
CLI_PREFIX = "cli:"
#: Seconds of quiet, past the longest a round may take (a poll interval and an attempt's budget),
#: after which an unfinished run counts as abandoned by its owner.
LIVE_GRACE = 5.0
OPERATION_EVENT = {engine.START: ev.START, engine.STOP: ev.STOP, engine.REBOOT: ev.REBOOT}
IN_PROGRESS = {engine.START: "Starting", engine.STOP: "Stopping", engine.REBOOT: "Rebooting"}


class UsageError(Exception):
    """Something the operator can fix (exit 2): the message, and the command to run next."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


def _command(body: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """--home, and usage errors as one message (a JSON error document under --json), exit 2."""

    @functools.wraps(body)
    def run(args: argparse.Namespace) -> int:
        if getattr(args, "home", None):
            os.environ[paths.HOME_ENV] = str(Path(args.home).expanduser().resolve())
        try:
            return body(args)
        except UsageError as exc:
            _error(args, str(exc), exc.hint)
        except Failure as exc:  # the store's configuration (CRHELPER_BOOTGROUP_STORE)
            _error(args, exc.reason)
        return EXIT_USAGE

    return run


def _error(args: argparse.Namespace, message: str, hint: str = "") -> None:
    if getattr(args, "json", False):
        print(json.dumps(error_document("usage", message, hint), indent=2))
        return
    command = getattr(args, "bootgroups_command", None) or ""
    print(f"bootgroups {command}: {message}".replace("  ", " ") + (f"\n  next: {hint}" if hint else ""), file=sys.stderr)


def _find(store: GroupStore, name: str) -> GroupRecord:
    """The group named `name` (or with that GroupId) among every owner's groups in the store."""
    groups = store.list_groups()
    found = [group for group in groups if group.group_id == name] or [group for group in groups if group.name == name]
    if not found:
        known = sorted({group.name for group in groups})
        listed = ", ".join(repr(n) for n in known) if known else "none in this home"
        raise UsageError(f"no boot group is named {name!r} (known: {listed}); see crhelper bootgroups list",
                         "crhelper bootgroups list")
    if len(found) > 1:
        owners = "; ".join(f"{group.group_id} (owner {group.owner})" for group in found)
        raise UsageError(f"{len(found)} boot groups of different owners are named {name!r}: {owners}; "
                         "give the GroupId instead", "crhelper bootgroups list")
    return found[0]


def _global_settings() -> GlobalSettings:
    try:
        return GlobalSettings.from_env()
    except ValueError as exc:
        raise UsageError(f"configuration: {exc}") from None


def _make_backend(record: GroupRecord, store: GroupStore) -> BootBackend:
    """The group's backend as this machine can build it: the environment's credentials and
    connection settings (no FC context here), and the boots the group recorded."""
    return make_backend(record.backend, store, os.environ, Wiring(known_boots=dict(record.power_changes)))


def _backend(record: GroupRecord, store: GroupStore) -> BootBackend:
    try:
        return _make_backend(record, store)
    except (BackendUnavailable, Failure) as exc:
        raise UsageError(f"boot group {record.name!r}: {exc}") from None


# --- reading the state ---------------------------------------------------------------------------

def _run_of(record: GroupRecord) -> engine.BootRun | None:
    """The group's stored run (in progress or the last one); None without one or when unreadable."""
    if record.run is None:
        return None
    try:
        return engine.load_run(record.run)
    except Exception:  # noqa: BLE001 - a run of another version: shown as no run rather than a traceback
        return None


def run_owner(run_id: str) -> str:
    """Who a run key names, for people: a stack request's step or a command's process."""
    if run_id.startswith(CLI_PREFIX):
        operation = run_id[len(CLI_PREFIX):].partition(":")[0]
        pid = run_id.partition("@")[2].split("|")[-2:-1]
        return f"crhelper bootgroups {operation}" + (f", pid {pid[0]}" if pid else "")
    request, _, kind = run_id.rpartition(":")
    return f"the stack's {kind or 'operation'} of request {request or run_id}"


def running_elsewhere(record: GroupRecord, now: float) -> str | None:
    """Who is running an operation on the group right now (and how recently it made progress), or
    None when its run is finished, its owner provably gone, or it made no progress for longer than
    a round can take (a poll interval, an attempt's budget and LIVE_GRACE)."""
    run = _run_of(record)
    if run is None or run.finished or not record.run_id:
        return None
    if record.run_id.startswith(CLI_PREFIX) and holder.is_dead(record.run_id.partition("@")[2]):
        return None
    quiet = max(0.0, now - record.updated)
    if quiet > run.poll_interval + run.settings.timeout + LIVE_GRACE:
        return None
    return f"{run_owner(record.run_id)}, last progress {quiet:.1f} s ago"


def group_state(record: GroupRecord, now: float) -> str:
    """What the group is in: the operation running now, or what its last run left it in."""
    run = _run_of(record)
    if run is not None and not run.finished and record.run_id:
        live = running_elsewhere(record, now) is not None
        return IN_PROGRESS.get(run.operation, run.operation) if live else f"{run.operation} abandoned"
    last = record.last_result
    if not last:
        return record.desired_state
    if last.get("Operation") == engine.STOP:
        return "Stopped" if last.get("Ok") else "StopFailed"
    return "Running" if last.get("Ok") else "StartHalted"


def _members_of(member: MemberSpec, run: engine.BootRun | None) -> list[str]:
    """The instances of a member: itself, its group's listed instances, else those the last start found."""
    if member.kind != INSTANCE_GROUP:
        return [member.key]
    if member.group is not None and member.group.instances is not None:
        return list(member.group.instances)
    if run is not None and run.start is not None:
        return [vm.vm for tier in run.start.tiers for vm in tier.vms if vm.member == member.key]
    return []


def member_tiers(record: GroupRecord, run: engine.BootRun | None, backend: BootBackend | None, *,
                 ignore_instance_state: bool = False) -> list[dict[str, Any]]:
    """The members tier by tier (ascending BootOrder) with readiness from the result cache (the
    run's, which holds the group's and what the run added) as it reads now: an instance restarted
    outside the group since its last boot reads Unknown, not yet re-verified, and one that is not
    Running reads NotReady unless `ignore_instance_state` (§2.3). Nothing is written."""
    members = [(order, member, _members_of(member, run)) for order, group in tiers_of(record.members) for member in group]
    every = list(dict.fromkeys(vm for _, _, vms in members for vm in vms))
    errors: dict[str, str] = {}
    states = read_states(backend, every, errors) if backend is not None else {}
    cache = cache_as_read(run.cache if run is not None else record.cache, known_boots(record, run), states, time.time())
    tiers: dict[int, list[dict[str, Any]]] = {}
    for order, member, vms in members:
        shown = {vm: states[vm].state if vm in states else UNKNOWN + (f" ({errors[vm]})" if vm in errors else "")
                 for vm in vms}
        status, message = member_status(member, vms, cache, {vm: vm in states and states[vm].running for vm in vms},
                                        ignore_instance_state=ignore_instance_state)
        tiers.setdefault(order, []).append({
            "Member": member.key, "Kind": "InstanceGroup" if member.kind == INSTANCE_GROUP else "Instance",
            "Readiness": status, "Message": message, "Rules": [rule.describe() for rule in member.rules],
            "Instances": [{"Instance": vm, "State": state} for vm, state in shown.items()]})
    return [{"Order": order, "Members": rows} for order, rows in tiers.items()]


def run_document(record: GroupRecord, run: engine.BootRun) -> dict[str, Any]:
    return {"RunId": record.run_id, "Owner": run_owner(record.run_id) if record.run_id else "", "Operation": run.operation,
            "Finished": run.finished, "Ok": run.ok, "Reason": run.reason, "Began": run.began, "Ended": run.ended,
            "Seconds": round(run.ended - run.began, 3) if run.ended is not None else None,
            "Tiers": engine.tier_summary(run), "Readiness": engine.member_readiness(run),
            "StopFailures": list(run.stop_failures), "Timeline": ev.as_dicts(run.timeline)}


def _when(at: float | None) -> str:
    if not at:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) + f".{int(at * 1000) % 1000:03d}"


def _last_run_text(last: Mapping[str, Any]) -> str:
    if not last:
        return "none yet"
    outcome = "ok" if last.get("Ok") else f"FAILED: {last.get('Reason') or ''}"
    return f"{last.get('Operation')} {outcome} ({_when(last.get('Ended'))})"


def _print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join([cell.ljust(width) for cell, width in zip(row, widths)] + [row[-1]]).rstrip())


# --- list, show, events --------------------------------------------------------------------------

@_command
def list_groups(args: argparse.Namespace) -> int:
    store, now = group_store(), time.time()
    records = store.list_groups()
    groups: list[dict[str, Any]] = []
    for record in records:
        groups.append({"Name": record.name, "GroupId": record.group_id, "Backend": record.backend,
                       "State": group_state(record, now), "DesiredState": record.desired_state, "Status": record.status,
                       "Members": len(record.members), "Tiers": [order for order, _ in tiers_of(record.members)],
                       "Stack": record.stack_id, "Resource": record.logical_id,
                       "Busy": running_elsewhere(record, now), "LastRun": dict(record.last_result) or None})
    if args.json:
        print(json.dumps({"Groups": groups}, indent=2))
        return EXIT_OK
    if not groups:
        print("bootgroups list: no boot groups in this home; next: crhelper stack create templates/bootgroup-demo.yaml "
              "--stack tiers", file=sys.stderr)
        return EXIT_OK
    rows = [["NAME", "BACKEND", "STATE", "MEMBERS", "TIERS", "OWNER", "LAST RUN"]]
    for group, record in zip(groups, records):
        rows.append([group["Name"], group["Backend"], group["State"], str(group["Members"]),
                     ",".join(str(order) for order in group["Tiers"]), f"{record.stack_id}/{record.logical_id}",
                     _last_run_text(record.last_result)])
    _print_table(rows)
    return EXIT_OK


@_command
def show(args: argparse.Namespace) -> int:
    store, now = group_store(), time.time()
    record = _find(store, args.name)
    gs = _global_settings()
    try:
        backend: BootBackend | None = _make_backend(record, store)
        backend_note = ""
    except (BackendUnavailable, Failure) as exc:
        backend, backend_note = None, str(exc)
    run = _run_of(record)
    document: dict[str, Any] = {
        "Name": record.name, "GroupId": record.group_id, "Description": record.description, "Backend": record.backend,
        "BackendProblem": backend_note or None, "State": group_state(record, now), "DesiredState": record.desired_state,
        "Status": record.status, "Stack": record.stack_id, "Resource": record.logical_id,
        "Busy": running_elsewhere(record, now), "Forced": record.forced, "StopOnDelete": record.stop_on_delete,
        "Tiers": member_tiers(record, run, backend, ignore_instance_state=args.ignore_instance_state),
        "Settings": {**record.settings.report(), "PollIntervalSeconds": gs.poll_interval,
                     "CheckConcurrency": gs.check_concurrency, "MaxMembers": gs.max_members,
                     "TierDeadlineSeconds": tier_deadline(record.settings, gs.poll_interval)},
        "LastResult": dict(record.last_result) or None,
        "LastRun": run_document(record, run) if run is not None else None,
    }
    if args.json:
        print(json.dumps(document, indent=2))
        return EXIT_OK
    print(f"boot group {record.name!r} ({record.group_id}): {document['State']}, {record.backend} backend, "
          f"owned by {record.stack_id}/{record.logical_id}")
    if record.description:
        print(f"  {record.description}")
    if backend_note:
        print(f"  backend unavailable here: {backend_note}")
    if document["Busy"]:
        print(f"  running now: {document['Busy']}")
    print("tiers (ascending BootOrder):")
    for tier in document["Tiers"]:
        print(f"  order {tier['Order']}")
        for row in tier["Members"]:
            print(f"    {row['Kind']} {row['Member']}: {row['Readiness']}" + (f" ({row['Message']})" if row["Message"] else ""))
            for rule in row["Rules"]:
                print(f"      rule {rule}")
            if row["Kind"] == "InstanceGroup" or row["Instances"] and row["Instances"][0]["State"] != RUNNING:
                for instance in row["Instances"]:
                    print(f"      instance {instance['Instance']}: {instance['State']}")
            elif row["Instances"]:
                print(f"      instance {row['Instances'][0]['State']}")
    settings = document["Settings"]
    print("settings: " + ", ".join(f"{key} {json.dumps(value)}" for key, value in settings.items()))
    if run is None:
        print("last run: none yet")
        return EXIT_OK
    status = "in progress" if not run.finished else ("ok" if run.ok else f"FAILED: {run.reason}")
    print(f"last run: {run.operation} {status}, by {run_owner(record.run_id)}, began {_when(run.began)}")
    for entry in run.timeline:
        print(entry.line(run.began))
    return EXIT_OK


def _event_key(event: ev.Event) -> tuple[Any, ...]:
    return (event.type, event.at, event.message, event.ok, event.subject)


def _after(events: list[ev.Event], last: tuple[Any, ...] | None) -> list[ev.Event]:
    """The events recorded after the one keyed `last` (all of them when it is no longer kept)."""
    if last is None:
        return events
    for index in range(len(events) - 1, -1, -1):
        if _event_key(events[index]) == last:
            return events[index + 1:]
    return events


@_command
def events(args: argparse.Namespace) -> int:
    if args.count is not None and args.count < 0:
        raise UsageError("--count must be 0 or more")
    if not (args.interval > 0 and math.isfinite(args.interval)):
        raise UsageError("--interval must be a positive number of seconds")
    store = group_store()
    record = _find(store, args.name)
    every = store.events(record.group_id)
    past = every if args.count is None else every[-args.count:] if args.count else []
    if not args.follow:
        if args.json:
            print(json.dumps({"Name": record.name, "GroupId": record.group_id, "Events": ev.as_dicts(past)}, indent=2))
        else:
            for event in past:
                print(f"{_when(event.at)}  {event.line()}")
        return EXIT_OK

    def emit(event: ev.Event) -> None:
        print(json.dumps(dataclasses.asdict(event)) if args.json else f"{_when(event.at)}  {event.line()}", flush=True)

    def emit_entry(run_id: str, run: engine.BootRun, entry: ev.TimelineEntry) -> None:
        if args.json:
            print(json.dumps({"RunId": run_id, "Operation": run.operation, "Timeline": dataclasses.asdict(entry)}), flush=True)
        else:
            print(f"{_when(entry.at)}    {run.operation} {entry.line(run.began)}", flush=True)

    for event in past:
        emit(event)
    last = _event_key(every[-1]) if every else None
    first = _run_of(record)
    # A run in progress shows from its beginning; a finished one only with what it adds from now.
    shown = (record.run_id, len(first.timeline) if first is not None and first.finished else 0)
    stop = threading.Event()
    with on_signals(lambda signum, frame: stop.set()):
        while True:
            current = store.get_group(record.group_id)
            if current is not None:
                run = _run_of(current)
                if run is not None:
                    done = shown[1] if current.run_id == shown[0] else 0
                    for entry in run.timeline[done:]:
                        emit_entry(current.run_id, run, entry)
                    shown = (current.run_id, len(run.timeline))
            fresh = store.events(record.group_id)
            for event in _after(fresh, last):
                emit(event)
            if fresh:
                last = _event_key(fresh[-1])
            if stop.wait(args.interval):
                return EXIT_OK


# --- start, stop, reboot -------------------------------------------------------------------------

class _InterruptibleClock:
    """The system clock whose sleeps end when the operator interrupts."""

    def __init__(self, interrupted: threading.Event) -> None:
        self.interrupted = interrupted

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        self.interrupted.wait(max(0.0, seconds))

    def defer(self, seconds: float) -> float:
        return seconds


class _InterruptibleBackend:
    """The group's backend, refusing new power changes once the operator interrupted: the round in
    flight ends, nothing more is started, stopped or rebooted."""

    def __init__(self, inner: BootBackend, interrupted: threading.Event, operation: str) -> None:
        self.inner, self.interrupted, self.operation = inner, interrupted, operation

    def __getattr__(self, name: str) -> Any:
        """The inner backend's optional parts (`vm_states`, `power_changes`, `start_grace`), as they are."""
        return getattr(self.inner, name)

    def _refuse(self, verb: str) -> None:
        if self.interrupted.is_set():
            raise Failure(f"not {verb}: the operator interrupted the {self.operation} (Ctrl-C)")

    def vm_state(self, vm: str) -> VmState:
        return self.inner.vm_state(vm)

    def start_vm(self, vm: str) -> None:
        self._refuse("started")
        self.inner.start_vm(vm)

    def stop_vm(self, vm: str, forced: bool) -> None:
        self._refuse("stopped")
        self.inner.stop_vm(vm, forced)

    def reboot_vm(self, vm: str) -> None:
        self._refuse("rebooted")
        self.inner.reboot_vm(vm)

    def expand_group(self, group: GroupRef) -> list[str]:
        return self.inner.expand_group(group)

    def check(self, rule_type: str, vm: str, details: Mapping[str, str], timeout: float) -> CheckResult:
        return self.inner.check(rule_type, vm, details, timeout)


class _TakenOver(Exception):
    """Another operation put its own run on the group while this one ran."""


class _WatchedStore:
    """The group store as the provider's `converge` sees it during a command's run: every save of
    the group first checks that the run is still this one's (a stack operation may have taken the
    group over) and saves it in the same compare-and-set (`GroupStore.save_group_if`), then prints
    the timeline entries the save adds."""

    def __init__(self, inner: GroupStore, group_id: str, run_key: str, on_saved: Callable[[GroupRecord], None]) -> None:
        self._inner, self._group_id, self._run_key, self._on_saved = inner, group_id, run_key, on_saved

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def save_group(self, record: GroupRecord) -> None:
        if record.group_id == self._group_id:
            if not self._inner.save_group_if(record, run_id=self._run_key):  # the check and the write in one
                latest = self._inner.get_group(record.group_id)
                raise _TakenOver(run_owner(latest.run_id) if latest is not None else "the group's deletion")
        else:
            self._inner.save_group(record)
        self._on_saved(record)


def interrupt_run(run: engine.BootRun, at: float) -> str:
    """End an unfinished run the operator interrupted: halted without rollback (the current start
    tier halted, later ones skipped), its event FAILED; returns the reason."""
    phase = "stop" if run.phase == engine.STOP else "start"
    left = (engine.NO_ROLLBACK if phase == "start"
            else "instances already stopped stay stopped, the others keep running")
    reason = f"interrupted by the operator (Ctrl-C) during the {phase}; the group is left as is: {left}"
    progress = run.start
    if phase == "start" and progress is not None and progress.current < len(progress.tiers):
        engine._halt(run, progress, progress.tiers[progress.current], reason, at)
    else:
        run.timeline.append(ev.TimelineEntry(at, ev.HALT, "", reason, None))
    run.finished, run.ok, run.reason, run.ended, run.phase = True, False, reason, at, "done"
    run.events.append(ev.Event(OPERATION_EVENT[run.operation], at, reason, ok=False, subject=run.group))
    run.timeline.append(ev.TimelineEntry(at, ev.DONE, "", f"failed: {reason}", None))
    return reason


class _Timeline:
    """Prints a stored run's new timeline entries (text only: --json prints the document at the end)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet, self.printed = quiet, 0

    def show(self, record: GroupRecord) -> None:
        raw = record.run if isinstance(record.run, dict) else {}
        entries = raw.get("timeline") or []
        if not self.quiet:
            origin = float(raw.get("began") or 0.0)
            for entry in entries[self.printed:]:
                print(ev.TimelineEntry(**entry).line(origin), flush=True)
        self.printed = len(entries)


def _header(record: GroupRecord, run: engine.BootRun) -> str:
    def tiers(descending: bool) -> str:
        return ", ".join(f"order {order} [{', '.join(m.key for m in members)}]"
                         for order, members in tiers_of(run.members, descending=descending))

    parts = []
    if run.operation in (engine.STOP, engine.REBOOT):
        parts.append(f"stop{' (forced)' if run.forced else ''} in descending order: {tiers(True)}")
    if run.operation in (engine.START, engine.REBOOT):
        parts.append(f"start in ascending order: {tiers(False)}")
    return (f"boot group {record.name!r} ({record.backend} backend): {run.operation}: {'; then '.join(parts)}; "
            f"poll every {run.poll_interval:g} s, up to {run.check_concurrency} at once")


@_command
def run_operation(args: argparse.Namespace) -> int:
    operation = args.operation
    store = group_store()
    record = _find(store, args.name)
    gs = _global_settings()
    backend = _backend(record, store)
    now = time.time()
    busy = running_elsewhere(record, now)
    if busy:
        return _refuse_busy(args, record, busy)
    abandoned = _run_of(record)
    if abandoned is not None and not abandoned.finished and record.run_id:
        print(f"bootgroups {operation}: taking over the unfinished {abandoned.operation} of {run_owner(record.run_id)} "
              f"(no progress for {now - record.updated:.1f} s)", file=sys.stderr)
    run_key = f"{CLI_PREFIX}{operation}:{now:.6f}@{holder.current()}"
    seen_run, seen_updated = record.run_id, record.updated
    forced = record.forced
    record.forced = forced or bool(getattr(args, "forced", False))
    begin_run(record, operation, run_key, backend, gs, now)
    record.forced = forced
    # Taken only if nobody wrote the group since it was judged free: one compare-and-set in the store.
    if not store.save_group_if(record, run_id=seen_run, updated=seen_updated):
        stored = store.get_group(record.group_id)
        who = "a delete" if stored is None else run_owner(stored.run_id) if stored.run_id else "another writer"
        return _refuse_busy(args, stored or record, who)
    timeline = _Timeline(args.json)
    if not args.json:
        print(_header(record, engine.load_run(record.run)), flush=True)
    interrupted = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt  # the second Ctrl-C: at once (the last round stays stored)
        interrupted.set()
        print(f"bootgroups {operation}: stopping after the current round (Ctrl-C again to quit at once)",
              file=sys.stderr, flush=True)

    clock = _InterruptibleClock(interrupted)
    budget = Budget(clock=clock, step_started=clock.now(), step_seconds=math.inf, deadline=math.inf, memory=Memory(),
                    invocation_left=lambda: 0.0 if interrupted.is_set() else math.inf)
    watched = cast(GroupStore, _WatchedStore(store, record.group_id, run_key, timeline.show))
    driven = _InterruptibleBackend(backend, interrupted, operation)
    try:
        with on_signals(on_signal):
            outcome = converge(record, run_key, watched, driven, budget)
        if not isinstance(outcome, engine.BootRun):  # it stopped short: only an interruption does
            run = engine.load_run(record.run)
            interrupt_run(run, time.time())
            record.run = engine.dump_run(run)
            outcome = converge(record, run_key, watched, driven, budget)  # finished: the bookkeeping only
    except _TakenOver as exc:
        message = (f"{exc} took boot group {record.name!r} over while this {operation} ran; it goes on there "
                   f"(follow it with crhelper bootgroups events {record.name} --follow)")
        if args.json:
            _error(args, message)
        else:
            print(f"bootgroups {operation}: {message}", file=sys.stderr)
        return EXIT_FAILED
    assert isinstance(outcome, engine.BootRun)
    return _report(args, record, outcome, interrupted.is_set())


def _refuse_busy(args: argparse.Namespace, record: GroupRecord, who: str) -> int:
    message = (f"boot group {record.name!r}: another process is running an operation on it ({who}); "
               f"follow it with crhelper bootgroups events {record.name} --follow")
    if args.json:
        print(json.dumps(error_document("busy", message, f"crhelper bootgroups events {record.name} --follow"), indent=2))
    else:
        print(f"bootgroups {args.operation}: {message}", file=sys.stderr)
    return EXIT_FAILED


def _report(args: argparse.Namespace, record: GroupRecord, run: engine.BootRun, interrupted: bool) -> int:
    interrupted = interrupted and not run.ok  # a Ctrl-C during the last round of a start that went well
    code = EXIT_INTERRUPTED if interrupted else EXIT_OK if run.ok else EXIT_FAILED
    if args.json:
        print(json.dumps({"Name": record.name, "GroupId": record.group_id, "Interrupted": interrupted,
                          **run_document(record, run)}, indent=2))
        return code
    if interrupted:
        print(f"interrupted: boot group {record.name!r} is left as is (halt without rollback); what was done is stored; "
              f"go on with: crhelper bootgroups {run.operation} {record.name}", file=sys.stderr)
    elif not run.ok:
        failures = list(run.stop_failures)
        if run.start is not None and run.start.halted:
            failures.append(run.start.halted)
        print(f"bootgroups {run.operation}: boot group {record.name!r} failed ({len(failures)} failure(s)):", file=sys.stderr)
        for failure in failures or [run.reason or "failed"]:
            print(f"  - {failure}", file=sys.stderr)
    return code
