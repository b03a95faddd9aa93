"""Stack operations with ROS semantics: create, update and delete, with rollback and events.

The engine mutates a `StackRecord` in memory and reports every change through two callbacks:
`on_event` (each status change, as it happens) and `save` (persist the record). Delivery is
injected as a `Deliverer`, so the same engine runs in-process providers, the local FC/MNS
endpoints or real `web:` URLs. Local ALIYUN:: resources (`cloud_registry`) have no provider: the
engine applies them itself through the operation's `CloudSession`, in the same dependency order,
and a custom resource whose ServiceToken is one of the stack's own functions reaches that function.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection
from typing import Any

from .cloud_registry import is_cloud_token
from .cloud_session import CloudSession
from .errors import ResolutionError
from .graph import DependencyGraph
from .intrinsics import NO_VALUE
from .masking import mask, secret_values
from .model import LIVE_RESOURCE_STATUSES, STACK_RESOURCE_TYPE, ResourceRecord, StackEvent, StackRecord, utc_now
from .plan import DEFAULT_TIMEOUT, Plan, resource_settings, shown_token
from .protocol import Deliverer, Outcome, StackContext, build_request, failure
from .runner import Call, Runner

EventSink = Callable[[StackEvent], None]
#: save(record) persists everything; save(record, resource) just that resource's current state.
Saver = Callable[..., None]

CREATE, UPDATE, DELETE = "Create", "Update", "Delete"
_UNCHANGED, _SKIPPED = "Unchanged", "Skipped"
#: The reason a resource retained on delete (ROS RetainResources) is reported with.
RETAINED_REASON = "retained (RetainResources): no Delete request sent; the resource is left as it is"
RETAINED_ALL_REASON = "retained (RetainAllResources): no Delete request sent; the resource is left as it is"


def _context(record: StackRecord) -> StackContext:
    return StackContext(record.stack_id, record.name, record.region, record.account_id)


def _is_live(resource: ResourceRecord | None) -> bool:
    return resource is not None and resource.physical_id is not None and resource.status in LIVE_RESOURCE_STATUSES


def _never_requested(resource: ResourceRecord) -> bool:
    """No provider ever heard of it: its Create was never sent (its settings did not resolve, or
    nothing was bound to its token). Records from before `requested` existed have an empty token."""
    return resource.physical_id is None and (not resource.requested or not resource.service_token)


def update_conflicts(record: StackRecord, plan: Plan) -> list[str]:
    """Changes ROS refuses on update: a live resource's Type cannot change (spec §3.6)."""
    errors = []
    for name, spec in plan.resources.items():
        existing = record.resources.get(name)
        if _is_live(existing) and existing is not None and existing.resource_type != spec.type:
            errors.append(f"Resources.{name}.Type: cannot change from '{existing.resource_type}' to '{spec.type}' on update")
    return errors


