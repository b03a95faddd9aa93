"""Building the ROS response body: physical-id rules, Reason hygiene and the 4,096-byte budget (pure)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping
from urllib.parse import quote, quote_plus

from .constants import (
    CREATE,
    CREATE_FAILED_MARKER,
    FAILED,
    MAX_NESTING_DEPTH,
    MAX_PHYSICAL_ID_BYTES,
    MAX_REASON_CHARS,
    MAX_RESPONSE_BYTES,
    SUCCESS,
)
from .config import Value
from .errors import Failure
from .request import Request, nesting_exceeds


@dataclass(init=False, repr=False, eq=False)
class Result(Value):
    """What a handler returns: the physical id (Create only; None keeps or derives it) and the attributes."""

    physical_id: str | None = None
    data: Mapping[str, Any] | None = None
    _names = ("physical_id", "data")

    def __init__(self, physical_id: str | None = None, data: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "physical_id", physical_id)
        object.__setattr__(self, "data", data)


@dataclass(init=False, repr=False, eq=False)
class InProgress(Value):
    """Returned by a handler whose work is not done: call me again in `delay` seconds with `state`.

    `state` must be JSON-serialisable; it comes back as `request.state` on the next call.
    """

    state: Any = None
    delay: float = 30.0
    _names = ("state", "delay")

    def __init__(self, state: Any = None, delay: float = 30.0) -> None:
        object.__setattr__(self, "state", state)
        object.__setattr__(self, "delay", delay)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_TRUNCATED = " …[truncated]"


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def encode(body: Mapping[str, Any]) -> bytes:
    """The exact bytes we send; their length is what ROS measures.

    Never raises on text: a lone surrogate (echoed from a request, where it arrived as the JSON
    escape `\\udc80`) goes back as that same escape, the one form of it that is valid UTF-8.
    """
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Inside JSON text a surrogate can only be part of a string, where its escape means the same.
        return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text).encode("utf-8")


def _cut_utf8(text: str, max_bytes: int) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    return raw[:max_bytes].decode("utf-8", errors="ignore")


def _secret_forms(secret: str) -> set[str]:
    """The ways a secret shows up in text: as is, inside a repr(), JSON-escaped (ASCII or not),
    percent-encoded, and one level of those nested (repr of JSON, JSON of repr)."""
    forms = {secret}
    for _ in range(2):
        for form in list(forms):
            forms.add(repr(form)[1:-1])
            forms.add(json.dumps(form)[1:-1])
            forms.add(json.dumps(form, ensure_ascii=False)[1:-1])
            try:
                forms.update((quote(form, safe=""), quote(form), quote_plus(form)))
            except UnicodeEncodeError:  # a lone surrogate cannot be percent-encoded
                pass
    return {form for form in forms if form}


def mask_secrets(text: str, secrets: Iterable[str]) -> str:
    """Replace every form of every secret value with `***`, longest form first (so a short secret
    inside a longer one cannot leave the rest of the longer one behind)."""
    forms: set[str] = set()
    for secret in secrets:
        if isinstance(secret, str) and secret:
            forms |= _secret_forms(secret)
    if not forms:
        return text
    pattern = "|".join(re.escape(form) for form in sorted(forms, key=len, reverse=True))
    return re.sub(pattern, "***", text)


def clean_reason(reason: str, secrets: Iterable[str] = ()) -> str:
    """One readable line: control characters folded, secret values masked, the head kept."""
    reason = mask_secrets(reason, secrets)
    reason = _CONTROL.sub(" ", reason).strip() or "unknown error"
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - len(_TRUNCATED)] + _TRUNCATED
    return reason


def default_physical_id(request: Request) -> str:
    """Deterministic per request (a retried Create gets the same id), unique per resource, ≤ 255 bytes."""
    import hashlib  # only handlers that return no physical id need it: ~1.5 ms off every other cold start

    digest = hashlib.sha256(
        "\x1f".join((request.stack_id, request.logical_resource_id, request.request_id)).encode("utf-8")
    ).hexdigest()[:16]
    prefix = f"{request.stack_name or 'stack'}-{request.logical_resource_id}"
    return f"{_cut_utf8(prefix, MAX_PHYSICAL_ID_BYTES - 17)}-{digest}"


def physical_id_problem(physical_id: object) -> str | None:
    """Why a physical id cannot be sent, or None when it can."""
    if not isinstance(physical_id, str):
        return f"PhysicalResourceId must be a string, got {type(physical_id).__name__}"
    if not physical_id:
        return "PhysicalResourceId must not be empty"
    size = len(physical_id.encode("utf-8"))
    if size > MAX_PHYSICAL_ID_BYTES:
        return f"PhysicalResourceId is {size} bytes; ROS allows at most {MAX_PHYSICAL_ID_BYTES}"
    return None


def data_problem(data: object) -> str | None:
    """Why Data cannot be sent as a JSON object, naming the key at fault."""
    if not isinstance(data, Mapping):
        return f"Data must be a JSON object (a mapping), got {type(data).__name__}"
    for key, value in data.items():
        if not isinstance(key, str):
            return f"Data key {key!r} must be a string"
        if nesting_exceeds(value, MAX_NESTING_DEPTH):  # json.dumps would recurse into it
            return f"Data[{key!r}] is nested too deeply (limit {MAX_NESTING_DEPTH} levels)"
        try:
            json.dumps(value, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            return f"Data[{key!r}] is not JSON-serialisable: {exc}"
        except RecursionError:  # a custom container nesting_exceeds cannot see into
            return f"Data[{key!r}] is nested too deeply to serialise"
    return None


def _echo(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {name: str(fields.get(name) or "") for name in ("StackId", "RequestId", "LogicalResourceId")}


def echo_fields(request: Request) -> dict[str, str]:
    """The identifiers every response copies unchanged from its request."""
    return {
        "StackId": request.stack_id,
        "RequestId": request.request_id,
        "LogicalResourceId": request.logical_resource_id,
    }


def failed_physical_id(request_type: str, physical_id: str | None) -> str:
    """A FAILED Create carries the marker, so the Delete ROS may send next is known to be a no-op."""
    if request_type == CREATE or not physical_id:
        return CREATE_FAILED_MARKER
    return physical_id


def failed_body(echo: Mapping[str, Any], reason: str, physical_id: str, secrets: Iterable[str] = ()) -> dict[str, Any]:
    return {
        "Status": FAILED,
        "Reason": clean_reason(reason, secrets),
        "PhysicalResourceId": physical_id,
        **_echo(echo),
    }


def failed_body_from_raw(raw: Mapping[str, Any], reason: str) -> dict[str, Any]:
    """For a request that failed validation: echo what it has, use the id rules on what we can read."""
    request_type = raw.get("RequestType")
    physical_id = raw.get("PhysicalResourceId")
    return fit_to_limit(
        failed_body(
            raw,
            reason,
            failed_physical_id(
                request_type if isinstance(request_type, str) else CREATE,
                physical_id if isinstance(physical_id, str) else None,
            ),
        )
    )


def success_body(request: Request, physical_id: str, data: Mapping[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"Status": SUCCESS, "PhysicalResourceId": physical_id, **echo_fields(request)}
    body["Data"] = dict(data or {})
    return body


def _largest_keys(data: Mapping[str, Any], count: int = 3) -> str:
    sizes = sorted(
        ((len(encode({key: value})) - 2, key) for key, value in data.items()), reverse=True
    )[:count]
    return ", ".join(f"{key} ({size} B)" for size, key in sizes)


def fit_to_limit(body: dict[str, Any]) -> dict[str, Any]:
    """Make the body fit 4,096 UTF-8 bytes: never cut Data silently; cut a Reason keeping its head."""
    size = len(encode(body))
    if size <= MAX_RESPONSE_BYTES:
        return body
    if body.get("Status") == SUCCESS:
        data = body.get("Data") or {}
        reason = (
            f"response is {size} bytes, ROS accepts at most {MAX_RESPONSE_BYTES}; "
            f"Data is too large, largest keys: {_largest_keys(data)}. "
            "Return less in Data (store large values elsewhere and return a reference)."
        )
        body = {k: v for k, v in body.items() if k != "Data"}
        body.update(Status=FAILED, Reason=clean_reason(reason))
        size = len(encode(body))
        if size <= MAX_RESPONSE_BYTES:
            return body
    reason = str(body.get("Reason", ""))
    overflow = size - MAX_RESPONSE_BYTES
    keep = max(0, len(reason.encode("utf-8")) - overflow - len(_TRUNCATED.encode("utf-8")))
    return {**body, "Reason": _cut_utf8(reason, keep) + _TRUNCATED}


def failed_response(request: Request, reason: str, secrets: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """A FAILED body for this request, with the physical-id rule applied and secrets masked."""
    body = failed_body(
        {"StackId": request.stack_id, "RequestId": request.request_id, "LogicalResourceId": request.logical_resource_id},
        reason,
        failed_physical_id(request.request_type, request.physical_resource_id),
        secrets,
    )
    return fit_to_limit(body)


def exception_reason(exc: BaseException) -> str:
    """`Type: message` for surprises, the bare text for Failure raised on purpose."""
    if isinstance(exc, Failure):
        return exc.reason
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
