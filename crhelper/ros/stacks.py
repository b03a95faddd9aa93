"""The local ROS as its API and console see it: stacks addressed by StackId, plain data with ROS's
field names, operations running asynchronously as in ROS.

`LocalStacks` is the one facade the ROS 2019-09-10 endpoint (`crhelper.ros.api`) and the console share. It
drives the same `StackEmulator` and state (`$CRHELPER_HOME/stacks.sqlite`) as `crhelper stack`, so a
stack created here is listed there and the other way round. CreateStack, UpdateStack and
DeleteStack return at once: the operation runs on a thread of its own and GetStack shows its
progress. One operation per stack at a time: a second is refused with ROS's `ActionInProgress`, in
this process and against a `crhelper stack` process working on the same stack.

Times are UTC `YYYY-MM-DDThh:mm:ss` (no zone letter), as ROS's response models document them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

import yaml

from ..emulator import (
    EmulatorError,
    PreparedOperation,
    StackEmulator,
    StackEvent,
    StackNotFoundError,
    StackStateError,
    TemplateValidationError,
    UnknownResourceError,
)
from ..emulator.delivery import StackDelivery
from ..emulator.delivery_bindings import BindingError, Bindings, load_bindings, remember_bindings, remembered_bindings
from ..emulator.masking import mask, masked_parameters, secret_values
from ..emulator.model import STACK_RESOURCE_TYPE, StackRecord
from ..emulator.provider_logs import LogRecord, ProviderLogs, read_records, render
from ..emulator.protocol import Deliverer, RequestNotSent
from ..emulator.template import load_template
from ..loading import import_from_cwd
from ..logs import current_request, get_logger

__all__ = ["RosError", "LocalStacks", "ros_time", "DEFAULT_TIMEOUT_MINUTES"]

_log = get_logger("local")

DEFAULT_TIMEOUT_MINUTES = 60
MIN_TIMEOUT_MINUTES, MAX_TIMEOUT_MINUTES = 10, 1440
MAX_CLIENT_TOKEN = 64
#: How long `close()` waits for running operations before leaving them to be marked interrupted.
CLOSE_WAIT_SECONDS = 30.0
#: How long a new operation waits for the previous one, already finished, to close its endpoints.
FINISH_WAIT_SECONDS = 10.0
_EVENT_NAMESPACE = uuid.UUID("5d1b7b5e-6a0c-4c84-9b0e-0c9c1f2a6e11")
_SUCCESS = {"create": "CREATE_COMPLETE", "update": "UPDATE_COMPLETE", "delete": "DELETE_COMPLETE"}


_Dicts = list[dict[str, Any]]
_Names = list[str]


class RosError(Exception):
    """A refusal in ROS's words: its error `code`, `message` and the HTTP `status` it comes with."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


def ros_time(timestamp: str | None) -> str:
    """`2026-01-02T03:04:05.678Z` (the emulator's) -> `2026-01-02T03:04:05` (ROS's response format)."""
    return (timestamp or "")[:19]


def _stack_not_found(name: str) -> RosError:
    return RosError("StackNotFound", f"The Stack ({name}) could not be found.", 404)


def _in_progress(name: str, action: str) -> RosError:
    return RosError("ActionInProgress", f"Stack {name} already has an action ({action}) in progress.", 409)


