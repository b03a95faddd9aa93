"""Helpers for testing providers: request factories and the capturing ResponseURL server."""

from __future__ import annotations

import time
import uuid
from typing import Any, Callable, Mapping

from .local.response_server import Capture, ResponseServer

__all__ = ["Capture", "ResponseServer", "make_event", "wait_until"]


def make_event(
    request_type: str,
    resource_type: str,
    properties: Mapping[str, Any] | None = None,
    *,
    old_properties: Mapping[str, Any] | None = None,
    physical_resource_id: str | None = None,
    response_url: str = "http://127.0.0.1:9/unset",
    intranet_response_url: str | None = None,
    stack_id: str | None = None,
    stack_name: str = "test-stack",
    request_id: str | None = None,
    logical_resource_id: str = "Res",
    **extra: Any,
) -> dict[str, Any]:
    """A ROS request as ROS sends it (PascalCase), with realistic ids."""
    event: dict[str, Any] = {
        "RequestType": request_type,
        "RequestId": request_id or str(uuid.uuid4()).upper(),
        "ResponseURL": response_url,
        "IntranetResponseURL": intranet_response_url or response_url,
        "StackId": stack_id or str(uuid.uuid4()),
        "StackName": stack_name,
        "ResourceOwnerId": "123456789",
        "CallerId": "123456789",
        "RegionId": "cn-hangzhou",
        "ResourceType": resource_type,
        "LogicalResourceId": logical_resource_id,
        "ResourceProperties": dict(properties or {}),
    }
    if request_type != "Create":
        event["PhysicalResourceId"] = physical_resource_id
    if request_type == "Update":
        event["OldResourceProperties"] = dict(old_properties or {})
    event.update(extra)
    return event


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.02, what: str = "condition") -> Any:
    """The first truthy value of predicate(), or AssertionError naming `what` after `timeout` seconds."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= end:
            raise AssertionError(f"{what} not met within {timeout} s")
        time.sleep(interval)
