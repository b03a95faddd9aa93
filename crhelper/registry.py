"""Which function handles which (ResourceType, operation); resolution of the generic type (pure)."""

from __future__ import annotations

from typing import Any, Callable

from .config import Value
from .constants import CREATE, DELETE, GENERIC_TYPE, MAX_ROS_TIMEOUT, REQUEST_TYPES, UPDATE
from .properties import HandlerShape, handler_shape

Handler = Callable[..., Any]


class Registration:
    """A handler and, once resolved, how to call it (a plain class: no dataclass methods to generate at import)."""

    __slots__ = ("func", "_shape")

    def __init__(self, func: Handler, _shape: HandlerShape | None = None) -> None:
        self.func = func
        self._shape = _shape

    def __repr__(self) -> str:
        return f"Registration(func={self.func!r})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not Registration:
            return NotImplemented
        return (self.func, self._shape) == (other.func, other._shape)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaces

    @property
    def shape(self) -> HandlerShape:
        """Resolved on first use, so models defined after the decorator still work."""
        if self._shape is None:
            self._shape = handler_shape(self.func)
        return self._shape


class UnknownType(LookupError):
    pass


#: Default overall deadline of one long-running operation; keep it below the template's Timeout.
DEFAULT_DEADLINE = 1800.0
#: The longest deadline a type may have: ROS's longest resource Timeout.
MAX_DEADLINE = MAX_ROS_TIMEOUT


def deadline_problem(resource_type: str, seconds: object) -> str | None:
    """Why `seconds` cannot be `resource_type`'s deadline, or None (pure: the rule in one place)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds != seconds:
        return f"{resource_type}: the deadline must be a number of seconds, got {seconds!r}"
    if seconds < 1:
        return f"{resource_type}: a deadline of {seconds:g} s is too short; it must be at least 1 s"
    if seconds > MAX_DEADLINE:
        return (f"{resource_type}: a deadline of {seconds:,.0f} s is above {MAX_DEADLINE:,.0f} s, ROS's longest "
                "Timeout; a longer operation would be failed by ROS first: split it or shorten its plan")
    return None


class TypeOptions(Value):
    """Per-type limits of long-running operations."""

    __slots__ = ("deadline", "on_timeout")
    deadline: float
    on_timeout: Handler | None

    def __init__(self, deadline: float = DEFAULT_DEADLINE, on_timeout: Handler | None = None) -> None:
        self._init(deadline=deadline, on_timeout=on_timeout)


class Registry:
    """Resource type → operation → handler. Filled at import time by decorators, read-only afterwards."""

    def __init__(self) -> None:
        self._handlers: dict[str, dict[str, Registration]] = {}
        self._options: dict[str, TypeOptions] = {}

    def set_options(self, resource_type: str, **changes: Any) -> None:
        current = self._options.get(resource_type, TypeOptions())
        deadline = changes.get("deadline", current.deadline)
        problem = deadline_problem(resource_type, deadline)
        if problem:
            raise ValueError(problem)
        self._options[resource_type] = TypeOptions(float(deadline), changes.get("on_timeout", current.on_timeout))

    def options(self, resource_type: str) -> TypeOptions:
        return self._options.get(resource_type, TypeOptions())

    def add(self, resource_type: str, operation: str, func: Handler) -> None:
        if operation not in REQUEST_TYPES:
            raise ValueError(f"operation must be one of {', '.join(REQUEST_TYPES)}, got {operation!r}")
        if not resource_type.startswith("Custom::") and resource_type != GENERIC_TYPE:
            raise ValueError(f"resource type must be 'Custom::<Name>' or {GENERIC_TYPE}, got {resource_type!r}")
        operations = self._handlers.setdefault(resource_type, {})
        if operation in operations:
            raise ValueError(f"{operation} handler for {resource_type} is already registered ({operations[operation].func.__qualname__})")
        operations[operation] = Registration(func)

    @property
    def types(self) -> list[str]:
        return sorted(self._handlers)

    def operations(self, resource_type: str) -> list[str]:
        return [op for op in (CREATE, UPDATE, DELETE) if op in self._handlers.get(resource_type, {})]

    def resolve_type(self, resource_type: str, default_type: str | None) -> str:
        """The registered type a request is for; the generic type goes to the default when one is set."""
        if resource_type in self._handlers:
            return resource_type
        if resource_type == GENERIC_TYPE and default_type:
            if default_type in self._handlers:
                return default_type
            raise UnknownType(
                f"default type {default_type!r} for {GENERIC_TYPE} is not registered; "
                f"registered types: {', '.join(self.types) or 'none'}"
            )
        hint = f"; set CRHELPER_DEFAULT_TYPE to route {GENERIC_TYPE}" if resource_type == GENERIC_TYPE else ""
        raise UnknownType(
            f"unknown ResourceType {resource_type!r}; this provider handles: {', '.join(self.types) or 'nothing'}{hint}"
        )

    def get(self, resource_type: str, operation: str) -> Registration | None:
        return self._handlers.get(resource_type, {}).get(operation)
