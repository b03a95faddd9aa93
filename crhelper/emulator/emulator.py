"""The public facade the CLI calls: StackEmulator runs and remembers local ROS stacks."""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .engine import Engine, update_conflicts
from .errors import StackNotFoundError, StackStateError, TemplateValidationError
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
from .plan import StackIdentity, build_plan
from .protocol import Deliverer
from .state import StackStore
from .template import load_template

DEFAULT_REGION = "cn-hangzhou"
DEFAULT_ACCOUNT_ID = "123456789"
_STACK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,254}")
UPDATABLE_STATUSES = frozenset(
    {"CREATE_COMPLETE", "CREATE_FAILED", "UPDATE_COMPLETE", "UPDATE_FAILED", "ROLLBACK_COMPLETE", "ROLLBACK_FAILED"}
)

EventCallback = Callable[[StackEvent], None]


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _STACK_NAME.fullmatch(name):
        raise StackStateError(
            f"stack name {name!r}: must be 1-255 letters, digits, '_' or '-', starting with a letter or digit"
        )


class StackEmulator:
    """Create, update, delete and inspect stacks; state lives in `home`/stacks.sqlite.

    `deliver(service_token, request, timeout_seconds) -> response body` is injected per call,
    so the CLI decides how each ServiceToken is reached. `on_event` sees every event live.
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        *,
        region: str = DEFAULT_REGION,
        account_id: str = DEFAULT_ACCOUNT_ID,
        max_concurrency: int = 64,
    ) -> None:
        self.store = StackStore(home)
        self.region = region
        self.account_id = account_id
        self.max_concurrency = max_concurrency

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

    def create(
        self,
        name: str,
        template_text: str,
        parameters: Mapping[str, Any] | None,
        deliver: Deliverer,
        *,
        disable_rollback: bool = False,
        on_event: EventCallback | None = None,
    ) -> StackDescription:
        _check_name(name)
        with self._operation(name):
            return self._create(name, template_text, parameters, deliver, disable_rollback, on_event)

    def _create(
        self,
        name: str,
        template_text: str,
        parameters: Mapping[str, Any] | None,
        deliver: Deliverer,
        disable_rollback: bool,
        on_event: EventCallback | None,
    ) -> StackDescription:
        existing = self.store.load(name)
        if existing is not None and existing.status != "DELETE_COMPLETE":
            raise StackStateError(f"stack '{name}' already exists (status {existing.status}); delete it first")
        identity = StackIdentity(name, str(uuid.uuid4()), self.region, self.account_id)
        plan = build_plan(load_template(template_text), parameters or {}, identity)
        if existing is not None:
            self.store.remove(existing)
        record = StackRecord(
            stack_id=identity.stack_id,
            name=name,
            region=self.region,
            account_id=self.account_id,
            template_text=template_text,
            parameters=plan.parameter_values(),
            no_echo=plan.no_echo,
            status="CREATE_IN_PROGRESS",
            disable_rollback=disable_rollback,
        )
        engine = self._engine(deliver, on_event)
        self._guarded(record, "CREATE_FAILED", lambda: engine.create(record, plan, disable_rollback))
        return self._describe(record)

    def update(
        self,
        name: str,
        template_text: str | None,
        parameters: Mapping[str, Any] | None,
        deliver: Deliverer,
        *,
        disable_rollback: bool = False,
        on_event: EventCallback | None = None,
        use_previous_parameters: bool = True,
    ) -> StackDescription:
        """Update to a new template (None keeps the current one); unset parameters keep their values."""
        with self._operation(name):
            return self._update(name, template_text, parameters, deliver, disable_rollback, on_event, use_previous_parameters)

    def _update(
        self,
        name: str,
        template_text: str | None,
        parameters: Mapping[str, Any] | None,
        deliver: Deliverer,
        disable_rollback: bool,
        on_event: EventCallback | None,
        use_previous_parameters: bool,
    ) -> StackDescription:
        record = self._load(name)
        if record.status not in UPDATABLE_STATUSES:
            raise StackStateError(f"stack '{name}' cannot be updated in status {record.status}")
        text = template_text if template_text is not None else record.template_text
        template = load_template(text)
        given = dict(parameters or {})
        if use_previous_parameters:
            for key, value in record.parameters.items():
                if key in template.parameters and key not in given:
                    given[key] = value
        identity = StackIdentity(record.name, record.stack_id, record.region, record.account_id)
        plan = build_plan(template, given, identity)
        conflicts = update_conflicts(record, plan)
        if conflicts:
            raise TemplateValidationError(conflicts)
        engine = self._engine(deliver, on_event)
        self._guarded(record, "UPDATE_FAILED", lambda: engine.update(record, plan, text, disable_rollback))
        return self._describe(record)

    def delete(self, name: str, deliver: Deliverer, *, on_event: EventCallback | None = None) -> StackDescription:
        """Delete every resource (Retain ones get no request); a deleted stack stays describable."""
        with self._operation(name):
            return self._delete(name, deliver, on_event)

    def _delete(self, name: str, deliver: Deliverer, on_event: EventCallback | None) -> StackDescription:
        record = self._load(name)
        if record.status == "DELETE_COMPLETE":
            return self._describe(record)
        if record.status.endswith("_IN_PROGRESS"):
            raise StackStateError(f"stack '{name}' cannot be deleted in status {record.status}")
        engine = self._engine(deliver, on_event)
        self._guarded(record, "DELETE_FAILED", lambda: engine.delete(record))
        return self._describe(record)

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
            raise StackStateError(
                f"stack '{name}' is busy: crhelper process {owner[0]} on {owner[1]} is running an operation on it"
            )
        try:
            record = self.store.load(name)
            if record is not None and record.status.endswith("_IN_PROGRESS"):
                self._mark_interrupted(record)
            yield
        finally:
            self.store.release_operation(name)

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

    def _engine(self, deliver: Deliverer, on_event: EventCallback | None) -> Engine:
        def sink(event: StackEvent) -> None:
            self.store.append_event(event)
            if on_event is not None:
                on_event(event)

        return Engine(deliver, sink, self.store.save, self.max_concurrency)

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



