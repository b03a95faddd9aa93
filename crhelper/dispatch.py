"""From a valid request to a response body: routing, validation, calling the handler, id rules.

No I/O here except the user's handler itself; the runtime decides when and where the body goes.
"""

from __future__ import annotations

import dataclasses
import json
import traceback
from typing import Any

from .config import ReadOnly
from .constants import CREATE, DELETE, NOTHING_CREATED_IDS, UPDATE
from .errors import Failure, PropertiesError
from .logs import get_logger
from .properties import secret_values, validate, validate_leniently
from .registry import Registry, UnknownType
from .request import Request
from .response import (
    InProgress,
    Result,
    data_problem,
    default_physical_id,
    exception_reason,
    failed_physical_id,
    failed_response,
    fit_to_limit,
    mask_secrets,
    physical_id_problem,
    success_body,
)

_log = get_logger("dispatch")


class Orphaned(ReadOnly):
    """A FAILED Create whose handler did produce a resource (its answer could not be sent as is):
    the lifecycle records `physical_id` so that the Delete that follows cleans it up."""

    __slots__ = ("body", "physical_id")
    body: dict[str, Any]
    physical_id: str

    def __init__(self, body: dict[str, Any], physical_id: str) -> None:
        self._init(body=body, physical_id=physical_id)


def plain(outcome: "dict[str, Any] | InProgress | Orphaned") -> "dict[str, Any] | InProgress":
    """The body to send, where nothing records what a failed Create left behind."""
    if isinstance(outcome, Orphaned):
        _log.warning("a Create failed after its handler produced a resource; with no store it is not "
                     "tracked for the Delete that follows", extra={"fields": {"PhysicalResourceId": outcome.physical_id}})
        return outcome.body
    return outcome


def _call(registration: Any, request: Request, props: Any, old: Any) -> Any:
    """Pass as many of (props[, old], request) as the handler declares."""
    args: list[Any] = [props, old, request] if request.request_type == UPDATE else [props, request]
    return registration.func(*args[: registration.shape.arity])


