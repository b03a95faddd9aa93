"""The ROS request: decoding from bytes, str or dict, and validation into a typed value (pure)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from .constants import (
    CREATE,
    INTRANET_URL_FIELDS,
    REQUEST_TYPES,
    REQUIRED_FIELDS,
    UPDATE,
)
from .errors import RequestError

_KNOWN_FIELDS = frozenset(
    {
        "RequestType",
        "RequestId",
        "ResponseURL",
        *INTRANET_URL_FIELDS,
        "StackId",
        "StackName",
        "ResourceOwnerId",
        "CallerId",
        "RegionId",
        "ResourceType",
        "LogicalResourceId",
        "PhysicalResourceId",
        "ResourceProperties",
        "OldResourceProperties",
    }
)


@dataclass(frozen=True)
class Request:
    """One ROS custom-resource request. URLs are credentials, so they stay out of repr()."""

    request_type: str
    request_id: str
    stack_id: str
    logical_resource_id: str
    resource_type: str
    stack_name: str = ""
    region_id: str = ""
    resource_owner_id: str = ""
    caller_id: str = ""
    physical_resource_id: str | None = None
    properties: dict[str, Any] = field(default_factory=dict)
    old_properties: dict[str, Any] | None = None
    response_url: str | None = field(default=None, repr=False)
    intranet_response_url: str | None = field(default=None, repr=False)
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    #: For long-running handlers: the state returned in the last InProgress (None on the first call)
    state: Any = field(default=None, repr=False)
    #: How many times the handler has been called before for this request (0 on the first call)
    attempt: int = 0
    #: POSIX time the operation started (the first call)
    started_at: float | None = None

    @property
    def is_create(self) -> bool:
        return self.request_type == CREATE

    def log_fields(self) -> dict[str, str]:
        """The fields every log line of this request carries."""
        return {
            "RequestType": self.request_type,
            "RequestId": self.request_id,
            "StackId": self.stack_id,
            "LogicalResourceId": self.logical_resource_id,
            "ResourceType": self.resource_type,
        }


def decode_event(event: bytes | bytearray | str | Mapping[str, Any]) -> dict[str, Any]:
    """Turn whatever the transport handed us into a JSON object, or say precisely why not."""
    if isinstance(event, Mapping):
        return dict(event)
    if isinstance(event, (bytes, bytearray)):
        try:
            event = bytes(event).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RequestError(f"request body is not UTF-8 text (byte {exc.start})") from None
    if not isinstance(event, str):
        raise RequestError(f"request must be JSON text or an object, got {type(event).__name__}")
    text = event.strip()
    if not text:
        raise RequestError("request body is empty")
    try:
        decoded = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(decoded, dict):
        raise RequestError(f"request body must be a JSON object, got {type(decoded).__name__}")
    return decoded


def response_urls_of(raw: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(public, intranet) callback URLs of a raw request, under either documented name."""
    public = raw.get("ResponseURL")
    intranet = next((raw[name] for name in INTRANET_URL_FIELDS if isinstance(raw.get(name), str) and raw[name]), None)
    return (public if isinstance(public, str) and public else None), intranet


def _string_field(raw: Mapping[str, Any], name: str, errors: list[str], required: bool) -> str:
    value = raw.get(name)
    if value is None:
        if required:
            errors.append(f"{name}: required field is missing")
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        errors.append(f"{name}: must be a string, got {type(value).__name__}")
        return ""
    if required and not value:
        errors.append(f"{name}: must not be empty")
    return value


def _properties_field(raw: Mapping[str, Any], name: str, errors: list[str]) -> dict[str, Any] | None:
    value = raw.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        # Some transports double-encode maps; accept a JSON object in a string.
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            errors.append(f"{name}: must be a JSON object")
            return None
    if not isinstance(value, dict):
        errors.append(f"{name}: must be a JSON object, got {type(value).__name__}")
        return None
    # A CloudFormation habit: ServiceToken copied into the properties. It is a ROS-side setting.
    return {k: v for k, v in value.items() if k != "ServiceToken"}


def parse_request(raw: Mapping[str, Any]) -> Request:
    """Validate a decoded request. All problems are reported together, each naming its field."""
    errors: list[str] = []
    values = {name: _string_field(raw, name, errors, required=True) for name in REQUIRED_FIELDS}
    request_type = values["RequestType"]
    if request_type and request_type not in REQUEST_TYPES:
        errors.append(f"RequestType: must be one of {', '.join(REQUEST_TYPES)}, got {request_type!r}")
    public, intranet = response_urls_of(raw)
    if public is None and intranet is None:
        errors.append("ResponseURL: required field is missing")
    physical_id = raw.get("PhysicalResourceId")
    if physical_id is not None and not isinstance(physical_id, str):
        errors.append(f"PhysicalResourceId: must be a string, got {type(physical_id).__name__}")
        physical_id = None
    properties = _properties_field(raw, "ResourceProperties", errors)
    old_properties = _properties_field(raw, "OldResourceProperties", errors)
    if request_type == UPDATE and not physical_id:
        errors.append("PhysicalResourceId: required on Update")
    if errors:
        raise RequestError("; ".join(errors))
    return Request(
        request_type=request_type,
        request_id=values["RequestId"],
        stack_id=values["StackId"],
        logical_resource_id=values["LogicalResourceId"],
        resource_type=values["ResourceType"],
        stack_name=_string_field(raw, "StackName", errors, required=False),
        region_id=_string_field(raw, "RegionId", errors, required=False),
        resource_owner_id=_string_field(raw, "ResourceOwnerId", errors, required=False),
        caller_id=_string_field(raw, "CallerId", errors, required=False),
        physical_resource_id=physical_id,
        properties=properties or {},
        old_properties=(old_properties or {}) if request_type == UPDATE else None,
        response_url=public,
        intranet_response_url=intranet,
        extra={k: v for k, v in raw.items() if k not in _KNOWN_FIELDS},
    )
