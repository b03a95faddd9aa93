"""FC ServiceTokens: the provider runs as a function of a local Function Compute endpoint.

Requests are sent as **async** invocations (`x-fc-invocation-type: Async`) with the real SDK of the
token's version: `fc2` for FC 2.0 (`services/S/functions/F`), `alibabacloud-fc20230330` for FC 3.0
(`functions/F`, a function with no service, which then re-enters through the 3.0 API),
which is what ROS plausibly does (it waits up to 12 h for the ResponseURL; spec §4.1): the
provider gets a real FC context (function timeout, credentials, request id) in a fresh worker
process, and a crashed attempt is retried by FC's async queue.

An emulated function gets what a deployed one gets, through its environment only: a store shared by
all its instances (`CRHELPER_STORE`: the local store under `$CRHELPER_HOME` unless the emulator's
environment or the bindings' `environment` name one) and the endpoint to re-invoke itself through
(`CRHELPER_FC_ENDPOINT`, set by the local FC for every function), so a provider returning
`InProgress` continues exactly as on Function Compute: delayed async self-invocations.

With a `ProviderLogs` sink, every line a worker writes reaches it as it is written, attributed to
its resource: a request's payload names its LogicalResourceId, a continuation's payload
(`{"crhelperContinuation": id}`) is looked up in the function's store, and a framework JSON line
names its own.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..local.fc_records import PENDING as PENDING_INVOCATION
from ..local.fc_server import LocalFunctionCompute
from ..reentry import CONTINUATION_FIELD
from ..servicetoken import FcFunctionToken
from ..store.url import SETTING as STORE_SETTING
from ..store.url import default_url
from ..transports.fc import PENDING
from .delivery_fc_handler import KILL_AFTER_ENV, KILL_DIR_ENV, PROVIDER_ENV

if TYPE_CHECKING:
    from ..local.fc_runner import InvocationRequest
    from ..store.base import Store
    from .provider_logs import ProviderLogs

HANDLER = "crhelper.emulator.delivery_fc_handler:handler"
#: Seconds before FC's first async retry (FC itself starts back-off at 0.5 s).
ASYNC_RETRY_DELAY = 0.5

#: Seconds the emulated function's timeout exceeds the resource's Timeout.
FUNCTION_TIMEOUT_SLACK = 10.0


def function_environment(configured: Mapping[str, str], emulator: Mapping[str, str]) -> dict[str, str]:
    """The variables an emulated function gets on top of the emulator's own: the shared local store
    unless the emulator's environment already names one, then the bindings' `environment`."""
    env = {} if emulator.get(STORE_SETTING) else {STORE_SETTING: default_url(emulator)}
    env.update(configured)
    return env


def in_progress(record: Any) -> bool:
    """Whether a settled invocation returned the framework's "nothing to send now" summary
    (an operation continuing through re-entries, or a duplicate of one in flight)."""
    last = record.attempts[-1] if record.attempts else None
    try:
        summary = json.loads(last.result) if last is not None and last.result else None
    except ValueError:
        return False
    return isinstance(summary, dict) and summary.get("Status") == PENDING


class FcRoute:
    """One local FC endpoint per stack operation; functions are registered on first use."""

    def __init__(
        self, region: str, account_id: str, *, workers: int = 64, kill_provider: bool = False, kill_after: float = 0.0,
        environment: Mapping[str, str] | None = None, logs: "ProviderLogs | None" = None,
    ) -> None:
        self._logs = logs
        self._attribution = _Attribution()
        self._fc = LocalFunctionCompute(region=region, account_id=account_id, async_workers=workers,
                                        async_retry_delay=ASYNC_RETRY_DELAY,
                                        on_output=self._output if logs is not None else None)
        self._kill_dir = tempfile.TemporaryDirectory(prefix="crhelper-kill-") if kill_provider else None
        self._kill_after = kill_after
        self._environment = dict(environment or {})
        self._lock = threading.Lock()
        self._timeouts: dict[tuple[str, str], float] = {}
        self._client: Any = None
        self._client3: Any = None
        self._invoke_lock = threading.Lock()

    def start(self) -> "FcRoute":
        self._fc.start()
        self._client = self._fc.client()
        return self

    def stop(self) -> None:
        self._fc.stop()
        self._attribution.close()
        if self._kill_dir is not None:
            self._kill_dir.cleanup()

    def _output(self, invocation: "InvocationRequest", line: bytes) -> None:
        """A line a worker wrote, to the sink under its resource (from the worker's log reader thread)."""
        assert self._logs is not None
        resource, request_type, request_id = self._attribution.of(invocation)
        self._logs.line(line.decode("utf-8", errors="replace"), stream="output", resource=resource,
                        request_type=request_type, request_id=request_id)

    @property
    def fc(self) -> LocalFunctionCompute:
        return self._fc

    def _ensure_function(self, token: FcFunctionToken, spec: str, timeout: float) -> None:
        key = (token.service or "", token.function)
        with self._lock:
            if self._timeouts.get(key, 0) >= timeout:
                return
            env = function_environment(self._environment, os.environ)
            env[PROVIDER_ENV] = spec
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
            if token.fc_version == 3:
                return self._send_fc3(token.function, payload)
            response = self._client.invoke_function(token.service, token.function, payload=payload,
                                                    headers={"x-fc-invocation-type": "Async"})
        return str(response.headers.get("x-fc-request-id", ""))

    def _send_fc3(self, function: str, payload: bytes) -> str:
        """An async invocation through the FC 3.0 API (the SDK is loaded on the first FC 3.0 token)."""
        try:
            from alibabacloud_fc20230330 import models
            from alibabacloud_tea_util.models import RuntimeOptions
        except ImportError:
            raise RuntimeError("FC 3.0 tokens are invoked with the FC 3.0 SDK: pip install alibabacloud-fc20230330 "
                               "(or bind the token in process with --in-process)") from None

        if self._client3 is None:
            self._client3 = self._fc.client3()
        response = self._client3.invoke_function_with_options(
            function, models.InvokeFunctionRequest(body=payload),
            models.InvokeFunctionHeaders(x_fc_invocation_type="Async"), RuntimeOptions())
        headers = {k.lower(): v for k, v in (response.headers or {}).items()}
        return str(headers.get("x-fc-request-id", ""))

    def failure(self, invocation_id: str) -> str | None:
        """Why an invocation can no longer answer (it settled), or None while it may; check before captures."""
        try:
            record = self._fc.record(invocation_id)
        except KeyError:
            return None
        if record.status == "succeeded":
            if in_progress(record):
                return None  # its continuations answer, through their own invocations
            return "the function finished but its response never reached the ResponseURL"
        if record.status not in ("failed", "dropped"):
            return None
        return f"the function failed on all {len(record.attempts)} attempt(s) without answering{_error_of(record)}"

    def settled(self, invocation_ids: list[str]) -> bool:
        """Whether every one of these invocations has finished (a duplicate then sends nothing more)."""
        try:
            return all(self._fc.record(i).status != PENDING_INVOCATION for i in invocation_ids)
        except KeyError:
            return False

    def timeout_note(self, invocation_id: str) -> str:
        """What a timed-out wait adds to its reason: an operation still in progress, and the last
        invocation of the function that failed for good since (a continuation that kept crashing)."""
        try:
            first = self._fc.record(invocation_id)
        except KeyError:
            return ""
        if first.status != "succeeded" or not in_progress(first):
            return ""
        later = [r for r in self._fc.records if r.received >= first.received and r.request_id != invocation_id
                 and (r.service, r.function) == (first.service, first.function) and r.status in ("failed", "dropped")]
        failed = f"; an invocation of the function since failed for good{_error_of(later[-1])}" if later else ""
        return f" (the operation was still in progress: the provider returned InProgress{failed})"


class _Attribution:
    """Which resource an FC invocation works for: (LogicalResourceId, RequestType, RequestId), or
    empty strings when unknown; cached per invocation and per continuation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_invocation: dict[str, tuple[str, str, str]] = {}
        self._by_continuation: dict[str, tuple[str, str, str]] = {}
        self._stores: dict[str, "Store"] = {}

    def of(self, invocation: "InvocationRequest") -> tuple[str, str, str]:
        with self._lock:
            known = self._by_invocation.get(invocation.request_id)
        if known is None:
            known = self._resolve(invocation)
            with self._lock:
                self._by_invocation[invocation.request_id] = known
        return known

    def _resolve(self, invocation: "InvocationRequest") -> tuple[str, str, str]:
        try:
            payload = json.loads(invocation.payload)
        except (ValueError, RecursionError):
            return "", "", ""
        if not isinstance(payload, dict):
            return "", "", ""
        if isinstance(payload.get("LogicalResourceId"), str):
            return _identity(payload)
        continuation_id = payload.get(CONTINUATION_FIELD)
        if not isinstance(continuation_id, str):
            return "", "", ""
        with self._lock:
            known = self._by_continuation.get(continuation_id)
        if known is not None:
            return known
        url = invocation.spec.env.get(STORE_SETTING) or os.environ.get(STORE_SETTING) or default_url(os.environ)
        try:
            continuation = self._store(url).get_continuation(continuation_id)
        except Exception:  # noqa: BLE001 - an unreadable store only costs the attribution
            return "", "", ""
        if continuation is None:
            return "", "", ""
        known = _identity(continuation.request)
        with self._lock:
            self._by_continuation[continuation_id] = known
        return known

    def _store(self, url: str) -> "Store":
        from ..store import open_store

        with self._lock:
            if url not in self._stores:
                self._stores[url] = open_store(url)
            return self._stores[url]

    def close(self) -> None:
        with self._lock:
            stores = list(self._stores.values())
            self._stores.clear()
        for store in stores:
            try:
                store.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass


def _identity(request: Mapping[str, Any]) -> tuple[str, str, str]:
    return tuple(str(request.get(name) or "") for name in ("LogicalResourceId", "RequestType", "RequestId"))  # type: ignore[return-value]


def _error_of(record: Any) -> str:
    last = record.attempts[-1] if record.attempts else None
    return f": {last.error_type}: {last.error_message}" if last is not None and last.error_message else ""
