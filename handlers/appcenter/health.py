"""Health checks and monitor collection of a running cluster (spec §3.4), and the local agent that runs them.

`health_plan` turns the rendered cluster into what to run per node: the role's `health_check`
(its own fields over the cluster's: `check_cmd` every `interval_sec` within `timeout_sec`, Unhealthy
after `unhealthy_threshold` failures in a row, Healthy after `healthy_threshold` successes, then
`action_cmd` within `action_timeout_sec` once a node turns Unhealthy) and the role's `monitor`
command (its output, a JSON object, kept for the monitor's items). `NodeHealth.observe` is the
threshold logic, pure. The intervals are the package's unless `CRHELPER_APPCENTER_HEALTH_INTERVAL`
replaces them (tests: a fraction of a second; the spec's minimum is 60 s).

Locally the checks run in one agent process per cluster under the supervisor daemon that owns the
nodes (`health_agent`), each command with the node's environment; it rewrites `health.json` in the
cluster's folder after every round (`write_status`), which `crhelper appcenter status` reads. On
ECS the deployed provider's time trigger does the same through Cloud Assistant (`health_ecs`),
keeping the same document in the health book beside the cluster store (`health_store`). The
monitor command runs within 5 s (MONITOR_TIMEOUT), the check within its `timeout_sec`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:  # the agent and $APPCTL import this module: no pydantic at import
    from .cluster import Cluster

UNKNOWN, HEALTHY, UNHEALTHY = "Unknown", "Healthy", "Unhealthy"
PLAN_FILE, STATUS_FILE = "health-plan.json", "health.json"
OUTPUT_BYTES = 2048
#: The monitor command must finish within 5 s (spec §3.4), whatever the check's timeout_sec.
MONITOR_TIMEOUT = 5.0


@dataclass(frozen=True)
class NodeChecks:
    """What the agent runs on one node."""

    node_id: str
    role: str
    interval: float
    check_cmd: str | None = None
    action_cmd: str | None = None
    timeout: float = 10.0
    action_timeout: float = 30.0
    healthy_threshold: int = 3
    unhealthy_threshold: int = 3
    monitor_cmd: str | None = None
    monitor_items: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "NodeChecks":
        values = dict(doc)
        values["monitor_items"] = tuple(values.get("monitor_items") or ())
        return cls(**values)


def health_plan(cluster: "Cluster", nodes: Sequence[Mapping[str, Any]], interval: float | None = None) -> list[NodeChecks]:
    """The checks of every node whose role has an enabled health_check or monitor; `interval`
    replaces the package's intervals (None: the package's)."""
    from .cluster import REPLICA_SUFFIX

    found = []
    for node in nodes:
        role = str(node["role"])
        base = role[: -len(REPLICA_SUFFIX)] if role.endswith(REPLICA_SUFFIX) else role
        check = cluster.health_check_for(base) if base in cluster.roles else None
        monitor = cluster.monitor_for(base) if base in cluster.roles else None
        checking = check is not None and check.enable and check.check_cmd
        monitoring = monitor is not None and monitor.enable and monitor.cmd
        if not checking and not monitoring:
            continue
        every = interval if interval is not None else float(check.interval_sec if check is not None else 60)
        found.append(NodeChecks(
            node_id=str(node["node_id"]), role=role, interval=every,
            check_cmd=check.check_cmd if checking and check is not None else None,
            action_cmd=check.action_cmd if checking and check is not None else None,
            timeout=float(check.timeout_sec) if check is not None else 10.0,
            action_timeout=float(check.action_timeout_sec) if check is not None else 30.0,
            healthy_threshold=check.healthy_threshold if check is not None else 3,
            unhealthy_threshold=check.unhealthy_threshold if check is not None else 3,
            monitor_cmd=monitor.cmd if monitoring and monitor is not None else None,
            monitor_items=tuple(monitor.items) if monitoring and monitor is not None else ()))
    return found


@dataclass
class NodeHealth:
    """One node's health as the checks saw it (kept in health.json)."""

    node_id: str
    status: str = UNKNOWN
    successes: int = 0
    failures: int = 0
    checks: int = 0
    actions: int = 0
    last_check: float | None = None
    last_exit: int | None = None
    last_output: str = ""
    last_action_exit: int | None = None
    monitor: dict[str, Any] = field(default_factory=dict)
    monitored_at: float | None = None

    def observe(self, ok: bool, checks: NodeChecks) -> bool:
        """Count one check; True when the node just turned Unhealthy (its action_cmd is due)."""
        self.checks += 1
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= checks.healthy_threshold:
                self.status = HEALTHY
            return False
        self.failures, self.successes = self.failures + 1, 0
        if self.failures >= checks.unhealthy_threshold and self.status != UNHEALTHY:
            self.status = UNHEALTHY
            return True
        return False


