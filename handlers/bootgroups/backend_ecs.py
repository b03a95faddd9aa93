"""The boot-group `ecs` backend: Alibaba ECS through the official `alibabacloud-ecs20140526` SDK
(imported on first use), with Cloud Assistant for GuestAgentLiveness (spec §10, cloud-apis.md §1-§2).

* Power: Start/Stop(ForceStop)/RebootInstances, one instance per call (the engine hands us one VM
  at a time). `IncorrectInstanceStatus` is read against the instance's status: a start of a
  Starting/Running instance and a stop of a Stopping/Stopped one are no-ops (the Protocol), a
  transitory status (stop while Starting) or the required one (a race, an injected fault) is
  waited out and the call repeated, any other status fails naming it.
* Retries: Throttling* and 5xx answers are retried on the `crhelper.cloud.poll` schedule for at most
  `call_timeout` seconds (a ThrottlingException's `retry_after` is waited first); anything else
  fails at once as a `Failure` naming the action, the instance, the code and the request id.
* State: one instance through DescribeInstances (`InstanceIds`), which also gives the VPC address
  the checks connect to; several (`vm_states`, a tier's poll round) through DescribeInstanceStatus,
  at most 100 `InstanceId.N` per call and `PageSize` 50, every page read; an id it does not list
  (deleted, another account's or region's) is MISSING. ECS has no "last power change" field with
  seconds: a change this backend observed (one status, then another) is dated when it saw it;
  otherwise a Running instance's `StartTime` (minute precision; DescribeInstances, one call per 100
  such instances, kept while the instance stays Running in this backend's sight) is read as the end
  of its minute, capped at now, so the initial delay is never cut short; a boot the provider
  recorded (`engine.power_changes`, passed as `known_boots`) inside that minute is used as is, so it
  is not mistaken for a restart outside the group.
* Groups: `Instances` as given, or `Tag {Key, Value}` through DescribeInstances `Tag.1.*`, paged
  with `NextToken`; a Tag group is one item across boot groups as `tag:<Key>=<Value>`
  (`group_identity`).
* Eligibility (`ineligible`, §5): the ECS analogues of CloudStack's ineligible VMs, read from the tags
  the managing services put on their instances (DescribeInstances `Tags`, 100 instances per call):
  `ack.aliyun.com` (value: the cluster id) marks a node of an ACK (Kubernetes) cluster, as a CKS node
  is in CloudStack; `acs:autoscaling:scalingGroupId` (value: the scaling group id) an instance of an
  Auto Scaling group, as a member of an AutoScale VM group is. Both services start, stop and release
  those instances themselves. ACK's node-pool documentation lists both keys among the tags "added by
  ACK" and "added by Auto Scaling" to every node. CloudStack's third case, a VNF appliance, has no
  ECS counterpart.
* Checks run from the function, inside the VPC: PortCheck a TCP connect to the instance's
  `VpcAttributes.PrivateIpAddress`, Ping the shared `probes.ping`; GuestAgentLiveness asks
  DescribeCloudAssistantStatus for "true", then runs `echo ok` with RunCommand and polls
  DescribeInvocationResults until a terminal status within the check's budget.
* Credentials always go to the SDK explicitly (FC context STS, else the environment): the SDK's
  default chain, whose last step asks the metadata service at 100.100.100.200, never runs.
"""

from __future__ import annotations

import json
import math
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Mapping, Sequence

from crhelper.cloud.credentials import Credentials, missing_hint, resolve
from crhelper.cloud.poll import (
    Done, Finished, OffPath, OutOfBudget, PollFailed, Waiting, is_throttling_or_server_error, poll,
)
from crhelper.cloud.ecs import EcsSettings, sdk_client, sdk_error
from crhelper.errors import Failure

from . import probes
from .backends import MISSING, RUNNING, STARTING, STOPPED, STOPPING, CheckResult, VmState
from .model import ERROR, GUEST_AGENT, NOT_READY, PING, PORT, PORT_CHECK, READY, GroupRef

