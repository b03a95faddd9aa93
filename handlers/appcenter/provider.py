"""`Custom::AppCluster` on the crhelper framework (issue 13): a QingCloud AppCenter package deployed as
a cluster of nodes and driven through its lifecycle (spec §7) by stack create, update and delete.

A cluster's truth is the provider's own state (`state.ClusterStore`), not the idempotency
records: the package as deployed (its absolute path, the values, the rendered cluster), the nodes,
and the lifecycle run, checkpointed by the executor after every step. The long operations only
carry the cluster id between InProgress steps, so a step whose process dies resumes from the
stored run, and a retried Create finds the cluster it made (its id derives from the request).

Create checks the package with the Inputs (every problem at once), stores the cluster and runs
its create plan; Update plans the difference (`changes.plan_update`: upgrade, vertical scaling,
scale out/in, env, DesiredState, RunService) after refusing `changeable: false` changes (an
upgrade's too: what cannot change carries its deployed value over the new version's default); Delete
runs the tear-down (the destroy gate; `Force`, read as ROS passes it, where `allow_force`
permits) and releases the nodes. Deleting a Stopped cluster runs no service at all (nothing runs
on stopped nodes, and the spec's Delete orders are those of an active cluster): no ``destroy``,
so Force and ``allow_force`` do not apply, which the Delete's log line says; the nodes are
released. An Update that replaces a run left unfinished (an earlier Update abandoned mid-run)
clears what that run had registered (``/adding-hosts``, ``/deleting-hosts``,
``vertical-scaling-roles``) and republishes the metadata first.
Secrets (``password``/``accesskey`` items) are masked in the stored Inputs; their values stay in
the stored values, which the nodes' metadata needs.
A failed Create releases what it made: ROS sends its Delete without a physical id we made.
A relative `Package` is resolved against the template's folder (`CRHELPER_TEMPLATE_DIR`, else the
working directory) at Create and stored absolute.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Mapping

from crhelper import Failure, Provider, Request, Result, get_logger, operations
from crhelper.config import env_float
from crhelper.constants import TEMPLATE_DIR_ENV
from crhelper.local.supervisor import resource_owner
from crhelper.paths import home as crhelper_home
from crhelper.registry import MAX_DEADLINE

from . import plan as plans
from .backend_for import backend_for
from .backends import NodeBackend
from .changes import STOPPED, Changes, plan_update
from .check import Checked, check_package
from .cluster import Cluster
from .config import ACCESSKEY, PASSWORD, SERVICE_PARAMS, Config, parse_config
from .executor import OWNER, PACKAGE_DIR, Executor, masked_inputs, new_run, phase_of
from .health import health_plan
from .locale import Translator
from .model import APP_CLUSTER_TYPE, AppClusterProps, ros_boolean
from .package import Package, load_package
from .problems import InvalidPackage, PackageUnreadable, errors_in
from .settings import AppCenterSettings
from .state import ACTIVE, DELETING, STORE_ENV, ClusterRecord, ClusterStore
from .store_for import open_cluster_store
from .values import service_params_for

log = get_logger("appcenter")

ENV_TEMPLATE_DIR = TEMPLATE_DIR_ENV
ENV_DEADLINE = "CRHELPER_APPCENTER_DEADLINE"
#: Data stays well inside ROS's 4,096 bytes (the framework adds the ids around it).
DATA_BUDGET = 3500
MAX_PROBLEMS_SHOWN = 20


@dataclasses.dataclass
class ClusterStep:
    """What travels between the steps of a long operation: which cluster (the rest is stored)."""

    cluster_id: str = ""


# --- shared pieces -------------------------------------------------------------------------------

@functools.lru_cache(maxsize=16)
def _opened(url: str, home: str) -> ClusterStore:
    # the whole environment: an OSS store takes its credentials and region from it (as in a function)
    return open_cluster_store(url or None, {**os.environ, "CRHELPER_HOME": home})


def cluster_store() -> ClusterStore:
    """The store of `CRHELPER_APPCENTER_STORE` (default: SQLite under `$CRHELPER_HOME/appcenter`), one per process."""
    try:
        return _opened(os.environ.get(STORE_ENV, ""), str(crhelper_home()))
    except ValueError as exc:
        raise Failure(str(exc)) from None


def app_settings() -> AppCenterSettings:
    try:
        return AppCenterSettings.from_env()
    except ValueError as exc:
        raise Failure(f"provider configuration: {exc}") from None


def derived_id(request: Request) -> str:
    """An id the Create's retries and duplicates find again: from the stack, the resource and the request."""
    digest = hashlib.sha256(f"{request.stack_id}\0{request.logical_resource_id}\0{request.request_id}".encode()).hexdigest()
    slug = re.sub(r"[^a-z0-9]+", "-", request.logical_resource_id.lower()).strip("-")[:24] or "x"
    return f"cl-{slug}-{digest[:10]}"


