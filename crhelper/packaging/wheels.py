"""What pip chose for the target, read back from the installed dist-info folders, and what its
failures mean. Pip already filters by tag; this check makes a host value leaking in (a
`cp311` or `linux_x86_64` wheel) a build failure instead of an import error on FC."""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from . import PackagingError
from .targets import PLATFORMS, Runtime

_NOT_FOUND = (re.compile(r"No matching distribution found for ([^\s;]+)"),
              re.compile(r"Could not find a version that satisfies the requirement ([^\s;]+)"))


@dataclass(frozen=True)
class InstalledWheel:
    """One distribution in the package: its name, version and wheel tags."""

    name: str
    version: str
    tags: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "version": self.version, "tags": list(self.tags)}


def installed_wheels(target: Path) -> list[InstalledWheel]:
    """The distributions under `target`, sorted by name, from their METADATA and WHEEL files."""
    wheels = []
    for info in sorted(target.glob("*.dist-info")):
        parser = HeaderParser()
        metadata = parser.parsestr((info / "METADATA").read_text(encoding="utf-8", errors="replace"))
        wheel = parser.parsestr((info / "WHEEL").read_text(encoding="utf-8", errors="replace")) \
            if (info / "WHEEL").is_file() else None
        tags = tuple(wheel.get_all("Tag") or ()) if wheel is not None else ()
        wheels.append(InstalledWheel(str(metadata.get("Name", info.name)), str(metadata.get("Version", "")), tags))
    return sorted(wheels, key=lambda w: w.name.lower())


def check_tags(wheels: list[InstalledWheel], runtime: Runtime) -> None:
    """PackagingError naming every installed wheel whose tags cannot run on `runtime`."""
    wrong = [w for w in wheels if not any(runtime.accepts(tag) for tag in w.tags)]
    if wrong:
        listed = ", ".join(f"{w.name} {w.version} ({' '.join(w.tags) or 'no tags'})" for w in wrong)
        raise PackagingError(f"wheels that cannot run on FC {runtime.name}: {listed}",
                             f"use wheels tagged for {runtime.abi} or abi3 on {PLATFORMS[0]}, or pure-Python ones")


def missing_dependency(pip_output: str) -> str | None:
    """The requirement pip found no usable wheel for, from its error output (None when it says no such thing)."""
    for pattern in _NOT_FOUND:
        match = pattern.search(pip_output)
        if match:
            return match.group(1)
    return None
