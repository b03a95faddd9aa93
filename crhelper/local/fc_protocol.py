"""Wire-level rules of the Function Compute 2.0 invoke API, kept free of I/O.

The shapes here follow what the `fc2` SDK (2.5.x) sends and parses: API errors are
`{"ErrorCode", "ErrorMessage"}` JSON with a 4xx status, function errors are HTTP 200 with
`x-fc-error-type` and `{"errorMessage", "errorType", "stackTrace"}`.
"""
from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crhelper.servers import ApiResponse

API_VERSION = "2016-08-15"
SYNC_PAYLOAD_LIMIT = 32 * 1024 * 1024
ASYNC_PAYLOAD_LIMIT = 128 * 1024
MAX_ASYNC_DELAY_SECONDS = 3600
LOG_TAIL_BYTES = 4096

HEADER_REQUEST_ID = "x-fc-request-id"
HEADER_INVOCATION_TYPE = "x-fc-invocation-type"
HEADER_ASYNC_DELAY = "x-fc-async-delay"
HEADER_LOG_TYPE = "x-fc-log-type"
HEADER_LOG_RESULT = "x-fc-log-result"
HEADER_ERROR_TYPE = "x-fc-error-type"
HEADER_DURATION = "x-fc-invocation-duration"

UNHANDLED_INVOCATION_ERROR = "UnhandledInvocationError"

_INVOKE_PATH = re.compile(
    r"^/" + re.escape(API_VERSION)
    + r"/services/(?P<service>[^/]+)/functions/(?P<function>[^/]+)/invocations/?$"
)


class FcApiError(Exception):
    """An API-level rejection, answered with FC's `{"ErrorCode", "ErrorMessage"}` body."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> bytes:
        return json.dumps({"ErrorCode": self.code, "ErrorMessage": self.message}).encode("utf-8")


@dataclass(frozen=True)
class InvocationTarget:
    """Which function a request addresses; `qualifier` is the part after the first '.'."""

    service: str
    function: str
    qualifier: str | None


def parse_invocation_path(path: str) -> InvocationTarget | None:
    """Match an unescaped request path against the invoke route; None when it is another route."""
    match = _INVOKE_PATH.match(path)
    if match is None:
        return None
    service, _, qualifier = match.group("service").partition(".")
    return InvocationTarget(service, match.group("function"), qualifier or None)


def path_not_supported(method: str, path: str) -> FcApiError:
    return FcApiError(400, "PathNotSupported", f"'{method}' against '{path}' is not supported")


def parse_invocation_type(value: str | None) -> str:
    """Return 'Sync' or 'Async'; FC defaults to Sync when the header is absent."""
    if value is None or value.strip() == "":
        return "Sync"
    normalized = value.strip().lower()
    if normalized == "sync":
        return "Sync"
    if normalized == "async":
        return "Async"
    raise FcApiError(400, "InvalidArgument",
                     f"header {HEADER_INVOCATION_TYPE} must be 'Sync' or 'Async'")


def parse_async_delay(value: str | None) -> int:
    """Seconds to postpone an async invocation: an integer from 0 to 3600."""
    if value is None or value.strip() == "":
        return 0
    text = value.strip()
    if not text.isdigit():
        raise FcApiError(400, "InvalidArgument",
                         f"header {HEADER_ASYNC_DELAY} must be an integer number of seconds")
    delay = int(text)
    if delay > MAX_ASYNC_DELAY_SECONDS:
        raise FcApiError(400, "InvalidArgument",
                         f"header {HEADER_ASYNC_DELAY} must be between 0 and "
                         f"{MAX_ASYNC_DELAY_SECONDS} seconds")
    return delay


def wants_log_tail(value: str | None) -> bool:
    """True for `x-fc-log-type: Tail`; 'None' or absence means no log."""
    if value is None or value.strip() == "" or value.strip().lower() == "none":
        return False
    if value.strip().lower() == "tail":
        return True
    raise FcApiError(400, "InvalidArgument", f"header {HEADER_LOG_TYPE} must be 'None' or 'Tail'")


def check_payload_size(size: int, invocation_type: str) -> None:
    limit = ASYNC_PAYLOAD_LIMIT if invocation_type == "Async" else SYNC_PAYLOAD_LIMIT
    if size > limit:
        raise FcApiError(400, "EntityTooLarge",
                         f"payload size exceeds maximum allowed size ({limit} bytes)")


def management_response(request_id: str, result: Any) -> "ApiResponse":
    """A management call's answer: its JSON document, or 204 No Content (`None`, a delete)."""
    from crhelper.servers import ApiResponse

    if result is None:
        return ApiResponse(204, {HEADER_REQUEST_ID: request_id}, b"")
    return ApiResponse(200, {HEADER_REQUEST_ID: request_id, "Content-Type": "application/json"},
                       json.dumps(result).encode("utf-8"))


def function_error_body(error: dict[str, Any]) -> bytes:
    """The JSON body FC returns with `x-fc-error-type` for a failed function."""
    return json.dumps(error).encode("utf-8")


def timeout_error(timeout: float) -> dict[str, Any]:
    """FC's answer for a handler killed at its timeout."""
    shown = int(timeout) if float(timeout).is_integer() else timeout
    return {"errorMessage": f"Function timed out after {shown} seconds"}


def log_tail_header(log: bytes) -> str:
    """Base64 of the last 4 KB of an invocation's log, as in `x-fc-log-result`."""
    return base64.b64encode(log[-LOG_TAIL_BYTES:]).decode("ascii")