def resolve_package(raw: str, base: str | None = None) -> str:
    """An object URL as it is; a path made absolute against `base` (the template's folder:
    CRHELPER_TEMPLATE_DIR, else the working directory)."""
    if "://" in raw:
        return raw
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = Path(base or os.environ.get(ENV_TEMPLATE_DIR) or os.getcwd()) / path
    return str(path.resolve())


def _problems_failure(what: str, problems: list[Any]) -> Failure:
    shown = [str(problem) for problem in problems[:MAX_PROBLEMS_SHOWN]]
    more = f" (and {len(problems) - MAX_PROBLEMS_SHOWN} more)" if len(problems) > MAX_PROBLEMS_SHOWN else ""
    return Failure(f"{what}: " + "; ".join(shown) + more)


def _load(path: str) -> Package:
    try:
        return load_package(path)
    except PackageUnreadable as exc:
        raise Failure(f"Package: {exc}") from None
    except InvalidPackage as exc:
        raise _problems_failure(f"Package {path} is invalid", exc.problems) from None


def _check(package: Package, props: AppClusterProps, previous: Mapping[str, Any] | None = None,
           inputs: Mapping[str, Any] | None = None) -> Checked:
    """Check the package with the Inputs (`inputs` in their place when given): a Create without
    `previous`; an Update (an upgrade too) against the deployed values, so `changeable: false` holds."""
    checked = check_package(package, props.Inputs if inputs is None else inputs, resource_group=props.ResourceGroup,
                            zone=props.Zone, previous=previous, creating=previous is None)
    if not checked.ok or checked.cluster is None:
        raise _problems_failure(f"Package {package.source} with these Inputs", checked.errors)
    return checked


def secret_paths(config: Config | None) -> list[str]:
    """The paths of the package's secret items (``password``, ``accesskey``)."""
    return [path for path, item in (config.items.items() if config is not None else ())
            if item.type in (PASSWORD, ACCESSKEY)]


def clear_abandoned(record: ClusterRecord) -> list[dict[str, Any]]:
    """Before a new run: drop the temporary keys an earlier run left registered (one abandoned
    mid-run by a new request, or one that failed between registering and clearing them) and
    return the phase that republishes the metadata without them (none when nothing was left)."""
    if not (record.adding or record.deleting or record.vertical_roles):
        return []
    record.adding, record.deleting, record.vertical_roles = [], [], []
    republish = plans.Plan("cleanup", (plans.Stage("republish the metadata after an abandoned run",
                                                   (plans.Step("action", plans.REGISTER_METADATA, None, ()),)),))
    return [phase_of(republish, False, "clear what an abandoned run registered")]


def cluster_of(record: ClusterRecord) -> Cluster:
    return Cluster.model_validate(record.rendered)


def _rendered(cluster: Cluster) -> Any:
    return cluster.model_dump(mode="json", by_alias=True, exclude_unset=False)


def _translator(record: ClusterRecord) -> Translator:
    try:
        package = load_package(record.package)
    except (PackageUnreadable, InvalidPackage):
        return Translator({})  # a package gone since: the messages fall back to their source
    return Translator(package.locales, record.language)


