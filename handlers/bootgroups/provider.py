"""`Custom::InstanceBootGroup` and `Custom::LocalInstance` on the crhelper framework (issue 12).

A boot group's truth is the provider's own state (`state.GroupStore`, never expiring), not the
idempotency records: the group, its claims on its instances across stacks, and the engine's run,
checkpointed after every tier's start calls and at most once a second of poll rounds (a crash
loses at most a second of rounds, whose attempts were never counted). The long operations only
carry the group id between steps, so a step whose process dies resumes from the stored run (no tier restarted, no attempt counted
twice), and a retried Create finds the group it made (its id derives from the request).

Create validates (membership across stacks, rules, limits; the plan's worst case against the
type's deadline; on a cloud backend what the cloud says: each Tag/Id group's identity and
instances, which instances exist and may join), stores the group and converges on DesiredState;
Update applies member, rule and setting changes in place (results of rules and instances no longer
in the plan are dropped), then converges (start, stop, or a reboot when RebootToken changed);
Delete removes the group, its members and rules (stopping the instances first with StopOnDelete).
A failed Create forgets the group again: ROS sends its Delete without a physical id we made.
`Custom::LocalInstance` Create registers a process definition Stopped; the group starts it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import threading
import time
from typing import Any, Callable, Mapping

from crhelper import Failure, Provider, Request, Result, get_logger, operations
from crhelper.config import env_float
from crhelper.constants import TEMPLATE_DIR_ENV
from crhelper.invocation import fc_context
from crhelper.local.supervisor import NOT_FOUND, SupervisorClient, SupervisorError, resource_owner
from crhelper.paths import state_dir
from crhelper.registry import MAX_DEADLINE
from crhelper.response import exception_reason

from . import engine, events as ev
from .backend_for import BackendUnavailable, Wiring, make_backend, owner_of
from .backend_local import agent_address
from .backends import MISSING, BootBackend, NotFound, VmState
from .model import (
    BACKENDS, BOOT_GROUP_TYPE, INSTANCE_GROUP, LOCAL_INSTANCE_TYPE, RUNNING, GroupRef, InstanceBootGroupProps,
    LocalInstanceProps,
)
from .readiness import cache_as_read, member_status, prune_cache
from .settings import GlobalSettings, effective, worst_case
from .state import (
    ACTIVE, STATE_DIR, GroupRecord, GroupStore, InstanceRecord, StateConflict, describe_item, open_group_store,
)
from .validation import (
    CheckedGroup, Context, Problem, check_group, check_update, group_item, group_ref, instance_item, problems_error,
    validate_local_instance,
)

log = get_logger("bootgroups")

ENV_STORE = "CRHELPER_BOOTGROUP_STORE"
ENV_DEADLINE = "CRHELPER_BOOTGROUP_DEADLINE"
ENV_STEP = "CRHELPER_BOOTGROUP_STEP_SECONDS"
#: Data stays well inside ROS's 4,096 bytes (the framework adds the ids around it).
DATA_BUDGET = 3500
PLAN_ADVICE = ("lower Settings.ReadinessTimeoutSeconds, MaxRetryAttempts or InitialDelaySeconds, or use fewer "
               "BootOrders (the worst case is tiers × (InitialDelaySeconds + (MaxRetryAttempts+1)·ReadinessTimeoutSeconds "
               "+ MaxRetryAttempts·CRHELPER_BOOTGROUP_POLL_INTERVAL))")


@dataclasses.dataclass
class GroupStep:
    """What travels between the steps of a long operation: which group (the rest is stored)."""

    group_id: str = ""


# --- shared pieces -------------------------------------------------------------------------------

_stores: dict[tuple[str, str], GroupStore] = {}
_stores_lock = threading.Lock()


def group_store(env: Mapping[str, str] | None = None) -> GroupStore:
    """The store of `CRHELPER_BOOTGROUP_STORE` (default: SQLite under `$CRHELPER_HOME/bootgroups`), one per process."""
    env = os.environ if env is None else env
    key = (env.get(ENV_STORE, ""), str(state_dir(STATE_DIR, env)))
    with _stores_lock:
        if key not in _stores:
            try:
                _stores[key] = open_group_store(key[0] or None, env)
            except ValueError as exc:
                raise Failure(str(exc)) from None
        return _stores[key]


def global_settings() -> GlobalSettings:
    try:
        return GlobalSettings.from_env()
    except ValueError as exc:
        raise Failure(f"provider configuration: {exc}") from None


def _derived_id(prefix: str, request: Request, label: str = "") -> str:
    """An id the Create's retries and duplicates find again: from the stack, the resource and the request."""
    digest = hashlib.sha256(f"{request.stack_id}\0{request.logical_resource_id}\0{request.request_id}".encode()).hexdigest()
    slug = re.sub(r"[^a-z0-9]+", "-", (label or request.logical_resource_id).lower()).strip("-")[:40] or "x"
    return f"{prefix}-{slug}-{digest[:10]}"