def monitor_values(output: str, items: Sequence[str]) -> dict[str, Any]:
    """The monitor command's JSON object (its last line), kept for the monitor's items; {} if it is not one."""
    lines = output.strip().splitlines()
    try:
        found = json.loads(lines[-1]) if lines else None
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {key: value for key, value in found.items() if not items or key in items}


# --- the local agent ------------------------------------------------------------------------------

Runner = Callable[[NodeChecks, str, float], "tuple[int, str]"]


def run_round(plan: Sequence[NodeChecks], health: dict[str, NodeHealth], run: Runner, now: float,
              due: dict[str, float]) -> bool:
    """Run what is due (`due`: node -> next time), in parallel across nodes; True if anything ran."""
    ready = [checks for checks in plan if due.get(checks.node_id, 0.0) <= now]
    if not ready:
        return False

    def one(checks: NodeChecks) -> None:
        state = health.setdefault(checks.node_id, NodeHealth(checks.node_id))
        if checks.check_cmd:
            code, output = run(checks, checks.check_cmd, checks.timeout)
            state.last_check, state.last_exit, state.last_output = time.time(), code, output[-OUTPUT_BYTES:]
            if state.observe(code == 0, checks) and checks.action_cmd:
                state.actions += 1
                state.last_action_exit, _ = run(checks, checks.action_cmd, checks.action_timeout)
        if checks.monitor_cmd:
            code, output = run(checks, checks.monitor_cmd, MONITOR_TIMEOUT)
            if code == 0:
                state.monitor, state.monitored_at = monitor_values(output, checks.monitor_items), time.time()
        due[checks.node_id] = now + checks.interval

    with ThreadPoolExecutor(max_workers=min(16, len(ready))) as pool:
        list(pool.map(one, ready))
    return True


def run_shell(cmd: str, timeout: float, *, cwd: str, env: Mapping[str, str]) -> tuple[int, str]:
    """(exit code, output tail) of `cmd` under /bin/sh in a session of its own. At the timeout the
    whole process group goes (SIGKILL): what the command started too, not only `sh`. The output goes
    to a file, not a pipe, so a server the command leaves running in the background (an action_cmd
    restarting one) neither holds the check up nor is killed once `sh` has exited."""
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(["/bin/sh", "-c", cmd], cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            return -1, str(exc)
        try:
            code = proc.wait(timeout)
            note = ""
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            code, note = -9, f"\ntimed out after {timeout:g} s"
        out.seek(0)
        return code, (out.read().decode("utf-8", "replace") + note)[-OUTPUT_BYTES:]


def shell_runner(node_env: Callable[[str], Mapping[str, str]], cwd_of: Callable[[str], str]) -> Runner:
    """A Runner of real shell commands in the node's folder, with its environment (`run_shell`)."""

    def run(checks: NodeChecks, cmd: str, timeout: float) -> tuple[int, str]:
        return run_shell(cmd, timeout, cwd=cwd_of(checks.node_id), env={**os.environ, **node_env(checks.node_id)})

    return run


def write_status(folder: Path, health: Mapping[str, NodeHealth]) -> None:
    partial = folder / (STATUS_FILE + ".partial")
    partial.write_text(json.dumps({"updated": time.time(), "nodes": {node: asdict(state) for node, state in health.items()}},
                                  sort_keys=True))
    partial.replace(folder / STATUS_FILE)


def read_status(folder: Path) -> dict[str, Any] | None:
    try:
        found = json.loads((folder / STATUS_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return found if isinstance(found, dict) else None