def _placement(record: ClusterRecord) -> dict[str, str]:
    placement = {OWNER: resource_owner(record.stack_id, record.logical_id) if record.stack_id else f"appcenter/{record.cluster_id}"}
    if "://" not in record.package:
        placement[PACKAGE_DIR] = record.package
    if record.zone:
        placement["zone"] = record.zone
    if record.resource_group:
        placement["resource_group"] = record.resource_group
    return placement


def _backend(name: str, settings: AppCenterSettings) -> NodeBackend:
    try:
        return backend_for(name, settings)
    except ImportError as exc:
        raise Failure(f"the {name} backend is not available here: {exc}") from None


def drive(record: ClusterRecord, store: ClusterStore, settings: AppCenterSettings,
          budget: operations.Budget, backend: NodeBackend | None = None) -> operations.Continue[ClusterStep] | dict[str, Any]:
    """Advance the record's run (checkpointed as it goes); the finished run, or Continue."""
    backend = backend or _backend(record.backend, settings)
    def on_stage(line: str) -> None:
        log.info(f"cluster {record.cluster_id}: {line}", extra={"fields": {"ClusterId": record.cluster_id}})

    executor = Executor(record, cluster_of(record), backend, store.save, settings, _translator(record),
                        placement=_placement(record), on_stage=on_stage)
    delay = executor.advance(budget.left)
    if delay is not None:
        return operations.Continue(delay=delay)
    assert record.run is not None
    return record.run


def watch_health(record: ClusterRecord, settings: AppCenterSettings, backend: NodeBackend | None = None) -> None:
    """Hand the cluster's health checks and monitor commands to its backend (a running cluster),
    or take them back (a stopped one); a backend without `watch` runs none."""
    backend = backend or _backend(record.backend, settings)
    watch, unwatch = getattr(backend, "watch", None), getattr(backend, "unwatch", None)
    if not callable(watch) or not callable(unwatch):
        return
    try:
        if record.desired_state == STOPPED or record.status == DELETING:
            unwatch(record.cluster_id)
            return
        checks = health_plan(cluster_of(record), record.nodes, settings.health_interval)
        watch(record.cluster_id, [dataclasses.asdict(c) for c in checks], _placement(record)[OWNER])
    except Exception as exc:  # noqa: BLE001 - the lifecycle's answer stands; the checks are reported missing
        log.warning("could not hand the cluster's health checks to its backend",
                    extra={"fields": {"ClusterId": record.cluster_id, "error": f"{type(exc).__name__}: {exc}"}})


def pause_health(record: ClusterRecord, settings: AppCenterSettings) -> None:
    """No health action (a restart) while a lifecycle operation stops or replaces nodes on purpose."""
    unwatch = getattr(_backend(record.backend, settings), "unwatch", None)
    if callable(unwatch):
        unwatch(record.cluster_id)


def _data_bytes(data: Mapping[str, Any]) -> int:
    return len(json.dumps(data, ensure_ascii=False).encode("utf-8", errors="surrogatepass"))


def endpoint_role(cluster: Cluster, name: str) -> str | None:
    """The role serving an endpoint: the one its port is bound to (``<role>.env.<key>``); None
    for a cluster-wide port (a number, ``env.<key>``)."""
    port = cluster.endpoints[name].port
    if isinstance(port, str):
        role, _, key = port.partition(".env.")
        if key and role in cluster.roles:
            return role
    return None


def endpoint_host(cluster: Cluster, record: ClusterRecord, name: str,
                  topology: Mapping[str, tuple[str, ...]]) -> str | None:
    """The address an endpoint is reported on: the first node with an IP of the role serving it;
    for a cluster-wide endpoint, of the first role (the package's order) that has one."""
    serving = endpoint_role(cluster, name)
    for role in [serving] if serving is not None else [*cluster.roles, *topology]:
        for node_id in topology.get(role, ()):
            ip = (record.node(node_id) or {}).get("ip")
            if ip:
                return str(ip)
    return None


