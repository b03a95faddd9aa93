"""The instances run (slow: real processes): UserData listens on the instance's own 127.0.0.N
after Start and is gone, with its children, after Stop and Delete; Cloud Assistant runs commands
for real (cloud-apis.md "Test cases worth writing" 6)."""

from __future__ import annotations

import base64
import socket
import time
from typing import Any

import pytest
from ecs_support import REGION, pid_alive, sdk

from crhelper.local.ecs_server import LocalECS

pytestmark = pytest.mark.slow

#: A shell that starts a child listener (so a group kill, not just the leader's, is needed).
LISTENER = """\
python3 -c "
import os, socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((os.environ['HOST'], 18080)); s.listen()
open('listener.pid', 'w').write(str(os.getpid()))
while True: s.accept()[0].close()
" &
echo "$ECS_INSTANCE_ID $ECS_PRIVATE_IP" > identity
wait
"""


@pytest.fixture(scope="module")
def m() -> Any:
    return sdk("alibabacloud_ecs20140526.models")


def _accepts(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), 0.2).close()
        return True
    except OSError:
        return False


def _wait(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _pid(path: Any) -> int:
    """The pid the listener writes just after it starts listening: wait for it, not only for the port."""
    assert _wait(lambda: path.is_file() and path.read_text().strip().isdigit()), f"{path} holds no pid"
    return int(path.read_text())


def test_user_data_runs_on_its_own_address_and_dies_with_stop(ecs: LocalECS, m: Any) -> None:
    client = ecs.client()
    first, second = (ecs.add_instance(name, user_data=LISTENER) for name in ("a", "b"))
    client.start_instances(m.StartInstancesRequest(region_id=REGION, instance_id=[first, second]))
    hosts = [ecs.instance(i).private_ip for i in (first, second)]
    assert all(_wait(lambda h=h: _accepts(h, 18080)) for h in hosts), "both listen on one port, each its own IP"
    sandbox = ecs.sandbox(first)
    assert (sandbox / "identity").read_text().split() == [first, hosts[0]]
    leader = ecs.boot_pid(first)
    child = _pid(sandbox / "listener.pid")
    assert leader is not None and pid_alive(child)
    client.stop_instances(m.StopInstancesRequest(region_id=REGION, instance_id=[first]))
    assert ecs.wait_for_status(first, "Stopped", 5)
    assert _wait(lambda: not pid_alive(child) and not pid_alive(leader)), "no orphan after Stop"
    assert not _accepts(hosts[0], 18080) and _accepts(hosts[1], 18080)
    second_child = _pid(ecs.sandbox(second) / "listener.pid")
    client.delete_instances(m.DeleteInstancesRequest(region_id=REGION, instance_id=[second], force=True))
    assert _wait(lambda: not pid_alive(second_child)), "no orphan after Delete"


def test_stopping_the_endpoint_kills_every_instance(m: Any) -> None:
    with LocalECS(kill_grace=0.2) as ecs:
        instance_id = ecs.add_instance("a", status="Running", user_data=LISTENER)
        pid_file = ecs.sandbox(instance_id) / "listener.pid"
        child = _pid(pid_file)
    assert _wait(lambda: not pid_alive(child))


# ---------------------------------------------------------------------- Cloud Assistant
def _run(client: Any, m: Any, ids: list[str], content: str, **kw: Any) -> str:
    return client.run_command(m.RunCommandRequest(region_id=REGION, type="RunShellScript", instance_id=ids,
                                                  command_content=content, **kw)).body.invoke_id


def _results(client: Any, m: Any, invoke_id: str, **kw: Any) -> dict[str, Any]:
    body = client.describe_invocation_results(m.DescribeInvocationResultsRequest(
        region_id=REGION, invoke_id=invoke_id, **kw)).body
    return {row.instance_id: row for row in body.invocation.invocation_results.invocation_result}


def test_agent_status_and_refusal(ecs: LocalECS, m: Any) -> None:
    errors = sdk("alibabacloud_tea_openapi.exceptions")
    running, without = ecs.add_instance("a", status="Running"), ecs.add_instance("b", status="Running")
    ecs.set_cloud_assistant(without, False)
    client = ecs.client()
    body = client.describe_cloud_assistant_status(m.DescribeCloudAssistantStatusRequest(
        region_id=REGION, instance_id=[running, without])).body
    rows = body.instance_cloud_assistant_status_set.instance_cloud_assistant_status
    assert [(r.instance_id, r.cloud_assistant_status) for r in rows] == [(running, "true"), (without, "false")]
    with pytest.raises(errors.ClientException) as caught:
        _run(client, m, [without], "true")
    assert caught.value.code == "InvalidInstance.UnInstallCloudAssistant"


def test_commands_run_with_their_encoding_parameters_and_statuses(ecs: LocalECS, m: Any) -> None:
    ok, failing, stopped = (ecs.add_instance(n, status="Running") for n in ("ok", "fail", "off"))
    with ecs.fleet.lock:
        ecs.fleet.stop(stopped, forced=True)
    (ecs.sandbox(ok) / "work").mkdir()
    client = ecs.client()
    text = "a b + * ~ é ü"
    content = base64.b64encode(f"printf '%s|%s' '{text}' \"{{{{name}}}}\"; pwd".encode()).decode()
    invoke = _run(client, m, [ok], content, content_encoding="Base64", enable_parameter=True,
                  parameters={"name": "x y"}, working_dir="work")
    mixed = _run(client, m, [ok, failing],
                 'case "{{ACS::InstanceId}}" in ' + ok + ") exit 0;; *) echo bad >&2; exit 3;; esac",
                 enable_parameter=True)
    aborted = _run(client, m, [stopped], "true")
    assert ecs.wait_commands(10)
    row = _results(client, m, invoke)[ok]
    assert (row.invocation_status, row.exit_code, row.error_code) == ("Success", 0, "")
    output = base64.b64decode(row.output).decode()
    assert output.startswith(f"{text}|x y") and output.rstrip().endswith("/work")
    assert _results(client, m, invoke, content_encoding="PlainText")[ok].output == output
    rows = _results(client, m, mixed)
    assert (rows[failing].invocation_status, rows[failing].exit_code, rows[failing].error_code) == \
        ("Failed", 3, "ExitCodeNonzero")
    assert base64.b64decode(rows[failing].output) == b"bad\n"
    listed = client.describe_invocations(m.DescribeInvocationsRequest(region_id=REGION, invoke_id=mixed,
                                                                      include_output=True)).body
    assert listed.invocations.invocation[0].invocation_status == "PartialFailed"
    assert _results(client, m, aborted)[stopped].invocation_status == "Aborted"


def test_timeout_kills_and_big_output_is_dropped(ecs: LocalECS, m: Any) -> None:
    instance_id = ecs.add_instance("a", status="Running")
    client = ecs.client()
    slow = _run(client, m, [instance_id], "echo started; sleep 30", timeout=1)
    big = _run(client, m, [instance_id], "head -c 30000 /dev/zero | tr '\\0' x")
    assert ecs.wait_commands(10)
    row = _results(client, m, slow)[instance_id]
    assert (row.invocation_status, row.error_code) == ("Timeout", "ExecutionTimeout")
    assert base64.b64decode(row.output) == b"started\n"
    row = _results(client, m, big)[instance_id]
    assert (row.invocation_status, row.dropped, len(base64.b64decode(row.output))) == ("Success", 30000 - 24576, 24576)
