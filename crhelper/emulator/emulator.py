"""The public facade the CLI calls: StackEmulator runs and remembers local ROS stacks.

An operation is prepared once (`prepare`: the stack's state checked, the template parsed, the
parameters validated, the plan built) and then run (`run`) with a deliverer; `create`, `update`
and `delete` do both. Between the two, a caller sets delivery up from what the preparation found:
the ServiceTokens to bind and each resource's HttpConfig.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..local.supervisor import SupervisorClient, owned_by_stack, resource_owner
from ..logs import get_logger
from .engine import RETAINED_ALL_REASON, RETAINED_REASON, Engine, update_conflicts
from .errors import StackNotFoundError, StackStateError, TemplateValidationError, UnknownResourceError
from .masking import mask, masked_parameters, secret_values
from .model import (
    STACK_RESOURCE_TYPE,
    OutputDescription,
    ResourceDescription,
    StackDescription,
    StackEvent,
    StackRecord,
    utc_now,
)
from .plan import Plan, StackIdentity, build_plan, http_configs, service_tokens
from .protocol import Deliverer
from .runner import check_parallelism
from .state import StackStore
from .template import load_template

DEFAULT_REGION = "cn-hangzhou"
DEFAULT_ACCOUNT_ID = "123456789"
_STACK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,254}")
UPDATABLE_STATUSES = frozenset(
    {"CREATE_COMPLETE", "CREATE_FAILED", "UPDATE_COMPLETE", "UPDATE_FAILED", "ROLLBACK_COMPLETE", "ROLLBACK_FAILED"}
)

EventCallback = Callable[[StackEvent], None]
Operation = Literal["create", "update", "delete"]


_log = get_logger("emulator")

def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _STACK_NAME.fullmatch(name):
        raise StackStateError(
            f"stack name {name!r}: must be 1-255 letters, digits, '_' or '-', starting with a letter or digit",
            kind=StackStateError.INVALID_NAME, stack=str(name),
        )


def _exists(record: StackRecord) -> StackStateError:
    updatable = record.status in UPDATABLE_STATUSES
    return StackStateError(
        f"stack '{record.name}' already exists (status {record.status}); delete it first",
        kind=StackStateError.EXISTS, stack=record.name, status=record.status,
        next_operations=("update", "delete") if updatable else ("delete",),
    )


def _not_updatable(record: StackRecord) -> StackStateError:
    return StackStateError(
        f"stack '{record.name}' cannot be updated in status {record.status}",
        kind=StackStateError.NOT_UPDATABLE, stack=record.name, status=record.status, next_operations=("delete", "create"),
    )


def _changed(record: StackRecord, operation: str) -> StackStateError:
    return StackStateError(
        f"stack '{record.name}' was replaced by another process after this {operation} was prepared",
        kind=StackStateError.CHANGED, stack=record.name, status=record.status, next_operations=(operation,),
    )


@dataclass(frozen=True)
class PreparedOperation:
    """A stack operation checked and planned once, ready for `StackEmulator.run`.

    `service_tokens` (token -> logical ids) are the tokens a create or update calls that are known
    before anything runs (a delete calls the recorded ones); `http_configs` the evaluated
    HttpConfig of each resource that sets one (for `web:` delivery). `stack_id` pins the stack:
    if another process replaces it before the run, the run refuses. A delete sends no request to
    the resources in `retain` (ROS RetainResources / RetainAllResources). `parallelism` (ROS
    Parallelism) bounds the requests in flight at once, 0 meaning no limit; None (an update or a
    delete that sets none) keeps the stack's own."""

    operation: Operation
    name: str
    stack_id: str
    template_text: str
    plan: Plan | None = None
    service_tokens: dict[str, tuple[str, ...]] = field(default_factory=dict)
    http_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    retain: frozenset[str] = frozenset()
    retain_reason: str = ""
    parallelism: int | None = None


