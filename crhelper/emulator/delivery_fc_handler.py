"""The Function Compute handler the stack emulator registers for a bound FC ServiceToken.

Runs in a local FC worker process: the shared lazy entry (`crhelper.loading.lazy_handler`: the
provider named by CRHELPER_PROVIDER, a module or a file path spec, answered FAILED on every
request if it fails to import), preceded by the `kill_provider` fault: with
CRHELPER_EMULATOR_KILL_DIR set, the first attempt for each ROS RequestId leaves a marker there and
SIGKILLs its own worker process (at once, or CRHELPER_EMULATOR_KILL_AFTER seconds into the
handler), so FC's async retry has to deliver the request again, exactly as after a crashed or
recycled instance.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

from ..loading import PROVIDER_ENV, lazy_handler

__all__ = ["KILL_AFTER_ENV", "KILL_DIR_ENV", "PROVIDER_ENV", "handler"]

KILL_DIR_ENV = "CRHELPER_EMULATOR_KILL_DIR"
KILL_AFTER_ENV = "CRHELPER_EMULATOR_KILL_AFTER"

#: Reads CRHELPER_PROVIDER on the first request; the worker inherits the emulator's sys.path.
_entry = lazy_handler()


def _request_id(event: Any) -> str | None:
    try:
        body = json.loads(event) if isinstance(event, (bytes, str)) else event
    except (ValueError, RecursionError):  # the provider answers such a body itself, precisely
        return None
    value = body.get("RequestId") if isinstance(body, dict) else None
    return value if isinstance(value, str) and value.replace("-", "").isalnum() else None


def _maybe_kill(event: Any) -> None:
    directory = os.environ.get(KILL_DIR_ENV)
    if not directory:
        return
    request_id = _request_id(event)
    if request_id is None:
        return
    marker = Path(directory) / request_id
    try:
        marker.touch(exist_ok=False)
    except FileExistsError:
        return  # a retry: let it run
    after = float(os.environ.get(KILL_AFTER_ENV) or 0)
    if after <= 0:
        os.kill(os.getpid(), signal.SIGKILL)
        return
    # Mid-request: the handler runs meanwhile; the process dies wherever it then is.
    timer = threading.Timer(after, os.kill, (os.getpid(), signal.SIGKILL))
    timer.daemon = True
    timer.start()


def handler(event: Any, context: Any = None) -> str:
    _maybe_kill(event)
    return _entry(event, context)
