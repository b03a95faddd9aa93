"""Health checks and monitor values of a Custom::AppCluster on `ecs`, through the deployed provider's
time trigger (slow): the cluster is created through the stack emulator against the local ECS
endpoint (the official SDK, real commands in the instances' sandboxes, a real HTTP server per node);
its server process is SIGKILLed, and FC time-trigger events sent to the provider's fc_handler run
`check_cmd` through Cloud Assistant until the node turns Unhealthy after the threshold, its
`action_cmd` restarts the server, and `crhelper appcenter status` shows it; a stopped cluster is
left alone."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest

from appcenter_resource_support import Stack
from crhelper.cli.main import main as crhelper_main
from crhelper.local.ecs_server import LocalECS
from handlers.appcenter.backend_ecs import TAG_CLUSTER, TAG_NODE
from test_appcenter_ecs_stack import pointed_at

pytestmark = pytest.mark.slow

TIMER_EVENT = {"triggerTime": "2026-12-01T22:00:00Z", "triggerName": "appcenter-health", "payload": ""}
CHECK = ("python3 -c 'import os, urllib.request; urllib.request.urlopen(\"http://%s:%s/\" % "
         "(os.environ[\"APPCENTER_HOST_IP\"], os.environ[\"APPCENTER_ENV_PORT\"]), timeout=2)'")
#: Starts the node's server in the background (its requests logged to server.log) and waits until it
#: answers; the action_cmd too.
START = ('cd "$APPCENTER_NODE_DIR" && nohup python3 -m http.server "$APPCENTER_ENV_PORT" --bind "$APPCENTER_HOST_IP" '
         '> server.log 2>&1 & echo $! > "$APPCENTER_NODE_DIR/server.pid"; '
         f'for _ in $(seq 100); do {CHECK} 2>/dev/null && exit 0; sleep 0.05; done; exit 1')
MEASURE = 'printf \'{"requests": %s, "ignored": 1}\\n\' "$(grep -c "GET /" "$APPCENTER_NODE_DIR/server.log")"'


def health_package(folder: Path) -> Path:
    """One role `web` of two nodes: a server each, checked by an HTTP GET, restarted by action_cmd."""
    folder.mkdir()
    config = {"type": "array", "properties": [
        {"key": "cluster", "type": "array", "properties": [
            {"key": "name", "type": "string", "default": "hc", "required": "no"},
            {"key": "description", "type": "string", "default": "", "required": "no"},
            {"key": "vxnet", "type": "string", "default": "vxnet-local", "required": "yes"},
            {"key": "web", "type": "array", "properties": [
                {"key": "cpu", "type": "integer", "default": 1, "range": [1, 2], "required": "yes"},
                {"key": "memory", "type": "integer", "default": 1024, "range": [1024, 2048], "required": "yes"},
                {"key": "count", "type": "integer", "default": 2, "min": 1, "max": 3, "required": "yes"}]}]},
        {"key": "env", "type": "array", "properties": [
            {"key": "port", "type": "integer", "default": 8080, "min": 1, "max": 65535, "required": "yes"}]}]}
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    services = {"start": {"order": 0, "cmd": START, "timeout": 30},
                "stop": {"order": 0, "cmd": 'kill "$(cat "$APPCENTER_NODE_DIR/server.pid")" || true', "timeout": 30}}
    health = {"enable": True, "interval_sec": 60, "timeout_sec": 3, "action_timeout_sec": 10,
              "healthy_threshold": 2, "unhealthy_threshold": 2, "check_cmd": CHECK, "action_cmd": START}
    monitor = {"enable": True, "cmd": MEASURE, "items": {"requests": {"unit": "times", "statistics_type": "latest"}}}
    node = (f'{{"role": "web", "container": {{"type": "kvm", "image": "img-hc"}}, "count": {{{{cluster.web.count}}}}, '
            f'"cpu": {{{{cluster.web.cpu}}}}, "memory": {{{{cluster.web.memory}}}}, '
            f'"services": {json.dumps(services)}, "health_check": {json.dumps(health)}, '
            f'"monitor": {json.dumps(monitor)}}}')
    (folder / "cluster.json.mustache").write_text(
        '{"name": {{cluster.name}}, "description": {{cluster.description}}, "vxnet": {{cluster.vxnet}},\n'
        f' "nodes": [{node}],\n'
        ' "env": {"port": {{env.port}}}}\n')
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture()
def ecs(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalECS]:
    """The local endpoint, the provider's ecs backend pointed at it, every health interval 50 ms."""
    yield from pointed_at(monkeypatch, CRHELPER_APPCENTER_HEALTH_INTERVAL="0.05")


