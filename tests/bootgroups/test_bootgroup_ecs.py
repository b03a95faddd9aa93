"""The boot-group engine on the `ecs` backend against the local ECS endpoint, through the real
`alibabacloud-ecs20140526` SDK (every request signed by the SDK and verified by the endpoint):
a two-tier start gated by real PortChecks on 127.0.0.N, a forced stop, a reboot, Cloud Assistant
liveness with and without the agent, a Tag group paged with NextToken, and injected
IncorrectInstanceStatus / throttling / 5xx faults retried. The settings tests need no SDK."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from bootgroup_fakes import members_of
from crhelper.cloud.credentials import Credentials
from crhelper.cloud.poll import PollSettings
from crhelper.errors import Failure
from crhelper.local.ecs_server import EcsTimings, LocalECS
from crhelper.operations import SYSTEM_CLOCK, Budget, Memory
from handlers.bootgroups import events as ev, probes
from handlers.bootgroups.backend_ecs import EcsBackend, EcsSettings
from handlers.bootgroups.backends import MISSING, RUNNING, STOPPED
from handlers.bootgroups.engine import BootRun, StepOutcome, advance, begin
from handlers.bootgroups.model import ERROR, GUEST_AGENT, NOT_READY, READY, GroupRef
from handlers.bootgroups.settings import GroupSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cloud"))
from cloud_support import sdk  # noqa: E402  (the optional-SDK rule: skipped locally, required on CI)

FAST = EcsTimings(pending=0.05, starting=0.05, stopping=0.05, forced_stopping=0.02)
QUICK_POLL = PollSettings(initial=0.02, cap=0.1)
#: Quick polls fail fast: enough retries for a listener that needs ~0.5 s after boot.
SETTINGS = GroupSettings(timeout=5.0, max_retries=40, initial_delay=0.0)


def listener(port: int, after: float = 0.0) -> str:
    """UserData: listen on the instance's own address and `port` after `after` seconds."""
    return (f"sleep {after}\nexec python3 -c \"import os, socket; s = socket.socket(); "
            f"s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((os.environ['HOST'], {port})); "
            f"s.listen(); [s.accept()[0].close() for _ in iter(int, 1)]\"\n")


def vm(name: str, order: int, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"Instance": name, "BootOrder": order, "ReadinessRules": list(rules)}


def port_rule(number: int) -> dict[str, Any]:
    return {"Type": "PortCheck", "Details": {"port": number}}


def accepts(host: str, port: int) -> bool:
    return probes.tcp_probe(host, port, 0.2).status == READY


@pytest.fixture(autouse=True)
def _no_metadata_service(monkeypatch: pytest.MonkeyPatch) -> None:
    """The credentials chain must never reach for 100.100.100.200 (cloud-apis.md §1.2)."""
    monkeypatch.setenv("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true")


@pytest.fixture()
def ecs() -> Iterator[LocalECS]:
    sdk("alibabacloud_ecs20140526.client")
    with LocalECS(timings=FAST, kill_grace=0.3) as server:
        yield server


def backend_for(ecs: LocalECS, *, secret: str | None = None, **settings: Any) -> EcsBackend:
    config = EcsSettings(**{"region": ecs.region, "endpoint": ecs.endpoint, "protocol": "http", "call_timeout": 5.0,
                            "poll": QUICK_POLL, **settings})
    return EcsBackend(config, Credentials(ecs.access_key_id, secret or ecs.access_key_secret))


def run_to_end(run: BootRun, backend: EcsBackend, limit: float = 20.0) -> StepOutcome:
    """Advance on the real clock until the run finishes (one step, like one long invocation)."""
    ends = time.monotonic() + limit
    while True:
        budget = Budget(clock=SYSTEM_CLOCK, step_started=SYSTEM_CLOCK.now(), step_seconds=limit, deadline=math.inf,
                        memory=Memory(), invocation_left=lambda: math.inf)
        outcome = advance(run, backend, budget)
        if outcome.finished:
            return outcome
        assert time.monotonic() < ends, "the run did not finish in time"
        time.sleep(outcome.delay)


