"""The local FC's API as a function of (method, path, headers, body): no sockets here.

FC 2.0 (`/2016-08-15/...`, FC's own signature) and FC 3.0 (`/2023-03-30/...`, ACS3-HMAC-SHA256;
routes in `fc3_api`) side by side; management calls go to `fc_manage_api` / `fc3_api` over one
`fc_manage.Management`, invocations of both versions to the one invoke path here.
Order of checks follows FC: signature first, then route, function lookup, headers, payload.
"""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Mapping
from urllib.parse import unquote, urlsplit

from crhelper.cloud.signing.replay import nonce_cache
from crhelper.local import fc3_api
from crhelper.local.fc3_api import Fc3Api
from crhelper.local.fc_async import AsyncDispatcher
from crhelper.local.fc_auth import MAX_CLOCK_SKEW_SECONDS, AccessKey, verify_signed_request
from crhelper.local.fc_manage import Management
from crhelper.local.fc_manage_api import Fc2ManagementApi, is_management_path
from crhelper.local.fc_manage_timers import DueTimer, TimerFiring
from crhelper.local.fc_protocol import (
    HEADER_ASYNC_DELAY, HEADER_DURATION, HEADER_ERROR_TYPE, HEADER_INVOCATION_TYPE,
    HEADER_LOG_RESULT, HEADER_LOG_TYPE, HEADER_REQUEST_ID, LOG_TAIL_BYTES,
    UNHANDLED_INVOCATION_ERROR, FcApiError, check_payload_size, function_error_body,
    log_tail_header, parse_async_delay, parse_invocation_path, parse_invocation_type,
    path_not_supported, wants_log_tail,
)
from crhelper.local.fc_records import (
    DROPPED, FAILED, SUCCEEDED, AttemptRecord, InvocationJournal, InvocationRecord,
)
from crhelper.local.fc_registry import FunctionRegistry, FunctionSpec
from crhelper.local.fc_runner import InvocationRequest, InvocationResult, ProcessRunner
from crhelper.servers import ApiResponse


@dataclass(frozen=True)
class AsyncSettings:
    workers: int = 2
    max_retries: int = 3
    retry_delay: float = 1.0


def _attempt(number: int, result: InvocationResult) -> AttemptRecord:
    error = result.error or {}
    return AttemptRecord(number=number, started=result.started, ended=result.ended,
                         outcome=result.status, error_type=error.get("errorType"),
                         error_message=error.get("errorMessage"),
                         log_tail=result.log[-LOG_TAIL_BYTES:], result=result.body[:LOG_TAIL_BYTES])