def cluster_data(record: ClusterRecord) -> dict[str, Any]:
    """Data: ClusterId, the roles with their node counts, the endpoints as host:port, the version;
    compacted to stay within ROS's 4,096 bytes (node addresses go first)."""
    cluster = cluster_of(record)
    topology = record.topology()
    endpoints: dict[str, str] = {}
    for name in cluster.endpoints:
        port, host = cluster.endpoint_port(name), endpoint_host(cluster, record, name, topology)
        if host is not None and port is not None:
            endpoints[name] = f"{host}:{port}"
    data: dict[str, Any] = {
        "ClusterId": record.cluster_id, "Backend": record.backend, "Version": record.version,
        "State": record.desired_state, "Roles": {role: len(topology.get(role, ())) for role in cluster.roles},
        "Endpoints": endpoints,
        "Nodes": {role: [str((record.node(n) or {}).get("ip", "")) for n in members] for role, members in topology.items()},
    }
    for role in topology:
        if role not in data["Roles"]:
            data["Roles"][role] = len(topology[role])  # replicas
    if _data_bytes(data) > DATA_BUDGET:
        data.pop("Nodes")
    if _data_bytes(data) > DATA_BUDGET:
        data["Endpoints"] = dict(list(endpoints.items())[:8])
    return data


def _release(record: ClusterRecord, settings: AppCenterSettings) -> None:
    """Release every node of a cluster whose Create failed (no destroy: it never served)."""
    try:
        backend = _backend(record.backend, settings)
        backend.delete_nodes(record.cluster_id, [str(node["node_id"]) for node in record.nodes])
    except Exception as exc:  # noqa: BLE001 - reported with the Create's own failure
        log.warning("could not release the nodes of a failed cluster create",
                    extra={"fields": {"ClusterId": record.cluster_id, "error": f"{type(exc).__name__}: {exc}"}})


def _prop(props: Any, name: str, default: Any = None) -> Any:
    """A property of a Delete's (possibly unvalidated) properties."""
    if isinstance(props, Mapping):
        return props.get(name, default)
    return getattr(props, name, default)


def delete_force(props: Any) -> bool:
    """A Delete's `Force`, read as the model reads it: a boolean or "true"/"false" (ROS passes a
    String parameter's text). Anything else fails the Delete naming the property, forcing nothing."""
    try:
        return ros_boolean(_prop(props, "Force", False))
    except ValueError as exc:
        raise Failure(f"Force: {exc}") from None


# --- the provider --------------------------------------------------------------------------------

