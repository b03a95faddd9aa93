"""What a RunCommand leaves running in the background (a daemon a service starts, even in a session
of its own) lives on after the command, as on a real instance, and ends with the instance: on a
stop, on a delete, on the endpoint's stop; a reboot ends it but not the new boot (slow: real
processes; requests signed by hand, no SDK)."""

from __future__ import annotations

import time
from typing import Any, Mapping

import pytest
from ecs_support import REGION, acs3_request, pid_alive, send

from crhelper.local.ecs_guest import instance_processes
from crhelper.local.ecs_server import LocalECS

pytestmark = pytest.mark.slow

DAEMONS = "nohup sleep 301 >/dev/null 2>&1 &\nsetsid sleep 302 >/dev/null 2>&1 < /dev/null &\necho started"


def call(ecs: LocalECS, action: str, params: Mapping[str, str]) -> Any:
    status, _, body = send(ecs.endpoint, acs3_request(ecs.endpoint, action, {"RegionId": REGION, **params},
                                                      ecs.access_key_id, ecs.access_key_secret))
    assert status == 200, body
    return body


def start_daemons(ecs: LocalECS, instance_id: str) -> list[int]:
    body = call(ecs, "RunCommand", {"Type": "RunShellScript", "InstanceId.1": instance_id, "CommandContent": DAEMONS})
    assert ecs.wait_commands(5)
    assert ecs.invocation(body["InvokeId"]).targets[instance_id].status == "Success"
    ends = time.monotonic() + 5.0
    while True:  # a daemon still between fork and exec (`setsid` forks again) is not listed yet
        pids = [pid for pid in instance_processes(instance_id) if pid != ecs.boot_pid(instance_id)]
        if len(pids) >= 2 or time.monotonic() > ends:
            break
        time.sleep(0.02)
    assert len(pids) == 2 and all(pid_alive(pid) for pid in pids), pids  # the command ended, they did not
    return pids


def gone(pids: list[int], limit: float = 3.0) -> bool:
    ends = time.monotonic() + limit
    while any(pid_alive(pid) for pid in pids):
        if time.monotonic() > ends:
            return False
        time.sleep(0.02)
    return True


def test_a_stop_and_a_delete_end_what_commands_left_running(ecs: LocalECS) -> None:
    stopped, deleted = ecs.add_instance("a", status="Running"), ecs.add_instance("b", status="Running")
    on_stopped, on_deleted = start_daemons(ecs, stopped), start_daemons(ecs, deleted)
    call(ecs, "StopInstances", {"InstanceId.1": stopped})
    assert gone(on_stopped) and all(pid_alive(pid) for pid in on_deleted)   # only that instance's
    assert ecs.wait_for_status(stopped, "Stopped")
    call(ecs, "DeleteInstances", {"InstanceId.1": deleted, "Force": "true"})
    assert gone(on_deleted)


def test_a_reboot_ends_them_but_not_the_new_boot(ecs: LocalECS) -> None:
    instance = ecs.add_instance("a", status="Running", user_data="exec sleep 303\n")
    old_boot = ecs.boot_pid(instance)
    daemons = start_daemons(ecs, instance)
    call(ecs, "RebootInstances", {"InstanceId.1": instance})
    assert gone(daemons)
    assert ecs.wait_for_status(instance, "Running")
    deadline = time.monotonic() + 2
    while ecs.boot_pid(instance) in (None, old_boot) and time.monotonic() < deadline:
        time.sleep(0.02)
    new_boot = ecs.boot_pid(instance)
    assert new_boot not in (None, old_boot)
    time.sleep(0.5)                                       # past the kill grace (0.3 s) of the reboot's halt
    assert pid_alive(new_boot)


def test_the_endpoints_stop_ends_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true")
    with LocalECS(kill_grace=0.3) as ecs:
        instance = ecs.add_instance("a", status="Running")
        daemons = start_daemons(ecs, instance)
    assert gone(daemons)