def timer(remaining_ms: int = 20_000) -> dict[str, Any]:
    """One FC time-trigger invocation of the deployed provider; its summary."""
    from handlers.appcenter.provider import provider

    context = SimpleNamespace(request_id=f"timer-{time.monotonic_ns()}", function=SimpleNamespace(name="provider", timeout=60),
                              get_remaining_time_in_millis=lambda: remaining_ms)
    summary = json.loads(provider.fc_handler(json.dumps(TIMER_EVENT).encode(), context))
    assert "Error" not in json.dumps(summary), summary
    return summary


def status(cluster_id: str, capsys: pytest.CaptureFixture[str], *, as_json: bool = True) -> Any:
    capsys.readouterr()
    assert crhelper_main(["appcenter", "status", cluster_id] + (["--json"] if as_json else [])) == 0
    out = capsys.readouterr().out
    return json.loads(out) if as_json else out


def answers(host: str, port: int, within: float = 10.0) -> bool:
    """Whether a server accepts connections at host:port within `within` seconds (it may still be binding)."""
    deadline = time.monotonic() + within
    while True:
        try:
            with socket.create_connection((host, port), timeout=2):
                return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def health_of(doc: dict[str, Any], node_id: str) -> dict[str, Any]:
    return next(node["Health"] for node in doc["Nodes"] if node["NodeId"] == node_id)


def test_a_dead_server_on_ecs_turns_unhealthy_after_the_threshold_and_its_action_cmd_restarts_it(
        ecs: LocalECS, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    props = {"Package": str(health_package(tmp_path / "hc")), "Version": "1.0", "Backend": "ecs",
             "Inputs": {"env.port": port}}
    stack = Stack(tmp_path)
    try:
        assert stack.create(props) == "CREATE_COMPLETE", stack.reasons()
        instances = {dict(i.tags)[TAG_NODE]: i for i in ecs.fleet.instances()}
        assert sorted(instances) == ["web-1", "web-2"]
        cluster_id = dict(instances["web-1"].tags)[TAG_CLUSTER]
        assert status(cluster_id, capsys)["Nodes"][0]["Health"] is None  # nothing checked before the trigger

        for _ in range(2):  # healthy_threshold 2
            summary = timer()
            assert summary["Timers"]["appcenter-ecs-health"]["Rounds"][cluster_id] == {
                "Checked": 2, "Monitored": 2, "Actions": 0}, summary
            time.sleep(0.06)  # past the 50 ms interval: every node is due again
        doc = status(cluster_id, capsys)
        for node_id in instances:
            health = health_of(doc, node_id)
            assert (health["status"], health["checks"], health["actions"]) == ("Healthy", 2, 0), health
            assert health["monitor"]["requests"] >= 1 and "ignored" not in health["monitor"]
        # one RunCommand for both nodes' check (and one for their monitor) per round
        checks = [inv for inv in ecs.fleet.invocations.values() if inv.name.startswith("health-check-")]
        assert len(checks) == 2 and all(len(inv.targets) == 2 for inv in checks)

        sandbox = ecs.sandbox(instances["web-1"].instance_id) / "appcenter"
        first_pid = int((sandbox / "server.pid").read_text())
        os.kill(first_pid, signal.SIGKILL)
        timer()
        time.sleep(0.06)
        health = health_of(status(cluster_id, capsys), "web-1")
        assert (health["status"], health["failures"], health["actions"]) == ("Healthy", 1, 0), health
        summary = timer()                   # the second failure in a row: Unhealthy, and the action runs
        assert summary["Timers"]["appcenter-ecs-health"]["Rounds"][cluster_id]["Actions"] == 1, summary
        doc = status(cluster_id, capsys)
        health = health_of(doc, "web-1")
        assert (health["status"], health["actions"], health["last_action_exit"]) == ("Unhealthy", 1, 0), health
        assert health["last_exit"] not in (0, None)
        assert health_of(doc, "web-2")["status"] == "Healthy"
        restarted = int((sandbox / "server.pid").read_text())
        assert restarted != first_pid
        assert answers(instances["web-1"].private_ip, port)  # the action_cmd's server
        text = status(cluster_id, capsys, as_json=False)
        line = next(line for line in text.splitlines() if line.strip().startswith("web-1"))
        assert "Unhealthy (checks 4, actions 1, last exit 1)" in line and "requests=" in line, text
        assert "health checked" in text
        assert {(r.signature_method, r.status) for r in ecs.requests} == {("ACS3-HMAC-SHA256", 200)}

        # a stopped cluster is not checked (nor restarted); what the checks saw stays readable
        assert stack.update({**props, "DesiredState": "Stopped"}) == "UPDATE_COMPLETE", stack.reasons()
        time.sleep(0.06)
        assert timer()["Timers"]["appcenter-ecs-health"] == {"Clusters": 0}
        doc = status(cluster_id, capsys)
        assert health_of(doc, "web-1")["checks"] == 4 and "paused" in (doc["Note"] or "")

        assert stack.delete() == "DELETE_COMPLETE", stack.reasons()
        assert timer()["Timers"]["appcenter-ecs-health"] == {"Clusters": 0}
    finally:
        stack.close()

