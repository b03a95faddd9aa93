"""FC 2.0 ServiceTokens: the provider runs as a function of a local Function Compute endpoint.

Requests are sent with the real `fc2` SDK as **async** invocations (`x-fc-invocation-type: Async`),
which is what ROS plausibly does (it waits up to 12 h for the ResponseURL; spec §4.1): the
provider gets a real FC context (function timeout, credentials, request id) in a fresh worker
process, and a crashed attempt is retried by FC's async queue.
"""

from __future__ import annotations

import json
import tempfile
import threading
from typing import Any

from ..local.fc_server import LocalFunctionCompute
from ..servicetoken import FcFunctionToken
from .delivery_fc_handler import KILL_AFTER_ENV, KILL_DIR_ENV, PROVIDER_ENV

HANDLER = "crhelper.emulator.delivery_fc_handler:handler"
#: Seconds before FC's first async retry (FC itself starts back-off at 0.5 s).
ASYNC_RETRY_DELAY = 0.5

#: Seconds the emulated function's timeout exceeds the resource's Timeout.
FUNCTION_TIMEOUT_SLACK = 10.0


class FcRoute:
    """One local FC endpoint per stack operation; functions are registered on first use."""

    def __init__(
        self, region: str, account_id: str, *, workers: int = 64, kill_provider: bool = False, kill_after: float = 0.0
    ) -> None:
        self._fc = LocalFunctionCompute(region=region, account_id=account_id, async_workers=workers,
                                        async_retry_delay=ASYNC_RETRY_DELAY)
        self._kill_dir = tempfile.TemporaryDirectory(prefix="crhelper-kill-") if kill_provider else None
        self._kill_after = kill_after
        self._lock = threading.Lock()
        self._timeouts: dict[tuple[str, str], float] = {}
        self._client: Any = None
        self._invoke_lock = threading.Lock()

    def start(self) -> "FcRoute":
        self._fc.start()
        self._client = self._fc.client()
        return self

    def stop(self) -> None:
        self._fc.stop()
        if self._kill_dir is not None:
            self._kill_dir.cleanup()

    @property
    def fc(self) -> LocalFunctionCompute:
        return self._fc

    def _ensure_function(self, token: FcFunctionToken, spec: str, timeout: float) -> None:
        key = (token.service or "", token.function)
        with self._lock:
            if self._timeouts.get(key, 0) >= timeout:
                return
            env = {PROVIDER_ENV: spec}
            if self._kill_dir is not None:
                env[KILL_DIR_ENV] = self._kill_dir.name
                env[KILL_AFTER_ENV] = str(self._kill_after)
            self._fc.register(key[0], key[1], HANDLER, timeout=timeout, env=env)
            self._timeouts[key] = timeout

    def send(self, token: FcFunctionToken, spec: str, request: dict[str, Any], timeout: float) -> str:
        """Invoke asynchronously; returns FC's invocation request id (to read the journal later)."""
        # The function outlives the resource's Timeout, so the emulated ROS Timeout is what decides.
        self._ensure_function(token, spec, timeout + FUNCTION_TIMEOUT_SLACK)
        payload = json.dumps(request).encode("utf-8")
        # One invocation at a time: an async invoke only enqueues (202), and the endpoint's small
        # listen backlog would reset a burst of parallel connections from a large stack.
        with self._invoke_lock:
            response = self._client.invoke_function(token.service, token.function, payload=payload,
                                                    headers={"x-fc-invocation-type": "Async"})
        return str(response.headers.get("x-fc-request-id", ""))

    def failure(self, invocation_id: str) -> str | None:
        """Why an invocation can no longer answer (it settled), or None while it may; check before captures."""
        try:
            record = self._fc.record(invocation_id)
        except KeyError:
            return None
        if record.status == "succeeded":
            return "the function finished but its response never reached the ResponseURL"
        if record.status not in ("failed", "dropped"):
            return None
        last = record.attempts[-1] if record.attempts else None
        detail = f": {last.error_type}: {last.error_message}" if last is not None and last.error_message else ""
        return f"the function failed on all {len(record.attempts)} attempt(s) without answering{detail}"
