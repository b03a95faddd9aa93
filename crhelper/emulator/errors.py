"""Errors of the local ROS emulator; each message names the template path or stack and the rule."""

from __future__ import annotations

from collections.abc import Iterable


class EmulatorError(Exception):
    """Base class so the CLI can turn every emulator failure into one clean message."""


class TemplateValidationError(EmulatorError):
    """The template or its parameters are invalid; carries every problem found, not just the first."""

    def __init__(self, errors: Iterable[str]) -> None:
        self.errors: list[str] = list(errors)
        super().__init__("template is invalid:\n" + "\n".join(f"  - {e}" for e in self.errors))


class StackNotFoundError(EmulatorError):
    """No stack of that name exists in the local store."""

    def __init__(self, name: str) -> None:
        super().__init__(f"stack '{name}' does not exist")
        self.name = name


class StackStateError(EmulatorError):
    """The requested operation is not allowed in the stack's current status.

    `kind` says why (one of the constants below), `status` is the stack's status then (None when
    it has none), and `next_operations` the stack operations that would get it unstuck, best
    first ("events" means: watch the operation that is running), so callers choose their advice
    from fields rather than from the wording of the message."""

    BUSY = "busy"
    EXISTS = "exists"
    NOT_UPDATABLE = "not-updatable"
    INVALID_NAME = "invalid-name"
    CHANGED = "changed"

    def __init__(self, message: str, *, kind: str, stack: str, status: str | None = None,
                 next_operations: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.kind = kind
        self.stack = stack
        self.status = status
        self.next_operations = next_operations


class UnknownResourceError(EmulatorError):
    """A delete was asked to retain resources the stack does not have; `known` lists those it has."""

    def __init__(self, stack: str, unknown: Iterable[str], known: Iterable[str]) -> None:
        self.stack = stack
        self.unknown = sorted(unknown)
        self.known = sorted(known)
        listed = ", ".join(self.known) or "none"
        super().__init__(f"cannot retain {', '.join(self.unknown)}: stack '{stack}' has no such resource (its resources: {listed})")


class ResolutionError(EmulatorError):
    """An intrinsic function could not be evaluated; `path` is the template key path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
