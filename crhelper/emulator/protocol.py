"""The ROS request the emulator sends for a resource, and how it reads the provider's answer (pure)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_PHYSICAL_ID_BYTES = 255

#: Delivers a request to the provider behind a ServiceToken and returns its response body.
#: Called as deliver(service_token, request, timeout_seconds); it fills in ResponseURL and
#: IntranetResponseURL itself. Raising (e.g. TimeoutError) fails the resource with the message.
Deliverer = Callable[[str, dict[str, Any], float], dict[str, Any]]


class RequestNotSent(Exception):
    """Raised by a deliverer when the request never left (no provider is bound to the token):
    the resource fails, and a Create that was never sent leaves nothing to delete."""


@dataclass(frozen=True)
class StackContext:
    stack_id: str
    stack_name: str
    region: str
    account_id: str


def build_request(
    context: StackContext,
    request_type: str,
    logical_id: str,
    resource_type: str,
    properties: dict[str, Any],
    physical_id: str | None = None,
    old_properties: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ROS custom-resource request (spec §1.1) without the two callback URLs.

    Property maps are copied so a deliverer running on another thread can never alias state.
    """
    request: dict[str, Any] = {
        "RequestType": request_type,
        "RequestId": str(uuid.uuid4()),
        "StackId": context.stack_id,
        "StackName": context.stack_name,
        "RegionId": context.region,
        "ResourceOwnerId": context.account_id,
        "CallerId": context.account_id,
        "ResourceType": resource_type,
        "LogicalResourceId": logical_id,
        "ResourceProperties": copy.deepcopy(properties),
    }
    if physical_id is not None:
        request["PhysicalResourceId"] = physical_id
    if request_type == "Update":
        request["OldResourceProperties"] = copy.deepcopy(old_properties) if old_properties is not None else {}
    return request


@dataclass(frozen=True)
class Outcome:
    """The result of one request: success with id and Data, or a failure reason."""

    ok: bool
    reason: str = ""
    physical_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    data_given: bool = False
    #: False when the request never reached a provider (the deliverer raised RequestNotSent).
    sent: bool = True


def failure(reason: str, *, sent: bool = True) -> Outcome:
    return Outcome(ok=False, reason=reason, sent=sent)


def interpret_response(request: dict[str, Any], body: Any) -> Outcome:
    """Check what the stack needs from a response; the ResponseURL server checks the rest."""
    if not isinstance(body, dict):
        return failure(f"provider response must be a JSON object, got {type(body).__name__}")
    status = body.get("Status")
    if status == "FAILED":
        reason = body.get("Reason")
        return failure(str(reason) if reason else "provider answered FAILED without a Reason")
    if status != "SUCCESS":
        return failure(f"provider response Status must be SUCCESS or FAILED, got {status!r}")
    data = body.get("Data")
    if data is not None and not isinstance(data, dict):
        return failure(f"provider response Data must be a JSON object, got {type(data).__name__}")
    sent_id: str | None = request.get("PhysicalResourceId")
    raw_answer = body.get("PhysicalResourceId")
    if raw_answer is not None and (not isinstance(raw_answer, str) or not raw_answer):
        return failure("provider response PhysicalResourceId must be a non-empty string")
    answered: str | None = raw_answer
    if answered is not None and len(answered.encode("utf-8")) > MAX_PHYSICAL_ID_BYTES:
        return failure(f"provider response PhysicalResourceId is longer than {MAX_PHYSICAL_ID_BYTES} bytes")
    physical_id: str | None
    if request["RequestType"] == "Create":
        if answered is None:
            return failure("provider response to Create has no PhysicalResourceId")
        physical_id = answered
    else:
        if sent_id is not None and answered is not None and answered != sent_id:
            return failure(
                f"provider changed PhysicalResourceId on {request['RequestType']} "
                f"from '{sent_id}' to '{answered}'; ROS does not allow replacement"
            )
        physical_id = sent_id if sent_id is not None else answered
    return Outcome(ok=True, physical_id=physical_id, data=dict(data or {}), data_given=data is not None)


def describe_exception(exc: BaseException) -> str:
    """A resource failure reason from a delivery exception."""
    message = str(exc)
    if message:
        return message
    return "timed out waiting for the provider" if isinstance(exc, TimeoutError) else type(exc).__name__