def _log_exception(exc: BaseException, secrets: list[str]) -> None:
    """The traceback goes to the log (not the Reason), with secret values masked as in the Reason
    (repr-, JSON- and URL-escaped forms too)."""
    text = mask_secrets("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), secrets)
    _log.error("handler raised", extra={"fields": {"traceback": text}})


#: The longest delay between polls: FC's x-fc-async-delay accepts at most 3,600 s.
MAX_POLL_DELAY = 3600.0


def _interpret(request: Request, returned: Any, secrets: list[str]) -> "dict[str, Any] | InProgress | Orphaned":
    if returned is None:
        returned = Result()
    if isinstance(returned, InProgress):
        problem = progress_problem(returned)
        return failed_response(request, problem, secrets) if problem else returned
    if not isinstance(returned, Result):
        return failed_response(
            request,
            f"{request.request_type} handler returned {type(returned).__name__}; return crhelper.Result(...) or None",
            secrets,
        )
    if request.request_type == CREATE:
        physical_id = returned.physical_id if returned.physical_id is not None else default_physical_id(request)
        problem = physical_id_problem(physical_id)
        if problem:
            return failed_response(request, f"Create handler returned an invalid id: {problem}", secrets)
        problem = data_problem(returned.data) if returned.data is not None else None
        if problem:
            return Orphaned(failed_response(request, problem, secrets), physical_id)
        body = fit_to_limit(success_body(request, physical_id, returned.data))
        if body.get("Status") != "SUCCESS":  # Data too large: the resource exists all the same
            return Orphaned({**body, "PhysicalResourceId": failed_physical_id(CREATE, None)}, physical_id)
        return body
    if returned.data is not None:
        problem = data_problem(returned.data)
        if problem:
            return failed_response(request, problem, secrets)
    physical_id = request.physical_resource_id or ""
    if returned.physical_id is not None and returned.physical_id != physical_id:
        return failed_response(
            request,
            f"{request.request_type} handler returned PhysicalResourceId {returned.physical_id!r} but the resource is "
            f"{physical_id!r}; ROS forbids changing it. Keep the id (return Result(physical_id=None)) or model a "
            "replacement as a new resource with a new logical id.",
            secrets,
        )
    return fit_to_limit(success_body(request, physical_id, returned.data))


def progress_problem(progress: InProgress) -> str | None:
    """Why an InProgress cannot be stored and scheduled, or None."""
    if not isinstance(progress.delay, (int, float)) or isinstance(progress.delay, bool) or not 0 <= progress.delay <= MAX_POLL_DELAY:
        return f"InProgress.delay must be a number of seconds from 0 to {MAX_POLL_DELAY:.0f}, got {progress.delay!r}"
    try:
        json.dumps(progress.state, allow_nan=False)
    except RecursionError:
        return "InProgress.state is nested too deeply to be stored"
    except (TypeError, ValueError) as exc:
        return f"InProgress.state must be JSON-serialisable: {exc}"
    return None


#: Appended to an Update's strict validation error: ROS rolls back with an Update whose
#: ResourceProperties are the ones deployed before, and sends no flag saying so.
ROLLBACK_HINT = " (if this Update is a rollback, these are the properties deployed before it, which today's model must still accept)"


def typed_properties(model: Any, request: Request) -> "tuple[Any, Any, PropertiesError | None]":
    """(props, old, problem) in the handler's type. What the request asks for (Create's and Update's
    ResourceProperties) is validated strictly: PropertiesError. What was deployed before (Delete's
    ResourceProperties, Update's OldResourceProperties) is validated leniently: a value today's model
    refuses comes back unvalidated with `problem`, so it never blocks a delete or a rollback."""
    if request.request_type == DELETE:
        checked = validate_leniently(model, request.properties, "ResourceProperties")
        return checked.value, None, checked.problem
    try:
        props = validate(model, request.properties, "ResourceProperties")
    except PropertiesError as exc:
        if request.request_type == UPDATE:
            raise PropertiesError(exc.reason + ROLLBACK_HINT, exc.fields) from None
        raise
    if request.request_type != UPDATE:
        return props, None, None
    checked = validate_leniently(model, request.old_properties or {}, "OldResourceProperties")
    return props, checked.value, checked.problem


def _warn_unvalidated(request: Request, problem: PropertiesError, secrets: list[str]) -> None:
    """Field names and rules only: the values may be secrets (and those the model knows are masked)."""
    which = "Delete's ResourceProperties" if request.request_type == DELETE else "Update's OldResourceProperties"
    _log.warning(
        f"{which} fail today's model: {', '.join(problem.fields)}; the handler is called with them unvalidated",
        extra={"fields": {"InvalidFields": list(problem.fields), "Problem": mask_secrets(problem.reason, secrets)}},
    )


def dispatch(registry: Registry, request: Request, default_type: str | None) -> "dict[str, Any] | InProgress | Orphaned":
    """The response body for `request`, or the InProgress its handler returned.
    Never raises for anything the handler or the input does."""
    # Before the type check: a Create refused for an unknown type must not also block its rollback Delete.
    if request.request_type == DELETE and (request.physical_resource_id or "") in NOTHING_CREATED_IDS:
        _log.info("delete of a resource that was never created: answered without calling the handler")
        return fit_to_limit(success_body(request, request.physical_resource_id or failed_physical_id(CREATE, None), None))

    try:
        resource_type = registry.resolve_type(request.resource_type, default_type)
    except UnknownType as exc:
        return failed_response(request, str(exc))

    registration = registry.get(resource_type, request.request_type)
    if registration is None:
        if request.request_type == DELETE:
            return fit_to_limit(success_body(request, request.physical_resource_id or "", None))
        return failed_response(
            request,
            f"no {request.request_type} handler registered for {resource_type}; "
            f"registered: {', '.join(registry.operations(resource_type)) or 'none'}",
        )

    secrets: list[str] = []
    try:
        props, old, problem = typed_properties(registration.shape.model, request)
        secrets = secret_values(props) + secret_values(old)
        if problem is not None:
            _warn_unvalidated(request, problem, secrets)
            request = dataclasses.replace(request, invalid_properties=problem.reason)
        returned = _call(registration, request, props, old)
    except BaseException as exc:  # sys.exit(), KeyboardInterrupt, CancelledError: still one answer
        if not isinstance(exc, Failure):
            _log_exception(exc, secrets)
        return failed_response(request, exception_reason(exc), secrets)
    return _interpret(request, returned, secrets)
