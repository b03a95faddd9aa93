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
* State: DescribeInstances (`InstanceIds`), which also gives the VPC address the checks connect to.
  ECS has no "last power change" field with seconds: a change this backend observed (one status,
  then another) is dated when it saw it; otherwise a Running instance's `StartTime` (minute
  precision) is read as the end of its minute, capped at now, so the initial delay is never cut
  short; a boot the provider recorded (`engine.power_changes`, passed as `known_boots`) inside that
  minute is used as is, so it is not mistaken for a restart outside the group.
* Groups: `Instances` as given, or `Tag {Key, Value}` through DescribeInstances `Tag.1.*`, paged
  with `NextToken`.
* Checks run from the function, inside the VPC: PortCheck a TCP connect to the instance's
  `VpcAttributes.PrivateIpAddress`, Ping the shared `probes.ping`; GuestAgentLiveness asks
  DescribeCloudAssistantStatus for "true", then runs `echo ok` with RunCommand and polls
  DescribeInvocationResults until a terminal status within the check's budget.
* Credentials always go to the SDK explicitly (FC context STS, else the environment): the SDK's
  default chain, whose last step asks the metadata service at 100.100.100.200, never runs.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from crhelper.cloud.credentials import REGION_ENV, Credentials, missing_hint, resolve
from crhelper.cloud.poll import (
    Done, Finished, OffPath, OutOfBudget, PollFailed, PollSettings, Waiting, is_throttling_or_server_error, poll,
)
from crhelper.config import env_float
from crhelper.errors import Failure

from . import probes
from .backends import MISSING, RUNNING, STARTING, STOPPED, STOPPING, CheckResult, VmState
from .model import ERROR, GUEST_AGENT, NOT_READY, PING, PORT, PORT_CHECK, READY, GroupRef

ENDPOINT_ENV = "CRHELPER_ECS_ENDPOINT"
ECS_REGION_ENV = "CRHELPER_ECS_REGION"
CALL_TIMEOUT_ENV = "CRHELPER_ECS_CALL_TIMEOUT"
INCORRECT_STATUS = "IncorrectInstanceStatus"
#: The command GuestAgentLiveness runs through Cloud Assistant.
AGENT_PROBE = "echo ok"
#: Per-instance invocation statuses after which nothing changes (cloud-apis.md §2).
TERMINAL = ("Success", "Failed", "Error", "Timeout", "Cancelled", "Terminated", "Invalid", "Aborted", "Stopped")
_LOOPBACK = ("127.", "localhost", "[::1]", "::1")


@dataclasses.dataclass(frozen=True)
class EcsSettings:
    """Where and how this backend talks to ECS. `endpoint` is `host:port` without scheme (the SDK's
    `Config.endpoint`); `call_timeout` bounds the retries of one action; `poll` is the back-off of
    those retries and of the Cloud Assistant result polling."""

    region: str
    endpoint: str
    protocol: str = "https"
    call_timeout: float = 30.0
    poll: PollSettings = PollSettings()
    connect_timeout_ms: int = 5_000
    read_timeout_ms: int = 15_000
    #: DescribeInstances MaxResults when expanding a Tag group (ECS allows up to 100).
    page_size: int = 100

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, region: str | None = None,
                 on_fc: bool | None = None, endpoint: str | None = None) -> "EcsSettings":
        """Region: `region` (the resource's), else CRHELPER_ECS_REGION, ALIBABA_CLOUD_REGION_ID, FC_REGION.
        Endpoint: `endpoint` (the resource's), else CRHELPER_ECS_ENDPOINT (`host:port` or a URL; a bare
        loopback address means http), else `ecs-vpc.<region>.aliyuncs.com` on Function Compute,
        `ecs.<region>.aliyuncs.com` elsewhere."""
        env = os.environ if env is None else env
        region = region or env.get(ECS_REGION_ENV) or env.get(REGION_ENV) or env.get("FC_REGION") or ""
        if not region:
            raise Failure(f"the ecs backend needs a region: give the resource's region or set {ECS_REGION_ENV} "
                          f"(or {REGION_ENV})")
        if on_fc is None:
            on_fc = bool(env.get("FC_FUNCTION_NAME") or env.get("FC_FUNC_CODE_PATH"))
        given = (endpoint or env.get(ENDPOINT_ENV) or "").strip()
        if given:
            endpoint, protocol = _split_endpoint(given)
        else:
            endpoint, protocol = f"ecs{'-vpc' if on_fc else ''}.{region}.aliyuncs.com", "https"
        return cls(region=region, endpoint=endpoint, protocol=protocol,
                   call_timeout=env_float(env, CALL_TIMEOUT_ENV, 30.0, minimum=0.1), poll=PollSettings.from_env(env))