class FcApi:
    """Authenticates, routes and runs invocations; owns the async queue."""

    def __init__(self, *, registry: FunctionRegistry, keys: Mapping[str, AccessKey],
                 runner: ProcessRunner, journal: InvocationJournal, role: AccessKey,
                 account_id: str, region: str, endpoint: str, management: Management,
                 async_settings: AsyncSettings = AsyncSettings(),
                 max_clock_skew: float = MAX_CLOCK_SKEW_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        self._registry = registry
        self._keys = keys
        self._runner = runner
        self._journal = journal
        self._role = role
        self._account_id = account_id
        self._region = region
        self._endpoint = endpoint
        self._max_skew = max_clock_skew
        self._clock = clock
        self._lock = threading.Lock()
        self._management = management
        self._fc2_manage = Fc2ManagementApi(management, region=region, account_id=account_id)
        self._fc3 = Fc3Api(management, self.invoke, registry.lookup, region=region, account_id=account_id)
        self._nonces = nonce_cache(max_clock_skew)
        self._timers = TimerFiring(management.enabled_timers, self._fire_timer, clock=clock)
        self._pending: dict[str, InvocationRequest] = {}
        self._dispatcher = AsyncDispatcher(self._run_async_attempt, self._settle_async,
                                           workers=async_settings.workers,
                                           max_retries=async_settings.max_retries,
                                           retry_delay=async_settings.retry_delay)

    def start(self) -> None:
        self._dispatcher.start()
        self._timers.start()

    def stop(self) -> None:
        """Kill running workers, stop the queue and mark never-finished async requests dropped."""
        self._timers.stop()
        self._runner.kill_all()
        for request_id in self._dispatcher.stop():
            self._journal.settle(request_id, DROPPED)
        self._management.close()

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self._dispatcher.wait_idle(timeout)

    def handle(self, method: str, raw_path: str, headers: Mapping[str, str],
               body: bytes) -> ApiResponse:
        """`headers` must have lower-cased names."""
        request_id = str(uuid.uuid4())
        fc3 = raw_path.startswith(fc3_api.PREFIX)
        try:
            if fc3:
                verify_signed_request(method, raw_path, headers, body, self._keys, self._clock(), self._nonces,
                                      self._max_skew, acs3_default=True)
                return self._fc3.handle(request_id, method, raw_path, headers, body)
            return self._handle(request_id, method, raw_path, headers, body)
        except FcApiError as err:
            return ApiResponse(err.status, {HEADER_REQUEST_ID: request_id, "Content-Type": "application/json"},
                               fc3_api.error_body(err, request_id) if fc3 else err.body())

    def _handle(self, request_id: str, method: str, raw_path: str, headers: Mapping[str, str],
                body: bytes) -> ApiResponse:
        split = urlsplit(raw_path)
        path = unquote(split.path)
        verify_signed_request(method, raw_path, headers, body, self._keys, self._clock(), self._nonces, self._max_skew,
                              acs3_default=False)
        target = parse_invocation_path(path)
        if target is None and is_management_path(path):
            return self._fc2_manage.handle(request_id, method, path, split.query, body)
        if method.upper() != "POST" or target is None:
            raise path_not_supported(method.upper(), path)
        spec = self._registry.lookup(target.service, target.function)
        return self.invoke(request_id, spec, target.qualifier, headers, body)

    def invoke(self, request_id: str, spec: FunctionSpec, qualifier: str | None, headers: Mapping[str, str],
               body: bytes) -> ApiResponse:
        """Run an invocation of either API version: sync, or accepted for the async queue."""
        invocation_type = parse_invocation_type(headers.get(HEADER_INVOCATION_TYPE))
        check_payload_size(len(body), invocation_type)
        request = InvocationRequest(request_id=request_id, spec=spec, qualifier=qualifier,
                                    payload=body, role=self._role, account_id=self._account_id,
                                    region=self._region, endpoint=self._endpoint)
        if invocation_type == "Async":
            return self._accept_async(request, parse_async_delay(headers.get(HEADER_ASYNC_DELAY)))
        return self._invoke_sync(request, wants_log_tail(headers.get(HEADER_LOG_TYPE)))

    def _fire_timer(self, timer: DueTimer, event: bytes) -> None:
        """A timer trigger's invocation: asynchronous, as FC's time trigger invokes."""
        spec = self._registry.lookup(timer.service, timer.function)
        self.invoke(str(uuid.uuid4()), spec, timer.qualifier, {HEADER_INVOCATION_TYPE: "Async"}, event)

    def _record(self, request: InvocationRequest, invocation_type: str,
                delay: int) -> InvocationRecord:
        return InvocationRecord(request_id=request.request_id, service=request.spec.service,
                                function=request.spec.function, qualifier=request.qualifier,
                                invocation_type=invocation_type, delay=delay,
                                received=self._clock())

    def _invoke_sync(self, request: InvocationRequest, tail: bool) -> ApiResponse:
        self._journal.open(self._record(request, "Sync", 0))
        result = self._runner.run(request)
        self._journal.add_attempt(request.request_id, _attempt(1, result))
        self._journal.settle(request.request_id, SUCCEEDED if result.ok else FAILED)
        headers = {HEADER_REQUEST_ID: request.request_id,
                   HEADER_DURATION: str(int((result.ended - result.started) * 1000))}
        if tail:
            headers[HEADER_LOG_RESULT] = log_tail_header(result.log)
        if result.ok:
            headers["Content-Type"] = "application/octet-stream"
            return ApiResponse(200, headers, result.body)
        headers[HEADER_ERROR_TYPE] = UNHANDLED_INVOCATION_ERROR
        headers["Content-Type"] = "application/json"
        return ApiResponse(200, headers, function_error_body(result.error or {}))

    def _accept_async(self, request: InvocationRequest, delay: int) -> ApiResponse:
        with self._lock:
            self._pending[request.request_id] = request
        self._journal.open(self._record(request, "Async", delay))
        retries = self._management.max_async_retries(request.spec.service, request.spec.function, request.qualifier)
        self._dispatcher.submit(request.request_id, delay, retries)
        return ApiResponse(202, {HEADER_REQUEST_ID: request.request_id}, b"")

    def _run_async_attempt(self, request_id: str, number: int) -> bool:
        with self._lock:
            request = self._pending[request_id]
        result = self._runner.run(request)
        self._journal.add_attempt(request_id, _attempt(number, result))
        return result.ok

    def _settle_async(self, request_id: str, ok: bool) -> None:
        with self._lock:
            self._pending.pop(request_id, None)
        self._journal.settle(request_id, SUCCEEDED if ok else FAILED)