def _backend(name: str, store: GroupStore, wiring: Wiring | None = None) -> BootBackend:
    try:
        return make_backend(name, store, os.environ, wiring)
    except BackendUnavailable as exc:
        raise Failure(str(exc)) from None


def _connection(name: str, props: Any) -> dict[str, str] | None:
    """The template's `CloudStack` / `Ecs` settings for backend `name` (Delete's properties may
    come as sent: they are read leniently there)."""
    if not isinstance(props, InstanceBootGroupProps):
        try:
            props = InstanceBootGroupProps.model_validate(props)
        except Exception:  # noqa: BLE001 - a Delete with unreadable properties still deletes (env settings)
            return None
    if name == "cloudstack" and props.CloudStack is not None:
        return props.CloudStack.given()
    if name == "ecs" and props.Ecs is not None:
        return {key: value for key, value in (("Endpoint", props.Ecs.Endpoint), ("Region", props.Ecs.Region)) if value}
    return None


def _wiring(name: str, props: Any, request: Request, record: GroupRecord | None = None) -> Wiring:
    """What the group's backend is built from in this step: the invocation's FC context (STS
    credentials; else the ALIBABA_CLOUD_* environment), the request's region, the boots the
    group recorded and the template's connection settings."""
    return Wiring(context=fc_context(), region=request.region_id or None,
                  known_boots=dict(record.power_changes) if record is not None else None,
                  connection=_connection(name, props))


def _group_backend(record: GroupRecord, props: Any, request: Request, store: GroupStore) -> BootBackend:
    return _backend(record.backend, store, _wiring(record.backend, props, request, record))


def _keep_power_changes(record: GroupRecord, backend: BootBackend) -> None:
    """The power changes a cloud backend observed this step (ECS: statuses it saw change), kept
    with the group so the next step's backend tells the group's own boots from outside restarts."""
    seen = getattr(backend, "power_changes", None)
    if isinstance(seen, Mapping):
        record.power_changes.update(seen)


def _log_events(group: GroupRecord, events: list[ev.Event]) -> None:
    for event in events:
        log.info(event.line(), extra={"fields": {"event": event.type, "group": group.name, "GroupId": group.group_id,
                                                 "ok": event.ok}})


def _record_events(store: GroupStore, group: GroupRecord, events: list[ev.Event]) -> None:
    store.append_events(group.group_id, events)
    _log_events(group, events)


# --- validation against the state ----------------------------------------------------------------

#: What to fix when a cloud backend cannot answer the Create/Update checks.
_REACH = {"ecs": "Ecs.Endpoint (or CRHELPER_ECS_ENDPOINT), the region, and the credentials (the function's role, "
                 "or ALIBABA_CLOUD_ACCESS_KEY_ID/SECRET)",
          "cloudstack": "CloudStack.Endpoint and CloudStack.Key/Secret (or CLOUDSTACK_ENDPOINT, _KEY, _SECRET)"}
_MISSING = {"ecs": "no ECS instance {vm!r} for these credentials (it may be in another account or region)",
            "cloudstack": "no CloudStack VM {vm!r} for these credentials (it may belong to another account)"}


def _unreachable(backend: str, what: str, exc: Exception) -> Failure:
    return Failure(f"the {backend} backend could not {what}: {exception_reason(exc)}; "
                   f"check {_REACH.get(backend, 'its settings')}")