class StackEmulator:
    """Create, update, delete and inspect stacks; state lives in `home`/stacks.sqlite.

    `deliver(service_token, request, timeout_seconds) -> response body` is injected per call,
    so the CLI decides how each ServiceToken is reached. `on_event` sees every event live.
    Independent resources are requested all at once unless the stack's `parallelism` (ROS
    Parallelism, given to create or update and kept with the stack) says how many at most.
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        *,
        region: str = DEFAULT_REGION,
        account_id: str = DEFAULT_ACCOUNT_ID,
    ) -> None:
        self.store = StackStore(home)
        self.region = region
        self.account_id = account_id

    def close(self) -> None:
        """Release the store's database connection."""
        self.store.close()

    def __enter__(self) -> "StackEmulator":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ operations

    def validate(self, template_text: str, parameters: Mapping[str, Any] | None = None, name: str = "validation") -> None:
        """Raise TemplateValidationError listing every problem; nothing is stored or sent."""
        identity = StackIdentity(name, str(uuid.uuid4()), self.region, self.account_id)
        build_plan(load_template(template_text), parameters or {}, identity)

    def prepare(
        self,
        operation: Operation,
        name: str,
        template_text: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        *,
        use_previous_parameters: bool = False,
        retain: Collection[str] = (),
        retain_all: bool = False,
        parallelism: int | None = None,
    ) -> PreparedOperation:
        """Check the stack's state, parse the template and plan the operation, once.

        `template_text` is required for a create; an update without one keeps the current
        template. As in ROS UpdateStack, an update's parameters not given take the template's
        defaults, or with `use_previous_parameters` their current values (for parameters the
        template still declares). A delete keeps (sends no Delete to) the resources named in
        `retain`, or all of them with `retain_all`, as ROS DeleteStack RetainResources /
        RetainAllResources. `parallelism` (create, update: ROS Parallelism) bounds the requests in
        flight, 0 or None on a create meaning no limit, None on an update keeping the stack's; ValueError
        if it is not a whole number >= 0. Raises StackNotFoundError, StackStateError (with its fields),
        UnknownResourceError or TemplateValidationError; nothing is stored or sent."""
        if parallelism is not None:
            check_parallelism(parallelism)
        if operation == "create":
            return replace(self._prepare_create(name, template_text, parameters), parallelism=parallelism or 0)
        record = self._load_settled(name)
        self._refuse_busy(record)
        if operation == "update":
            return replace(self._prepare_update(record, template_text, parameters, use_previous_parameters),
                           parallelism=parallelism)
        if operation == "delete":
            return self._prepare_delete(record, retain, retain_all)
        raise ValueError(f"operation must be create, update or delete, got {operation!r}")

    def _prepare_create(self, name: str, template_text: str | None, parameters: Mapping[str, Any] | None) -> PreparedOperation:
        _check_name(name)
        if template_text is None:
            raise ValueError("a create needs the template text")
        existing = self.settled_record(name)
        if existing is not None and existing.status != "DELETE_COMPLETE":
            self._refuse_busy(existing)
            raise _exists(existing)
        identity = StackIdentity(name, str(uuid.uuid4()), self.region, self.account_id)
        plan = build_plan(load_template(template_text), parameters or {}, identity)
        return PreparedOperation("create", name, identity.stack_id, template_text, plan,
                                 self._needing_providers(service_tokens(plan)), http_configs(plan))

    def _prepare_update(
        self, record: StackRecord, template_text: str | None, parameters: Mapping[str, Any] | None, use_previous: bool
    ) -> PreparedOperation:
        if record.status not in UPDATABLE_STATUSES:
            raise _not_updatable(record)
        text = template_text if template_text is not None else record.template_text
        template = load_template(text)
        given = dict(parameters or {})
        if use_previous:  # previous values carry over only for parameters the (new) template still declares
            for key, value in record.parameters.items():
                if key in template.parameters and key not in given:
                    given[key] = value
        identity = StackIdentity(record.name, record.stack_id, record.region, record.account_id)
        plan = build_plan(template, given, identity)
        conflicts = update_conflicts(record, plan)
        if conflicts:
            raise TemplateValidationError(conflicts)
        return PreparedOperation("update", record.name, record.stack_id, text, plan,
                                 self._needing_providers(service_tokens(plan)), http_configs(plan))

    def _needing_providers(self, tokens: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        """The tokens less those naming a live function of a stack here, or a topic one of its mns_topic
        triggers listens to (a deployment template's outputs): the stack's CloudSession runs those
        functions, so they need no binding."""
        if not any(token.startswith(("acs:fc:", "acs:mns:")) for token in tokens):
            return tokens
        from .cloud_local_stacks import TOKEN_TYPES, canonical_token, live_tokens, stack_records

        served = live_tokens(stack_records(self.store, resource_types=TOKEN_TYPES))
        return {token: names for token, names in tokens.items() if canonical_token(token) not in served}

    def _prepare_delete(self, record: StackRecord, retain: Collection[str], retain_all: bool) -> PreparedOperation:
        unknown = set(retain) - set(record.resources)
        if unknown:
            raise UnknownResourceError(record.name, unknown, record.resources)
        kept = frozenset(record.resources) if retain_all else frozenset(retain)
        reason = RETAINED_ALL_REASON if retain_all else RETAINED_REASON
        configs: dict[str, dict[str, Any]] = {}
        if record.status != "DELETE_COMPLETE":
            template = load_template(record.template_text)
            if any(spec.http_config is not None for spec in template.resources.values()):
                identity = StackIdentity(record.name, record.stack_id, record.region, record.account_id)
                configs = http_configs(build_plan(template, record.parameters, identity))
        return PreparedOperation("delete", record.name, record.stack_id, record.template_text, http_configs=configs,
                                 retain=kept, retain_reason=reason)

    def run(
        self,
        prepared: PreparedOperation,
        deliver: Deliverer,
        *,
        disable_rollback: bool = False,
        on_event: EventCallback | None = None,
    ) -> StackDescription:
        """Run a prepared operation under the stack's operation lock (one at a time, across processes)."""
        with self._operation(prepared.name), self.store.deferred_writes():
            if prepared.operation == "create":
                record = self._new_record(prepared, disable_rollback)
                plan = prepared.plan
                assert plan is not None
                engine = self._engine(deliver, on_event, record.parallelism)
                self._guarded(record, "CREATE_FAILED", lambda: engine.create(record, plan, disable_rollback))
                return self._describe(record)
            record = self._load(prepared.name)
            if record.stack_id != prepared.stack_id:
                raise _changed(record, prepared.operation)
            if prepared.parallelism is not None:  # ROS keeps an update's Parallelism for later operations
                record.parallelism = prepared.parallelism
            engine = self._engine(deliver, on_event, record.parallelism)
            if prepared.operation == "update":
                self._run_update(record, prepared, engine, disable_rollback)
            elif record.status != "DELETE_COMPLETE":
                self._guarded(record, "DELETE_FAILED",
                              lambda: engine.delete(record, prepared.retain, prepared.retain_reason))
                if record.status == "DELETE_COMPLETE":
                    self._stop_leftover_processes(record, prepared.retain)
            return self._describe(record)

    def _stop_leftover_processes(self, record: StackRecord, retained: Collection[str] = ()) -> None:
        """A deleted stack leaves no process behind: stop what its resources' local backends started
        under the supervisor (owner `<stack id>/<logical id>`) and their providers did not stop.
        Resources retained on delete keep theirs: retaining means leaving the resource as it is."""
        client = SupervisorClient(self.store.home)
        kept = {resource_owner(record.stack_id, name) for name in retained}
        try:
            owners = sorted({s.owner for s in client.list() if owned_by_stack(s.owner, record.stack_id)} - kept)
            for owner in owners:
                stopped = client.stop_owner(owner, forget=True)
                _log.warning("stopped processes a deleted resource left running",
                             extra={"fields": {"owner": owner, "processes": [s.name for s in stopped]}})
        except Exception as exc:  # noqa: BLE001 - the stack is deleted; say what may still run
            _log.error("could not check for processes the stack left running; see `crhelper supervisor status`",
                       extra={"fields": {"StackId": record.stack_id, "error": str(exc)}})

    def _new_record(self, prepared: PreparedOperation, disable_rollback: bool) -> StackRecord:
        """The record of a stack being created; a deleted stack of the same name is forgotten first."""
        assert prepared.plan is not None
        existing = self.store.load(prepared.name)
        if existing is not None and existing.status != "DELETE_COMPLETE":
            raise _exists(existing)
        if existing is not None:
            self.store.remove(existing)
        return StackRecord(
            stack_id=prepared.stack_id,
            name=prepared.name,
            region=self.region,
            account_id=self.account_id,
            template_text=prepared.template_text,
            parameters=prepared.plan.parameter_values(),
            no_echo=prepared.plan.no_echo,
            status="CREATE_IN_PROGRESS",
            disable_rollback=disable_rollback,
            parallelism=prepared.parallelism or 0,
        )

    def _run_update(self, record: StackRecord, prepared: PreparedOperation, engine: Engine, disable_rollback: bool) -> None:
        plan = prepared.plan
        assert plan is not None
        if record.status not in UPDATABLE_STATUSES:
            raise _not_updatable(record)
        conflicts = update_conflicts(record, plan)  # again: the record may have moved on since prepare
        if conflicts:
            raise TemplateValidationError(conflicts)
        self._guarded(record, "UPDATE_FAILED", lambda: engine.update(record, plan, prepared.template_text, disable_rollback))

    def create(
        self,
        name: str,
        template_text: str,
        parameters: Mapping[str, Any] | None,
        deliver: Deliverer,
        *,
        disable_rollback: bool = False,
        on_event: EventCallback | None = None,
        parallelism: int | None = None,
    ) -> StackDescription:
        """Create a stack; `parallelism` (ROS Parallelism): at most that many requests at once, 0 or
        None for no limit, kept with the stack for its later operations."""
        prepared = self.prepare("create", name, template_text, parameters, parallelism=parallelism)
        return self.run(prepared, deliver, disable_rollback=disable_rollback, on_event=on_event)

    def update(
        self,
        name: str,
        template_text: str | None,
        parameters: Mapping[str, Any] | None,
        deliver: Deliverer,
        *,
        disable_rollback: bool = False,
        on_event: EventCallback | None = None,
        use_previous_parameters: bool = False,
        parallelism: int | None = None,
    ) -> StackDescription:
        """Update to a new template (None keeps the current one); unset parameters take the template's
        defaults, or their current values with `use_previous_parameters` (ROS UsePreviousParameters).
        `parallelism` replaces the stack's (0: no limit); None keeps it, as ROS UpdateStack does."""
        prepared = self.prepare("update", name, template_text, parameters, use_previous_parameters=use_previous_parameters,
                                parallelism=parallelism)
        return self.run(prepared, deliver, disable_rollback=disable_rollback, on_event=on_event)

    def delete(
        self,
        name: str,
        deliver: Deliverer,
        *,
        on_event: EventCallback | None = None,
        retain: Collection[str] = (),
        retain_all: bool = False,
    ) -> StackDescription:
        """Delete every resource (DeletionPolicy Retain ones and those in `retain`, or all with
        `retain_all`, get no request); a deleted stack stays describable."""
        return self.run(self.prepare("delete", name, retain=retain, retain_all=retain_all), deliver, on_event=on_event)

    # ------------------------------------------------------------------ queries

    def describe(self, name: str) -> StackDescription:
        return self._describe(self._load_settled(name))

    def events(self, name: str) -> list[StackEvent]:
        return self.store.events(self._load_settled(name).stack_id)

    def outputs(self, name: str) -> dict[str, Any]:
        return self.describe(name).output_values()

    def list_stacks(self) -> list[StackDescription]:
        records = [self.settled_record(name) for name in self.store.names()]
        return [self._describe(r) for r in records if r is not None]

    def settled_record(self, name: str) -> StackRecord | None:
        """The stored stack; one left *_IN_PROGRESS by a crhelper process that is gone (SIGKILL,
        power loss) is first marked interrupted, so every command reports what really happened
        instead of an operation that nothing runs any more."""
        record = self.store.load(name)
        if record is None or not record.status.endswith("_IN_PROGRESS") or self.store.operation_live(name):
            return record
        if self.store.claim_operation(name) is not None:  # another process started an operation meanwhile
            return self.store.load(name)
        try:
            record = self.store.load(name)
            if record is not None and record.status.endswith("_IN_PROGRESS"):
                self._mark_interrupted(record)
            return record
        finally:
            self.store.release_operation(name)

    # ------------------------------------------------------------------ helpers

    @contextlib.contextmanager
    def _operation(self, name: str) -> Iterator[None]:
        """One operation per stack at a time, across processes; a stack left *_IN_PROGRESS by a
        process that died (SIGKILL, power loss) is marked FAILED so it can be updated or deleted."""
        owner = self.store.claim_operation(name)
        if owner is not None:
            raise self._busy(name, owner)
        try:
            record = self.store.load(name)
            if record is not None and record.status.endswith("_IN_PROGRESS"):
                self._mark_interrupted(record)
            yield
        finally:
            self.store.release_operation(name)

    @staticmethod
    def _busy(name: str, owner: tuple[int, str], status: str | None = None) -> StackStateError:
        return StackStateError(
            f"stack '{name}' is busy: crhelper process {owner[0]} on {owner[1]} is running an operation on it",
            kind=StackStateError.BUSY, stack=name, status=status, next_operations=("events",),
        )

    def _refuse_busy(self, record: StackRecord) -> None:
        """A settled record still *_IN_PROGRESS has a live owner: say who, before anything is planned."""
        if record.status.endswith("_IN_PROGRESS"):
            owner = self.store.operation_owner(record.name)
            if owner is not None:
                raise self._busy(record.name, owner, record.status)

    def _mark_interrupted(self, record: StackRecord) -> None:
        reason = "interrupted: the crhelper process running this operation stopped before it finished"
        for resource in record.resources.values():
            if resource.status.endswith("_IN_PROGRESS"):
                resource.status = resource.status[: -len("_IN_PROGRESS")] + "_FAILED"
                resource.status_reason = reason
                self.store.append_event(StackEvent(utc_now(), record.name, record.stack_id, resource.logical_id,
                                                   resource.physical_id, resource.resource_type, resource.status, reason))
        record.status = record.status[: -len("_IN_PROGRESS")] + "_FAILED"
        record.status_reason = reason
        record.updated_at = utc_now()
        self.store.save(record)
        self.store.append_event(StackEvent(utc_now(), record.name, record.stack_id, record.name, record.stack_id,
                                           STACK_RESOURCE_TYPE, record.status, reason))

    def _load(self, name: str) -> StackRecord:
        record = self.store.load(name)
        if record is None:
            raise StackNotFoundError(name)
        return record

    def _load_settled(self, name: str) -> StackRecord:
        record = self.settled_record(name)
        if record is None:
            raise StackNotFoundError(name)
        return record

    def _engine(self, deliver: Deliverer, on_event: EventCallback | None, parallelism: int) -> Engine:
        def sink(event: StackEvent) -> None:
            self.store.append_event(event)
            if on_event is not None:
                on_event(event)

        return Engine(deliver, sink, self.store.save, parallelism)

    def _guarded(self, record: StackRecord, failed_status: str, operation: Callable[[], None]) -> None:
        """Run an operation; if it is interrupted, leave the stack FAILED rather than IN_PROGRESS."""
        try:
            operation()
        except BaseException as exc:
            record.status = failed_status
            record.status_reason = f"operation interrupted: {type(exc).__name__}"
            self.store.save(record)
            raise

    def _describe(self, record: StackRecord) -> StackDescription:
        secrets = secret_values(record.parameters, record.no_echo)
        resources = [
            ResourceDescription(
                logical_id=r.logical_id,
                resource_type=r.resource_type,
                physical_id=mask(r.physical_id, secrets),
                status=r.status,
                status_reason=r.status_reason,
                properties=mask(r.properties, secrets),
                data=mask(r.data, secrets),
                depends_on=list(r.depends_on),
                deletion_policy=r.deletion_policy,
            )
            for r in record.resources.values()
        ]
        outputs = [
            OutputDescription(key, mask(o.get("Value"), secrets), o.get("Description", ""))
            for key, o in record.outputs.items()
        ]
        return StackDescription(
            stack_id=record.stack_id,
            name=record.name,
            status=record.status,
            status_reason=record.status_reason,
            region=record.region,
            parameters=masked_parameters(record.parameters, record.no_echo),
            outputs=outputs,
            resources=resources,
            created_at=record.created_at,
            updated_at=record.updated_at,
        )



