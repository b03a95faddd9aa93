"""The local node backend on its own: working directories, real commands under the supervisor, the
metadata as environment, file and a metad-style HTTP endpoint, timeouts, $APPCTL services."""

from __future__ import annotations

import json
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from crhelper.local.supervisor import SupervisorClient
from handlers.appcenter import metadata
from handlers.appcenter.backend_local import LocalNodeBackend
from handlers.appcenter.backends import MISSING, RUNNING, STOPPED, BackendError, CommandResult, NodeSpec

pytestmark = pytest.mark.slow

CLUSTER = "cl-test"


@pytest.fixture
def backend(supervisor: SupervisorClient) -> LocalNodeBackend:
    return LocalNodeBackend.from_env()


def specs(*names: str) -> list[NodeSpec]:
    return [NodeSpec(node_id=name, role=name.rpartition("-")[0], sid=int(name.rpartition("-")[2]), cpu=1, memory=1024,
                     placement={"owner": "stack/App"}) for name in names]


def results(backend: LocalNodeBackend, invocation: str, timeout: float = 10) -> dict[str, CommandResult]:
    deadline = time.monotonic() + timeout
    while True:
        found = backend.command_results(CLUSTER, invocation)
        if all(result is not None for result in found.values()):
            return {node: result for node, result in found.items() if result is not None}
        assert time.monotonic() < deadline, found
        time.sleep(0.02)


def tree_for(node: str, ip: str) -> dict[str, Any]:
    host = {"node_id": node, "instance_id": f"i-{node}", "ip": ip, "sid": node[-1], "role": "web"}
    return metadata.self_tree(host, [host], {"cluster_id": CLUSTER, "endpoints": {"http": {"port": 80}}},
                              {"greeting": "hi", "web.console.enabled": True})


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=3) as answer:
        return answer.read().decode()


def wait_for_http(url: str, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return get(url)
        except (urllib.error.URLError, ConnectionError):
            assert time.monotonic() < deadline, url
            time.sleep(0.05)


def test_nodes_are_created_once_and_see_their_metadata_as_environment_file_and_endpoint(
        backend: LocalNodeBackend) -> None:
    made = backend.create_nodes(CLUSTER, specs("web-1", "web-2"))
    again = backend.create_nodes(CLUSTER, specs("web-1", "web-2"))
    assert made == again and {info.state for info in made.values()} == {RUNNING}
    assert made["web-1"].ip != made["web-2"].ip and made["web-1"].ip.startswith("127.")
    assert backend.describe_nodes(CLUSTER, ["web-1", "nope"])["nope"].state == MISSING
    ip = made["web-1"].ip
    backend.publish_metadata(CLUSTER, "web-1", tree_for("web-1", ip))
    assert wait_for_http(f"http://{ip}:{metadata.METAD_PORT}/self/host/ip") == ip
    assert json.loads(get(f"http://{ip}:{metadata.METAD_PORT}/self/env")) == {"greeting": "hi",
                                                                                "web.console.enabled": "true"}
    with pytest.raises(urllib.error.HTTPError) as missing:
        get(f"http://{ip}:{metadata.METAD_PORT}/self/host/nothing")
    assert missing.value.code == 404
    backend.publish_metadata(CLUSTER, "web-1", {**tree_for("web-1", ip), "env": {"greeting": "bye"}})
    assert get(f"http://{ip}:{metadata.METAD_PORT}/self/env/greeting") == "bye"  # a new tree is seen at once

    script = 'echo "$APPCENTER_HOST_IP $APPCENTER_ENV_GREETING $EXTRA $(basename "$PWD")"; grep -c bye "$METADATA_FILE"'
    backend.start_command(CLUSTER, "look", ["web-1"], script, timeout=10, env={"EXTRA": "x"})
    assert results(backend, "look") == {"web-1": CommandResult(0, f"{ip} bye x web-1\n1")}


def test_commands_report_exit_codes_run_once_per_invocation_and_are_stopped_past_their_timeout(
        backend: LocalNodeBackend, tmp_path: Path) -> None:
    backend.create_nodes(CLUSTER, specs("web-1", "web-2"))
    counter = tmp_path / "count"
    command = f'echo ran >> {counter}; echo "bad thing on $APPCENTER_NODE_DIR" >&2; exit 3'
    backend.start_command(CLUSTER, "once", ["web-1", "web-2"], command, timeout=10, env={})
    backend.start_command(CLUSTER, "once", ["web-1", "web-2"], command, timeout=10, env={})  # a restarted executor
    done = results(backend, "once")
    assert {node: result.exit_code for node, result in done.items()} == {"web-1": 3, "web-2": 3}
    assert "bad thing on" in done["web-1"].output and done["web-1"].output.endswith("web-1")
    assert counter.read_text() == "ran\nran\n"
    assert backend.command_results(CLUSTER, "once") == done  # kept after the supervisor forgot the processes

    started = time.monotonic()
    backend.start_command(CLUSTER, "slow", ["web-1"], "echo begun; sleep 30", timeout=0.3, env={})
    (late,) = results(backend, "slow").values()
    assert late.timed_out and not late.ok and late.output.strip() == "begun" and time.monotonic() - started < 5
    with pytest.raises(BackendError):
        backend.command_results(CLUSTER, "never")


def port_open(ip: str, port: int) -> bool:
    try:
        socket.create_connection((ip, port), timeout=0.2).close()
        return True
    except OSError:
        return False


def test_appctl_keeps_a_service_running_until_the_node_stops_and_delete_releases_everything(
        backend: LocalNodeBackend, supervisor: SupervisorClient) -> None:
    (info,) = backend.create_nodes(CLUSTER, specs("web-1")).values()
    serve = (f'$APPCTL start http --ready {info.ip}:18081 -- {sys.executable} -m http.server --bind {info.ip} 18081')
    backend.start_command(CLUSTER, "start", ["web-1"], serve, timeout=20, env={})
    assert results(backend, "start")["web-1"].exit_code == 0
    assert port_open(info.ip, 18081)  # the command returned; its service runs on
    backend.stop_nodes(CLUSTER, ["web-1"])
    assert not port_open(info.ip, 18081) and backend.describe_nodes(CLUSTER, ["web-1"])["web-1"].state == STOPPED
    backend.start_nodes(CLUSTER, ["web-1"])  # its metad again, not its services (their start command does that)
    backend.publish_metadata(CLUSTER, "web-1", tree_for("web-1", info.ip))
    assert wait_for_http(f"http://{info.ip}:{metadata.METAD_PORT}/self/host/instance_id") == "i-web-1"
    assert not port_open(info.ip, 18081)
    folder = backend.node_dir(CLUSTER, "web-1")
    backend.delete_nodes(CLUSTER, ["web-1"])
    backend.delete_nodes(CLUSTER, ["web-1"])
    assert not folder.exists() and [s.name for s in supervisor.list() if s.running] == []
    assert backend.describe_nodes(CLUSTER, ["web-1"])["web-1"].state == MISSING
