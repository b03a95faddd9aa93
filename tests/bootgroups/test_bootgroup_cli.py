"""`crhelper bootgroups` as operators run it: the CLI as a subprocess on the test's own
$CRHELPER_HOME, on groups the real provider created (in process, against a real ResponseURL
server) over `Custom::LocalInstance` processes the supervisor daemon really starts and stops,
checked with real TCP connects. Each test has its own 127.x.y.* addresses."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from crhelper import Provider, holder
from crhelper.local.supervisor import SupervisorClient
from crhelper.testing import ResponseServer, make_event
from crhelper.cli.main import build_parser
from handlers.bootgroups import commands, engine, events as ev
from handlers.bootgroups.backend_local import LocalBackend
from handlers.bootgroups.readiness import NOT_REVERIFIED
from handlers.bootgroups.state import GroupRecord
from handlers.bootgroups.provider import build_provider, group_data, group_store

REPO = Path(__file__).resolve().parents[2]
GROUP, INSTANCE = "Custom::InstanceBootGroup", "Custom::LocalInstance"
FAST = {"CRHELPER_BOOTGROUP_POLL_INTERVAL": "0.1", "CRHELPER_SUPERVISOR_GRACE": "2", "CRHELPER_SUPERVISOR_LINGER": "1"}
#: A server that listens LISTEN_DELAY seconds after it is spawned.
SERVER = """\
import os, socket, time
time.sleep(float(os.environ.get("LISTEN_DELAY", "0")))
server = socket.create_server((os.environ["CRHELPER_INSTANCE_HOST"], int(os.environ["CRHELPER_INSTANCE_PORT"])))
while True:
    server.accept()[0].close()