def _translated(exc: Exception, name: str) -> RosError:
    """The emulator's refusal as the ROS error a client of the real service would get."""
    if isinstance(exc, RosError):
        return exc
    if isinstance(exc, StackNotFoundError):
        return _stack_not_found(exc.name)
    if isinstance(exc, StackStateError):
        if exc.kind == StackStateError.EXISTS:
            return RosError("StackExists", f"The Stack ({exc.stack}) already exists.", 409)
        if exc.kind in (StackStateError.BUSY, StackStateError.CHANGED):
            return _in_progress(exc.stack, (exc.status or "UNKNOWN").rsplit("_IN_PROGRESS", 1)[0] or "UNKNOWN")
        if exc.kind == StackStateError.INVALID_NAME:
            return RosError("InvalidParameter", f"The specified parameter StackName is invalid, {exc}.", 400)
        if exc.kind == StackStateError.NOT_UPDATABLE:
            return RosError("NotSupported", f"Updating a stack when it is {exc.status} is not supported "
                                            f"(stack {exc.stack}); delete it and create it again.", 400)
    if isinstance(exc, TemplateValidationError):
        return RosError("StackValidationFailed", "Stack validation failed: " + "; ".join(exc.errors) + ".", 400)
    if isinstance(exc, UnknownResourceError):
        return RosError("InvalidParameter", f"The specified parameter RetainResources is invalid, {exc}.", 400)
    if isinstance(exc, BindingError):
        return RosError("StackValidationFailed", f"Stack validation failed: {exc}.", 400)
    if isinstance(exc, ValueError):
        return RosError("InvalidParameter", f"The specified parameter is invalid, {exc}.", 400)
    return RosError("StackValidationFailed", f"Stack validation failed: {exc}.", 400)


@dataclasses.dataclass
class _Running:
    """An operation this process runs: its thread and the ROS action name it reports."""

    action: str
    thread: threading.Thread
    started: threading.Event


@dataclasses.dataclass
class _Extras:
    """What ROS keeps with a stack that the emulator does not: per server process."""

    timeout_minutes: int = DEFAULT_TIMEOUT_MINUTES
    tags: dict[str, str] = dataclasses.field(default_factory=dict)
    client_tokens: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)  # token -> (op, fingerprint)


class _OutputRouter(ProviderLogs):
    """One capture of in-process providers' output for the whole server: each line goes to the log
    sink of the operation whose request wrote it (by the request's StackId), as `crhelper stack`'s
    single-operation capture does; lines outside any operation pass through."""

    def __init__(self, home: Path) -> None:
        super().__init__("", home, out=sys.stdout, err=sys.stderr)
        self._sinks: dict[str, ProviderLogs] = {}
        self._sinks_lock = threading.Lock()

    def attach(self, stack_id: str, logs: ProviderLogs) -> None:
        with self._sinks_lock:
            self._sinks[stack_id] = logs

    def detach(self, stack_id: str) -> None:
        with self._sinks_lock:
            self._sinks.pop(stack_id, None)

    def _sink(self) -> ProviderLogs | None:
        stack_id = current_request().get("StackId", "")
        with self._sinks_lock:
            return self._sinks.get(stack_id)

    def line(self, text: str, *, stream: str, resource: str = "", request_type: str = "", request_id: str = "") -> None:
        sink = self._sink()
        if sink is None:
            self.passthrough(text + "\n", self.err if stream == "stderr" else self.out)
            return
        sink.line(text, stream=stream, resource=resource, request_type=request_type, request_id=request_id)

    def add(self, record: LogRecord) -> None:
        sink = self._sink()
        if sink is not None:
            sink.add(dataclasses.replace(record, stack=sink.stack))

    def redact(self, text: str) -> str:
        sink = self._sink()
        return sink.redact(text) if sink is not None else text


