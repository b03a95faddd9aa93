"""The ROS request: decoding from bytes, str or dict, and validation into a typed value (pure)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .constants import (
    CREATE,
    INTRANET_URL_FIELDS,
    MAX_NESTING_DEPTH,
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
    #: Set when properties deployed earlier (a Delete's ResourceProperties, an Update's
    #: OldResourceProperties) fail today's model: the error a strict validation gives, naming each field
    #: and rule, never a value. The handler then gets them unvalidated, as far as possible in the model's
    #: type, so that a tightened model never blocks a delete or a rollback. None when they validate.
    invalid_properties: str | None = None

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


class NestedTooDeeply(ValueError):
    """JSON nested beyond MAX_NESTING_DEPTH: refused before anything recurses into it."""


class TooDeep(str):
    """Stands in for a top-level field whose value was nested too deeply to build (an empty string,
    so code reading it as text sees nothing); parse_request reports the field by name, and because
    the other fields survive, the FAILED can still reach the ResponseURL."""

    __slots__ = ()


#: A JSON string literal (skipped: brackets inside strings do not nest) or one bracket.
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
_PLACEHOLDER = "\\u0000crhelper:nested-too-deeply:{}"
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def nesting_exceeds(value: Any, limit: int) -> bool:
    """True when objects/arrays in `value` nest more than `limit` levels (a cycle counts as too deep).
    Iterative: it must not hit the recursion limit it guards against."""
    if not isinstance(value, (Mapping, list, tuple)):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        for child in node.values() if isinstance(node, Mapping) else node:
            if isinstance(child, (Mapping, list, tuple)):
                stack.append((child, depth + 1))
    return False


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise NestedTooDeeply(f"nested too deeply (limit {MAX_NESTING_DEPTH} levels)") from None


def load_json(text: str, salvage: bool = False) -> Any:
    """json.loads for untrusted text, bounded to MAX_NESTING_DEPTH levels below the top level.

    With `salvage`, a top-level object keeps its shallow fields and each too-deep one becomes a
    TooDeep placeholder (so a request's ResponseURL survives a monstrous ResourceProperties);
    otherwise, and for anything else too deep, NestedTooDeeply is raised.
    """
    limit = MAX_NESTING_DEPTH + 1
    if text.count("[") + text.count("{") <= limit:  # the common case, decided in C
        return _loads(text)
    depth, deepest, member_start, member_deepest = 0, 0, -1, 0
    too_deep: list[tuple[int, int]] = []
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token[0] == '"':
            continue
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if depth == 2:
                member_start, member_deepest = match.start(), 2
            member_deepest = max(member_deepest, depth)
        else:
            if depth == 2 and member_start >= 0 and member_deepest > limit:
                too_deep.append((member_start, match.end()))
            depth -= 1
            if depth < 0:
                break  # not JSON: let the decoder say where
    if deepest <= limit or depth != 0:
        return _loads(text)
    if not salvage or not text.lstrip().startswith("{") or not too_deep:
        raise NestedTooDeeply(f"nested too deeply (limit {MAX_NESTING_DEPTH} levels)")
    pieces, position = [], 0
    for number, (begin, finish) in enumerate(too_deep):
        pieces += [text[position:begin], '"', _PLACEHOLDER.format(number), '"']
        position = finish
    pieces.append(text[position:])
    value = _loads("".join(pieces))
    if isinstance(value, dict):
        markers = {json.loads(f'"{_PLACEHOLDER.format(n)}"') for n in range(len(too_deep))}
        for key, member in value.items():
            if isinstance(member, str) and member in markers:
                value[key] = TooDeep()
    return value


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
        decoded = load_json(text, salvage=True)
    except json.JSONDecodeError as exc:
        raise RequestError(f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except NestedTooDeeply:
        raise RequestError(f"request body is nested too deeply (limit {MAX_NESTING_DEPTH} levels)") from None
    if not isinstance(decoded, dict):
        raise RequestError(f"request body must be a JSON object, got {type(decoded).__name__}")
    return decoded


def response_urls_of(raw: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(public, intranet) callback URLs of a raw request, under either documented name."""
    public = raw.get("ResponseURL")
    intranet = next((raw[name] for name in INTRANET_URL_FIELDS if isinstance(raw.get(name), str) and raw[name]), None)
    return (public if isinstance(public, str) and public else None), intranet


def surrogate_problem(value: str) -> str | None:
    """A lone surrogate is a valid JSON escape (`"\\udc80"`) but not Unicode: it cannot be encoded, hashed or sent."""
    found = _SURROGATE.search(value)
    return f"contains a lone surrogate U+{ord(found.group()):04X}, not valid Unicode" if found else None


def _string_field(raw: Mapping[str, Any], name: str, errors: list[str], required: bool) -> str:
    value = raw.get(name)
    if isinstance(value, TooDeep):
        return ""  # reported once, by the depth check
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
    problem = surrogate_problem(value)
    if problem:
        errors.append(f"{name}: {problem}")
        return ""
    return value


def _properties_field(raw: Mapping[str, Any], name: str, errors: list[str]) -> dict[str, Any] | None:
    value = raw.get(name)
    if value is None or isinstance(value, TooDeep):
        return None
    if isinstance(value, str):
        # Some transports double-encode maps; accept a JSON object in a string.
        try:
            value = load_json(value) if value.strip() else {}
        except NestedTooDeeply:
            errors.append(f"{name}: nested too deeply (limit {MAX_NESTING_DEPTH} levels)")
            return None
        except json.JSONDecodeError:
            errors.append(f"{name}: must be a JSON object")
            return None
        if nesting_exceeds(value, MAX_NESTING_DEPTH):
            errors.append(f"{name}: nested too deeply (limit {MAX_NESTING_DEPTH} levels)")
            return None
    if not isinstance(value, dict):
        errors.append(f"{name}: must be a JSON object, got {type(value).__name__}")
        return None
    # A CloudFormation habit: ServiceToken copied into the properties. It is a ROS-side setting.
    return {k: v for k, v in value.items() if k != "ServiceToken"}


def _depth_errors(raw: Mapping[str, Any]) -> list[str]:
    """Every top-level field nested deeper than handlers, validators and stores can safely walk."""
    return [
        f"{name}: nested too deeply (limit {MAX_NESTING_DEPTH} levels)"
        for name, value in raw.items()
        if isinstance(value, TooDeep) or nesting_exceeds(value, MAX_NESTING_DEPTH)
    ]


def parse_request(raw: Mapping[str, Any]) -> Request:
    """Validate a decoded request. All problems are reported together, each naming its field."""
    errors: list[str] = _depth_errors(raw)
    values = {name: _string_field(raw, name, errors, required=True) for name in REQUIRED_FIELDS}
    optional = {name: _string_field(raw, name, errors, required=False)
                for name in ("StackName", "RegionId", "ResourceOwnerId", "CallerId")}
    request_type = values["RequestType"]
    if request_type and request_type not in REQUEST_TYPES:
        errors.append(f"RequestType: must be one of {', '.join(REQUEST_TYPES)}, got {request_type!r}")
    public, intranet = response_urls_of(raw)
    if public is None and intranet is None:
        errors.append("ResponseURL: required field is missing")
    for name in ("ResponseURL", *INTRANET_URL_FIELDS):
        url = raw.get(name)
        problem = surrogate_problem(url) if isinstance(url, str) else None
        if problem:
            errors.append(f"{name}: {problem}")
    physical_id = raw.get("PhysicalResourceId")
    if isinstance(physical_id, TooDeep):
        physical_id = None
    elif physical_id is not None and not isinstance(physical_id, str):
        errors.append(f"PhysicalResourceId: must be a string, got {type(physical_id).__name__}")
        physical_id = None
    elif physical_id is not None and surrogate_problem(physical_id):
        errors.append(f"PhysicalResourceId: {surrogate_problem(physical_id)}")
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
        stack_name=optional["StackName"],
        region_id=optional["RegionId"],
        resource_owner_id=optional["ResourceOwnerId"],
        caller_id=optional["CallerId"],
        physical_resource_id=physical_id,
        properties=properties or {},
        old_properties=(old_properties or {}) if request_type == UPDATE else None,
        response_url=public,
        intranet_response_url=intranet,
        extra={k: v for k, v in raw.items() if k not in _KNOWN_FIELDS},
    )
