"""What ROS checks on a response body, as a pure function shared by the response server and tests."""

from __future__ import annotations

import json
from email.utils import parsedate_to_datetime
from typing import Any, Mapping

from .constants import FAILED, MAX_PHYSICAL_ID_BYTES, MAX_RESPONSE_BYTES, SUCCESS, UPDATE, DELETE


def header_violations(method: str, headers: Mapping[str, str]) -> list[str]:
    problems = []
    if method not in ("POST", "PUT"):
        problems.append(f"method must be POST or PUT, got {method}")
    content_type = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if content_type != "application/json":
        problems.append(f"Content-Type must be application/json, got {content_type or 'none'!r}")
    date = headers.get("Date")
    if not date:
        problems.append("Date header is missing")
    else:
        try:
            parsed = parsedate_to_datetime(date)
            if parsed.tzinfo is None or not date.endswith("GMT"):
                raise ValueError
        except (TypeError, ValueError):
            problems.append(f"Date header is not an RFC 1123 GMT date: {date!r}")
    return problems


def body_violations(raw: bytes, request: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, list[str]]:
    """Parse a response body and list every rule it breaks; `request` (the ROS request) enables echo checks."""
    problems = []
    if len(raw) > MAX_RESPONSE_BYTES:
        problems.append(f"body is {len(raw)} bytes; the limit is {MAX_RESPONSE_BYTES}")
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, problems + [f"body is not UTF-8 JSON: {exc}"]
    if not isinstance(body, dict):
        return None, problems + ["body must be a JSON object"]
    status = body.get("Status")
    if status not in (SUCCESS, FAILED):
        problems.append(f"Status must be SUCCESS or FAILED, got {status!r}")
    if status == FAILED and not (isinstance(body.get("Reason"), str) and body["Reason"].strip()):
        problems.append("Reason is required on FAILED")
    for name in ("StackId", "RequestId", "LogicalResourceId"):
        if not isinstance(body.get(name), str):
            problems.append(f"{name} is required")
        elif request is not None and body[name] != str(request.get(name) or ""):
            problems.append(f"{name} must echo the request's value")
    physical_id = body.get("PhysicalResourceId")
    if status == SUCCESS:
        if not isinstance(physical_id, str) or not physical_id:
            problems.append("PhysicalResourceId is required on SUCCESS")
    if isinstance(physical_id, str) and len(physical_id.encode("utf-8")) > MAX_PHYSICAL_ID_BYTES:
        problems.append(f"PhysicalResourceId is longer than {MAX_PHYSICAL_ID_BYTES} bytes")
    if request is not None and request.get("RequestType") in (UPDATE, DELETE) and status == SUCCESS:
        expected = request.get("PhysicalResourceId")
        if expected and physical_id != expected:
            problems.append(f"PhysicalResourceId changed on {request.get('RequestType')}: {expected!r} -> {physical_id!r}")
    if "Data" in body and not isinstance(body["Data"], dict):
        problems.append("Data must be a JSON object")
    if "NoEcho" in body:
        problems.append("NoEcho is not part of the ROS response")
    return body, problems