def new_run(operation: str, members: Any, **kw: Any) -> BootRun:
    return begin(operation, "g", members, settings=kw.pop("settings", SETTINGS), now=SYSTEM_CLOCK.now(),
                 poll_interval=0.05, check_concurrency=4, **kw)


def calls(ecs: LocalECS, action: str) -> list[Any]:
    return [r for r in ecs.requests if r.action == action]


# --- against the local endpoint (real SDK, real processes) --------------------------------------------


@pytest.mark.slow
def test_two_tiers_start_in_order_stop_forced_in_reverse_and_reboot(ecs: LocalECS) -> None:
    db = ecs.add_instance("db", user_data=listener(15432, after=0.3))
    web = ecs.add_instance("web", user_data=listener(18080))
    members = members_of({"Backend": "ecs", "Members": [vm(db, 0, port_rule(15432)), vm(web, 1, port_rule(18080))]})
    backend = backend_for(ecs)

    run = new_run("start", members)
    outcome = run_to_end(run, backend)
    assert outcome.ok, outcome.reason
    assert ecs.status(db) == ecs.status(web) == RUNNING
    assert accepts(ecs.instance(db).private_ip, 15432) and accepts(ecs.instance(web).private_ip, 18080)
    db_ready = next(e.at for e in run.timeline if e.subject == db and e.kind == ev.CHECK and e.message.startswith(READY))
    web_start = next(e.at for e in run.timeline if e.subject == web and e.kind == ev.VM_START)
    assert db_ready <= web_start, "web is started only once db's PortCheck on 127.0.0.N:15432 answered"
    db_checks = [e.message for e in run.timeline if e.subject == db and e.kind == ev.CHECK]
    assert any("connection refused by" in m for m in db_checks[:-1]), db_checks
    cached = run.cache[f"{db}/PortCheck-VirtualMachine-{db}@{db}"]
    assert cached.status == READY and cached.message.startswith(f"TCP connect to {ecs.instance(db).private_ip}:15432 accepted")
    assert [r.parameters["InstanceId.1"] for r in calls(ecs, "StartInstances")] == [db, web]
    assert backend.power_changes[db] >= run.began
    # every request was signed by the SDK (ACS3) and verified by the endpoint
    assert ecs.requests and {(r.signature_method, r.status) for r in ecs.requests} == {("ACS3-HMAC-SHA256", 200)}

    ecs.clear_requests()
    outcome = run_to_end(new_run("stop", members, forced=True), backend)
    assert outcome.ok, outcome.reason
    stops = calls(ecs, "StopInstances")
    assert [(r.parameters["InstanceId.1"], r.parameters["ForceStop"]) for r in stops] == [(web, "True"), (db, "True")]
    assert ecs.status(db) == ecs.status(web) == STOPPED
    assert not accepts(ecs.instance(web).private_ip, 18080)

    outcome = run_to_end(new_run("start", members), backend)       # back up, then a reboot: stop + start
    assert outcome.ok, outcome.reason
    ecs.clear_requests()
    reboot = new_run("reboot", members)
    outcome = run_to_end(reboot, backend)
    assert outcome.ok, outcome.reason
    reads = ("DescribeInstances", "DescribeInstanceStatus")
    actions = [(r.action, r.parameters.get("InstanceId.1")) for r in ecs.requests if r.action not in reads]
    assert actions == [("StopInstances", web), ("StopInstances", db), ("StartInstances", db), ("StartInstances", web)]
    # the poll rounds read their tier's states with DescribeInstanceStatus (B7), 50 a page
    rounds = calls(ecs, "DescribeInstanceStatus")
    assert rounds and {(r.parameters["PageSize"], r.parameters["PageNumber"]) for r in rounds} == {("50", "1")}
    assert all(r.parameters["ForceStop"] == "False" for r in calls(ecs, "StopInstances"))
    assert accepts(ecs.instance(web).private_ip, 18080)


