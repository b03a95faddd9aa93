"""Flynn's error JSON (``pkg/httphelper``) as one exception type shared by every layer.

The controller serialises it, the Flynn client rebuilds it from a response, and the provider turns
it into a ROS Reason of the form ``<code>: <message>`` (how Flynn's own JSON client prints it).
"""

from __future__ import annotations

from typing import Any

#: code -> HTTP status, from httphelper's table (spec §6).
STATUS_BY_CODE: dict[str, int] = {
    "not_found": 404,
    "object_not_found": 404,
    "object_exists": 409,
    "conflict": 409,
    "syntax_error": 400,
    "validation_error": 400,
    "request_body_too_big": 400,
    "unknown_error": 500,
    "unauthorized": 401,
    "precondition_failed": 412,
    "ratelimited": 429,
    "service_unavailable": 503,
}

INVALID_ROUTE = "Invalid route"
DUPLICATE_ROUTE = "Duplicate route"
PORT_RESERVED = "Port reserved for HTTP/HTTPS traffic"
DEPENDENT_ROUTES = "Route has dependent routes"
TYPE_ENUM = "type Enum error. The data must be equal to one of these values [http tcp]."
CONTENT_TYPE = "Content-Type must be application/json"
SYNTAX = "The provided JSON input is invalid"
UNKNOWN = "Something went wrong"
BODY_TOO_BIG = "The provided request body is too big"


class FlynnError(Exception):
    """One controller error response. ``bare`` errors are sent as a status with an empty body.

    ``hint`` never reaches the wire: it explains *which* property and rule failed when Flynn's
    message alone does not (``Invalid route``), and is appended to ROS Reasons only.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        detail: Any = None,
        retry: bool = False,
        status: int | None = None,
        bare: bool = False,
        hint: str = "",
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.detail = detail
        self.retry = retry
        self.status = status if status is not None else STATUS_BY_CODE.get(code, 500)
        self.bare = bare
        self.hint = hint

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.detail:
            out["detail"] = self.detail
        out["retry"] = self.retry
        return out

    def reason(self) -> str:
        """The ROS Reason: Flynn's ``<code>: <message>``, plus the hint when there is one."""
        text = f"{self.code}: {self.message}"
        return f"{text} ({self.hint})" if self.hint else text

    @classmethod
    def from_json(cls, status: int, body: Any, *, hint: str = "") -> "FlynnError":
        """Rebuild from a controller response; ``hint`` describes bare statuses only."""
        if isinstance(body, dict) and isinstance(body.get("code"), str):
            return cls(
                body["code"],
                str(body.get("message", "")),
                detail=body.get("detail"),
                retry=bool(body.get("retry", False)),
                status=status,
            )
        if status == 404:
            return not_found(hint or "the app or route does not exist")
        if status == 401:
            return unauthorized()
        return cls("unknown_error", f"HTTP {status} from the controller", status=status, hint=hint)


def not_found(hint: str = "") -> FlynnError:
    """The controller's bare 404 (unknown app, unknown route, route of another app)."""
    return FlynnError("not_found", "Not found", status=404, bare=True, hint=hint)


def unauthorized() -> FlynnError:
    """The controller's bare 401; the Reason never says which key was tried."""
    return FlynnError(
        "unauthorized", "Unauthorized", status=401, bare=True,
        hint="the controller key was rejected",
    )


def field_error(field: str, message: str, *, hint: str = "") -> FlynnError:
    """httphelper ``ValidationError``: message ``<field> <message>``, detail ``{"field": ...}``."""
    return FlynnError("validation_error", f"{field} {message}", detail={"field": field}, hint=hint)


def unknown_error(*, retry: bool = True, hint: str = "") -> FlynnError:
    return FlynnError("unknown_error", UNKNOWN, retry=retry, hint=hint)