def _cloud_group(ref: GroupRef, backend: str) -> bool:
    """A member group the cloud lists when asked (an ECS Tag, a CloudStack Id), not an Instances list."""
    return ref.instances is None and (ref.tag_key is not None if backend == "ecs" else ref.id is not None)


@dataclasses.dataclass
class _Inventory:
    """What the cloud said about the plan's items, for `validation.Context` (§5)."""

    identities: dict[str, str] = dataclasses.field(default_factory=dict)
    group_instances: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    instance_groups: dict[str, str] = dataclasses.field(default_factory=dict)
    ineligible: dict[str, str] = dataclasses.field(default_factory=dict)
    problems: list[Problem] = dataclasses.field(default_factory=list)


def _take_inventory(props: InstanceBootGroupProps, backend: str, cloud: BootBackend, store: GroupStore,
                    besides: str) -> _Inventory:
    """One look at the cloud for §5: each Tag/Id group's identity and instances (NotFound: a Problem at
    the member), every instance the plan names in one `vm_states` (MISSING: a Problem at its path),
    the backend's `ineligible` reasons, and the instances of the owner's other cloud groups (a VM
    joining two boot groups through a group). Raises a Failure saying what to fix when the backend
    cannot be reached."""
    found = _Inventory()
    named: dict[str, str] = {}  # instance -> the path naming it (an instance a group lists is named too)
    identify = getattr(cloud, "group_identity", None)
    for index, member in enumerate(props.Members):
        if member.Instance and member.Instance.strip():
            named.setdefault(member.Instance.strip(), f"Members[{index}].Instance")
        if member.InstanceGroup is None:
            continue
        ref, key = group_ref(member.InstanceGroup)
        for position, vm in enumerate(ref.instances or ()):
            named.setdefault(vm.strip(), f"Members[{index}].InstanceGroup.Instances[{position}]")
        if key is None or not _cloud_group(ref, backend) or key in found.group_instances:
            continue
        try:
            identity = identify(ref) if callable(identify) else None
            found.group_instances[key] = list(cloud.expand_group(ref))
        except NotFound as exc:
            found.problems.append(Problem(f"Members[{index}].InstanceGroup", str(exc)))
            continue
        except Exception as exc:  # noqa: BLE001 - reported with what to fix, never a traceback
            raise _unreachable(backend, f"read instance group {key!r} (Members[{index}].InstanceGroup)", exc) from None
        if identity:
            found.identities[key] = identity
    vms = list(named) + [vm for listed in found.group_instances.values() for vm in listed if vm not in named]
    try:
        batch = getattr(cloud, "vm_states", None)  # one call; its failure is the answer (no retry one by one)
        states = (batch(list(named)) if callable(batch) else {vm: cloud.vm_state(vm) for vm in named}) if named else {}
        why = getattr(cloud, "ineligible", None)
        found.ineligible = dict(why(vms)) if callable(why) and vms else {}
    except Exception as exc:  # noqa: BLE001 - as above
        raise _unreachable(backend, "describe the instances the template names", exc) from None
    for vm, path in named.items():
        if vm in states and states[vm].state == MISSING:
            found.problems.append(Problem(path, _MISSING.get(backend, "no instance {vm!r}").format(vm=vm)))
    for other in store.list_groups():  # another group's instances, as its cloud lists them now
        if other.group_id == besides or other.owner != store.owner or other.backend != backend:
            continue
        for spec in other.members:
            if spec.group is None or not _cloud_group(spec.group, backend):
                continue
            try:
                identity = (identify(spec.group) if callable(identify) else None) or spec.key
                for vm in cloud.expand_group(spec.group):
                    found.instance_groups.setdefault(vm, identity)
            except Exception as exc:  # noqa: BLE001 - that group's own start will report it
                log.warning("could not list another boot group's instance group",
                            extra={"fields": {"group": other.name, "member": spec.key, "error": str(exc)}})
    return found