@pytest.mark.slow
def test_reboot_on_retry_waits_until_running_again(ecs: LocalECS) -> None:
    instance = ecs.add_instance("app", status=RUNNING)
    backend = backend_for(ecs)
    assert backend.vm_state(instance).state == RUNNING
    before = time.time()
    backend.reboot_vm(instance)
    assert ecs.status(instance) == RUNNING and len(calls(ecs, "RebootInstances")) == 1
    state = backend.vm_state(instance)
    assert state.running and state.last_power_change is not None and state.last_power_change >= before
    ecs.clear_requests()
    backend.stop_vm(instance, forced=False)
    assert ecs.wait_for_status(instance, STOPPED)
    with pytest.raises(Failure) as refused:
        backend.reboot_vm(instance)
    assert refused.value.reason == (f"ECS RebootInstances of instance {instance!r} refused: it is Stopped "
                                    "(it must be Running) [IncorrectInstanceStatus]")


@pytest.mark.slow
def test_guest_agent_liveness_ready_with_the_agent_and_error_without(ecs: LocalECS) -> None:
    with_agent = ecs.add_instance("agent", status=RUNNING)
    without = ecs.add_instance("bare", status=RUNNING, cloud_assistant=False)
    rule = {"Type": GUEST_AGENT}
    members = members_of({"Backend": "ecs", "Members": [vm(with_agent, 0, rule), vm(without, 1, rule)]})
    backend = backend_for(ecs)
    run = new_run("start", members, settings=GroupSettings(timeout=5.0, max_retries=0, initial_delay=0.0))
    outcome = run_to_end(run, backend)
    assert not outcome.ok and outcome.reason is not None
    assert outcome.reason.startswith(f"tier 2 of 2 (order 1): Instance {without!r} is not Ready after 1 attempt(s): "
                                     f"GuestAgentLiveness 'GuestAgentLiveness-VirtualMachine-{without}': Error: "
                                     f"the Cloud Assistant agent of instance {without!r} is not running "
                                     "(DescribeCloudAssistantStatus: CloudAssistantStatus 'false')")
    ok = run.cache[f"{with_agent}/GuestAgentLiveness-VirtualMachine-{with_agent}@{with_agent}"]
    assert ok.status == READY and ok.message.startswith(f"Cloud Assistant ran `echo ok` on instance {with_agent!r} (exit 0)")
    commands = calls(ecs, "RunCommand")
    assert [(r.parameters["InstanceId.1"], r.parameters["CommandContent"], r.parameters["Type"]) for r in commands] == [
        (with_agent, "echo ok", "RunShellScript")]
    assert calls(ecs, "DescribeInvocationResults"), "the result was polled until Success"

    # an attempt whose budget is spent does not run a command
    slow = backend.check(GUEST_AGENT, with_agent, {}, 0.0)
    assert slow.status == ERROR and "no time left" in slow.message


@pytest.mark.slow
def test_a_tag_group_is_expanded_across_pages_and_started(ecs: LocalECS) -> None:
    tagged = [ecs.add_instance(f"web{n}", tags={"tier": "web"}) for n in range(3)]
    other = ecs.add_instance("db", tags={"tier": "db"})
    members = members_of({"Backend": "ecs", "Members": [
        {"InstanceGroup": {"Name": "web", "Tag": {"Key": "tier", "Value": "web"}}, "BootOrder": 0}]},
        group_instances={"web": tagged})
    backend = backend_for(ecs, page_size=2)
    outcome = run_to_end(new_run("start", members), backend)
    assert outcome.ok, outcome.reason
    assert [ecs.status(i) for i in tagged] == [RUNNING] * 3 and ecs.status(other) == STOPPED
    pages = [r.parameters for r in calls(ecs, "DescribeInstances") if "Tag.1.Key" in r.parameters]
    assert [(p["Tag.1.Key"], p["Tag.1.Value"], p["MaxResults"], "NextToken" in p) for p in pages] == [
        ("tier", "web", "2", False), ("tier", "web", "2", True)]


