"""Exceptions a provider raises on purpose, and the framework's own request errors."""

from __future__ import annotations


class Failure(Exception):
    """Raise in a handler to answer FAILED with exactly this Reason (no type prefix)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ExplainedError(Exception):
    """An error a command reports to a person: `problem` says what is wrong, `next_step` what to do,
    `kind` a stable word programs match on (packaging, deploy, provider specs, CLI profiles, stack and
    boot-group commands; `crhelper.cli.failures` prints it)."""

    def __init__(self, problem: str, next_step: str, kind: str = "error") -> None:
        super().__init__(f"{problem}; next: {next_step}" if next_step else problem)
        self.problem = problem
        self.next_step = next_step
        self.kind = kind


def error_document(kind: str, problem: str, next_step: str = "", **extra: object) -> dict[str, object]:
    """The one JSON shape every command prints for an error under --json (plus details, e.g. `errors`)."""
    return {"error": {"kind": kind, "problem": problem, "next_step": next_step, **extra}}


class RequestError(ValueError):
    """The incoming request is not a valid ROS request; the message names the field and the rule."""


class PropertiesError(Failure):
    """ResourceProperties failed validation; the Reason lists fields and rules, never values.
    `fields` names the failing fields alone (`ResourceProperties.Tags[0].Key`), for logs."""

    def __init__(self, reason: str, fields: tuple[str, ...] = ()) -> None:
        super().__init__(reason)
        self.fields = fields
