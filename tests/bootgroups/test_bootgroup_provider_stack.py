"""The boot-group provider through `crhelper stack` as a user runs it: templates/bootgroup-demo.yaml
on the local FC endpoint, real processes under the supervisor daemon, real TCP checks. Each test
has its own $CRHELPER_HOME (conftest) and its own 127.x.y.* addresses."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from crhelper.holder import process_alive
from crhelper.local.supervisor import SupervisorClient
from crhelper.testing import wait_until
from handlers.bootgroups import engine, events as ev
from handlers.bootgroups.state import GroupRecord, SqliteGroupStore, default_path

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "templates" / "bootgroup-demo.yaml"
TOKEN = "acs:fc:cn-hangzhou:123456789:services/crhelper-bootgroups/functions/provider"
FAST = {"CRHELPER_BOOTGROUP_POLL_INTERVAL": "0.1", "CRHELPER_SUPERVISOR_GRACE": "2", "CRHELPER_SUPERVISOR_LINGER": "1"}


def run_cli(*args: str, timeout: float = 90) -> Any:
    import subprocess

    return subprocess.run([sys.executable, "-m", "crhelper.cli.stack", *args], cwd=REPO, env={**os.environ, **FAST},
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def bindings(tmp_path: Path) -> Path:
    """The demo's bindings with the tests' fast poll interval (a bindings environment wins over ours)."""
    document = yaml.safe_load((TEMPLATE.parent / "bootgroup-demo.bindings.yaml").read_text())
    document["environment"] = {**document.get("environment", {}), **FAST}
    path = tmp_path / "bindings.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture
def prefix() -> str:
    return f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"


@pytest.fixture
def supervisor() -> Any:
    client = SupervisorClient()
    yield client
    client.stop_all(grace=0.5)


def stack(command: str, name: str, bindings: Path, *params: str, template: Path = TEMPLATE, extra: tuple[str, ...] = ()) -> Any:
    args = [command, str(template), "--stack", name, "--bindings", str(bindings), "--json"]
    for param in params:
        args += ["-p", param]
    done = run_cli(*args, *extra)
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise AssertionError(done.stdout[-3000:] + done.stderr[-3000:]) from None


def the_group() -> GroupRecord:
    (group,) = SqliteGroupStore(default_path()).list_groups()
    return group


def instance_times(supervisor: SupervisorClient) -> dict[str, list[dict[str, float]]]:
    """What each instance printed at each start: when it was spawned and when it listened."""
    times: dict[str, list[dict[str, float]]] = {}
    for status in supervisor.list():
        lines = Path(status.log_path).read_text().splitlines()
        times[status.owner.rpartition("/")[2]] = [json.loads(line) for line in lines if line.startswith("{")]
    return times


def timeline(group: GroupRecord) -> list[ev.TimelineEntry]:
    return engine.load_run(group.run).timeline


def test_the_demo_starts_tiers_in_order_stops_them_in_reverse_reboots_and_deletes_without_leftovers(
        bindings: Path, prefix: str, supervisor: SupervisorClient) -> None:
    created = stack("create", "tiers", bindings, f"HostPrefix={prefix}", "ListenDelay=0.3", "AppListenDelay=0.3")
    assert created["Stack"]["status"] == "CREATE_COMPLETE", created
    outputs = {o["key"]: o["value"] for o in created["Stack"]["outputs"]}
    group = the_group()
    db, app, web = (member.key for member in group.members)
    assert outputs["Tiers"] == [{"Order": 0, "Members": [db]}, {"Order": 1, "Members": [app]},
                                            {"Order": 2, "Members": [web]}]
    assert outputs["Readiness"] == {db: "Ready", app: "Ready", web: "Ready"}
    started = instance_times(supervisor)
    assert started["Db"][0]["listening"] < started["App"][0]["spawned"]  # the instances' own clocks
    assert started["App"][0]["listening"] < started["Web"][0]["spawned"]
    assert [e.type for e in SqliteGroupStore(default_path()).events(group.group_id)][-1] == ev.START

    stopped = stack("update", "tiers", bindings, f"HostPrefix={prefix}", "ListenDelay=0.3", "AppListenDelay=0.3",
                    "DesiredState=Stopped")
    assert stopped["Stack"]["status"] == "UPDATE_COMPLETE", stopped
    assert all(not status.running for status in supervisor.list())
    order = [entry.subject for entry in timeline(the_group()) if entry.kind == ev.VM_STOPPED]
    assert order == [web, app, db]  # descending tiers

    running = stack("update", "tiers", bindings, f"HostPrefix={prefix}", "ListenDelay=0.3", "AppListenDelay=0.3")
    assert running["Stack"]["status"] == "UPDATE_COMPLETE", running
    pids = {status.name: status.pid for status in supervisor.list()}
    assert all(status.running for status in supervisor.list())
    rebooted = stack("update", "tiers", bindings, f"HostPrefix={prefix}", "ListenDelay=0.3", "AppListenDelay=0.3",
                     "RebootToken=2")
    assert rebooted["Stack"]["status"] == "UPDATE_COMPLETE", rebooted
    after = {status.name: status.pid for status in supervisor.list()}
    assert all(after[name] != pid for name, pid in pids.items())  # every instance was restarted
    kinds = [(entry.kind, entry.subject) for entry in timeline(the_group()) if entry.kind in (ev.VM_STOPPED, ev.VM_START)]
    assert kinds == [(ev.VM_STOPPED, web), (ev.VM_STOPPED, app), (ev.VM_STOPPED, db),
                     (ev.VM_START, db), (ev.VM_START, app), (ev.VM_START, web)]
    assert the_group().last_result["Operation"] == engine.REBOOT

    deleted = run_cli("delete", "--stack", "tiers", "--json")
    assert json.loads(deleted.stdout)["Stack"]["status"] == "DELETE_COMPLETE", deleted.stdout + deleted.stderr
    assert supervisor.list() == []
    wait_until(lambda: not any(process_alive(pid) for pid in after.values() if pid), timeout=5, what="instances gone")
    assert SqliteGroupStore(default_path()).list_groups() == []
    assert SqliteGroupStore(default_path()).list_instances() == []


def test_a_port_that_never_opens_fails_the_create_naming_member_rule_attempt_and_what_was_seen(
        bindings: Path, prefix: str, supervisor: SupervisorClient) -> None:
    created = stack("create", "broken", bindings, f"HostPrefix={prefix}", "ListenDelay=0", "AppListenDelay=0",
                    "WebCheckPort=18081", "MaxRetryAttempts=2", "ReadinessTimeout=1", extra=("--disable-rollback",))
    assert created["Stack"]["status"] == "CREATE_FAILED", created
    (failure,) = [e for e in created["Events"] if e["logical_id"] == "Tiers" and e["status"] == "CREATE_FAILED"]
    reason = failure["reason"]
    assert "tier 3 of 3 (order 2)" in reason and "PortCheck 'web-port' (port 18081)" in reason, reason
    assert "(attempt 3/3)" in reason and f"connection refused by {prefix}.3:18081" in reason, reason
    assert "no rollback" in reason
    states = {status.owner.rpartition("/")[2]: status.running for status in supervisor.list()}
    assert states == {"Db": True, "App": True, "Web": True}  # halt without rollback: nothing stopped
    assert SqliteGroupStore(default_path()).list_groups() == []  # the failed Create left no group (nor claims)


def test_an_instance_in_a_boot_group_of_another_stack_is_refused_naming_that_group(
        bindings: Path, prefix: str, supervisor: SupervisorClient, tmp_path: Path) -> None:
    first = stack("create", "first", bindings, f"HostPrefix={prefix}", "ListenDelay=0", "AppListenDelay=0")
    assert first["Stack"]["status"] == "CREATE_COMPLETE", first
    db = the_group().members[0].key
    second = tmp_path / "second.json"
    second.write_text(json.dumps({"ROSTemplateFormatVersion": "2015-09-01", "Resources": {"Other": {
        "Type": "Custom::InstanceBootGroup", "Properties": {"ServiceToken": TOKEN, "Timeout": 30, "Parameters": {
            "Name": "other", "Members": [{"Instance": db, "BootOrder": 0}]}}}}}))
    refused = stack("create", "second", bindings, template=second, extra=("--disable-rollback",))
    assert refused["Stack"]["status"] == "CREATE_FAILED", refused
    (failure,) = [e for e in refused["Events"] if e["logical_id"] == "Other" and e["status"] == "CREATE_FAILED"]
    assert (f"ResourceProperties.Members[0].Instance: instance {db!r} is already a member of boot group 'first-tiers'"
            in failure["reason"]), failure["reason"]
    assert [g.name for g in SqliteGroupStore(default_path()).list_groups()] == ["first-tiers"]


def test_a_start_killed_mid_tier_1_resumes_without_restarting_tier_0_or_counting_attempts_twice(
        bindings: Path, prefix: str, supervisor: SupervisorClient) -> None:
    created = stack("create", "crash", bindings, f"HostPrefix={prefix}", "ListenDelay=0.1", "AppListenDelay=2.5",
                    "MaxRetryAttempts=60",  # one evaluation per 0.1 s poll: 21 would give up before 2.5 s
                    extra=("--kill-provider", "--kill-provider-after", "1.5"))
    assert created["Stack"]["status"] == "CREATE_COMPLETE", created
    group = the_group()
    assert group.resumed == 1  # the first worker was killed inside the start; the retry took the run over
    db, app, _web = (member.key for member in group.members)
    entries = timeline(group)
    assert [e.subject for e in entries if e.kind == ev.VM_START] == [db, app, _web]  # each started once
    status = {s.owner.rpartition("/")[2]: s for s in supervisor.list()}
    assert status["Db"].restarts == 0 and len(instance_times(supervisor)["Db"]) == 1
    tier = engine.load_run(group.run).start.tiers[1]  # type: ignore[union-attr]
    (app_run,) = tier.vms
    checks = [e for e in entries if e.kind == ev.CHECK and e.subject == app]
    assert app_run.ready and app_run.evaluations == len(checks) == app_run.retries + 1
    labels = [e.message.rpartition("(attempt ")[2].partition("/")[0] for e in checks]
    assert labels == [str(k) for k in range(1, len(checks) + 1)]  # 1/N, 2/N, ... with no repeat