"""
LINE = re.compile(r"^\s*[\d.]+s \[order (\d+)\] (\S+)\s+(?:(\S+): )?")


def bootgroups(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crhelper.cli.main", "bootgroups", *args], cwd=REPO,
                          env={**os.environ, **FAST, **env}, capture_output=True, text=True, timeout=timeout)


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "crhelper.cli.main", "bootgroups", *args], cwd=REPO,
                            env={**os.environ, **FAST}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_until(process: subprocess.Popen[str], found: Any) -> list[str]:
    """Lines of its stdout up to the first one `found` accepts."""
    assert process.stdout is not None
    seen: list[str] = []
    while not seen or not found(seen[-1]):
        line = process.stdout.readline()
        assert line, "it ended early: " + "".join(seen)
        seen.append(line)
    return seen


def timeline(stdout: str) -> list[tuple[int, str, str]]:
    """(order, kind, subject) of each timeline line printed."""
    return [(int(m[1]), m[2], m[3] or "") for m in map(LINE.match, stdout.splitlines()) if m]


def accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class Shop:
    """Three `Custom::LocalInstance`s (db, app, web) in a three-tier boot group named `shop`, made
    Stopped through the provider (so no process runs until the CLI starts it)."""

    def __init__(self, provider: Provider, server: ResponseServer, prefix: str, delays: dict[str, float]) -> None:
        self.provider, self.server, self.prefix = provider, server, prefix
        self.hosts = {name: f"{prefix}.{index}" for index, name in enumerate(("db", "app", "web"), start=1)}
        self.ports = {"db": 15432, "app": 18000, "web": 18080}
        self.ids = {name: self.instance(name, delays.get(name, 0.0)) for name in self.hosts}
        members = [{"Instance": self.ids[name], "BootOrder": order,
                    "ReadinessRules": [{"Type": "PortCheck", "Name": f"{name}-port", "Details": {"port": self.ports[name]}}]}
                   for order, name in enumerate(("db", "app", "web"))]
        body = self.send("Create", GROUP, {"Name": "shop", "DesiredState": "Stopped", "Members": members,
                                           "Settings": {"InitialDelaySeconds": 0, "ReadinessTimeoutSeconds": 1,
                                                        "MaxRetryAttempts": 40}}, logical_resource_id="Tiers")
        self.group_id = body["PhysicalResourceId"]

    def send(self, request_type: str, resource_type: str, props: dict[str, Any], **kw: Any) -> dict[str, Any]:
        event = self.server.attach(make_event(request_type, resource_type, props, stack_id="stack-cli", **kw))
        self.provider.handle(event)
        body = self.server.wait_for(event["RequestId"], timeout=10)
        assert body["Status"] == "SUCCESS", body.get("Reason")
        return body

    def instance(self, name: str, delay: float) -> str:
        props = {"Command": [sys.executable, "-c", SERVER], "Host": self.hosts[name], "Ports": [self.ports[name]],
                 "Environment": {"LISTEN_DELAY": str(delay)}}
        return str(self.send("Create", INSTANCE, props, logical_resource_id=name.title())["PhysicalResourceId"])

    def listening(self) -> dict[str, bool]:
        return {name: accepts(self.hosts[name], self.ports[name]) for name in self.hosts}


@pytest.fixture
def supervisor() -> Iterator[SupervisorClient]:
    client = SupervisorClient()
    yield client
    client.stop_all(grace=0.5)


@pytest.fixture
def make_shop(response_server: ResponseServer, supervisor: SupervisorClient, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for key, value in FAST.items():
        monkeypatch.setenv(key, value)
    provider = build_provider()
    prefix = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
    yield lambda **delays: Shop(provider, response_server, prefix, delays)
    provider.close()


@pytest.mark.slow
def test_list_show_and_events_read_the_providers_state_and_an_unknown_name_is_a_usage_error(
        make_shop: Any, tmp_path: Path) -> None:
    shop = make_shop()
    home = os.environ["CRHELPER_HOME"]
    listed = bootgroups("list", "--json", "--home", home, CRHELPER_HOME=str(tmp_path / "another-home"))
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)["Groups"]
    assert row["Name"] == "shop" and row["GroupId"] == shop.group_id and row["Backend"] == "local"
    assert row["State"] == "Stopped" and row["Members"] == 3 and row["Tiers"] == [0, 1, 2]
    assert (row["Stack"], row["Resource"]) == ("stack-cli", "Tiers") and row["Busy"] is None
    assert row["LastRun"]["Operation"] == "stop" and row["LastRun"]["Ok"] is True
    text = bootgroups("list")
    assert re.search(r"^shop\s+local\s+Stopped\s+3\s+0,1,2\s+stack-cli/Tiers\s+stop ok", text.stdout, re.M), text.stdout

    shown = bootgroups("show", "shop", "--json")
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert [tier["Order"] for tier in document["Tiers"]] == [0, 1, 2]
    db = document["Tiers"][0]["Members"][0]
    assert db["Member"] == shop.ids["db"] and db["Kind"] == "Instance" and db["Readiness"] == "NotReady"
    assert db["Instances"] == [{"Instance": shop.ids["db"], "State": "Stopped"}]
    assert db["Rules"] == ["PortCheck 'db-port' (port 15432)"]
    assert document["Settings"]["ReadinessTimeoutSeconds"] == 1 and document["Settings"]["PollIntervalSeconds"] == 0.1
    assert document["LastRun"]["Operation"] == "stop" and document["LastRun"]["Finished"] is True

    unknown = bootgroups("start", "nope")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert "no boot group is named 'nope' (known: 'shop'); see crhelper bootgroups list" in unknown.stderr
    assert "Traceback" not in unknown.stderr

    events = bootgroups("events", "shop", "--json")
    assert events.returncode == 0, events.stderr
    kinds = [event["type"] for event in json.loads(events.stdout)["Events"]]
    assert kinds[0] == ev.CREATE and kinds.count(ev.MEMBER_ADD) == 3 and kinds[-1] == ev.STOP


@pytest.mark.slow
def test_start_prints_the_timeline_in_ascending_tiers_the_instances_listen_and_stop_goes_in_descending_order(
        make_shop: Any, supervisor: SupervisorClient) -> None:
    shop = make_shop(app=0.3)
    db, app, web = (shop.ids[name] for name in ("db", "app", "web"))
    started = bootgroups("start", "shop")
    assert started.returncode == 0, started.stdout + started.stderr
    lines = timeline(started.stdout)
    assert [subject for _, kind, subject in lines if kind == ev.VM_START] == [db, app, web]
    assert [tier for tier, kind, _ in lines if kind == ev.TIER_READY] == [0, 1, 2]
    for order in (0, 1):  # each tier is ready before the next one starts
        ready = lines.index((order, ev.TIER_READY, ""))
        assert ready < next(i for i, line in enumerate(lines) if line[0] == order + 1)
    checks = [line for line in started.stdout.splitlines() if f"check         {app}:" in line]
    assert "attempt 1/41" in checks[0] and "Ready" in checks[-1], checks
    assert "done: 3 tier(s) ready" in started.stdout
    assert shop.listening() == {"db": True, "app": True, "web": True}

    record = group_store().get_group(shop.group_id)
    assert record is not None and record.last_result["Operation"] == "start" and record.last_result["Ok"]
    assert record.last_result["RunId"].startswith("cli:start:") and set(record.power_changes) == {db, app, web}
    assert {entry.status for entry in record.cache.values()} == {"Ready"}  # the cache was stored back
    assert group_store().events(shop.group_id)[-1].type == ev.START
    shown = json.loads(bootgroups("show", "shop", "--json").stdout)
    assert [m["Readiness"] for tier in shown["Tiers"] for m in tier["Members"]] == ["Ready", "Ready", "Ready"]
    assert shown["State"] == "Running"

    stopped = bootgroups("stop", "shop", "--json")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    document = json.loads(stopped.stdout)
    assert document["Operation"] == "stop" and document["Ok"] is True and document["Interrupted"] is False
    assert [e["subject"] for e in document["Timeline"] if e["kind"] == ev.VM_STOPPED] == [web, app, db]
    assert not any(status.running for status in supervisor.list())
    assert shop.listening() == {"db": False, "app": False, "web": False}
    assert json.loads(bootgroups("list", "--json").stdout)["Groups"][0]["State"] == "Stopped"


@pytest.mark.slow
def test_a_running_start_refuses_another_is_followed_and_ctrl_c_leaves_the_group_as_it_is(
        make_shop: Any, supervisor: SupervisorClient) -> None:
    shop = make_shop(app=60)  # app never listens in time: the start waits in tier 1
    app_check = f"check         {shop.ids['app']}:"
    first = spawn("start", "shop")
    follower = spawn("events", "shop", "--follow", "--json", "--count", "0", "--interval", "0.1")
    try:
        seen = read_until(first, lambda line: app_check in line)
        refused = bootgroups("stop", "shop")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "another process is running an operation on it (crhelper bootgroups start, pid " in refused.stderr
        assert "follow it with crhelper bootgroups events shop --follow" in refused.stderr
        followed = [json.loads(line) for line in read_until(follower, lambda line: app_check.split()[0] in line)]
        assert followed[0]["Operation"] == "start" and followed[0]["Timeline"]["kind"] == ev.TIER_START  # from its beginning
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=20)
        last = json.loads(read_until(follower, lambda line: ev.START in line)[-1])
        assert last["type"] == ev.START and last["ok"] is False and "interrupted by the operator" in last["message"]
        follower.send_signal(signal.SIGINT)
        assert follower.wait(timeout=10) == 0
    finally:
        for process in (first, follower):
            if process.poll() is None:
                process.kill()
                process.wait()
    assert first.returncode == 130, "".join(seen) + out + err
    assert "interrupted: boot group 'shop' is left as is (halt without rollback)" in err
    assert "halt" in out and "interrupted by the operator (Ctrl-C) during the start" in out
    states = {status.owner.rpartition("/")[2]: status.running for status in supervisor.list()}
    assert states == {"Db": True, "App": True}  # nothing stopped, web never started
    record = group_store().get_group(shop.group_id)
    assert record is not None and record.last_result["Ok"] is False
    assert "interrupted by the operator" in record.last_result["Reason"]
    run = engine.load_run(record.run)
    assert run.finished and [t.status for t in run.start.tiers] == ["ready", "halted", "skipped"]  # type: ignore[union-attr]
    last_event = group_store().events(shop.group_id)[-1]
    assert last_event.type == ev.START and not last_event.ok
    assert json.loads(bootgroups("list", "--json").stdout)["Groups"][0]["State"] == "StartHalted"


@pytest.mark.slow
def test_a_group_whose_stack_step_runs_now_is_refused(make_shop: Any) -> None:
    shop = make_shop()
    store = group_store()
    record = store.get_group(shop.group_id)
    assert record is not None
    run = engine.begin(engine.START, record.name, record.members, settings=record.settings, now=time.time())
    record.run, record.run_id = engine.dump_run(run), "REQ-42:update"  # what a stack step stores as it starts
    store.save_group(record)
    refused = bootgroups("start", "shop", "--json")
    assert refused.returncode == 1
    error = json.loads(refused.stdout)["error"]
    assert error["kind"] == "busy" and "the stack's update of request REQ-42, last progress" in error["problem"]
    assert error["next_step"] == "crhelper bootgroups events shop --follow"
    assert store.get_group(shop.group_id).run_id == "REQ-42:update"  # type: ignore[union-attr]


def test_every_sub_command_explains_itself_with_examples() -> None:
    parser = build_parser()
    commands_action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    group = commands_action.choices["bootgroups"]
    assert "examples:" in (group.epilog or "") and "crhelper bootgroups list" in (group.epilog or "")
    sub = next(a for a in group._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(sub.choices) == ["events", "list", "reboot", "show", "start", "stop"]
    for name, parser_ in sub.choices.items():
        assert f"crhelper bootgroups {name}" in (parser_.epilog or ""), name
        options = {option for action in parser_._actions for option in action.option_strings}
        assert {"--json", "--home"} <= options, name
        assert ("--forced" in options) == (name in ("stop", "reboot")), name
        assert all(action.help for action in parser_._actions), name


def test_an_unfinished_run_is_live_only_while_its_owner_makes_progress() -> None:
    record = GroupRecord(group_id="ibg-1", name="shop")
    assert commands.running_elsewhere(record, 1000.0) is None  # no run
    run = engine.begin(engine.START, "shop", [], settings=record.settings, now=990.0, poll_interval=2.0)
    record.run, record.run_id, record.updated = engine.dump_run(run), "REQ-1:update", 999.0
    assert commands.running_elsewhere(record, 1000.0) == "the stack's update of request REQ-1, last progress 1.0 s ago"
    quiet = run.poll_interval + run.settings.timeout + commands.LIVE_GRACE
    assert commands.running_elsewhere(record, 999.0 + quiet + 0.1) is None  # abandoned: may be taken over
    record.run_id = f"cli:start:1.0@{holder.current()}"  # this very process: alive
    assert commands.running_elsewhere(record, 1000.0) == f"crhelper bootgroups start, pid {os.getpid()}, last progress 1.0 s ago"
    gone = holder.current().rsplit("|", 2)[0] + "|999999999|1"
    record.run_id = f"cli:start:1.0@{gone}"  # a command whose process is gone
    assert commands.running_elsewhere(record, 1000.0) is None
    run.finished = True
    record.run, record.run_id = engine.dump_run(run), "REQ-1:update"
    assert commands.running_elsewhere(record, 1000.0) is None


@pytest.mark.slow
def test_show_and_data_read_an_outside_restart_as_unknown_and_a_stopped_instance_as_not_ready_without_writing(
        make_shop: Any, supervisor: SupervisorClient, capsys: pytest.CaptureFixture[str]) -> None:  # B6: §2.3, test 12
    from crhelper.cli.main import main  # `show` in process (each command's interpreter start costs ~1 s here)

    def show(*flags: str) -> str:
        capsys.readouterr()
        assert main(["bootgroups", "show", "shop", *flags]) == 0
        return capsys.readouterr().out

    shop = make_shop()
    db, app, web = (shop.ids[name] for name in ("db", "app", "web"))
    started = bootgroups("start", "shop")
    assert started.returncode == 0, started.stdout + started.stderr
    store = group_store()
    before = store.get_group(shop.group_id)
    assert before is not None and {entry.status for entry in before.cache.values()} == {"Ready"}

    def readiness(*flags: str) -> dict[str, tuple[str, str]]:
        return {m["Member"]: (m["Readiness"], m["Message"]) for tier in json.loads(show("--json", *flags))["Tiers"]
                for m in tier["Members"]}

    supervisor.restart(app)  # outside the boot group
    seen = readiness()
    assert seen[app][0] == "Unknown" and NOT_REVERIFIED in seen[app][1], seen
    assert seen[db][0] == seen[web][0] == "Ready"
    text = show()
    assert f"Instance {app}: Unknown (PortCheck 'app-port' (port 18000): {NOT_REVERIFIED})" in text, text
    data = group_data(store.get_group(shop.group_id), None, LocalBackend(store))  # type: ignore[arg-type]
    assert data["Readiness"] == {db: "Ready", app: "Unknown", web: "Ready"} and data["GroupId"] == shop.group_id

    supervisor.stop(web, grace=0.5)  # a stopped instance reads NotReady, or its cached result when asked
    assert readiness()[web] == ("NotReady", f"instance {web!r} is not Running")
    ignoring = readiness("--ignore-instance-state")
    assert ignoring[web][0] == "Ready" and ignoring[app][0] == "Unknown" and ignoring[db][0] == "Ready"
    after = store.get_group(shop.group_id)
    assert after is not None and after.updated == before.updated and after.cache == before.cache  # reads wrote nothing


@pytest.mark.slow
def test_stop_on_delete_stops_the_instances_or_leaves_them_running_and_a_disabled_rule_never_blocks(
        make_shop: Any, supervisor: SupervisorClient) -> None:
    shop = make_shop()
    shop.send("Delete", GROUP, {}, physical_resource_id=shop.group_id)  # Stopped, so nothing runs yet
    members = [{"Instance": shop.ids[name], "BootOrder": order, "ReadinessRules": [
        {"Type": "PortCheck", "Details": {"port": shop.ports[name]}},
        {"Type": "PortCheck", "Name": "never", "Enabled": False, "Details": {"port": 1}}]}  # nothing listens on port 1
        for order, name in enumerate(("db", "app", "web"))]
    props = {"Members": members, "Settings": {"InitialDelaySeconds": 0, "ReadinessTimeoutSeconds": 1, "MaxRetryAttempts": 40}}
    kept = shop.send("Create", GROUP, {"Name": "keep", "StopOnDelete": False, **props}, logical_resource_id="Keep")
    assert set(kept["Data"]["Readiness"].values()) == {"Ready"}
    checked = [entry.message for entry in engine.load_run(group_store().get_group(kept["PhysicalResourceId"]).run).timeline  # type: ignore[union-attr]
               if entry.kind == ev.CHECK]
    assert checked and not any(":1 " in message or "'never'" in message for message in checked), checked
    pids = {status.name: status.pid for status in supervisor.list()}
    assert len(pids) == 3 and shop.listening() == {"db": True, "app": True, "web": True}
    shop.send("Delete", GROUP, {}, physical_resource_id=kept["PhysicalResourceId"])
    assert {status.name: status.pid for status in supervisor.list() if status.running} == pids  # left running

    stopping = shop.send("Create", GROUP, {"Name": "stop", "StopOnDelete": True, **props}, logical_resource_id="Stop")
    assert {status.name: status.pid for status in supervisor.list()} == pids  # already Running: not restarted
    shop.send("Delete", GROUP, {}, physical_resource_id=stopping["PhysicalResourceId"])
    assert not any(status.running for status in supervisor.list())
    assert shop.listening() == {"db": False, "app": False, "web": False}
    assert [e.type for e in group_store().events(stopping["PhysicalResourceId"])][-2:] == [ev.STOP, ev.DELETE]
    assert group_store().list_groups() == []