def _check(props: InstanceBootGroupProps, store: GroupStore, gs: GlobalSettings, besides: str = "",
           cloud: Callable[[], BootBackend] | None = None) -> CheckedGroup:
    """Every rule of the spec on `props`, with the other groups' claims and names, what the local
    instances are, and on a cloud backend what the cloud says (`_take_inventory`); raises
    PropertiesError listing every problem. `cloud` builds the group's cloud backend, asked also
    (only for a GuestAgentLiveness rule on an instance) whether that instance has a guest agent:
    CloudStack's hypervisor is KVM, ECS's Cloud Assistant status is not "false"."""
    backend = (props.Backend or gs.backend).strip().lower()
    instances: dict[str, InstanceRecord | None] = {}
    agents: dict[str, bool | None] = {}

    def local_instance(vm: str) -> InstanceRecord | None:
        if vm not in instances:
            instances[vm] = store.get_instance(vm)
        return instances[vm]

    def has_guest_agent(vm: str) -> bool | None:
        if backend == "local":
            found = local_instance(vm)
            return None if found is None else found.guest_agent
        if cloud is None or vm in agents:
            return agents.get(vm)
        try:
            probe = getattr(cloud(), "has_guest_agent", None)
            agents[vm] = probe(vm) if callable(probe) else None
        except Exception as exc:  # noqa: BLE001 - not known here; the start's check reports the instance
            log.warning("could not tell whether an instance has a guest agent",
                        extra={"fields": {"instance": vm, "backend": backend, "error": str(exc)}})
            agents[vm] = None
        return agents[vm]

    inventory = _Inventory()
    if backend != "local" and backend in BACKENDS and cloud is not None:
        inventory = _take_inventory(props, backend, cloud(), store, besides)
    context = Context(max_members=gs.max_members, default_backend=gs.backend, group_instances=inventory.group_instances,
                      group_identities=inventory.identities, instance_groups=inventory.instance_groups,
                      ineligible=inventory.ineligible, has_guest_agent=has_guest_agent, taken_names=store.names(besides=besides))
    # The claims that matter: every item this plan would claim, and the groups holding its instances elsewhere.
    candidates = check_group(props, context).items
    held = [group_item(identity) for identity in inventory.instance_groups.values()]
    context = dataclasses.replace(context, claims=store.claims(list(dict.fromkeys([*candidates, *held])), besides=besides))
    checked = check_group(props, context)
    problems = list(checked.problems) + inventory.problems
    if backend == "local":
        for index, member in enumerate(props.Members):
            if member.Instance and member.Instance.strip() and local_instance(member.Instance.strip()) is None:
                problems.append(Problem(f"Members[{index}].Instance", f"no Custom::LocalInstance {member.Instance.strip()!r} "
                                        "is registered (give {Ref: <its logical id>})"))
            if member.InstanceGroup is not None:
                for position, vm in enumerate(member.InstanceGroup.Instances or ()):
                    if vm.strip() and local_instance(vm.strip()) is None:
                        problems.append(Problem(f"Members[{index}].InstanceGroup.Instances[{position}]",
                                                f"no Custom::LocalInstance {vm!r} is registered"))
    if problems:
        raise problems_error(problems)
    return checked


def _conflict(exc: StateConflict) -> Failure:
    if exc.path:
        return problems_error([Problem(exc.path, str(exc))])
    return Failure(str(exc))


# --- runs ----------------------------------------------------------------------------------------

def read_states(backend: BootBackend, vms: list[str], errors: dict[str, str] | None = None) -> dict[str, VmState]:
    """The power states of `vms`, from one call where the backend can; an instance that cannot be
    read is left out (its error in `errors`, when given)."""
    states = engine.vm_states(backend, vms, batch_only=True)
    for vm in vms:
        if vm in states:
            continue
        try:
            states[vm] = backend.vm_state(vm)
        except Exception as exc:  # noqa: BLE001 - the caller shows or skips the instance
            if errors is not None:
                errors[vm] = exception_reason(exc)
    return states


def begin_run(record: GroupRecord, operation: str, run_key: str, backend: BootBackend, gs: GlobalSettings,
               now: float) -> engine.BootRun:
    """Put a new run on the record (stored by the caller with whatever else changed) and return it
    (for `converge(fresh=...)`). Instances restarted outside the group since its last run read
    Unknown first (§2.3)."""
    if operation in (engine.START, engine.REBOOT) and record.power_changes:
        states = read_states(backend, list(record.power_changes))  # only a cache hint: the run reports the instances
        record.cache = cache_as_read(record.cache, record.power_changes, states, now)
    run = engine.begin(operation, record.name, record.members, settings=record.settings, now=now,
                       poll_interval=gs.poll_interval, check_concurrency=gs.check_concurrency, forced=record.forced,
                       cache=record.cache)
    record.run, record.run_id = engine.dump_run(run), run_key
    return run


