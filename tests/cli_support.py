"""Running the real `crhelper` command from tests, as a user runs it (importable from every test
folder: tests/ is on sys.path through its conftest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

REPO = Path(__file__).resolve().parents[1]


def crhelper_json(*args: str, timeout: float = 240, env: Mapping[str, str] | None = None,
                  cwd: Path = REPO) -> dict[str, Any]:
    """`crhelper ARGS --json` in a fresh process (CRHELPER_HOME is the test's): its one JSON
    document. A failed command or one whose output is not that document fails the test, showing
    the ends of both streams."""
    done = subprocess.run([sys.executable, "-m", "crhelper.cli.main", *args, "--json"], cwd=cwd,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout)
    shown = f"`crhelper {' '.join(args)}` exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    try:
        document = dict(json.loads(done.stdout))
    except ValueError:
        raise AssertionError(shown) from None
    assert done.returncode == 0, shown
    return document


def created_outputs(answer: dict[str, Any]) -> dict[str, Any]:
    """The outputs of a `crhelper stack create --json` answer, which must be CREATE_COMPLETE."""
    assert answer["Stack"]["status"] == "CREATE_COMPLETE", json.dumps(answer)[-3000:]
    return {o["key"]: o["value"] for o in answer["Stack"]["outputs"]}
