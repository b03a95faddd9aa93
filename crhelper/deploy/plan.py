"""What a deploy wants FC to hold, and the steps from what FC holds to that. Pure: no SDK, no I/O.

Both API versions describe functions and triggers with the same camelCase fields, so one plan
serves both; the version modules only fetch the current state and make the calls. What deploy
creates carries `MANAGED_MARK` in its description: only those triggers are pruned.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..servicetoken import FcFunctionToken

#: The description prefix of everything deploy creates (functions, services, triggers).
MANAGED_MARK = "managed by crhelper deploy"
TIMER_TRIGGER = "crhelper-resume"
MNS_TRIGGER = "crhelper-mns"
DEFAULT_TIMER = "@every 5m"
#: The async configuration of a provider's function: FC retries an invocation whose worker died.
DEFAULT_ASYNC = {"maxAsyncRetryAttempts": 3, "maxAsyncEventAgeInSeconds": 86400}


def managed(description: object) -> bool:
    return isinstance(description, str) and description.startswith(MANAGED_MARK)


@dataclass(frozen=True)
class FunctionSettings:
    """The function's settings as FC names them (code apart)."""

    name: str
    handler: str
    runtime: str
    memory: int
    timeout: int
    environment: Mapping[str, str]
    description: str
    role: str | None = None  # FC 3.0's function role (FC 2.0 gives the role to the service)
    log: Mapping[str, str] | None = None  # FC 3.0's function logConfig {project, logstore} (FC 2.0: the service's)

    def fields(self) -> dict[str, Any]:
        found = {"handler": self.handler, "runtime": self.runtime, "memorySize": self.memory,
                 "timeout": self.timeout, "environmentVariables": dict(self.environment),
                 "description": self.description}
        if self.role is not None:
            found["role"] = self.role
        if self.log is not None:
            found["logConfig"] = dict(self.log)
        return found


@dataclass(frozen=True)
class TriggerSpec:
    name: str
    trigger_type: str
    config: Mapping[str, Any]
    source_arn: str | None = None
    invocation_role: str | None = None
    description: str = MANAGED_MARK


@dataclass(frozen=True)
class Step:
    """One thing a deploy did (or found already so): `action` is create, update, delete or unchanged."""

    action: str
    kind: str  # service, function, code, oss-object, trigger, async-config
    name: str
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"action": self.action, "kind": self.kind, "name": self.name, **({"detail": self.detail} if self.detail else {})}

    def text(self) -> str:
        return f"{self.action:9} {self.kind} {self.name}" + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True)
class DeploySpec:
    """Everything one deploy wants: the function, its code, triggers and async configuration."""

    function: FunctionSettings
    code: bytes
    checksum: str  # FC's codeChecksum of `code`: CRC-64 in decimal
    triggers: tuple[TriggerSpec, ...] = ()
    async_config: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_ASYNC))
    service: str | None = None  # FC 2.0 only
    via_oss: bool = False  # send the code as an OSS object (the deployer's uploader puts it there)


@dataclass
class DeployResult:
    token: str
    steps: list[Step]

    @property
    def changed(self) -> bool:
        return any(step.action != "unchanged" for step in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {"service_token": self.token, "changed": self.changed, "steps": [s.to_dict() for s in self.steps]}


def description_for(provider: str) -> str:
    return f"{MANAGED_MARK}: {provider}"


def wanted_triggers(*, timer: str | None, mns_topic: str | None, region: str, account_id: str,
                    invocation_role: str | None, payload: str = "") -> tuple[TriggerSpec, ...]:
    """The time trigger that resumes abandoned operations (unless `timer` is None), and an MNS topic trigger."""
    found: list[TriggerSpec] = []
    if timer is not None:
        found.append(TriggerSpec(TIMER_TRIGGER, "timer", {"cronExpression": timer, "enable": True, "payload": payload}))
    if mns_topic is not None:
        found.append(TriggerSpec(MNS_TRIGGER, "mns_topic",
                                 {"notifyContentFormat": "JSON", "notifyStrategy": "BACKOFF_RETRY"},
                                 source_arn=f"acs:mns:{region}:{account_id}:/topics/{mns_topic}",
                                 invocation_role=invocation_role))
    return tuple(found)


def function_changes(current: Mapping[str, Any], wanted: FunctionSettings) -> dict[str, Any]:
    """The fields of `wanted` FC holds differently (an empty environment and none are the same)."""
    changes = {}
    for name, value in wanted.fields().items():
        held = current.get(name)
        if name == "environmentVariables":
            held = dict(held or {})
        elif isinstance(value, dict):
            held = held_part(held, value)
        if held != value:
            changes[name] = value
    return changes


def held_part(held: Any, wanted: Mapping[str, Any]) -> dict[str, Any] | None:
    """The keys of `wanted` of a configuration FC holds (FC answers a logConfig with more keys than given)."""
    return {key: held.get(key) for key in wanted} if isinstance(held, Mapping) else None


def config_of(trigger: Mapping[str, Any]) -> dict[str, Any]:
    """A trigger's configuration as an object (FC 3.0 answers it as a JSON string)."""
    config = trigger.get("triggerConfig")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return {}
    return dict(config) if isinstance(config, dict) else {}


@dataclass(frozen=True)
class TriggerPlan:
    create: tuple[TriggerSpec, ...]
    update: tuple[TriggerSpec, ...]
    delete: tuple[str, ...]
    unchanged: tuple[str, ...]


def plan_triggers(current: Sequence[Mapping[str, Any]], wanted: Sequence[TriggerSpec]) -> TriggerPlan:
    """Create what is missing, update what differs, delete what deploy created and no longer wants.

    A trigger deploy did not create is never deleted; one holding a wanted name is a conflict
    (`foreign_conflicts`), to refuse before planning."""
    held = {str(t.get("triggerName")): t for t in current}
    create, update, unchanged = [], [], []
    for spec in wanted:
        existing = held.get(spec.name)
        if existing is None:
            create.append(spec)
        elif (needs_replacing(existing, spec) or config_of(existing) != dict(spec.config)
              or (existing.get("invocationRole") or None) != spec.invocation_role):
            update.append(spec)
        else:
            unchanged.append(spec.name)
    names = {spec.name for spec in wanted}
    delete = [name for name, t in sorted(held.items()) if name not in names and managed(t.get("description"))]
    return TriggerPlan(tuple(create), tuple(update), tuple(delete), tuple(unchanged))


def foreign_conflicts(current: Sequence[Mapping[str, Any]], wanted: Sequence[TriggerSpec]) -> list[str]:
    """Wanted trigger names FC already holds for something deploy did not create."""
    names = {spec.name for spec in wanted}
    return sorted(str(t.get("triggerName")) for t in current
                  if t.get("triggerName") in names and not managed(t.get("description")))


def needs_replacing(existing: Mapping[str, Any], spec: TriggerSpec) -> bool:
    """FC cannot change a trigger's type or source: such a change is a delete and a create."""
    return existing.get("triggerType") != spec.trigger_type or (existing.get("sourceArn") or None) != spec.source_arn


def async_changes(current: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    """Whether the async configuration must be put (absent, or a wanted field differs)."""
    return current is None or any(current.get(k) != v for k, v in wanted.items())


def service_token(region: str, account_id: str, function: str, service: str | None) -> str:
    """The ServiceToken of the function: `services/S/functions/F` on FC 2.0, `functions/F` on 3.0."""
    return FcFunctionToken(region, account_id, function, service).format()
