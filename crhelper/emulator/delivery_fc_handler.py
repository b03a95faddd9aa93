"""The Function Compute handler the stack emulator registers for a bound FC ServiceToken.

Runs in a local FC worker process. It loads the provider named by CRHELPER_PROVIDER (a module or
a file path spec), answers FAILED if that fails (like `crhelper.fc.handler`), and implements the
`kill_provider` fault: with CRHELPER_EMULATOR_KILL_DIR set, the first attempt for each ROS
RequestId leaves a marker there and SIGKILLs its own worker process (at once, or
CRHELPER_EMULATOR_KILL_AFTER seconds into the handler), so FC's async retry has to deliver the
request again, exactly as after a crashed or recycled instance.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

PROVIDER_ENV = "CRHELPER_PROVIDER"
KILL_DIR_ENV = "CRHELPER_EMULATOR_KILL_DIR"
KILL_AFTER_ENV = "CRHELPER_EMULATOR_KILL_AFTER"

_state: dict[str, Any] = {}


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


def _provider() -> Any:
    if "provider" not in _state and "error" not in _state:
        from ..cli.loading import provider_from_spec

        spec = os.environ.get(PROVIDER_ENV, "")
        try:
            if not spec:
                raise ValueError(f"{PROVIDER_ENV} is not set")
            _state["provider"] = provider_from_spec(spec)
        except BaseException as exc:  # any import-time failure must still be answered
            _state["error"] = f"provider failed to initialise: {type(exc).__name__}: {exc}"
    return _state.get("provider")


def handler(event: Any, context: Any = None) -> str:
    _maybe_kill(event)
    provider = _provider()
    if provider is None:
        from ..config import Settings
        from ..runtime import send_failed

        outcome = send_failed(event, _state["error"], Settings.from_env())
        return json.dumps(outcome.body or {"Status": "FAILED", "Reason": _state["error"]})
    return str(provider.fc_handler(event, context))