def build_provider(provider: Provider | None = None) -> Provider:
    """Register Custom::AppCluster on `provider` (a new one by default). Importing this module costs no I/O."""
    provider = provider or Provider()
    provider.set_deadline(APP_CLUSTER_TYPE, env_float(os.environ, ENV_DEADLINE, MAX_DEADLINE, minimum=1.0,
                                                      maximum=MAX_DEADLINE))
    step_seconds = AppCenterSettings.from_env().step_budget or operations.DEFAULT_STEP_SECONDS

    @operations.create(provider, APP_CLUSTER_TYPE, state=ClusterStep, step_seconds=step_seconds)
    def create_cluster(props: AppClusterProps, state: ClusterStep, request: Request, budget: operations.Budget) -> Any:
        settings, store = app_settings(), cluster_store()
        state.cluster_id = state.cluster_id or derived_id(request)
        record = store.get(state.cluster_id)
        if record is None:
            template_dir = os.environ.get(ENV_TEMPLATE_DIR) or os.getcwd()
            path = resolve_package(props.Package, template_dir)
            checked = _check(_load(path), props)
            assert checked.cluster is not None and checked.values is not None
            record = ClusterRecord(
                cluster_id=state.cluster_id, stack_id=request.stack_id, logical_id=request.logical_resource_id,
                request_id=request.request_id, backend=props.Backend or settings.backend, package=path,
                template_dir=template_dir, version=props.Version or "", language=props.Language, zone=props.Zone,
                resource_group=props.ResourceGroup, values=dict(checked.values.values),
                rendered=_rendered(checked.cluster), desired_state=props.DesiredState,
                run_token=props.RunService.Token if props.RunService else None, force=props.Force,
                secret_paths=secret_paths(checked.config))
            record.inputs = masked_inputs(props.Inputs, record.secret_paths)
            phases = [phase_of(plans.plan_create(checked.cluster), props.Force, "create")]
            if props.DesiredState == STOPPED:
                phases.append(phase_of(plans.plan_stop(checked.cluster), props.Force, "DesiredState Stopped"))
            record.run = new_run(f"{request.request_id}:create", phases)
            store.save(record)
            log.info(f"cluster {record.cluster_id}: create on the {record.backend} backend",
                     extra={"fields": {"ClusterId": record.cluster_id, "package": path}})
        outcome = drive(record, store, settings, budget)
        if isinstance(outcome, operations.Continue):
            return outcome
        if not outcome["ok"]:
            _release(record, settings)
            store.remove(record.cluster_id)  # a failed Create leaves nothing: its Delete never reaches us
            raise Failure(f"cluster {record.cluster_id} was not created: {outcome['reason']}")
        record.status = ACTIVE
        store.save(record)
        watch_health(record, settings)
        return Result(physical_id=record.cluster_id, data=cluster_data(record))

    @operations.update(provider, APP_CLUSTER_TYPE, state=ClusterStep, step_seconds=step_seconds)
    def update_cluster(props: AppClusterProps, old: Any, state: ClusterStep, request: Request,
                       budget: operations.Budget) -> Any:
        settings, store = app_settings(), cluster_store()
        cluster_id = state.cluster_id = state.cluster_id or (request.physical_resource_id or "")
        record = store.get(cluster_id)
        if record is None:
            raise Failure(f"cluster {cluster_id!r} is not in the provider's state (deleted outside the stack?); "
                          "delete the resource and create it again")
        key = f"{request.request_id}:update"
        if record.run is None or record.run.get("key") != key:
            changes = begin_update(record, props, settings)
            phases = clear_abandoned(record) + changes.phases
            record.run = {**new_run(key, phases), "upgrade_audit": changes.upgrade_audit}
            if changes.phases:
                pause_health(record, settings)
            store.save(record)
        outcome = drive(record, store, settings, budget)
        if isinstance(outcome, operations.Continue):
            return outcome
        watch_health(record, settings)  # the cluster lives on, updated or not
        if not outcome["ok"]:
            raise Failure(f"cluster {record.cluster_id} was not updated: {outcome['reason']}")
        return Result(data=cluster_data(record))

    @operations.delete(provider, APP_CLUSTER_TYPE, state=ClusterStep)
    def delete_cluster(props: Any, state: ClusterStep, request: Request, budget: operations.Budget) -> Any:
        settings, store = app_settings(), cluster_store()
        cluster_id = state.cluster_id = state.cluster_id or (request.physical_resource_id or "")
        record = store.get(cluster_id)
        if record is None:
            return Result()
        key = f"{request.request_id}:delete"
        if record.run is None or record.run.get("key") != key:
            cluster = cluster_of(record)
            stopped = record.desired_state == STOPPED
            plan = plans.plan_delete(cluster, record.topology(), running=not stopped)
            force = delete_force(props)
            if stopped:  # a warning where the user asked to force: there is nothing to force
                (log.warning if force else log.info)(
                    f"cluster {record.cluster_id} is Stopped: its delete runs no service (nothing runs on stopped "
                    "nodes), so no destroy gate and Force/allow_force do not apply; its nodes are released",
                    extra={"fields": {"ClusterId": record.cluster_id}})
            record.adding, record.deleting, record.vertical_roles = [], [], []
            record.run, record.status = new_run(key, [phase_of(plan, force, "delete")]), DELETING
            pause_health(record, settings)
            store.save(record)
        outcome = drive(record, store, settings, budget)
        if isinstance(outcome, operations.Continue):
            return outcome
        if not outcome["ok"]:
            record.status = ACTIVE
            store.save(record)
            watch_health(record, settings)
            raise Failure(f"cluster {record.cluster_id} was not deleted: {outcome['reason']}")
        store.remove(record.cluster_id)
        return Result()

    return provider


