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
    """The requested operation is not allowed in the stack's current status."""


class ResolutionError(EmulatorError):
    """An intrinsic function could not be evaluated; `path` is the template key path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