@pytest.mark.slow
def test_incorrect_status_throttling_and_5xx_are_retried_other_errors_named() -> None:
    sdk("alibabacloud_ecs20140526.client")
    slow_boot = EcsTimings(pending=0.05, starting=0.3, stopping=0.05, forced_stopping=0.02)
    with LocalECS(timings=slow_boot, kill_grace=0.3) as ecs:
        instance = ecs.add_instance("app")
        backend = backend_for(ecs)
        ecs.inject_fault("StartInstances", status=403, code="IncorrectInstanceStatus",
                         message="The current status of the resource does not support this operation.")
        ecs.inject_fault("DescribeInstances", status=400, code="Throttling.User",
                         message="Request was denied due to user flow control.")
        ecs.inject_fault("StartInstances", status=503, code="ServiceUnavailable", retry_after=1)
        backend.start_vm(instance)
        assert [r.code for r in calls(ecs, "StartInstances")] == ["IncorrectInstanceStatus", "ServiceUnavailable", ""]
        assert [r.code for r in calls(ecs, "DescribeInstances")][:2] == ["Throttling.User", ""]
        assert ecs.status(instance) == "Starting"

        # a stop while Starting is refused by ECS, waited out, then sent again
        ecs.clear_requests()
        backend.stop_vm(instance, forced=True)
        codes = [r.code for r in calls(ecs, "StopInstances")]
        assert codes[0] == "IncorrectInstanceStatus" and codes[-1] == "" and len(codes) >= 2
        assert ecs.wait_for_status(instance, STOPPED)
        backend.stop_vm(instance, forced=False)        # Stopped already: a no-op, not an error
        backend.start_vm(instance)
        backend.start_vm(instance)                     # Starting already: a no-op, not an error
        assert ecs.wait_for_status(instance, RUNNING)
        backend.stop_vm(instance, forced=True)
        assert ecs.wait_for_status(instance, STOPPED)

        ecs.inject_fault("StartInstances", status=403, code="OperationDenied.NoStock",
                         message="The resource is out of stock.")
        members = members_of({"Backend": "ecs", "Members": [vm(instance, 0)]})
        outcome = run_to_end(new_run("start", members), backend)
        assert not outcome.ok and outcome.reason is not None
        assert outcome.reason.startswith(f"tier 1 of 1 (order 0): instance {instance!r} failed to start: ECS "
                                         f"StartInstances of instance {instance!r} failed: OperationDenied.NoStock "
                                         "(HTTP 403): The resource is out of stock. [request ")


@pytest.mark.slow
def test_a_wrong_secret_is_refused_and_a_check_still_throttled_reads_not_ready(ecs: LocalECS) -> None:
    instance = ecs.add_instance("app")
    with pytest.raises(Failure) as refused:
        backend_for(ecs, secret="not-the-secret").vm_state(instance)
    assert refused.value.reason.startswith(f"ECS DescribeInstances of instance {instance!r} failed: "
                                           "SignatureDoesNotMatch (HTTP 400)")
    assert "not-the-secret" not in refused.value.reason and ecs.access_key_secret not in refused.value.reason
    checked = backend_for(ecs).check("PortCheck", instance, {"port": "1"}, 1.0)
    assert checked.status == ERROR and checked.message == f"connection refused by {ecs.instance(instance).private_ip}:1"
    ecs.inject_fault("DescribeInstances", status=503, code="ServiceUnavailable", times=1000)
    throttled = backend_for(ecs, call_timeout=0.3).check("PortCheck", instance, {"port": "1"}, 1.0)
    assert throttled.status == NOT_READY
    assert throttled.message.startswith(f"ECS DescribeInstances of instance {instance!r} did not succeed within 0.3 s (")
    assert (f"; last: ECS DescribeInstances of instance {instance!r} failed: ServiceUnavailable (HTTP 503): The request "
            "processing has failed due to some unknown error. [request ") in throttled.message


# --- settings and time (no SDK) ------------------------------------------------------------------------


