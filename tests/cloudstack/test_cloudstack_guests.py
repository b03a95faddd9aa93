"""A VM's guest command is a real process group while the VM is Running: it listens on the VM's
own 127.0.0.N after a start, is gone (children too) after a stop, comes back after a reboot, and
the endpoint's stop leaves nothing behind. The server runs standalone too, and imports no `cs`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable

import pytest

from crhelper.local.cloudstack_server import LocalCloudStack
from crhelper.local.supervisor import group_alive, port_open, wait_port

GUEST = Path(__file__).with_name("cloudstack_guest.py")
PORT = 15432
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def guest_vm(cloud: LocalCloudStack, tmp_path: Path, name: str = "db-1"):  # type: ignore[no-untyped-def]
    marker = tmp_path / f"{name}.txt"
    return cloud.add_vm(name, guest=[sys.executable, str(GUEST), str(PORT), str(marker)]), marker


def test_the_guest_listens_while_running_and_is_gone_after_stop(
        cs: ModuleType, cloud: LocalCloudStack, tmp_path: Path) -> None:
    vm, marker = guest_vm(cloud, tmp_path)
    client = cloud.client(fetch_result=True, poll_interval=0.01)
    assert not port_open(vm.ip, PORT)
    client.startVirtualMachine(id=vm.id)
    assert wait_port(vm.ip, PORT, timeout=5)
    vm_id, host, child = marker.read_text().split()
    assert (vm_id, host) == (vm.id, vm.ip)
    pgid = cloud.guest_pid(vm.id)
    assert pgid is not None and os.getpgid(int(child)) == pgid
    client.stopVirtualMachine(id=vm.id)
    assert not port_open(vm.ip, PORT) and not group_alive(pgid) and cloud.guest_pid(vm.id) is None


def test_a_reboot_restarts_the_guest(cs: ModuleType, cloud: LocalCloudStack, tmp_path: Path) -> None:
    vm, _ = guest_vm(cloud, tmp_path)
    client = cloud.client(fetch_result=True, poll_interval=0.01)
    client.startVirtualMachine(id=vm.id)
    assert wait_port(vm.ip, PORT, timeout=5)
    before = cloud.guest_pid(vm.id)
    assert client.rebootVirtualMachine(id=vm.id)["virtualmachine"]["state"] == "Running"
    assert wait_port(vm.ip, PORT, timeout=5)
    after = cloud.guest_pid(vm.id)
    assert before is not None and after not in (None, before) and not group_alive(before)


def test_stopping_the_endpoint_kills_every_guest(make_cloud: Callable[..., LocalCloudStack], tmp_path: Path) -> None:
    cloud = make_cloud()
    vms = [cloud.add_vm(f"web-{n}", state="Running", guest=[sys.executable, str(GUEST), str(PORT), str(tmp_path / f"{n}")])
           for n in range(2)]
    assert all(wait_port(vm.ip, PORT, timeout=5) for vm in vms)
    groups = [cloud.guest_pid(vm.id) for vm in vms]
    cloud.stop()
    assert not any(group_alive(pgid) for pgid in groups if pgid is not None) and None not in groups


def test_importing_the_server_imports_no_sdk() -> None:
    code = "import sys, crhelper.local.cloudstack_server; print(sorted({'cs', 'requests'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "[]", out.stderr


def test_the_standalone_server_answers_cs_and_stops_on_sigterm(cs: ModuleType) -> None:
    env = {**os.environ, "CLOUDSTACK_KEY": "local-key", "CLOUDSTACK_SECRET": "local-secret",
           "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "crhelper.local.cloudstack_server", "--vm", "web-1@web"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        vm_line, endpoint_line = proc.stdout.readline(), proc.stdout.readline()
        endpoint = endpoint_line.split()[-1]
        client = cs.CloudStack(endpoint=endpoint, key="local-key", secret="local-secret")
        [vm] = client.listVirtualMachines(groupid=client.listInstanceGroups(name="web")["instancegroup"][0]["id"])[
            "virtualmachine"]
        assert vm_line.startswith(f"VM web-1 id {vm['id']} ip 127.0.0.2") and vm["state"] == "Stopped"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
