"""How a command reports an `ExplainedError` (packaging, deploy, provider specs): one JSON
document on stdout with --json, else two lines on stderr."""

from __future__ import annotations

import json
import sys

from ..errors import ExplainedError, error_document


def print_failure(command: str, error: ExplainedError, as_json: bool) -> None:
    if as_json:
        print(json.dumps(error_document(error.kind, error.problem, error.next_step), indent=2))
    else:
        print(f"crhelper {command}: {error.problem}\n  next: {error.next_step}", file=sys.stderr)