INCORRECT_STATUS = "IncorrectInstanceStatus"
#: The command GuestAgentLiveness runs through Cloud Assistant.
AGENT_PROBE = "echo ok"
#: Per-instance invocation statuses after which nothing changes (cloud-apis.md §2).
TERMINAL = ("Success", "Failed", "Error", "Timeout", "Cancelled", "Terminated", "Invalid", "Aborted", "Stopped")
#: Most instance ids one DescribeInstanceStatus / DescribeInstances call takes.
MAX_IDS = 100
#: DescribeInstanceStatus's largest PageSize.
STATUS_PAGE_SIZE = 50
#: Tag key -> why an instance carrying it may not join a boot group (§5; see the module doc).
INELIGIBLE_TAGS = (
    ("ack.aliyun.com", "it is a node of ACK (Kubernetes) cluster {value} (tag ack.aliyun.com), which manages "
                       "its nodes' power: the ECS counterpart of a CKS cluster node"),
    ("acs:autoscaling:scalingGroupId", "it is an instance of Auto Scaling group {value} (tag "
                                       "acs:autoscaling:scalingGroupId), which starts and releases its instances: "
                                       "the ECS counterpart of an AutoScale VM group member"),
)


class EcsCallTimedOut(Failure):
    """An action still throttled, failing with 5xx, or waiting out a status when its time ran out."""