def test_settings_come_from_the_resource_and_the_environment() -> None:
    local = EcsSettings.from_env({"CRHELPER_ECS_ENDPOINT": "127.0.0.1:16101", "ALIBABA_CLOUD_REGION_ID": "cn-beijing"})
    assert (local.endpoint, local.protocol, local.region) == ("127.0.0.1:16101", "http", "cn-beijing")
    on_fc = EcsSettings.from_env({"FC_FUNCTION_NAME": "f", "FC_REGION": "cn-shanghai"}, region="cn-hangzhou")
    assert (on_fc.endpoint, on_fc.protocol, on_fc.region) == ("ecs-vpc.cn-hangzhou.aliyuncs.com", "https", "cn-hangzhou")
    public = EcsSettings.from_env({"CRHELPER_ECS_REGION": "eu-central-1", "CRHELPER_ECS_CALL_TIMEOUT": "3"})
    assert (public.endpoint, public.call_timeout) == ("ecs.eu-central-1.aliyuncs.com", 3.0)
    assert EcsSettings.from_env({"CRHELPER_ECS_ENDPOINT": "https://ecs.example:8443/", "FC_REGION": "r"}).protocol == "https"
    with pytest.raises(Failure, match="needs a region: give the resource's region or set CRHELPER_ECS_REGION"):
        EcsSettings.from_env({})
    with pytest.raises(Failure, match="CRHELPER_ECS_ENDPOINT must be host:port or an http"):
        EcsSettings.from_env({"CRHELPER_ECS_ENDPOINT": "ftp://x", "FC_REGION": "r"})
    with pytest.raises(Failure, match="no Alibaba Cloud credentials: set ALIBABA_CLOUD_ACCESS_KEY_ID"):
        EcsBackend.from_env(None, {"FC_REGION": "r"})
    made = EcsBackend.from_env(None, {"FC_REGION": "r", "ALIBABA_CLOUD_ACCESS_KEY_ID": "AK",
                                      "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "SK"})
    assert made.settings.region == "r"


def test_a_running_instance_seen_first_is_anchored_to_its_start_minute_never_earlier() -> None:
    """ECS's StartTime has minutes only: read as the end of its minute (capped at now), unless the
    provider's recorded boot falls inside that minute."""
    minute = 1_800_000_000.0 - 1_800_000_000.0 % 60  # a whole minute
    stamp = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(minute))
    backend = EcsBackend(EcsSettings(region="r", endpoint="127.0.0.1:1"), Credentials("AK", "SK"),
                         known_boots={"i-known": minute + 12.5})
    assert backend._boot_estimate("i-old", stamp, minute + 3600) == minute + 60
    assert backend._boot_estimate("i-new", stamp, minute + 20) == minute + 20
    assert backend._boot_estimate("i-known", stamp, minute + 3600) == minute + 12.5
    later = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(minute + 120))   # restarted outside since
    assert backend._boot_estimate("i-known", later, minute + 3600) == minute + 180
    assert backend._boot_estimate("i-x", None, minute) is None


@pytest.mark.slow
def test_a_stopped_instance_is_not_refused_a_guest_agent_rule_for_reading_false(ecs: LocalECS) -> None:
    """Every stopped ECS instance's Cloud Assistant reads "false": only a running one's "false" means
    no agent, so a group of stopped instances can still be created with GuestAgentLiveness."""
    backend = backend_for(ecs)
    stopped = ecs.add_instance("stopped-with-agent", status=STOPPED)
    running_without = ecs.add_instance("running-without", status=RUNNING, cloud_assistant=False)
    running_with = ecs.add_instance("running-with", status=RUNNING)
    assert ecs.wait_for_status(running_with, RUNNING, 5) and ecs.wait_for_status(running_without, RUNNING, 5)
    assert backend.has_guest_agent(stopped) in (None, True)
    assert backend.has_guest_agent(running_without) is False
    assert backend.has_guest_agent(running_with) is True


# --- Inventory: batch states, group identity, eligibility (B7, §5) ------------------------------------