class Engine:
    """Runs one stack operation at a time on a record; see the module docstring."""

    def __init__(self, deliver: Deliverer, on_event: EventSink, save: Saver, parallelism: int | None = None) -> None:
        #: The operation's local ALIYUN:: resources (set while create/update/delete runs).
        self._cloud: CloudSession | None = None
        self._runner = Runner(self._delivering(deliver), parallelism)
        self._on_event = on_event
        self._save = save
        self._secrets: list[str] = []

    # ------------------------------------------------------------------ local ALIYUN:: resources

    def _delivering(self, deliver: Deliverer) -> Deliverer:
        """Requests for the stack's own functions go to them; the rest to `deliver`."""

        def route(service_token: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
            cloud = self._cloud
            return (cloud.deliverer(deliver) if cloud is not None else deliver)(service_token, request, timeout)

        return route

    def _cloud_operation(self, record: StackRecord) -> CloudSession:
        self._cloud = CloudSession(record.region, record.account_id)
        self._cloud.attach(record.resources.values())
        return self._cloud

    def _end_cloud_operation(self) -> None:
        cloud, self._cloud = self._cloud, None
        if cloud is not None:
            cloud.close()

    def _apply_cloud(self, request_type: str, resource: ResourceRecord, properties: dict[str, Any],
                     old_properties: dict[str, Any] | None = None) -> Outcome:
        """A local ALIYUN:: resource's operation, done here rather than delivered (it has no provider)."""
        assert self._cloud is not None
        return self._cloud.apply(request_type, resource.resource_type, properties, resource.physical_id, old_properties)

    # ------------------------------------------------------------------ operations

    def create(self, record: StackRecord, plan: Plan, disable_rollback: bool = False) -> None:
        """CREATE_COMPLETE, or CREATE_FAILED / CREATE_ROLLBACK_COMPLETE / CREATE_ROLLBACK_FAILED."""
        self._cloud_operation(record)
        try:
            self._create(record, plan, disable_rollback)
        finally:
            self._end_cloud_operation()

    def update(self, record: StackRecord, plan: Plan, template_text: str, disable_rollback: bool = False) -> None:
        """UPDATE_COMPLETE, or UPDATE_FAILED / ROLLBACK_COMPLETE / ROLLBACK_FAILED (spec §9.4)."""
        self._cloud_operation(record)
        try:
            self._update(record, plan, template_text, disable_rollback)
        finally:
            self._end_cloud_operation()

    def delete(self, record: StackRecord, retain: Collection[str] = (), retain_reason: str = "") -> None:
        """Deletes in reverse dependency order; DeletionPolicy Retain and the resources in `retain`
        (ROS DeleteStack RetainResources) get no request and are reported DELETE_COMPLETE with why."""
        self._cloud_operation(record)
        try:
            self._delete(record, retain, retain_reason)
        finally:
            self._end_cloud_operation()

    def _create(self, record: StackRecord, plan: Plan, disable_rollback: bool = False) -> None:
        """CREATE_COMPLETE, or CREATE_FAILED / CREATE_ROLLBACK_COMPLETE / CREATE_ROLLBACK_FAILED."""
        self._secrets = secret_values(record.parameters, record.no_echo)
        self._stack_status(record, "CREATE_IN_PROGRESS", "")
        actions, reason, _ = self._deploy(record, plan)
        if reason is None:
            self._stack_status(record, "CREATE_COMPLETE", "")
            return
        if disable_rollback:
            self._stack_status(record, "CREATE_FAILED", reason)
            return
        self._stack_status(record, "CREATE_ROLLBACK_IN_PROGRESS", reason)
        revert = {node: DELETE for node, action in actions.items() if action == CREATE}
        failed = self._revert(record, revert, plan.graph, {})
        if failed:
            self._stack_status(record, "CREATE_ROLLBACK_FAILED", failed)
        else:
            self._stack_status(record, "CREATE_ROLLBACK_COMPLETE", reason)

    def _update(self, record: StackRecord, plan: Plan, template_text: str, disable_rollback: bool = False) -> None:
        before = (record.template_text, dict(record.parameters), list(record.no_echo), dict(record.outputs))
        previous = {name: copy.deepcopy(res) for name, res in record.resources.items()}
        record.template_text = template_text
        record.parameters = plan.parameter_values()
        record.no_echo = plan.no_echo
        self._secrets = secret_values({**before[1], **record.parameters}, set(before[2]) | set(record.no_echo))
        self._stack_status(record, "UPDATE_IN_PROGRESS", "")
        actions, reason, attempted = self._deploy(record, plan)
        if reason is None:
            problem = self._delete_removed(record, plan)
            self._stack_status(record, "UPDATE_FAILED" if problem else "UPDATE_COMPLETE", problem)
            return
        if disable_rollback:
            self._stack_status(record, "UPDATE_FAILED", reason)
            return
        self._stack_status(record, "ROLLBACK_IN_PROGRESS", reason)
        failed = self._rollback_update(record, plan, actions, previous, attempted)
        record.template_text, record.parameters, record.no_echo, record.outputs = before
        if failed:
            self._stack_status(record, "ROLLBACK_FAILED", failed)
        else:
            self._stack_status(record, "ROLLBACK_COMPLETE", reason)

    def _delete_removed(self, record: StackRecord, plan: Plan) -> str:
        """After a successful update, Delete resources the new template dropped (last, as ROS does)."""
        removed = [n for n, r in record.resources.items() if n not in plan.resources and r.status != "DELETE_COMPLETE"]
        old_graph = DependencyGraph({n: r.depends_on for n, r in record.resources.items()})
        problem = self._revert(record, {n: DELETE for n in removed}, old_graph, {})
        for name in [n for n, r in record.resources.items() if n not in plan.resources and r.status == "DELETE_COMPLETE"]:
            del record.resources[name]
        return problem

    def _rollback_update(
        self,
        record: StackRecord,
        plan: Plan,
        actions: dict[str, str],
        previous: dict[str, ResourceRecord],
        attempted: dict[str, dict[str, Any]],
    ) -> str:
        """Send the old properties back to what the update changed or tried to, then delete what it created.

        Like ROS's ROLLBACK_IN_PROGRESS: restores run in the old template's dependency order (a
        resource reading another's attributes is restored after it), then the resources the update
        added are deleted, dependents first.
        """
        # The resource whose Update failed is restored too: its provider may have changed it part way.
        restore = {
            n: UPDATE for n, a in actions.items()
            if a == UPDATE and record.resources[n].status in ("UPDATE_COMPLETE", "UPDATE_FAILED")
        }
        remove = {n: DELETE for n, a in actions.items() if a == CREATE}
        # A rollback Update says what it rolls back from: the properties the failed Update was sent
        # (`attempted`); the record keeps the last applied ones, so a failed rollback leaves none that never existed.
        old_graph = DependencyGraph({n: r.depends_on for n, r in previous.items()})
        problems = [self._revert(record, restore, old_graph, previous, forward=True, rolled_from=attempted)]
        problems.append(self._revert(record, remove, plan.graph, previous))
        for node in remove:
            if record.resources[node].status == "DELETE_COMPLETE" and node not in previous:
                del record.resources[node]
        return "; ".join(p for p in problems if p)

    def _delete(self, record: StackRecord, retain: Collection[str] = (), retain_reason: str = "") -> None:
        self._secrets = secret_values(record.parameters, record.no_echo)
        self._stack_status(record, "DELETE_IN_PROGRESS", "")
        for resource in record.resources.values():
            if _never_requested(resource):
                resource.status, resource.status_reason = "DELETE_COMPLETE", ""
        targets = {n: DELETE for n, r in record.resources.items() if r.status != "DELETE_COMPLETE"}
        graph = DependencyGraph({n: r.depends_on for n, r in record.resources.items()})
        retained = {n: retain_reason or RETAINED_REASON for n in retain if n in targets}
        failed = self._revert(record, targets, graph, {}, retained=retained)
        if failed:
            self._stack_status(record, "DELETE_FAILED", failed)
        else:
            record.outputs = {}
            self._stack_status(record, "DELETE_COMPLETE", "")

    # ------------------------------------------------------------------ create / update

    def _deploy(
        self, record: StackRecord, plan: Plan
    ) -> tuple[dict[str, str], str | None, dict[str, dict[str, Any]]]:
        """Create added and Update changed resources in order; returns (actions, failure reason, the
        properties each failed Update tried to apply)."""
        context = _context(record)
        actions: dict[str, str] = {}
        pending: dict[str, tuple[str, float, dict[str, Any]]] = {}
        attempted: dict[str, dict[str, Any]] = {}

        def lookup(name: str) -> tuple[str | None, dict[str, Any]] | None:
            resource = record.resources.get(name)
            return (resource.physical_id, resource.data) if _is_live(resource) and resource is not None else None

        def launch(node: str) -> Call | Outcome:
            spec = plan.resources[node]
            existing = record.resources.get(node)
            is_update = _is_live(existing)
            actions[node] = UPDATE if is_update else CREATE
            depends_on = sorted(plan.graph.dependencies(node))
            try:
                token, timeout, properties = resource_settings(plan, spec, lookup)
            except ResolutionError as exc:
                if not is_update:
                    record.resources[node] = ResourceRecord(
                        node, spec.type, "", DEFAULT_TIMEOUT, spec.deletion_policy, depends_on=depends_on, requested=False
                    )
                return failure(str(exc))
            if is_update and existing is not None:
                if token != existing.service_token:
                    return failure(
                        f"Resources.{node}.Properties.ServiceToken: cannot change on update "
                        f"(was '{shown_token(existing.service_token)}', now '{shown_token(token)}')"
                    )
                existing.timeout, existing.deletion_policy, existing.depends_on = timeout, spec.deletion_policy, depends_on
                if properties == existing.properties:
                    actions[node] = _UNCHANGED
                    return Outcome(ok=True, physical_id=existing.physical_id)
                pending[node] = (token, timeout, properties)
                request = build_request(context, UPDATE, node, spec.type, properties, existing.physical_id, existing.properties)
                self._resource_status(record, existing, "UPDATE_IN_PROGRESS", "")
                if is_cloud_token(token):
                    return self._apply_cloud(UPDATE, existing, properties, existing.properties)
                return Call(token, request, timeout)
            resource = ResourceRecord(node, spec.type, token, timeout, spec.deletion_policy, None, properties, {}, depends_on=depends_on)
            record.resources[node] = resource
            self._resource_status(record, resource, "CREATE_IN_PROGRESS", "")
            if is_cloud_token(token):
                return self._apply_cloud(CREATE, resource, properties)
            return Call(token, build_request(context, CREATE, node, spec.type, properties), timeout)

        def finish(node: str, outcome: Outcome) -> bool:
            action = actions[node]
            if action == _UNCHANGED:
                return True
            resource = record.resources[node]
            if not outcome.ok:
                status = "CREATE_FAILED" if action == CREATE else "UPDATE_FAILED"
                if action == CREATE and not outcome.sent:
                    resource.requested = False
                if action == UPDATE and node in pending:
                    attempted[node] = pending[node][2]
                self._resource_status(record, resource, status, outcome.reason)
                return False
            if action == CREATE:
                resource.physical_id = outcome.physical_id
                resource.data = outcome.data
                self._resource_status(record, resource, "CREATE_COMPLETE", "")
            else:
                resource.service_token, resource.timeout, resource.properties = pending[node]
                if is_cloud_token(resource.service_token) and outcome.physical_id:  # replaced on update
                    resource.physical_id = outcome.physical_id
                if outcome.data_given:
                    resource.data = outcome.data
                self._resource_status(record, resource, "UPDATE_COMPLETE", "")
            return True

        result = self._runner.run(plan.graph, launch, finish, stop_on_failure=True)
        if not result.ok:
            return actions, self._failure_summary(record, result.failed), attempted
        try:
            record.outputs = self._outputs(record, plan, lookup)
        except ResolutionError as exc:
            return actions, f"Outputs could not be resolved: {mask(str(exc), self._secrets)}", attempted
        self._save(record)
        return actions, None, attempted

    def _outputs(self, record: StackRecord, plan: Plan, lookup: Any) -> dict[str, dict[str, Any]]:
        outputs = {}
        for key, spec in plan.outputs.items():
            value = plan.evaluate(spec.value, f"Outputs.{key}.Value", lookup)
            if value is not NO_VALUE:
                outputs[key] = {"Value": value, "Description": spec.description}
        return outputs

    # ------------------------------------------------------------------ rollback / delete

    def _revert(
        self,
        record: StackRecord,
        operations: dict[str, str],
        graph: DependencyGraph,
        previous: dict[str, ResourceRecord],
        forward: bool = False,
        rolled_from: dict[str, dict[str, Any]] | None = None,
        retained: dict[str, str] | None = None,
    ) -> str:
        """Delete or restore resources in reverse (or, with `forward`, creation) dependency order;
        returns a failure summary or ''. A restore's OldResourceProperties come from `rolled_from`
        (default: the recorded properties);
        `retained` (logical id -> reason) get no Delete request."""
        if not operations:
            return ""
        context = _context(record)
        order = graph.subgraph(operations) if forward else graph.subgraph(operations).reversed()
        kinds: dict[str, str] = {}

        def launch(node: str) -> Call | Outcome:
            resource = record.resources[node]
            if operations[node] == UPDATE:
                old = previous[node]
                kinds[node] = UPDATE
                request = build_request(
                    context, UPDATE, node, resource.resource_type, old.properties, resource.physical_id,
                    (rolled_from or {}).get(node, resource.properties),
                )
                self._resource_status(record, resource, "UPDATE_IN_PROGRESS", "Rollback to the previous properties")
                if is_cloud_token(resource.service_token):
                    return self._apply_cloud(UPDATE, resource, old.properties, (rolled_from or {}).get(node, resource.properties))
                return Call(resource.service_token, request, old.timeout)
            if resource.deletion_policy == "Retain":
                kinds[node] = _SKIPPED
                return Outcome(ok=True, reason="DeletionPolicy is Retain: no Delete request sent")
            if retained and node in retained:
                kinds[node] = _SKIPPED
                return Outcome(ok=True, reason=retained[node])
            if _never_requested(resource):
                kinds[node] = _UNCHANGED
                return Outcome(ok=True)
            kinds[node] = DELETE
            request = build_request(context, DELETE, node, resource.resource_type, resource.properties, resource.physical_id)
            self._resource_status(record, resource, "DELETE_IN_PROGRESS", "")
            if is_cloud_token(resource.service_token):
                return self._apply_cloud(DELETE, resource, resource.properties)
            return Call(resource.service_token, request, resource.timeout)

        def finish(node: str, outcome: Outcome) -> bool:
            resource = record.resources[node]
            if kinds[node] == _UNCHANGED:
                return True
            if kinds[node] == UPDATE:
                if not outcome.ok:
                    self._resource_status(record, resource, "UPDATE_FAILED", outcome.reason)
                    return False
                old = previous[node]
                data = outcome.data if outcome.data_given else old.data
                if is_cloud_token(resource.service_token) and outcome.physical_id:  # replaced back
                    resource.physical_id = outcome.physical_id
                resource.properties, resource.service_token, resource.timeout, resource.data = (
                    old.properties,
                    old.service_token,
                    old.timeout,
                    data,
                )
                resource.depends_on, resource.deletion_policy = old.depends_on, old.deletion_policy
                self._resource_status(record, resource, "UPDATE_COMPLETE", "Rollback complete")
                return True
            if not outcome.ok:
                self._resource_status(record, resource, "DELETE_FAILED", outcome.reason)
                return False
            self._resource_status(record, resource, "DELETE_COMPLETE", outcome.reason)
            return True

        result = self._runner.run(order, launch, finish, stop_on_failure=False)
        if result.ok:
            return ""
        summary = self._failure_summary(record, result.failed)
        if result.not_started:
            blocked = ", ".join(sorted(result.not_started))
            summary = f"{summary}; not attempted because a dependent resource failed: {blocked}"
        return summary

    # ------------------------------------------------------------------ events

    def _failure_summary(self, record: StackRecord, failed: set[str]) -> str:
        parts = [f"Resource {name} failed: {record.resources[name].status_reason}" for name in sorted(failed)]
        return "; ".join(parts)

    def _stack_status(self, record: StackRecord, status: str, reason: str) -> None:
        record.status = status
        record.status_reason = mask(reason, self._secrets)
        record.updated_at = utc_now()
        self._save(record)
        self._emit(record, record.name, record.stack_id, STACK_RESOURCE_TYPE, status, record.status_reason)

    def _resource_status(self, record: StackRecord, resource: ResourceRecord, status: str, reason: str) -> None:
        resource.status = status
        resource.status_reason = mask(reason, self._secrets)
        self._save(record, resource)
        self._emit(record, resource.logical_id, resource.physical_id, resource.resource_type, status, resource.status_reason)

    def _emit(
        self, record: StackRecord, logical_id: str, physical_id: str | None, resource_type: str, status: str, reason: str
    ) -> None:
        event = StackEvent(utc_now(), record.name, record.stack_id, logical_id, physical_id, resource_type, status, reason)
        self._on_event(event)
