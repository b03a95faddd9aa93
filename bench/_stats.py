"""Pure arithmetic and formatting for the bench: medians, p90, ratios, target verdicts."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


def median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def p90(values: list[float]) -> float:
    """Nearest-rank 90th percentile (with 15 runs: the 14th smallest)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def ratio(value: float, reference: float) -> float:
    return value / reference if reference else math.nan


@dataclass(frozen=True)
class Verdict:
    """One target from the issue, the measured value and whether it holds."""

    name: str
    measured: float
    limit: float
    higher_is_better: bool
    strict: bool = False
    note: str = ""

    @property
    def passed(self) -> bool:
        if self.higher_is_better:
            return self.measured > self.limit if self.strict else self.measured >= self.limit
        return self.measured < self.limit if self.strict else self.measured <= self.limit

    def line(self) -> str:
        relation = (">" if self.higher_is_better else "<") + ("" if self.strict else "=")
        line = f"{'PASS' if self.passed else 'MISS'}  {self.name}: {self.measured:.2f} (target {relation} {self.limit:.2f})"
        return f"{line}; {self.note}" if self.note else line


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain fixed-width table; the first column left-aligned, the rest right-aligned."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]

    def fmt(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([fmt(headers), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)])
