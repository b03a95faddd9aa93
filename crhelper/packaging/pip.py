"""The one pip subprocess: install the requirements into a folder, with wheels for the target runtime."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from . import PackagingError
from .targets import PLATFORMS, Runtime
from .wheels import missing_dependency

#: How long one pip run may take (a large set of wheels from a slow index).
PIP_TIMEOUT = 1800.0


def pip_command(target: Path, runtime: Runtime, requirements: Sequence[str], requirement_files: Sequence[Path],
                find_links: Sequence[str], no_index: bool, python: str = sys.executable) -> list[str]:
    """The `pip install --target` command line (pure, for tests and `--json`)."""
    command = [python, "-m", "pip", "install", "--target", str(target), *runtime.pip_options(),
               "--disable-pip-version-check", "--no-input", "--no-warn-script-location", "--quiet"]
    if no_index:
        command.append("--no-index")
    for link in find_links:
        command += ["--find-links", link]
    for file in requirement_files:
        command += ["--requirement", str(file)]
    return command + list(requirements)


def install(target: Path, runtime: Runtime, requirements: Sequence[str], requirement_files: Sequence[Path] = (),
            find_links: Sequence[str] = (), no_index: bool = False, timeout: float = PIP_TIMEOUT) -> None:
    """Run pip; a requirement with no wheel for the target is a PackagingError naming it."""
    command = pip_command(target, runtime, requirements, requirement_files, find_links, no_index)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PIP_NO_COMPILE": "1"}
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                              env=env, check=False)
    except subprocess.TimeoutExpired:
        raise PackagingError(f"pip did not finish within {timeout:g} s", "check the index is reachable") from None
    if done.returncode == 0:
        return
    output = f"{done.stdout}\n{done.stderr}"
    missing = missing_dependency(output)
    if missing is not None:
        raise PackagingError(
            f"no wheel of {missing} for FC {runtime.name} ({PLATFORMS[0]}, {runtime.abi}, abi3 or pure Python): "
            "FC has no compiler and crhelper package does not build source distributions",
            f"use a version of {missing} that publishes such a wheel, put one in a --find-links folder, or drop it")
    last = [line for line in output.splitlines() if line.strip()][-3:]
    raise PackagingError(f"pip failed (exit {done.returncode}): {' | '.join(last)}",
                         "run the pip command shown by --json to see its full output")