class _EventLog:
    """One stack's events converted to ROS's fields, oldest first, with each resource's first and
    last event time (ListStackResources' CreateTime / UpdateTime)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.first: dict[str, str] = {}
        self.last: dict[str, str] = {}

    def add(self, stack_id: str, name: str, event: StackEvent) -> None:
        stack_event = event.resource_type == STACK_RESOURCE_TYPE and event.logical_id == name
        self.events.append({
            "EventId": str(uuid.uuid5(_EVENT_NAMESPACE, f"{stack_id}/{len(self.events)}")),
            "StackId": stack_id,
            "StackName": name,
            "LogicalResourceId": event.logical_id,
            "PhysicalResourceId": event.physical_id or "",
            "ResourceType": event.resource_type,
            "Status": event.status,
            "StatusReason": event.reason or (_default_reason(event.status) if stack_event else ""),
            "CreateTime": ros_time(event.timestamp),
        })
        if not stack_event:
            self.first.setdefault(event.logical_id, event.timestamp)
            self.last[event.logical_id] = event.timestamp

    def snapshot(self) -> "_EventLog":
        """A copy whose lists the caller may keep while more events are added."""
        copy = _EventLog()
        copy.events, copy.first, copy.last = list(self.events), dict(self.first), dict(self.last)
        return copy


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode("utf-8")).hexdigest()


class LocalStacks:
    """Create, update, delete and read local stacks by StackId; see the module docstring.

    `bindings` is a bindings file (what `crhelper stack --bindings` reads) applied to every
    operation over the bindings remembered with each stack. With `capture_output`, what in-process
    providers print or log goes to their stack's provider log (sys.stdout / sys.stderr are routed
    until `close()`): for a server process, which owns its standard streams."""

    def __init__(self, home: str | os.PathLike[str] | None = None, region: str = "cn-hangzhou",
                 bindings: str | os.PathLike[str] | Bindings | None = None, *, capture_output: bool = False) -> None:
        if isinstance(bindings, Bindings) or bindings is None:
            self._bindings = bindings
        else:
            self._bindings = load_bindings(os.fspath(bindings))
        self.region = region
        self._emulator = StackEmulator(home, region=region)
        self.home = self._emulator.store.home
        self._lock = threading.RLock()
        self._running: dict[str, _Running] = {}  # stack name -> its operation in this process
        self._running_lock = threading.Lock()
        self._extras: dict[str, _Extras] = {}  # stack id -> what the emulator does not keep
        self._event_logs: dict[str, _EventLog] = {}  # stack id -> its events as ROS shows them
        self._events_lock = threading.Lock()
        self._create_tokens: dict[str, tuple[str, str]] = {}  # ClientToken -> (fingerprint, StackId)
        self._changed = threading.Condition()
        self._version = 0
        self._closed = False
        self._exit = contextlib.ExitStack()
        self._router: _OutputRouter | None = None
        if capture_output:
            self._router = _OutputRouter(self.home)
            self._exit.enter_context(self._router.capture())
        import_from_cwd()  # bound `package.module:provider` specs resolve from here, as in `crhelper stack`

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Wait (up to CLOSE_WAIT_SECONDS) for running operations, then release the store."""
        with self._lock, self._running_lock:
            self._closed = True
            threads = [r.thread for r in self._running.values()]
        for thread in threads:
            thread.join(CLOSE_WAIT_SECONDS)
        self._exit.close()
        self._emulator.close()

    def __enter__(self) -> "LocalStacks":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ change notification

    @property
    def version(self) -> int:
        """A counter that grows with every event and every finished operation (for live views)."""
        with self._changed:
            return self._version

    def wait_for_change(self, version: int, timeout: float) -> int:
        """Block until `version` is passed or `timeout` seconds went by; the current version."""
        with self._changed:
            self._changed.wait_for(lambda: self._version > version, timeout)
            return self._version

    def _bump(self, _event: StackEvent | None = None) -> None:
        with self._changed:
            self._version += 1
            self._changed.notify_all()

    # ------------------------------------------------------------------ lookups

    def _name(self, stack_id: str) -> str:
        """The stack's name from its StackId (a name is accepted too, as ROS resolves them)."""
        found = self._emulator.store.name_of(stack_id)
        if found is not None:
            return found[0]
        if self._emulator.store.load(stack_id) is not None:
            return stack_id
        raise _stack_not_found(stack_id)

    def _record(self, stack_id: str) -> StackRecord:
        name = self._name(stack_id)
        record = self._emulator.settled_record(name)
        if record is None:
            raise _stack_not_found(stack_id)
        return record

    def stack_id_of(self, stack_id_or_name: str) -> str:
        """The StackId of a stack given by id or by name; RosError StackNotFound."""
        return self._record(stack_id_or_name).stack_id

    def _extras_of(self, stack_id: str) -> _Extras:
        with self._lock:
            return self._extras.setdefault(stack_id, _Extras())

    # ------------------------------------------------------------------ operations

    def _refuse_running(self, name: str) -> None:
        """ActionInProgress while this process runs an operation on the stack; one whose stack already
        shows its final status is only closing its local endpoints, so it is waited for."""
        with self._running_lock:
            running = self._running.get(name)
        if running is None or not running.thread.is_alive():
            return
        record = self._emulator.store.load(name)
        if record is not None and not record.status.endswith("_IN_PROGRESS"):
            running.thread.join(FINISH_WAIT_SECONDS)
        if running.thread.is_alive():
            raise _in_progress(name, running.action)

    def _bindings_for(self, name: str) -> Bindings:
        bindings = remembered_bindings(self.home, name)
        if self._bindings is not None:
            given = self._bindings
            bindings = dataclasses.replace(given, providers={**bindings.providers, **given.providers},
                                           environment={**bindings.environment, **given.environment})
        return bindings

    def _check_bound(self, prepared: PreparedOperation, bindings: Bindings) -> None:
        missing = bindings.unbound(prepared.service_tokens)
        if missing:
            listed = "; ".join(f"{token} (used by {', '.join(names)})" for token, names in missing.items())
            raise RosError("StackValidationFailed",
                           f"Stack validation failed: no local provider is bound to ServiceToken {listed}; "
                           "serve with `crhelper ros serve --bindings FILE` naming a provider for it.", 400)

    @staticmethod
    def _check_timeout(timeout_minutes: int | None) -> int | None:
        if timeout_minutes is None:
            return None
        if isinstance(timeout_minutes, bool) or not isinstance(timeout_minutes, int) \
                or not MIN_TIMEOUT_MINUTES <= timeout_minutes <= MAX_TIMEOUT_MINUTES:
            raise RosError("InvalidParameter", f"The specified parameter TimeoutInMinutes is invalid, it must be "
                                               f"a whole number from {MIN_TIMEOUT_MINUTES} to {MAX_TIMEOUT_MINUTES}.")
        return timeout_minutes

    @staticmethod
    def _check_token(client_token: str | None) -> None:
        if client_token is not None and (not client_token or len(client_token) > MAX_CLIENT_TOKEN):
            raise RosError("InvalidParameter", f"The specified parameter ClientToken is invalid, it must be 1 to "
                                               f"{MAX_CLIENT_TOKEN} characters.")

    def _start(self, prepared: PreparedOperation, bindings: Bindings, action: str,
               disable_rollback: bool = False, before: Callable[[], None] | None = None) -> None:
        """Run `prepared` on its own thread; return once the stack shows the operation in progress."""
        started = threading.Event()
        with self._lock:
            if self._closed:
                raise RosError("ServiceUnavailable", "The local ROS is shutting down.", 503)
            self._refuse_running(prepared.name)
            if before is not None:
                before()
            minutes = self._extras_of(prepared.stack_id).timeout_minutes
            thread = threading.Thread(target=self._operate, args=(prepared, bindings, disable_rollback, started, minutes),
                                      name=f"ros-{prepared.operation}-{prepared.name}", daemon=True)
            with self._running_lock:
                self._running[prepared.name] = _Running(action, thread, started)
            thread.start()
        started.wait(30)

    def _operate(self, prepared: PreparedOperation, bindings: Bindings, disable_rollback: bool,
                 started: threading.Event, timeout_minutes: int) -> None:
        def on_event(event: StackEvent) -> None:
            started.set()
            self._bump(event)

        deadline = time.monotonic() + timeout_minutes * 60

        def within_timeout(deliver: Deliverer) -> Deliverer:
            """ROS TimeoutInMinutes: no request waits past the operation's deadline; none starts after it."""
            def bounded(token: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RequestNotSent(f"the stack operation timed out (TimeoutInMinutes {timeout_minutes})")
                return deliver(token, request, min(timeout, remaining))

            return bounded

        null = open(os.devnull, "w", encoding="utf-8")  # the lines are kept in the stack's log file
        logs = ProviderLogs(prepared.name, self.home, out=null, err=null)
        if self._router is not None:
            self._router.attach(prepared.stack_id, logs)
        try:
            with logs, StackDelivery(bindings, region=self._emulator.region, account_id=self._emulator.account_id,
                                     http_configs=prepared.http_configs, logs=logs) as deliver:
                description = self._emulator.run(prepared, within_timeout(deliver), disable_rollback=disable_rollback,
                                                 on_event=on_event)
            if description.status != _SUCCESS[prepared.operation]:
                _log.warning("stack operation did not succeed", extra={"fields": {
                    "StackName": prepared.name, "Status": description.status, "StatusReason": description.status_reason}})
        except Exception as exc:  # noqa: BLE001 - reported through the stack's status; never lost
            _log.error("stack operation failed", exc_info=True, extra={"fields": {"StackName": prepared.name,
                                                                                    "error": str(exc)}})
        finally:
            if self._router is not None:
                self._router.detach(prepared.stack_id)
            null.close()
            with self._running_lock:  # never self._lock: a new operation holds it while it waits for this one
                running = self._running.get(prepared.name)
                if running is not None and running.thread is threading.current_thread():
                    del self._running[prepared.name]
            started.set()
            self._bump()

    def create(self, name: str, template_body: str, parameters: Mapping[str, str], *, disable_rollback: bool = False,
               timeout_minutes: int | None = None, client_token: str | None = None,
               parallelism: int | None = None, tags: Mapping[str, str] | None = None) -> str:
        """CreateStack: checks and plans now (errors raise RosError), runs in the background; the StackId.
        `tags` are kept with the stack (shown by GetStack / ListStacks) for this server's lifetime."""
        timeout = self._check_timeout(timeout_minutes)
        self._check_token(client_token)
        fingerprint = _fingerprint(name, template_body, dict(parameters), disable_rollback, timeout, parallelism)
        with self._lock:
            if client_token is not None and client_token in self._create_tokens:
                known, stack_id = self._create_tokens[client_token]
                if known != fingerprint:
                    raise RosError("InvalidIdempotenceParameter", "The specified parameters are different from before.")
                return stack_id
            existing = self._emulator.store.load(name)
            if existing is not None and existing.status != "DELETE_COMPLETE":  # whatever it is doing, as ROS says
                raise RosError("StackExists", f"The Stack ({name}) already exists.", 409)
            try:
                self._refuse_running(name)
                prepared = self._emulator.prepare("create", name, template_body, dict(parameters), parallelism=parallelism)
                bindings = self._bindings_for(name)
                self._check_bound(prepared, bindings)
            except (EmulatorError, BindingError, ValueError) as exc:
                raise _translated(exc, name) from None

            def remember() -> None:
                remember_bindings(self.home, name, bindings)
                self._extras[prepared.stack_id] = _Extras(timeout or DEFAULT_TIMEOUT_MINUTES, dict(tags or {}))
                if client_token is not None:
                    self._create_tokens[client_token] = (fingerprint, prepared.stack_id)

            self._start(prepared, bindings, "CREATE", disable_rollback, remember)
        return prepared.stack_id

    def update(self, stack_id: str, template_body: str | None, parameters: Mapping[str, str], *,
               use_previous_parameters: bool = False, disable_rollback: bool = False,
               timeout_minutes: int | None = None, client_token: str | None = None,
               parallelism: int | None = None) -> str:
        """UpdateStack (None keeps the template); parameters not given take the template's defaults,
        or with `use_previous_parameters` the stack's current values. Returns the StackId."""
        timeout = self._check_timeout(timeout_minutes)
        self._check_token(client_token)
        with self._lock:
            record = self._record(stack_id)
            if self._repeated(record.stack_id, "update", client_token, template_body, dict(parameters),
                              use_previous_parameters, disable_rollback, timeout, parallelism):
                return record.stack_id
            try:
                self._refuse_running(record.name)
                prepared = self._emulator.prepare("update", record.name, template_body, dict(parameters),
                                                  use_previous_parameters=use_previous_parameters, parallelism=parallelism)
                bindings = self._bindings_for(record.name)
                self._check_bound(prepared, bindings)
            except (EmulatorError, BindingError, ValueError) as exc:
                raise _translated(exc, record.name) from None
            unchanged = (prepared.plan is not None and prepared.template_text == record.template_text
                         and prepared.plan.parameter_values() == record.parameters
                         and parallelism in (None, record.parallelism))
            if unchanged and record.status in ("CREATE_COMPLETE", "UPDATE_COMPLETE"):  # ROS: an update must change something
                raise RosError("NotSupported", "Update the completely same stack is not supported.", 400)

            def remember() -> None:
                remember_bindings(self.home, record.name, bindings)
                if timeout is not None:
                    self._extras_of(record.stack_id).timeout_minutes = timeout

            self._start(prepared, bindings, "UPDATE", disable_rollback, remember)
        return record.stack_id

    def delete(self, stack_id: str, *, retain_resources: list[str] | None = None, retain_all: bool = False,
               client_token: str | None = None) -> None:
        """DeleteStack: resources in `retain_resources` (or all with `retain_all`) get no Delete request."""
        self._check_token(client_token)
        with self._lock:
            record = self._record(stack_id)
            if self._repeated(record.stack_id, "delete", client_token, sorted(retain_resources or []), retain_all):
                return
            if record.status == "DELETE_COMPLETE":
                return
            try:
                self._refuse_running(record.name)
                prepared = self._emulator.prepare("delete", record.name, retain=retain_resources or (),
                                                  retain_all=retain_all)
            except (EmulatorError, BindingError, ValueError) as exc:
                raise _translated(exc, record.name) from None
            self._start(prepared, self._bindings_for(record.name), "DELETE")

    def _repeated(self, stack_id: str, operation: str, client_token: str | None, *parts: Any) -> bool:
        """True when `client_token` already started this very operation (the SDK retrying);
        InvalidIdempotenceParameter when it started a different one."""
        if client_token is None:
            return False
        extras = self._extras_of(stack_id)
        fingerprint = _fingerprint(operation, *parts)
        known = extras.client_tokens.get(client_token)
        if known is None:
            extras.client_tokens[client_token] = (operation, fingerprint)
            return False
        if known != (operation, fingerprint):
            raise RosError("InvalidIdempotenceParameter", "The specified parameters are different from before.")
        return True

    # ------------------------------------------------------------------ queries

    def running_action(self, stack_id: str) -> str | None:
        """CREATE / UPDATE / DELETE while this process runs an operation on the stack."""
        name = self._name(stack_id)
        with self._running_lock:
            running = self._running.get(name)
            return running.action if running is not None and running.thread.is_alive() else None

    def _settled_stack(self, stack_id: str) -> StackRecord:
        """The stack without its resources when it is not in progress (a poll reads one row); the
        full, settled record otherwise (an operation whose process died is marked interrupted)."""
        found = self._emulator.store.name_of(stack_id)
        if found is not None and not found[1].endswith("_IN_PROGRESS"):
            record = self._emulator.store.load(found[0], with_resources=False)
            if record is not None and record.stack_id == stack_id:
                return record
        return self._record(stack_id)

    def get(self, stack_id: str) -> dict[str, Any]:
        """GetStack's fields (NoEcho parameters masked)."""
        record = self._settled_stack(stack_id)
        secrets = secret_values(record.parameters, record.no_echo)
        pseudo = [("ALIYUN::AccountId", record.account_id), ("ALIYUN::Region", record.region),
                  ("ALIYUN::StackId", record.stack_id), ("ALIYUN::StackName", record.name)]
        shown = masked_parameters(record.parameters, record.no_echo)
        parameters = [{"ParameterKey": key, "ParameterValue": _text(value)} for key, value in [*shown.items(), *pseudo]]
        outputs = [{"OutputKey": key, "OutputValue": mask(o.get("Value"), secrets), "Description": o.get("Description", "")}
                   for key, o in record.outputs.items()]
        return {
            "StackId": record.stack_id,
            "StackName": record.name,
            "Status": record.status,
            "StatusReason": record.status_reason or _default_reason(record.status),
            "CreateTime": ros_time(record.created_at),
            "UpdateTime": ros_time(record.updated_at),
            "RegionId": record.region,
            "Parameters": parameters,
            "Outputs": outputs,
            "DisableRollback": record.disable_rollback,
            "TimeoutInMinutes": self._extras_of(record.stack_id).timeout_minutes,
            "TemplateDescription": _template_description(record.template_text),
            "Description": _template_description(record.template_text),
            "StackType": "ROS",
            "Tags": _tag_list(self._extras_of(record.stack_id).tags),
            "DeletionProtection": "Disabled",
            "StackDriftStatus": "NOT_CHECKED",  # no drift detection here (the SDK model's value for that)
            "Parallelism": record.parallelism,
        }

    def list(self, include_deleted: bool = False) -> _Dicts:
        """ListStacks' summaries, newest first (deleted stacks only with `include_deleted`)."""
        store = self._emulator.store
        summaries = []
        for name in store.names():
            record = self._emulator.settled_record(name)
            if record is None or (record.status == "DELETE_COMPLETE" and not include_deleted):
                continue
            summaries.append({
                "StackId": record.stack_id, "StackName": record.name, "Status": record.status,
                "StatusReason": record.status_reason or _default_reason(record.status),
                "CreateTime": ros_time(record.created_at), "UpdateTime": ros_time(record.updated_at),
                "RegionId": record.region, "DisableRollback": record.disable_rollback,
                "TimeoutInMinutes": self._extras_of(record.stack_id).timeout_minutes, "StackType": "ROS",
                "Tags": _tag_list(self._extras_of(record.stack_id).tags),
            })
        summaries.sort(key=lambda s: (s["CreateTime"], s["StackName"]), reverse=True)
        return summaries

    def events(self, stack_id: str) -> _Dicts:
        """ListStackEvents' events, oldest first; EventId is stable for each event."""
        found = self._emulator.store.name_of(stack_id)
        if found is None or found[1].endswith("_IN_PROGRESS"):  # a name, or maybe interrupted: the full lookup
            record = self._record(stack_id)
            stack_id, name = record.stack_id, record.name
        else:
            name = found[0]
        return list(self._events_of(stack_id, name).events)

    def _events_of(self, stack_id: str, name: str) -> "_EventLog":
        """The stack's events as ROS shows them, read from the store incrementally (they are only
        appended), so a poll of a stack with 1,000 events converts only the new ones."""
        with self._events_lock:
            log = self._event_logs.setdefault(stack_id, _EventLog())
            for event in self._emulator.store.events_since(stack_id, len(log.events)):
                log.add(stack_id, name, event)
            return log.snapshot()

    def resources(self, stack_id: str) -> _Dicts:
        """ListStackResources' resources in template order (times from the resource's events)."""
        record = self._record(stack_id)
        return self._resources(record)

    def _resources(self, record: StackRecord) -> _Dicts:
        log = self._events_of(record.stack_id, record.name)
        secrets = secret_values(record.parameters, record.no_echo)
        return [{
            "LogicalResourceId": r.logical_id,
            "PhysicalResourceId": mask(r.physical_id, secrets) or "",
            "ResourceType": r.resource_type,
            "Status": r.status or "INIT_COMPLETE",
            "StatusReason": r.status_reason,
            "CreateTime": ros_time(log.first.get(r.logical_id) or record.created_at),
            "UpdateTime": ros_time(log.last.get(r.logical_id) or record.updated_at),
            "StackId": record.stack_id,
            "StackName": record.name,
            "DependsOn": list(r.depends_on),
            "DeletionPolicy": r.deletion_policy,
            "Data": mask(r.data, secrets),
        } for r in record.resources.values()]

    def resource(self, stack_id: str, logical_id: str) -> dict[str, Any]:
        """GetStackResource; RosError ResourceNotFound (404) for a logical id the stack lacks."""
        record = self._record(stack_id)
        for resource in self._resources(record):
            if resource["LogicalResourceId"] == logical_id:
                return resource
        raise RosError("ResourceNotFound", f"The Resource ({logical_id}) could not be found in Stack {record.name}.", 404)

    def template(self, stack_id: str) -> str:
        """GetTemplate's TemplateBody: the text the stack was created or last updated with."""
        return self._record(stack_id).template_text

    def dependencies(self, stack_id: str) -> dict[str, _Names]:
        """Logical id -> the logical ids it depends on (Ref, Fn::GetAtt and DependsOn)."""
        record = self._record(stack_id)
        return {name: list(r.depends_on) for name, r in record.resources.items()}

    def provider_logs(self, stack_id: str, logical_id: str) -> _Names:
        """The lines the resource's provider wrote (redacted as `crhelper stack logs` shows them)."""
        record = self._record(stack_id)
        lines: list[str] = []
        for log in read_records(self.home, record.name):
            if log.resource == logical_id:
                lines.extend(render(log))
        return lines

    def validate(self, template_body: str) -> dict[str, Any]:
        """ValidateTemplate's answer: Description, Parameters, Outputs, Resources; RosError if invalid."""
        try:
            template = load_template(template_body)
        except (EmulatorError, ValueError) as exc:
            raise _translated(exc, "") from None
        document = _document(template_body)
        raw_parameters = _section(document, "Parameters")
        parameters = []
        for key, spec in template.parameters.items():
            raw = _section(raw_parameters, key)
            entry: dict[str, Any] = {"ParameterKey": key, "Type": spec.type, "NoEcho": spec.no_echo,
                                     "Description": str(raw.get("Description", "")), "Label": str(raw.get("Label", key))}
            if spec.has_default:
                entry["DefaultValue"] = _text(spec.default)
            if spec.allowed_values is not None:
                entry["AllowedValues"] = [_text(v) for v in spec.allowed_values]
            parameters.append(entry)
        outputs = [{"OutputKey": key, "Description": spec.description, "Label": key}
                   for key, spec in template.outputs.items()]
        resources = [{"LogicalResourceIdPattern": name, "ResourceType": spec.type, "ResourcePath": name}
                     for name, spec in template.resources.items()]
        return {"Description": template.description, "Parameters": parameters, "Outputs": outputs,
                "Resources": resources,
                "ResourceTypes": {"Resources": sorted({spec.type for spec in template.resources.values()}),
                                  "DataSources": []}}

    def preview(self, name: str, template_body: str, parameters: Mapping[str, str]) -> dict[str, Any]:
        """PreviewStack: what a create would deploy, planned and checked, nothing run or stored."""
        try:
            prepared = self._emulator.prepare("create", name, template_body, dict(parameters))
        except StackStateError as exc:
            if exc.kind != StackStateError.EXISTS:
                raise _translated(exc, name) from None
            self._emulator.validate(template_body, dict(parameters), name)
            prepared = None
        except (EmulatorError, ValueError) as exc:
            raise _translated(exc, name) from None
        document = _document(template_body)
        raw_resources = _section(document, "Resources")
        template = load_template(template_body)
        active = prepared.plan.resources if prepared is not None and prepared.plan is not None else template.resources
        resources = []
        for logical_id, spec in active.items():
            raw = _section(raw_resources, logical_id)
            resources.append({"LogicalResourceId": logical_id, "ResourceType": spec.type, "Action": "Add",
                              "Properties": raw.get("Properties", {}),  # Replacement: only with Action Modify
                              "RequiredBy": sorted(n for n, s in active.items() if logical_id in s.depends_on),
                              "Description": str(raw.get("Description", ""))})
        values = prepared.plan.parameter_values() if prepared is not None and prepared.plan is not None else dict(parameters)
        no_echo = set(prepared.plan.no_echo) if prepared is not None and prepared.plan is not None else set()
        return {"StackName": name, "RegionId": self.region, "Description": template.description, "TemplateDescription": template.description,
                "DisableRollback": False, "TimeoutInMinutes": DEFAULT_TIMEOUT_MINUTES,
                "Parameters": [{"ParameterKey": k, "ParameterValue": "******" if k in no_echo else _text(v)}
                               for k, v in values.items()],
                "Resources": resources}


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in tags.items()]


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def _default_reason(status: str) -> str:
    """ROS's wording for a status nobody explained (`Stack CREATE completed successfully`)."""
    if not status:
        return ""
    operation, _, state = status.partition("_")
    if state == "COMPLETE":
        return f"Stack {operation} completed successfully"
    if state == "IN_PROGRESS":
        return f"Stack {operation} started"
    return ""


def _document(text: str) -> dict[str, Any]:
    """The template as a mapping ({} when it is not one): for the fields the emulator does not keep."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        return {}
    return document if isinstance(document, dict) else {}


def _section(document: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = document.get(key)
    return value if isinstance(value, Mapping) else {}


@functools.lru_cache(maxsize=64)
def _template_description(text: str) -> str:
    return str(_document(text).get("Description") or "")