def _split_endpoint(given: str) -> tuple[str, str]:
    scheme, sep, rest = given.partition("://")
    if sep:
        if scheme not in ("http", "https"):
            raise Failure(f"{ENDPOINT_ENV} must be host:port or an http(s) URL, got scheme {scheme!r}")
        return rest.rstrip("/"), scheme
    return given.rstrip("/"), "http" if given.startswith(_LOOPBACK) else "https"


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
                from alibabacloud_ecs20140526.client import Client
                from alibabacloud_tea_openapi import models as open_api_models

                given = self._credentials
                self._client = Client(open_api_models.Config(
                    access_key_id=given.access_key_id, access_key_secret=given.access_key_secret,
                    security_token=given.security_token or None, endpoint=self.settings.endpoint,
                    protocol=self.settings.protocol, region_id=self.settings.region,
                    connect_timeout=self.settings.connect_timeout_ms, read_timeout=self.settings.read_timeout_ms))
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
        def send(client: Any, models: Any) -> Any:
            request = models.DescribeInstancesRequest(region_id=self.settings.region, instance_ids=json.dumps([vm]))
            return client.describe_instances(request).body

        body = self._call("DescribeInstances", f"instance {vm!r}", send)
        found = [i for i in _items(body, "instances", "instance") if i.instance_id == vm]
        if found:
            self._remember_address(found[0])
        return found[0] if found else None

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
        return since

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
        subject = f"{name} (tag {key}={value or '*'})"
        found: list[str] = []
        token: str | None = None
        while True:
            def send(client: Any, models: Any, token: str | None = token) -> Any:
                request = models.DescribeInstancesRequest(
                    region_id=self.settings.region, max_results=self.settings.page_size, next_token=token,
                    tag=[models.DescribeInstancesRequestTag(key=key, value=value)])
                return client.describe_instances(request).body

            body = self._call("DescribeInstances", subject, send)
            for instance in _items(body, "instances", "instance"):
                self._remember_address(instance)
                if instance.instance_id not in found:
                    found.append(instance.instance_id)
            token = getattr(body, "next_token", None) or None
            if token is None:
                return found

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


def sdk_error(exc: Exception, action: str, subject: str, endpoint: str) -> str:
    """An SDK exception as one line naming the action and the instance; never a traceback or a key."""
    kind = type(exc).__name__
    code = getattr(exc, "code", None)
    if kind == "UnretryableException" or (code is None and getattr(exc, "status_code", None) is None):
        inner = getattr(exc, "inner_exception", None) or exc
        text = str(inner).splitlines()[0][:300] if str(inner) else type(inner).__name__
        return f"ECS {action} of {subject}: could not reach the endpoint {endpoint} ({kind}: {text})"
    data = getattr(exc, "data", None)
    message = (data.get("Message") if isinstance(data, dict) else None) or getattr(exc, "message", "") or ""
    request_id = getattr(exc, "request_id", None) or (data.get("RequestId") if isinstance(data, dict) else None)
    parts = [f"ECS {action} of {subject} failed: {code} (HTTP {getattr(exc, 'status_code', '?')})"]
    if message:
        parts.append(f": {message}")
    retry_after = getattr(exc, "retry_after", None)
    if retry_after:
        parts.append(f"; retry after {retry_after} s")
    if request_id:
        parts.append(f" [request {request_id}]")
    return "".join(parts)