class EcsBackend:
    """A `BootBackend` over one account and region of ECS. Thread-safe: the engine calls it from
    its check threads, one VM per call."""

    def __init__(self, settings: EcsSettings, credentials: Credentials, *,
                 known_boots: Mapping[str, float] | None = None, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.settings = settings
        self._credentials = credentials
        self._known_boots = dict(known_boots or {})
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._client: Any = None
        #: vm -> (status last seen, when this backend saw it change to that status; None: not seen)
        self._seen: dict[str, tuple[str, float | None]] = {}
        self._addresses: dict[str, str] = {}
        #: vm -> its StartTime, read while it was Running with no change seen (dropped when its status changes)
        self._start_times: dict[str, str | None] = {}

    @classmethod
    def from_env(cls, context: object | None = None, env: Mapping[str, str] | None = None, *,
                 region: str | None = None, known_boots: Mapping[str, float] | None = None,
                 endpoint: str | None = None) -> "EcsBackend":
        """Credentials from the FC context (STS), else the environment; a precise Failure without any."""
        credentials = resolve(context, env)
        if credentials is None:
            raise Failure(f"the ecs backend has no Alibaba Cloud credentials: {missing_hint()}")
        return cls(EcsSettings.from_env(env, region=region, endpoint=endpoint), credentials, known_boots=known_boots)

    # ------------------------------------------------------------------ the SDK
    def _sdk(self) -> tuple[Any, Any]:
        """(client, models), built on first use: importing the SDK costs about a second."""
        from alibabacloud_ecs20140526 import models

        with self._lock:
            if self._client is None:
                self._client = sdk_client(self.settings, self._credentials)
            return self._client, models

    def _call(self, action: str, subject: str, send: Callable[[Any, Any], Any], *,
              on_error: Callable[[Exception], Any] | None = None, timeout: float | None = None) -> Any:
        """`send(client, models)` with Throttling/5xx retried until `timeout` (call_timeout). `on_error`
        may turn an error into Done/Waiting/OffPath (a status to wait out); others raise a Failure."""
        client, models = self._sdk()
        limit = self.settings.call_timeout if timeout is None else timeout
        deadline = self._clock() + limit

        def probe() -> Any:
            try:
                return Done(send(client, models))
            except Exception as exc:
                if is_throttling_or_server_error(exc):
                    retry_after = getattr(exc, "retry_after", None)
                    if isinstance(retry_after, int) and retry_after > 0:
                        self._sleep(max(0.0, min(float(retry_after), self.settings.poll.cap, deadline - self._clock())))
                    return Waiting(sdk_error(exc, action, subject, self.settings.endpoint))
                seen = on_error(exc) if on_error is not None else None
                if seen is None:
                    raise Failure(sdk_error(exc, action, subject, self.settings.endpoint)) from None
                return seen

        result = poll(probe, deadline=deadline, settings=self.settings.poll, what=f"ECS {action} of {subject}",
                      clock=self._clock, sleep=self._sleep)
        if isinstance(result, Finished):
            return result.value
        if isinstance(result, PollFailed) and result.off_path:
            raise Failure(result.reason)
        raise EcsCallTimedOut(f"ECS {action} of {subject} did not succeed within {limit:g} s "
                              f"({result.polls} attempt(s); last: {result.state if isinstance(result, OutOfBudget) else _last(result.reason)})")

    # ------------------------------------------------------------------ state
    def _describe(self, vm: str) -> Any:
        """The DescribeInstances entry of `vm`, None when ECS does not know it."""
        return self._describe_many([vm]).get(vm)

    def _status(self, vm: str) -> str:
        found = self._describe(vm)
        return MISSING if found is None else _power_state(found.status)

    def vm_state(self, vm: str) -> VmState:
        found = self._describe(vm)
        now = self._clock()
        status = MISSING if found is None else _power_state(found.status)
        since = self._observe(vm, status, now)
        if status == RUNNING and since is None:
            since = self._boot_estimate(vm, getattr(found, "start_time", None), now)
        return VmState(status, since)

    def _observe(self, vm: str, status: str, now: float) -> float | None:
        with self._lock:
            previous = self._seen.get(vm)
            since = None if previous is None else previous[1] if previous[0] == status else now
            self._seen[vm] = (status, since)
            if previous is not None and previous[0] != status:
                self._start_times.pop(vm, None)
        return since

    def vm_states(self, vms: Sequence[str]) -> dict[str, VmState]:
        """The states of `vms` from DescribeInstanceStatus (100 ids a call, every page of 50), dated as
        `vm_state` dates them; MISSING for an id ECS does not list. A Running instance this backend
        has not seen change costs one DescribeInstances per 100 such instances, once (its StartTime)."""
        wanted = list(dict.fromkeys(vms))
        listed: dict[str, str] = {}
        for chunk in _chunks(wanted, MAX_IDS):
            listed.update(self._instance_statuses(chunk))
        now = self._clock()
        states: dict[str, VmState] = {}
        undated: list[str] = []
        for vm in wanted:
            status = _power_state(listed.get(vm))
            since = self._observe(vm, status, now)
            states[vm] = VmState(status, since)
            if status == RUNNING and since is None:
                undated.append(vm)
        if undated:
            started = self._running_since(undated)
            for vm in undated:
                states[vm] = VmState(RUNNING, self._boot_estimate(vm, started.get(vm), now))
        return states

    def _instance_statuses(self, chunk: list[str]) -> dict[str, str]:
        """DescribeInstanceStatus of at most 100 ids, every page: instance id -> Status."""
        found: dict[str, str] = {}
        subject = _instances_subject(chunk)
        for number in range(1, math.ceil(len(chunk) / STATUS_PAGE_SIZE) + 2):  # one more: a page that shrank
            def send(client: Any, models: Any, number: int = number) -> Any:
                return client.describe_instance_status(models.DescribeInstanceStatusRequest(
                    region_id=self.settings.region, instance_id=chunk, page_number=number,
                    page_size=STATUS_PAGE_SIZE)).body

            body = self._call("DescribeInstanceStatus", subject, send)
            rows = _items(body, "instance_statuses", "instance_status")
            for row in rows:
                if row.instance_id in chunk:
                    found[row.instance_id] = row.status
            total = getattr(body, "total_count", None)
            if len(rows) < STATUS_PAGE_SIZE or (isinstance(total, int) and number * STATUS_PAGE_SIZE >= total):
                break
        return found

    def _running_since(self, vms: list[str]) -> dict[str, str | None]:
        """The StartTime of Running instances, read once while they stay Running (see `_observe`)."""
        with self._lock:
            known = {vm: self._start_times[vm] for vm in vms if vm in self._start_times}
        unread = [vm for vm in vms if vm not in known]
        if unread:
            described = self._describe_many(unread)
            with self._lock:
                for vm in unread:
                    known[vm] = self._start_times[vm] = getattr(described.get(vm), "start_time", None)
        return known

    def _boot_estimate(self, vm: str, start_time: str | None, now: float) -> float | None:
        """A Running instance's last boot when this backend did not see it happen (see the module doc)."""
        minute = _parse_start_time(start_time)
        known = self._known_boots.get(vm)
        if minute is None:
            return known
        if known is not None and minute <= known < minute + 60:
            return known
        return min(minute + 60, now)

    @property
    def power_changes(self) -> dict[str, float]:
        """The power changes this backend saw (vm -> when), for the provider to keep."""
        with self._lock:
            return {vm: since for vm, (_status, since) in self._seen.items() if since is not None}

    # ------------------------------------------------------------------ power
    def _power(self, action: str, vm: str, send: Callable[[Any, Any], Any], *, done: tuple[str, ...],
               retry: tuple[str, ...], needs: str) -> bool:
        """One power action; False when `done` says the instance is already where it goes."""
        subject = f"instance {vm!r}"

        def on_error(exc: Exception) -> Any:
            if getattr(exc, "code", None) != INCORRECT_STATUS:
                return None
            status = self._status(vm)
            if status in done:
                return Done(False)
            if status in retry:
                return Waiting(f"{subject} is {status}")
            return OffPath(f"ECS {action} of {subject} refused: it is {status} (it must be {needs}) "
                           f"[{INCORRECT_STATUS}]")

        return bool(self._call(action, subject, lambda client, models: send(client, models) is not None,
                               on_error=on_error))

    def start_vm(self, vm: str) -> None:
        self._power("StartInstances", vm, lambda client, models: client.start_instances(
            models.StartInstancesRequest(region_id=self.settings.region, instance_id=[vm])),
            done=(STARTING, RUNNING), retry=(STOPPING, STOPPED), needs=STOPPED)

    def stop_vm(self, vm: str, forced: bool) -> None:
        self._power("StopInstances", vm, lambda client, models: client.stop_instances(
            models.StopInstancesRequest(region_id=self.settings.region, instance_id=[vm], force_stop=forced)),
            done=(STOPPING, STOPPED), retry=(STARTING, RUNNING), needs=RUNNING)

    def reboot_vm(self, vm: str) -> None:
        """Reboot and wait until it reads Running again (like CloudStack's reboot job), so the next
        attempt's initial delay counts from a booted instance."""
        self._power("RebootInstances", vm, lambda client, models: client.reboot_instances(
            models.RebootInstancesRequest(region_id=self.settings.region, instance_id=[vm])),
            done=(), retry=(STARTING, RUNNING), needs=RUNNING)
        self._observe(vm, STOPPING, self._clock())
        deadline = self._clock() + self.settings.call_timeout

        def probe() -> Any:
            status = self.vm_state(vm).state
            if status == RUNNING:
                return Done(True)
            return OffPath(f"instance {vm!r} is {status} after a reboot") if status in (STOPPED, MISSING) else Waiting(status)

        result = poll(probe, deadline=deadline, settings=self.settings.poll, what=f"the reboot of instance {vm!r}",
                      clock=self._clock, sleep=self._sleep)
        if not isinstance(result, Finished):
            raise Failure(getattr(result, "reason", f"the reboot of instance {vm!r} did not finish"))

    # ------------------------------------------------------------------ groups
    def expand_group(self, group: GroupRef) -> list[str]:
        if group.instances is not None:
            return list(group.instances)
        name = f"InstanceGroup {group.name!r}" if group.name else "an InstanceGroup"
        if not group.tag_key:
            raise Failure(f"{name}: on ECS an InstanceGroup gives Instances or Tag {{Key, Value}}"
                          + (" (Id is CloudStack's)" if group.id else ""))
        key, value = group.tag_key, group.tag_value or None
        found: list[str] = []
        def by_tag(models: Any) -> dict[str, Any]:
            return {"tag": [models.DescribeInstancesRequestTag(key=key, value=value)]}

        for instance in self._describe_pages(f"{name} (tag {key}={value or '*'})", self.settings.page_size, by_tag):
            if instance.instance_id not in found:
                found.append(instance.instance_id)
        return found

    def _describe_pages(self, subject: str, page_size: int, filters: Callable[[Any], dict[str, Any]]) -> Iterator[Any]:
        """Every instance DescribeInstances lists under `filters(models)`, page by page (NextToken);
        their addresses are remembered on the way."""
        token: str | None = None
        while True:
            def send(client: Any, models: Any, token: str | None = token) -> Any:
                return client.describe_instances(models.DescribeInstancesRequest(
                    region_id=self.settings.region, max_results=page_size, next_token=token, **filters(models))).body

            body = self._call("DescribeInstances", subject, send)
            for instance in _items(body, "instances", "instance"):
                self._remember_address(instance)
                yield instance
            token = getattr(body, "next_token", None) or None
            if token is None:
                return

    def _describe_many(self, vms: Sequence[str]) -> dict[str, Any]:
        """The DescribeInstances entries of `vms` (100 ids a call); an instance ECS does not know is absent."""
        found: dict[str, Any] = {}
        for chunk in _chunks(list(dict.fromkeys(vms)), MAX_IDS):
            ids = {"instance_ids": json.dumps(chunk)}  # read by each page's request, within this iteration
            for instance in self._describe_pages(_instances_subject(chunk), MAX_IDS, lambda _models: ids):
                if instance.instance_id in chunk:
                    found[instance.instance_id] = instance
        return found

    # ------------------------------------------------------------------ Inventory (§5 checks)
    def group_identity(self, group: GroupRef) -> str | None:
        """`tag:<Key>=<Value>` (`=*` for any value) for a Tag group, whatever its Name; None for an
        `Instances` list (its Name is its identity). No call: a tag matching nothing is an empty group."""
        if group.instances is not None:
            return None
        if not group.tag_key:
            raise Failure(f"InstanceGroup {group.name or ''!r}: on ECS an InstanceGroup gives Instances or Tag "
                          "{Key, Value}" + (" (Id is CloudStack's)" if group.id else ""))
        return f"tag:{group.tag_key}={group.tag_value or '*'}"

    def ineligible(self, vms: Sequence[str]) -> dict[str, str]:
        """Why some of `vms` may not join a boot group, from their tags (INELIGIBLE_TAGS: an ACK node,
        an Auto Scaling instance); an instance ECS does not know is absent (`vm_states` says MISSING)."""
        reasons: dict[str, str] = {}
        for vm, instance in self._describe_many(vms).items():
            tags = {row.tag_key: row.tag_value or "" for row in _items(instance, "tags", "tag") if row.tag_key}
            for key, reason in INELIGIBLE_TAGS:
                if key in tags:
                    reasons[vm] = reason.format(value=repr(tags[key]))
                    break
        return reasons

    def _remember_address(self, instance: Any) -> None:
        addresses = getattr(getattr(getattr(instance, "vpc_attributes", None), "private_ip_address", None),
                            "ip_address", None) or []
        if addresses:
            with self._lock:
                self._addresses[instance.instance_id] = addresses[0]

    def address(self, vm: str) -> str:
        """The instance's VPC private address (the checks run from inside the VPC)."""
        with self._lock:
            known = self._addresses.get(vm)
        if known is None:
            found = self._describe(vm)
            with self._lock:
                known = self._addresses.get(vm)
            if known is None:
                raise Failure(f"instance {vm!r} {'does not exist' if found is None else 'has no VPC private address'} "
                              "(DescribeInstances)")
        return known

    # ------------------------------------------------------------------ checks
    def check(self, rule_type: str, vm: str, details: Mapping[str, str], timeout: float) -> CheckResult:
        """A call still throttled (or 5xx) when the budget ends reads NotReady; other API errors raise."""
        try:
            return self._check(rule_type, vm, details, timeout)
        except EcsCallTimedOut as timed_out:
            return CheckResult(NOT_READY, timed_out.reason)

    def _check(self, rule_type: str, vm: str, details: Mapping[str, str], timeout: float) -> CheckResult:
        began = self._clock()
        if rule_type == GUEST_AGENT:
            return self._agent_liveness(vm, timeout)
        if rule_type not in (PORT_CHECK, PING):
            return CheckResult(ERROR, f"the ecs backend has no checker for rule type {rule_type}")
        host = self.address(vm)
        left = max(0.0, timeout - (self._clock() - began))
        if rule_type == PORT_CHECK:
            return probes.tcp_probe(host, int(details[PORT]), left)
        return probes.ping(host, left)

    # ------------------------------------------------------------------ for validation
    def has_guest_agent(self, vm: str) -> bool | None:
        """Whether GuestAgentLiveness may attach to `vm`: False when DescribeCloudAssistantStatus says
        "false" for a running instance, None when ECS cannot tell (not listed, or stopped: a stopped
        instance's agent always reads "false"; the start's check then judges it)."""
        agent = self._assistant_status(vm)
        if agent is None or agent == "true":
            return None if agent is None else True
        # "false" is also what every stopped instance reads: only a running one's says it has no agent.
        return False if self.vm_state(vm).running else None

    def _assistant_status(self, vm: str, timeout: float | None = None) -> str | None:
        """DescribeCloudAssistantStatus's CloudAssistantStatus of `vm` ("true"/"false"), None when absent."""
        def status(client: Any, models: Any) -> Any:
            return client.describe_cloud_assistant_status(
                models.DescribeCloudAssistantStatusRequest(region_id=self.settings.region, instance_id=[vm])).body

        body = self._call("DescribeCloudAssistantStatus", f"instance {vm!r}", status, timeout=timeout)
        rows = [r for r in _items(body, "instance_cloud_assistant_status_set", "instance_cloud_assistant_status")
                if r.instance_id == vm]
        return rows[0].cloud_assistant_status if rows else None

    def _agent_liveness(self, vm: str, timeout: float) -> CheckResult:
        subject = f"instance {vm!r}"
        if timeout <= 0:
            return CheckResult(ERROR, f"Cloud Assistant check of {subject} not tried: no time left in the attempt's budget")
        deadline = self._clock() + timeout
        region = self.settings.region
        agent = self._assistant_status(vm, timeout)
        if agent != "true":
            return CheckResult(ERROR, f"the Cloud Assistant agent of {subject} is not running "
                                      f"(DescribeCloudAssistantStatus: CloudAssistantStatus {agent or 'absent'!r})")

        def refused(exc: Exception) -> Any:
            code = getattr(exc, "code", None) or ""
            return OffPath(sdk_error(exc, "RunCommand", subject, self.settings.endpoint)) if code.startswith("InvalidInstance") else None

        def run(client: Any, models: Any) -> Any:
            left = max(1, math.ceil(deadline - self._clock()))
            return client.run_command(models.RunCommandRequest(
                region_id=region, instance_id=[vm], type="RunShellScript", command_content=AGENT_PROBE,
                content_encoding="PlainText", timeout=left)).body.invoke_id

        try:
            invoke_id = self._call("RunCommand", subject, run, on_error=refused, timeout=max(0.0, deadline - self._clock()))
        except EcsCallTimedOut:
            raise
        except Failure as failure:
            return CheckResult(ERROR, failure.reason)
        return self._invocation_result(vm, invoke_id, deadline)

    def _invocation_result(self, vm: str, invoke_id: str, deadline: float) -> CheckResult:
        subject = f"instance {vm!r}"
        region = self.settings.region
        last: list[Any] = []

        def results(client: Any, models: Any) -> Any:
            return client.describe_invocation_results(models.DescribeInvocationResultsRequest(
                region_id=region, invoke_id=invoke_id, instance_id=vm, content_encoding="PlainText")).body

        def probe() -> Any:
            left = deadline - self._clock()
            body = self._call("DescribeInvocationResults", subject, results, timeout=max(0.0, left))
            rows = [r for r in _items(getattr(body, "invocation", None), "invocation_results", "invocation_result")
                    if r.instance_id == vm]
            if not rows:
                return Waiting("no result yet")
            last[:] = [rows[0]]
            seen = rows[0].invocation_status or ""
            return Done(rows[0]) if seen in TERMINAL else Waiting(seen)

        began = self._clock()
        outcome = poll(probe, deadline=deadline, settings=self.settings.poll, what=f"`{AGENT_PROBE}` on {subject}",
                       clock=self._clock, sleep=self._sleep)
        took = f"{(self._clock() - began) * 1000:.0f} ms"
        if not isinstance(outcome, Finished):
            state = last[0].invocation_status if last else "no result"
            return CheckResult(NOT_READY, f"Cloud Assistant `{AGENT_PROBE}` on {subject} ({invoke_id}) did not finish "
                                          f"within the budget (last status {state})")
        row = outcome.value
        if row.invocation_status == "Success":
            return CheckResult(READY, f"Cloud Assistant ran `{AGENT_PROBE}` on {subject} (exit 0) in {took}")
        error = ": ".join(part for part in (row.error_code, row.error_info) if part) or "no error code"
        return CheckResult(NOT_READY, f"Cloud Assistant `{AGENT_PROBE}` on {subject} ({invoke_id}) ended "
                                      f"{row.invocation_status}, exit {row.exit_code}: {error}")


def make_backend(env: Mapping[str, str] | None = None, *, context: object | None = None, region: str | None = None,
                 known_boots: Mapping[str, float] | None = None, given: Mapping[str, str] | None = None) -> EcsBackend:
    """What `backend_for.make_backend` calls: the SDK must be installed (checked without importing
    it), credentials and region as `EcsBackend.from_env` finds them; `given` is the resource's
    `Ecs: {Endpoint, Region}` (its Region wins over `region`, the request's)."""
    import importlib.util

    if importlib.util.find_spec("alibabacloud_ecs20140526") is None:
        raise Failure("Backend: the ecs backend needs alibabacloud-ecs20140526, which is not installed "
                      "(pip install 'alibabacloud-ecs20140526>=7.11')")
    given = given or {}
    return EcsBackend.from_env(context, env, region=given.get("Region") or region, known_boots=known_boots,
                               endpoint=given.get("Endpoint"))


# --- pure helpers ----------------------------------------------------------------------------------


def _last(reason: str) -> str:
    """The `last state` part of a poll's deadline reason."""
    head, sep, tail = reason.partition("(last state: ")
    return tail[:-1] if sep and tail.endswith(")") else head


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[start:start + size] for start in range(0, len(items), size)]


def _instances_subject(vms: Sequence[str]) -> str:
    """How an error names a batch: the instance itself when alone, else the first and how many more."""
    return f"instance {vms[0]!r}" if len(vms) == 1 else f"instances {vms[0]!r} and {len(vms) - 1} more"


def _items(body: Any, wrapper: str, field: str) -> list[Any]:
    """`body.<wrapper>.<field>` (ECS wraps every list in a singular-named object), [] when absent."""
    return list(getattr(getattr(body, wrapper, None), field, None) or [])


def _power_state(status: str | None) -> str:
    """ECS statuses onto the engine's: Pending (being created) counts as Starting."""
    if status == "Pending":
        return STARTING
    return status or MISSING


def _parse_start_time(value: str | None) -> float | None:
    """`2026-12-01T08:21Z` (minute precision, UTC; seconds accepted) as POSIX seconds."""
    if not value:
        return None
    for pattern in ("%Y-%m-%dT%H:%MZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(value, pattern).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
    return None
