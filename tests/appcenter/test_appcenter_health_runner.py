"""The health checks' pieces (spec §3.4, review D5): the monitor command runs within 5 s, not the
check's timeout_sec; the local shell runner kills the whole process group at a timeout (what the
command started too) and leaves a server an action started in the background running; the ecs
round's due and grouping rules."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from handlers.appcenter.health import MONITOR_TIMEOUT, NodeChecks, NodeHealth, run_round, run_shell
from handlers.appcenter.health_ecs import due_nodes, group_commands, invocation_name


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its reaper counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_the_monitor_runs_within_5_s_whatever_the_checks_timeout() -> None:
    checks = NodeChecks(node_id="web-1", role="web", interval=60.0, check_cmd="check", timeout=30.0,
                        monitor_cmd="measure", monitor_items=("requests",))
    seen: list[tuple[str, float]] = []

    def runner(node: NodeChecks, cmd: str, timeout: float) -> tuple[int, str]:
        seen.append((cmd, timeout))
        return 0, '{"requests": 3, "other": 1}' if cmd == "measure" else ""

    health: dict[str, NodeHealth] = {}
    assert run_round([checks], health, runner, now=0.0, due={})
    assert sorted(seen) == [("check", 30.0), ("measure", MONITOR_TIMEOUT)] and MONITOR_TIMEOUT == 5.0
    assert health["web-1"].monitor == {"requests": 3}


@pytest.mark.slow
def test_a_timed_out_check_takes_its_grandchildren_with_it_and_a_finished_one_leaves_its_daemon(tmp_path: Path) -> None:
    began = time.monotonic()
    code, output = run_shell("sh -c 'sleep 30 & echo $! > grandchild.pid; wait' & echo started; wait",
                             0.5, cwd=str(tmp_path), env=dict(os.environ))
    assert code == -9 and output.startswith("started") and "timed out after 0.5 s" in output
    assert time.monotonic() - began < 3.0
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    deadline = time.monotonic() + 2.0
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(grandchild)

    # An action_cmd restarting a server in the background returns at once, and the server lives on.
    began = time.monotonic()
    code, output = run_shell("sleep 30 & echo $! > daemon.pid; echo restarted", 5.0, cwd=str(tmp_path),
                             env=dict(os.environ))
    daemon = int((tmp_path / "daemon.pid").read_text())
    try:
        assert (code, output.strip()) == (0, "restarted") and time.monotonic() - began < 2.0
        assert _alive(daemon)
    finally:
        os.kill(daemon, signal.SIGKILL)


def test_a_node_is_due_within_a_tenth_of_its_interval_and_due_nodes_share_one_command() -> None:
    plan = [NodeChecks(node_id=f"web-{n}", role="web", interval=60.0, check_cmd="check", action_cmd="restart",
                       monitor_cmd="measure") for n in (1, 2, 3)]
    plan.append(NodeChecks(node_id="db-1", role="db", interval=60.0, check_cmd="probe", timeout=5.0))
    due = {"web-1": 1000.0, "web-2": 1005.9, "web-3": 1006.1, "db-1": 0.0}
    assert [c.node_id for c in due_nodes(plan, due, now=1000.0)] == ["web-1", "web-2", "db-1"]
    checks = group_commands(plan, "check")
    assert [(c.cmd, c.timeout, c.node_ids) for c in checks] == [
        ("check", 10.0, ["web-1", "web-2", "web-3"]), ("probe", 5.0, ["db-1"])]
    assert [(c.cmd, c.timeout) for c in group_commands(plan, "monitor")] == [("measure", MONITOR_TIMEOUT)]
    assert [c.node_ids for c in group_commands(plan, "action")] == [["web-1", "web-2", "web-3"]]
    name = invocation_name("check", checks[0], "ab12cd34")
    assert name.startswith("health-check-") and name.endswith("-ab12cd34") and len(name) <= 64
