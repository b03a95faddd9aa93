"""What the package checks report: a problem names where (a file and an item path) and the rule.

Every stage collects all of its problems before it gives up, so an author sees everything wrong at
once; a problem never carries a user's value (it may be a password).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

ERROR: Literal["error"] = "error"
WARNING: Literal["warning"] = "warning"
Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    """One broken rule: `where` is a file (``config.json``), an item path (``env.tickTime``) or
    both (``cluster.json.mustache line 12``); `rule` says what is wrong and what is allowed."""

    where: str
    rule: str
    severity: Severity = ERROR

    def __str__(self) -> str:
        prefix = "warning: " if self.severity == WARNING else ""
        return f"{prefix}{self.where}: {self.rule}"

    def to_json(self) -> dict[str, str]:
        return {"where": self.where, "rule": self.rule, "severity": self.severity}


def errors_in(problems: Iterable[Problem]) -> list[Problem]:
    """Only the problems that make a package (or a set of values) invalid."""
    return [problem for problem in problems if problem.severity == ERROR]


class PackageUnreadable(Exception):
    """The package cannot be read at all (no such path, a broken or unsafe archive, a failed
    download): nothing in it could be checked."""


class InvalidPackage(Exception):
    """A stage found errors it cannot go past; `problems` holds every one it found (warnings too)."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = list(problems)
        shown = errors_in(self.problems) or self.problems
        more = f" (and {len(shown) - 1} more)" if len(shown) > 1 else ""
        super().__init__(f"{shown[0]}{more}" if shown else "invalid package")