@pytest.mark.slow
def test_vm_states_reads_103_instances_in_three_status_calls_and_an_unknown_id_reads_missing(ecs: LocalECS) -> None:
    running = [ecs.add_instance(f"up{n}", status=RUNNING) for n in range(3)]
    stopped = [ecs.add_instance(f"down{n}") for n in range(100)]
    wanted = stopped[:60] + running + stopped[60:] + ["i-nowhere"]
    backend = backend_for(ecs)
    ecs.clear_requests()
    states = backend.vm_states(wanted)
    assert list(states) == wanted
    assert {vm: states[vm].state for vm in running} == dict.fromkeys(running, RUNNING)
    assert {states[vm].state for vm in stopped} == {STOPPED} and states["i-nowhere"].state == MISSING
    status_calls = [r.parameters for r in calls(ecs, "DescribeInstanceStatus")]
    ids_per_call = [sum(name.startswith("InstanceId.") for name in p) for p in status_calls]
    assert ids_per_call == [100, 100, 4] and [p["PageNumber"] for p in status_calls] == ["1", "2", "1"]
    assert {p["PageSize"] for p in status_calls} == {"50"}
    # the Running ones, never seen changing, are dated from their StartTime: one DescribeInstances for all three
    (described,) = calls(ecs, "DescribeInstances")
    assert sorted(json.loads(described.parameters["InstanceIds"])) == sorted(running)
    for vm in running:
        minute = math.floor(ecs.instance(vm).last_change / 60) * 60
        since = states[vm].last_power_change
        assert since == pytest.approx(min(minute + 60, time.time()), abs=1.0)  # as vm_state dates it

    ecs.clear_requests()
    backend.start_vm(stopped[0])
    again = backend.vm_states(wanted)
    assert calls(ecs, "DescribeInstances") == [], "StartTimes already read are not read again"
    assert again[stopped[0]].state in ("Starting", RUNNING) and again[stopped[0]].last_power_change is not None
    assert ecs.wait_for_status(stopped[0], RUNNING)
    booted = backend.vm_states([stopped[0]])[stopped[0]]
    assert booted.running and booted.last_power_change is not None and booted.last_power_change >= ecs.instance(
        stopped[0]).last_change, "a boot this backend saw is dated when it saw it"


def test_a_tag_group_is_one_item_by_its_tag_whatever_its_name() -> None:
    backend = EcsBackend(EcsSettings(region="r", endpoint="127.0.0.1:1"), Credentials("AK", "SK"))
    assert backend.group_identity(GroupRef(name="web", tag_key="tier", tag_value="web")) == "tag:tier=web"
    assert backend.group_identity(GroupRef(name="other name", tag_key="tier", tag_value="web")) == "tag:tier=web"
    assert backend.group_identity(GroupRef(name="any", tag_key="tier", tag_value="")) == "tag:tier=*"
    assert backend.group_identity(GroupRef(name="listed", instances=["i-1"])) is None
    with pytest.raises(Failure, match="on ECS an InstanceGroup gives Instances or Tag .* \\(Id is CloudStack's\\)"):
        backend.group_identity(GroupRef(id="cs-group-uuid"))


@pytest.mark.slow
def test_ack_nodes_and_auto_scaling_instances_are_ineligible_by_their_system_tags(ecs: LocalECS) -> None:
    node = ecs.add_instance("node", tags={"ack.aliyun.com": "c50e414cb83a8", "ack.alibabacloud.com/nodepool-id": "np1",
                                          "acs:autoscaling:scalingGroupId": "asg-pool"})
    scaled = ecs.add_instance("scaled")
    ecs.tag_instance(scaled, {"acs:autoscaling:scalingGroupId": "asg-2ze5", "ESS": "ESS"})  # as ESS tags what it attaches
    plain = ecs.add_instance("plain", tags={"tier": "web"})
    found = backend_for(ecs).ineligible([node, scaled, plain, "i-nowhere"])
    assert found == {
        node: "it is a node of ACK (Kubernetes) cluster 'c50e414cb83a8' (tag ack.aliyun.com), which manages its "
              "nodes' power: the ECS counterpart of a CKS cluster node",
        scaled: "it is an instance of Auto Scaling group 'asg-2ze5' (tag acs:autoscaling:scalingGroupId), which starts "
                "and releases its instances: the ECS counterpart of an AutoScale VM group member",
    }
    (described,) = calls(ecs, "DescribeInstances")
    assert len(json.loads(described.parameters["InstanceIds"])) == 4 and described.parameters["MaxResults"] == "100"