def converge(record: GroupRecord, run_key: str, store: GroupStore, backend: BootBackend,
              budget: operations.Budget, fresh: engine.BootRun | None = None,
              ) -> operations.Continue[GroupStep] | engine.BootRun:
    """Advance the record's run (checkpointed after every round); the finished run, or Continue.
    `fresh`: the run `begin_run` just put on the record, used as it is rather than read back from
    its JSON (in a fresh FC worker that read costs a pydantic schema build, ~40 ms, before tier 0)."""
    if record.run_id != run_key or record.run is None:
        raise Failure(f"boot group {record.name!r}: its stored run belongs to another request ({record.run_id or 'none'}); "
                      "another operation took the group over")
    run = fresh if fresh is not None else engine.load_run(record.run)
    if not run.finished:

        def checkpoint(current: engine.BootRun) -> None:
            record.run = engine.dump_run(current)
            store.save_group(record)

        outcome = engine.advance(run, backend, budget, checkpoint=checkpoint)
        record.run = engine.dump_run(run)
        _keep_power_changes(record, backend)
        store.save_group(record)
        if not outcome.finished:
            return operations.Continue(delay=outcome.delay)
    if record.last_result.get("RunId") != run_key:
        _record_events(store, record, list(run.events))
        record.cache = dict(run.cache)
        record.power_changes.update(engine.power_changes(run))
        record.last_result = {"RunId": run_key, "Operation": run.operation, "Ok": run.ok, "Reason": run.reason,
                              "Ended": run.ended}
        store.save_group(record)
    return run


def known_boots(record: GroupRecord, run: engine.BootRun | None) -> dict[str, float]:
    """Each instance's last boot the group made or saw (its record and its run, in progress or not):
    a later power change is a restart outside the group."""
    return {**record.power_changes, **(engine.power_changes(run) if run is not None else {})}


def _readiness(record: GroupRecord, run: engine.BootRun | None, backend: BootBackend) -> dict[str, str]:
    """Each member's readiness: from this start, else from the cache as it reads now (an outside
    restart reads Unknown) and the instances' power state."""
    if run is not None and run.start is not None:
        return engine.member_readiness(run)
    member_vms = {member.key: [member.key] if member.kind != INSTANCE_GROUP else
                  list((member.group.instances if member.group else None) or []) for member in record.members}
    states = read_states(backend, list(dict.fromkeys(vm for vms in member_vms.values() for vm in vms)))
    cache = cache_as_read(record.cache, known_boots(record, run), states, time.time())
    out: dict[str, str] = {}
    for member in record.members:
        vms = member_vms[member.key]
        out[member.key] = member_status(member, vms, cache, {vm: vm in states and states[vm].running for vm in vms})[0]
    return out


def _data_bytes(data: Mapping[str, Any]) -> int:
    """Data's size as ROS measures it: UTF-8 bytes of its JSON."""
    return len(json.dumps(data, ensure_ascii=False).encode("utf-8", errors="surrogatepass"))


def group_data(record: GroupRecord, run: engine.BootRun | None, backend: BootBackend) -> dict[str, Any]:
    """Data: GroupId, the tiers in order, per-member readiness, the effective settings; compacted
    to stay within ROS's 4,096 bytes (the tiers as `order:members`, then readiness as counts)."""
    tiers = engine.tier_summary(run) if run is not None else engine.tier_summary(
        engine.begin(engine.STOP, record.name, record.members, settings=record.settings, now=0.0))
    data: dict[str, Any] = {
        "GroupId": record.group_id, "Name": record.name, "Backend": record.backend, "State": record.desired_state,
        "Tiers": [{"Order": t["Order"], "Members": t["Members"]} for t in tiers],
        "Readiness": _readiness(record, run, backend),
        "Settings": record.settings.report(),
    }
    if run is not None and run.ended is not None:
        data["Seconds"] = round(run.ended - run.began, 3)
    if _data_bytes(data) > DATA_BUDGET:
        data["Tiers"] = [f"{t['Order']}:{len(t['Members'])}" for t in tiers]
    if _data_bytes(data) > DATA_BUDGET:  # a Name of at most 255 characters keeps this well inside the budget
        counts: dict[str, int] = {}
        for status in data["Readiness"].values():
            counts[status] = counts.get(status, 0) + 1
        data["Readiness"] = counts
    return data


