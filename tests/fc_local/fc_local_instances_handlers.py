"""Handlers for the instance-reuse tests (tests/fc_local/test_fc_local_instances.py); imported
inside worker processes, where their module state lives as long as the instance."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

_count = 0
_init_calls = 0


def counter(event: bytes, context: Any) -> dict[str, Any]:
    """Count this instance's invocations; {"crash": true} ends the instance instead."""
    global _count
    args = json.loads(event or b"{}")
    if args.get("crash"):
        os._exit(7)
    _count += 1
    if args.get("pid_file"):
        with open(args["pid_file"], "w", encoding="utf-8") as out:
            out.write(str(os.getpid()))
    if args.get("hold"):
        time.sleep(args["hold"])
    return {"pid": os.getpid(), "count": _count, "request_id": context.request_id,
            "stage": os.environ.get("STAGE")}


def init(context: Any) -> None:
    global _init_calls
    _init_calls += 1


def initialized(event: bytes, context: Any) -> dict[str, Any]:
    args = json.loads(event or b"{}")
    if args.get("hold"):
        time.sleep(args["hold"])
    return {"pid": os.getpid(), "init_calls": _init_calls}


def hang_with_child(event: bytes, context: Any) -> None:
    """Start a grandchild, say both pids, then hang past the timeout."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    print(json.dumps({"pid": os.getpid(), "child": child.pid}), flush=True)
    time.sleep(60)


def interpreter(event: bytes, context: Any) -> dict[str, Any]:
    return {"pid": os.getpid(), "version": list(sys.version_info[:2]), "executable": sys.executable,
            "path0": sys.path[0]}