def upgrade_inputs(config: Config, inputs: Mapping[str, Any], deployed: Mapping[str, Any]) -> dict[str, Any]:
    """An upgrade's Inputs: the given ones over the deployed values of the items that cannot change
    (`changeable: false`) and that the new version still has, so a default the new version changed
    does not count as a change; an item new in this version takes its default."""
    carried = {path: deployed[path] for path, item in config.items.items()
               if not item.changeable and item.section != SERVICE_PARAMS and deployed.get(path) is not None}
    return {**carried, **inputs}


def begin_update(record: ClusterRecord, props: AppClusterProps, settings: AppCenterSettings) -> Changes:
    """Check the new properties against what is deployed, take them on the record, and return the
    Update's phases (the caller puts the run on the record); raises Failure naming every problem."""
    backend = props.Backend or settings.backend
    if backend != record.backend:
        raise Failure(f"Backend: a cluster cannot move from the {record.backend} backend to {backend}; "
                      "create another cluster instead")
    if (props.Zone or None) != (record.zone or None):
        raise Failure("Zone: a deployed cluster cannot change its zone; create another cluster instead")
    path = resolve_package(props.Package, record.template_dir)
    version = props.Version or ""
    upgrading = path != record.package or version != record.version
    if upgrading and (path == record.package or version == record.version):
        raise Failure("Package and Version change together (an upgrade to the package's new version): "
                      f"{'Version' if path == record.package else 'Package'} changed alone")
    package = _load(path)
    try:
        config = parse_config(package.config)
    except InvalidPackage as exc:
        raise _problems_failure(f"Package {path} is invalid", exc.problems) from None
    inputs = upgrade_inputs(config, props.Inputs, record.values) if upgrading else props.Inputs
    checked = _check(package, props, previous=record.values, inputs=inputs)
    assert checked.cluster is not None and checked.values is not None
    old, new = cluster_of(record), checked.cluster
    run_service = None
    token = props.RunService.Token if props.RunService else None
    if props.RunService is not None and token != record.run_token:
        wanted = props.RunService
        defining = [role for role, node in new.roles.items() if wanted.Name in node.services
                    and (wanted.Role is None or role == wanted.Role)]
        if not defining:
            raise Failure(f"RunService.Name: no role{' ' + wanted.Role if wanted.Role else ''} of this package defines "
                          f"the service {wanted.Name!r}")
        _, problems = service_params_for(config, wanted.Role or (defining[0] if len(defining) == 1 else None),
                                         wanted.Params, "RunService.Params")
        if errors_in(problems):
            raise _problems_failure(f"RunService {props.RunService.Name}", errors_in(problems))
        run_service = {"Name": props.RunService.Name, "Role": props.RunService.Role, "Params": props.RunService.Params}
    try:
        changes = plan_update(old, new, record.topology(), upgrade=(record.version, version) if upgrading else None,
                              desired=(record.desired_state, props.DesiredState), run_service=run_service,
                              force=props.Force, pending_upgrade=record.pending_upgrade)
    except plans.PlanError as exc:
        raise Failure(str(exc)) from None
    record.package, record.version, record.language = path, version, props.Language
    record.secret_paths = secret_paths(config)
    record.resource_group, record.values = props.ResourceGroup, dict(checked.values.values)
    record.inputs = masked_inputs(props.Inputs, record.secret_paths)
    record.rendered, record.desired_state, record.run_token, record.force = (
        _rendered(new), props.DesiredState, token, props.Force)
    record.pending_upgrade = changes.pending_upgrade
    log.info(f"cluster {record.cluster_id}: update: {'; '.join(changes.notes) or 'no lifecycle change'}",
             extra={"fields": {"ClusterId": record.cluster_id}})
    return changes


#: The module-level provider; `handler` is the Function Compute entry point.
provider = build_provider()
handler = provider.fc_handler
from .health_ecs import ecs_health_round  # noqa: E402 - the ecs backend's health checks run on the time trigger
provider.on_timer(ecs_health_round, name="appcenter-ecs-health")