def _operation_for(desired: str, reboot: bool) -> str:
    if desired != RUNNING:
        return engine.STOP
    return engine.REBOOT if reboot else engine.START


def _result(record: GroupRecord, run: engine.BootRun, backend: BootBackend, physical: bool) -> Result:
    data = group_data(record, run, backend)
    return Result(physical_id=record.group_id, data=data) if physical else Result(data=data)


# --- the provider --------------------------------------------------------------------------------

def build_provider(provider: Provider | None = None) -> Provider:
    """Register both types on `provider` (a new one by default). Importing this module costs no I/O."""
    provider = provider or Provider()
    deadline = env_float(os.environ, ENV_DEADLINE, MAX_DEADLINE, minimum=1.0, maximum=MAX_DEADLINE)
    step_seconds = env_float(os.environ, ENV_STEP, operations.DEFAULT_STEP_SECONDS, minimum=0.1, maximum=3600.0)
    provider.set_deadline(BOOT_GROUP_TYPE, deadline)

    def plan(props: InstanceBootGroupProps) -> float:
        orders = {member.BootOrder for member in props.Members}
        return worst_case(len(orders), effective(props.Settings), global_settings().poll_interval)

    @operations.create(provider, BOOT_GROUP_TYPE, state=GroupStep, plan=plan, plan_advice=PLAN_ADVICE,
                       step_seconds=step_seconds)
    def create_group(props: InstanceBootGroupProps, state: GroupStep, request: Request,
                     budget: operations.Budget) -> Any:
        store, gs = group_store(), global_settings()
        run_key = f"{request.request_id}:create"
        first_step = not state.group_id
        state.group_id = state.group_id or _derived_id("ibg", request, props.Name)
        record = store.get_group(state.group_id)
        if record is not None and first_step and record.run_id == run_key and record.last_result.get("RunId") != run_key:
            record.resumed += 1
            log.warning("resuming a boot-group start another process left unfinished",
                        extra={"fields": {"group": record.name, "GroupId": record.group_id, "resumed": record.resumed}})
            store.save_group(record)
        backend: BootBackend | None = None
        fresh: engine.BootRun | None = None
        if record is None:
            chosen = (props.Backend or gs.backend).strip().lower()
            built: list[BootBackend] = []

            def cloud() -> BootBackend:
                if not built:
                    built.append(_backend(chosen, store, _wiring(chosen, props, request)))
                return built[0]

            # Names and claims are per owner (the home locally, the account on a cloud): known before the checks.
            owner = owner_of(chosen, os.environ, account=request.resource_owner_id, context=fc_context(),
                             backend=cloud() if chosen == "cloudstack" else None)
            store = store.for_owner(owner)
            checked = _check(props, store, gs, cloud=cloud)
            record = GroupRecord(group_id=state.group_id, name=props.Name, stack_id=request.stack_id,
                                 logical_id=request.logical_resource_id, request_id=request.request_id,
                                 backend=checked.backend, description=props.Description, members=checked.members,
                                 settings=checked.settings, desired_state=checked.desired_state,
                                 reboot_token=props.RebootToken, forced=props.Forced, stop_on_delete=props.StopOnDelete)
            backend = built[0] if built else _group_backend(record, props, request, store)
            record.owner = owner
            fresh = begin_run(record, _operation_for(record.desired_state, False), run_key, backend, gs, budget.now())
            try:
                store.create_group(record, checked.items)
            except StateConflict as exc:
                raise _conflict(exc) from None
            created = [ev.Event(ev.CREATE, budget.now(), f"boot group {record.name!r} on the {record.backend} backend",
                                subject=record.name)]
            _record_events(store, record, created + ev.plan_changes([], record.members, budget.now()))
        backend = backend or _group_backend(record, props, request, store)
        outcome = converge(record, run_key, store, backend, budget, fresh)
        if isinstance(outcome, operations.Continue):
            return outcome
        if not outcome.ok:
            store.remove_group(record.group_id)  # a failed Create leaves nothing: its Delete never reaches us
            raise Failure(outcome.reason or f"boot group {record.name!r}: the {outcome.operation} failed")
        record.status = ACTIVE
        store.save_group(record)
        return _result(record, outcome, backend, physical=True)

    @operations.update(provider, BOOT_GROUP_TYPE, state=GroupStep, plan=plan, plan_advice=PLAN_ADVICE,
                       step_seconds=step_seconds)
    def update_group(props: InstanceBootGroupProps, old: Any, state: GroupStep, request: Request,
                     budget: operations.Budget) -> Any:
        store, gs = group_store(), global_settings()
        group_id = state.group_id = state.group_id or (request.physical_resource_id or "")
        record = store.get_group(group_id)
        if record is None:
            raise Failure(f"boot group {group_id!r} is not in the provider's state (deleted outside the stack?); "
                          "delete the resource and create it again")
        run_key = f"{request.request_id}:update"
        backend = _group_backend(record, props, request, store)
        fresh: engine.BootRun | None = None
        if record.run_id != run_key:
            checked = _check(props, store.for_owner(record.owner), gs, besides=group_id, cloud=lambda: backend)
            if checked.backend != record.backend:
                raise problems_error([Problem("Backend", f"a boot group cannot move from the {record.backend} backend "
                                                         f"to {checked.backend}; create another boot group instead")])
            changed = check_update(record.members, checked.members)
            if changed:
                raise problems_error(changed)
            now = budget.now()
            happened = ev.plan_changes(record.members, checked.members, now)
            reboot = (props.RebootToken or "") != (record.reboot_token or "") and record.desired_state == RUNNING
            before = (record.name, record.description, record.settings, record.desired_state)
            record.name, record.description, record.members = props.Name, props.Description, checked.members
            record.cache = prune_cache(record.cache, checked.members)
            record.settings, record.desired_state = checked.settings, checked.desired_state
            record.reboot_token, record.forced, record.stop_on_delete = props.RebootToken, props.Forced, props.StopOnDelete
            fresh = begin_run(record, _operation_for(record.desired_state, reboot), run_key, backend, gs, now)
            try:
                store.reclaim(record, checked.items)
            except StateConflict as exc:
                raise _conflict(exc) from None
            if happened or before != (record.name, record.description, record.settings, record.desired_state):
                happened.insert(0, ev.Event(ev.UPDATE, now, f"boot group {record.name!r}: DesiredState "
                                                            f"{record.desired_state}", subject=record.name))
            _record_events(store, record, happened)
        outcome = converge(record, run_key, store, backend, budget, fresh)
        if isinstance(outcome, operations.Continue):
            return outcome
        if not outcome.ok:
            raise Failure(outcome.reason or f"boot group {record.name!r}: the {outcome.operation} failed")
        return _result(record, outcome, backend, physical=False)

    @operations.delete(provider, BOOT_GROUP_TYPE, state=GroupStep, step_seconds=step_seconds)
    def delete_group(props: Any, state: GroupStep, request: Request, budget: operations.Budget) -> Any:
        store = group_store()
        group_id = state.group_id = state.group_id or (request.physical_resource_id or "")
        record = store.get_group(group_id)
        if record is None:
            return Result()
        if record.stop_on_delete:
            run_key = f"{request.request_id}:delete"
            backend = _group_backend(record, props, request, store)
            if record.run_id != run_key:
                begin_run(record, engine.STOP, run_key, backend, global_settings(), budget.now())
                store.save_group(record)
            outcome = converge(record, run_key, store, backend, budget)
            if isinstance(outcome, operations.Continue):
                return outcome
            if not outcome.ok:
                raise Failure(f"boot group {record.name!r} was not deleted: StopOnDelete: {outcome.reason}")
        _record_events(store, record, [ev.Event(ev.DELETE, budget.now(), f"boot group {record.name!r} with "
                                                f"{len(record.members)} member(s) and their rules", subject=record.name)])
        store.remove_group(group_id)
        return Result()

    # --- Custom::LocalInstance -------------------------------------------------------------------

    def instance_record(props: LocalInstanceProps, instance_id: str, request: Request) -> InstanceRecord:
        validate_local_instance(props)
        cwd = resolve_working_directory(props.WorkingDirectory)
        if cwd is None:
            folder = state_dir(STATE_DIR, create=True) / "instances" / instance_id
            folder.mkdir(parents=True, exist_ok=True)
            cwd = str(folder)
        shell = isinstance(props.Command, str)
        return InstanceRecord(instance_id=instance_id, argv=[props.Command] if isinstance(props.Command, str) else list(props.Command),
                              shell=shell, owner=resource_owner(request.stack_id, request.logical_resource_id), cwd=cwd,
                              environment=dict(props.Environment), host=props.Host.strip(), ports=list(props.Ports),
                              guest_agent=props.GuestAgent,
                              agent_address=agent_address(str(state_dir(STATE_DIR)), instance_id) if props.GuestAgent else "",
                              stack_id=request.stack_id, logical_id=request.logical_resource_id)

    def instance_data(record: InstanceRecord, state: str) -> dict[str, Any]:
        return {"InstanceId": record.instance_id, "Host": record.host, "Ports": list(record.ports), "State": state}

    @provider.create(LOCAL_INSTANCE_TYPE)
    def create_instance(props: LocalInstanceProps, request: Request) -> Result:
        store = group_store()
        instance_id = _derived_id("li", request)
        record = instance_record(props, instance_id, request)
        existing = store.get_instance(instance_id)
        if existing is not None:
            record.created = existing.created
        store.put_instance(record)
        return Result(physical_id=instance_id, data=instance_data(record, "Stopped"))

    @provider.update(LOCAL_INSTANCE_TYPE)
    def update_instance(props: LocalInstanceProps, old: Any, request: Request) -> Result:
        store = group_store()
        instance_id = request.physical_resource_id or ""
        existing = store.get_instance(instance_id)
        if existing is None:
            raise Failure(f"Custom::LocalInstance {instance_id!r} is not in the provider's state; delete and recreate it")
        record = instance_record(props, instance_id, request)
        record.created = existing.created
        backend = _backend("local", store)
        running = backend.vm_state(instance_id).running
        if running and record != existing:
            backend.stop_vm(instance_id, False)
            store.put_instance(record)
            backend.start_vm(instance_id)
        else:
            store.put_instance(record)
        return Result(data=instance_data(record, "Running" if running else "Stopped"))

    @provider.delete(LOCAL_INSTANCE_TYPE)
    def delete_instance(props: Any, request: Request) -> None:
        store = group_store()
        instance_id = request.physical_resource_id or ""
        if store.get_instance(instance_id) is None:
            return
        held = store.claims([instance_item(instance_id)])
        if held:
            raise Failure(f"{describe_item(instance_item(instance_id))} is a member of boot group "
                          f"{held[instance_item(instance_id)]!r}: remove it from the group (or delete the group) first")
        try:
            SupervisorClient().stop(instance_id, forget=True)
        except SupervisorError as exc:
            if exc.code != NOT_FOUND:
                raise Failure(f"Custom::LocalInstance {instance_id!r} could not be stopped: {exc}") from None
        store.delete_instance(instance_id)

    return provider


def resolve_working_directory(raw: str | None) -> str | None:
    """A relative `WorkingDirectory` is the template's folder's (`CRHELPER_TEMPLATE_DIR`, set by
    `crhelper stack`), as a relative AppCluster `Package` is, so a template can run the servers
    it ships beside it; without a template folder it must be absolute. Stored absolute."""
    if raw is None or os.path.isabs(raw):
        return raw
    base = os.environ.get(TEMPLATE_DIR_ENV)
    if not base:
        raise problems_error([Problem("WorkingDirectory", "must be an absolute path, or relative to the template's "
                                                          "folder under `crhelper stack` (default: a folder of its own "
                                                          "under $CRHELPER_HOME/bootgroups/instances)")])
    return os.path.normpath(os.path.join(base, raw))


#: The module-level provider; `handler` is the Function Compute entry point.
provider = build_provider()
handler = provider.fc_handler
