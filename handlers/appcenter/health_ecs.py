"""Health checks and monitor collection of `ecs` clusters, on the deployed provider's time trigger
(spec §3.4; issue 13): `ecs_health_round` is the provider's timer hook (`Provider.on_timer`).

A deployed provider has no agent between two invocations, so each time-trigger invocation runs one
round for every live ecs cluster whose checks are watched (`EcsNodeBackend.watch` keeps the plan in
the health book beside the cluster store, `health_store`):

* a node is checked only when it is due (`interval_sec`, or CRHELPER_APPCENTER_HEALTH_INTERVAL
  through the plan; a node due within a tenth of its interval counts as due, so a trigger every
  minute checks a 60 s interval every minute, not every other);
* the due nodes of one role share one Cloud Assistant RunCommand per command (at most 100
  instances a call), `check_cmd` within `timeout_sec` and `monitor.cmd` within 5 s, both after the
  node's metadata environment (`backend_ecs.command_script`);
* `health.NodeHealth.observe` applies `healthy_threshold`/`unhealthy_threshold` (the local agent's
  logic and document shape), and a node that just turned Unhealthy gets its role's `action_cmd`
  (within `action_timeout_sec`; an action still running at the invocation's deadline is read by
  the next round);
* the health is written back to the book, which `crhelper appcenter status` and
  `EcsNodeBackend.health` read.

A cluster in a lifecycle operation (its run unfinished), stopped, or not Active is left alone; two
overlapping invocations do not check one cluster twice (a claim in the book until the first's
deadline). One cluster's failure is a log line and an entry of the summary, never the others'.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence

from crhelper.logs import get_logger

from .backends import RUNNING, CommandResult
from .health import MONITOR_TIMEOUT, OUTPUT_BYTES, NodeChecks, NodeHealth, monitor_values
from .health_store import HealthBook, health_book
from .state import ACTIVE, ClusterRecord

log = get_logger("appcenter.health")

#: A node due within this fraction of its interval is checked now (the trigger's own jitter).
DUE_SLACK = 0.1
#: Clusters one round checks side by side.
MAX_PARALLEL_CLUSTERS = 8
#: Seconds past a command's own Timeout that its results are waited for (Cloud Assistant's report).
RESULT_GRACE = 2.0
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclasses.dataclass
class _Command:
    """One RunCommand of a round: a command on the due nodes that share it."""

    kind: str  # check | monitor | action
    cmd: str
    timeout: float
    node_ids: list[str]
    name: str = ""


def is_watched(record: ClusterRecord) -> bool:
    """A live ecs cluster whose nodes are meant to run: no operation in progress, not stopped."""
    run = record.run or {}
    return (record.backend == "ecs" and record.status == ACTIVE and record.desired_state != "Stopped"
            and (not run or bool(run.get("finished"))))


def due_nodes(plan: Sequence[NodeChecks], due: Mapping[str, float], now: float) -> list[NodeChecks]:
    """The nodes whose next check is due by `now` (within DUE_SLACK of their interval)."""
    return [checks for checks in plan if float(due.get(checks.node_id, 0.0)) <= now + checks.interval * DUE_SLACK]


def group_commands(ready: Sequence[NodeChecks], kind: str) -> list[_Command]:
    """One command per distinct (command, timeout) of the ready nodes, in plan order."""
    found: dict[tuple[str, float], _Command] = {}
    for checks in ready:
        cmd, timeout = {"check": (checks.check_cmd, checks.timeout), "monitor": (checks.monitor_cmd, MONITOR_TIMEOUT),
                        "action": (checks.action_cmd, checks.action_timeout)}[kind]
        if cmd:
            found.setdefault((cmd, timeout), _Command(kind, cmd, timeout, [])).node_ids.append(checks.node_id)
    return list(found.values())


def invocation_name(kind: str, command: _Command, round_id: str) -> str:
    """A Cloud Assistant invocation name (1-64 of letters, digits, `._-`), new for every round."""
    digest = hashlib.sha256(f"{command.cmd}\0{command.timeout}".encode()).hexdigest()[:8]
    return _UNSAFE.sub("-", f"health-{kind}-{digest}-{round_id}")[:64]


class ClusterRound:
    """One round of one cluster's checks against the ecs backend, within `deadline` (monotonic)."""

    def __init__(self, backend: Any, book: HealthBook, cluster_id: str, deadline: float, *,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.backend, self.book, self.cluster_id, self.deadline = backend, book, cluster_id, deadline
        self._clock, self._monotonic, self._sleep = clock, monotonic, sleep
        self.round_id = secrets.token_hex(4)
        self.report: dict[str, Any] = {"Checked": 0, "Monitored": 0, "Actions": 0}

    # --- the book --------------------------------------------------------------------------------
    def _claim(self) -> dict[str, Any] | None:
        """The document, claimed for this round; None when not watched or another round holds it."""
        now = self._clock()
        claimed: dict[str, Any] = {}

        def change(doc: dict[str, Any]) -> bool:
            if not doc.get("watching") or not doc.get("plan"):
                return False
            busy = doc.get("busy") or {}
            if busy.get("until", 0.0) > now and busy.get("round") != self.round_id:
                self.report["Skipped"] = "another invocation is checking this cluster"
                return False
            doc["busy"] = {"round": self.round_id, "until": now + max(0.0, self.deadline - self._monotonic()) + 1.0}
            claimed.update(doc)
            return True

        self.book.update(self.cluster_id, change)
        return claimed or None

    def _save(self, health: Mapping[str, NodeHealth], due: Mapping[str, float],
              pending: Mapping[str, Mapping[str, Any]], touched: bool) -> None:
        """Merge what this round saw into the document (the plan may have changed meanwhile)."""
        def change(doc: dict[str, Any]) -> None:
            wanted = {str(check["node_id"]) for check in doc.get("plan") or []}
            nodes = dict(doc.get("nodes") or {})
            nodes.update({node: dataclasses.asdict(state) for node, state in health.items()})
            doc["nodes"] = {node: value for node, value in nodes.items() if node in wanted}
            doc["due"] = {node: value for node, value in {**(doc.get("due") or {}), **due}.items() if node in wanted}
            doc["pending_actions"] = {node: value for node, value in pending.items() if node in wanted}
            if touched:
                doc["updated"] = self._clock()
            if (doc.get("busy") or {}).get("round") == self.round_id:
                doc.pop("busy", None)

        self.book.update(self.cluster_id, change)

    # --- Cloud Assistant -------------------------------------------------------------------------
    def _start(self, commands: Sequence[_Command]) -> list[_Command]:
        started = []
        for command in commands:
            command.name = invocation_name(command.kind, command, self.round_id)
            try:
                self.backend.start_command(self.cluster_id, command.name, command.node_ids, command.cmd,
                                           timeout=command.timeout, env={})
            except Exception as exc:  # noqa: BLE001 - the others still run; the nodes read as failed
                log.warning(f"cluster {self.cluster_id}: the {command.kind} command could not start",
                            extra={"fields": {"ClusterId": self.cluster_id, "error": f"{type(exc).__name__}: {exc}"}})
                continue
            started.append(command)
        return started

    def _results(self, commands: Sequence[_Command]) -> dict[str, dict[str, CommandResult]]:
        """{invocation: {node: result}} of what finished by each command's timeout (or the deadline)."""
        found: dict[str, dict[str, CommandResult]] = {command.name: {} for command in commands}
        began = self._monotonic()
        waiting = list(commands)
        interval = self.backend.ecs.poll.initial
        while waiting:
            for command in list(waiting):
                rows = self.backend.command_results(self.cluster_id, command.name)
                found[command.name].update({node: result for node, result in rows.items() if result is not None})
                gave_up = self._monotonic() >= min(self.deadline, began + command.timeout + RESULT_GRACE)
                if set(command.node_ids) <= set(found[command.name]) or gave_up:
                    waiting.remove(command)
            if waiting:
                self._sleep(max(0.0, min(interval, self.deadline - self._monotonic())))
                interval = min(self.backend.ecs.poll.cap, interval * 2)
        self.backend.forget_invocations(self.cluster_id, [command.name for command in commands])
        return found

    # --- the round -------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        doc = self._claim()
        if doc is None:
            return self.report
        touched = False
        health = {node: NodeHealth(**state) for node, state in (doc.get("nodes") or {}).items()}
        due: dict[str, float] = {}
        pending: dict[str, dict[str, Any]] = dict(doc.get("pending_actions") or {})
        try:
            plan = [NodeChecks.from_json(entry) for entry in doc["plan"]]
            touched = self._finish_pending_actions(health, pending)
            now = self._clock()
            ready = due_nodes(plan, doc.get("due") or {}, now)
            if ready:
                touched = True
                self._check(ready, health, due, pending, now)
        finally:
            self._save(health, due, pending, touched)
        return self.report

    def _check(self, ready: Sequence[NodeChecks], health: dict[str, NodeHealth], due: dict[str, float],
               pending: dict[str, dict[str, Any]], now: float) -> None:
        states = self.backend.describe_nodes(self.cluster_id, [checks.node_id for checks in ready])
        running = [checks for checks in ready if states[checks.node_id].state == RUNNING]
        for checks in ready:
            if checks in running:
                continue
            # Cloud Assistant runs nothing on an instance that is not Running: the check fails.
            state = health.setdefault(checks.node_id, NodeHealth(checks.node_id))
            if checks.check_cmd:
                state.last_check, state.last_exit = self._clock(), None
                state.last_output = f"instance {states[checks.node_id].instance_id or '-'} is " \
                                    f"{states[checks.node_id].state}: the check cannot run"
                state.observe(False, checks)
                self.report["Checked"] += 1
            due[checks.node_id] = now + checks.interval
        by_node = {checks.node_id: checks for checks in running}
        commands = self._start(group_commands(running, "check") + group_commands(running, "monitor"))
        results = self._results(commands)
        turned: list[NodeChecks] = []
        for command in commands:
            for node_id, result in results[command.name].items():
                checks, state = by_node[node_id], health.setdefault(node_id, NodeHealth(node_id))
                if command.kind == "monitor":
                    if result.ok:
                        state.monitor, state.monitored_at = monitor_values(result.output, checks.monitor_items), self._clock()
                        self.report["Monitored"] += 1
                    continue
                state.last_check, state.last_exit = self._clock(), -9 if result.timed_out else result.exit_code
                state.last_output = result.output[-OUTPUT_BYTES:]
                self.report["Checked"] += 1
                if state.observe(result.ok, checks) and checks.action_cmd:
                    turned.append(checks)
        for checks in running:
            seen = any(checks.node_id in results[command.name] for command in commands)
            if seen or not (checks.check_cmd or checks.monitor_cmd):
                due[checks.node_id] = now + checks.interval
        if turned:
            self._act(turned, health, pending)

    def _act(self, turned: Sequence[NodeChecks], health: dict[str, NodeHealth],
             pending: dict[str, dict[str, Any]]) -> None:
        """The action_cmd of each node that just turned Unhealthy (one RunCommand per command)."""
        commands = self._start(group_commands(turned, "action"))
        for command in commands:
            for node_id in command.node_ids:
                health[node_id].actions += 1
                health[node_id].last_action_exit = None
                pending[node_id] = {"invocation": command.name, "until": self._clock() + command.timeout + RESULT_GRACE}
        self.report["Actions"] += sum(len(command.node_ids) for command in commands)
        results = self._results(commands)
        for command in commands:
            for node_id, result in results[command.name].items():
                health[node_id].last_action_exit = -9 if result.timed_out else result.exit_code
                pending.pop(node_id, None)

    def _finish_pending_actions(self, health: dict[str, NodeHealth], pending: dict[str, dict[str, Any]]) -> bool:
        """Read the actions an earlier round left running at its deadline; True if any ended."""
        ended = False
        for node_id, entry in list(pending.items()):
            try:
                rows = self.backend.command_results(self.cluster_id, str(entry["invocation"]))
            except Exception:  # noqa: BLE001 - gone from Cloud Assistant's history: give up on it
                rows = {}
            result = rows.get(node_id)
            if result is not None and node_id in health:
                health[node_id].last_action_exit = -9 if result.timed_out else result.exit_code
            if result is not None or self._clock() > float(entry.get("until", 0.0)):
                pending.pop(node_id)
                ended = True
            self.backend.forget_invocations(self.cluster_id, [str(entry["invocation"])])
        return ended


def ecs_health_round(deadline: float, *, env: Mapping[str, str] | None = None, backend: Any = None) -> dict[str, Any]:
    """The timer hook: one round of every watched ecs cluster's checks, within `deadline`
    (time.monotonic()); what each did, for the invocation's summary."""
    from .state import STORE_ENV
    from .store_for import open_cluster_store

    env = os.environ if env is None else env
    store = open_cluster_store(env.get(STORE_ENV) or None, env)
    records = [record for record in store.list() if is_watched(record)]
    if not records:
        return {"Clusters": 0}
    book = health_book(store)
    if backend is None:
        from crhelper.invocation import fc_context

        from .backend_ecs import EcsNodeBackend

        backend = EcsNodeBackend.from_env(None, env, context=fc_context())

    def one(record: ClusterRecord) -> tuple[str, dict[str, Any]]:
        try:
            return record.cluster_id, ClusterRound(backend, book, record.cluster_id, deadline).run()
        except Exception as exc:  # noqa: BLE001 - one cluster's trouble is not the others'
            log.warning(f"cluster {record.cluster_id}: the health round failed", exc_info=True,
                        extra={"fields": {"ClusterId": record.cluster_id, "error": f"{type(exc).__name__}: {exc}"}})
            return record.cluster_id, {"Error": f"{type(exc).__name__}: {exc}"[:300]}

    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_CLUSTERS, len(records))) as pool:
        done = dict(pool.map(one, records))
    return {"Clusters": len(records), "Rounds": done}
