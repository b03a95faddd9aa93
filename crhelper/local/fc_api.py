"""The invoke API as a function of (method, path, headers, body): no sockets here.

Order of checks follows FC: signature first, then route, function lookup, headers, payload.
"""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Mapping
from urllib.parse import unquote, urlsplit

from crhelper.local.fc_async import AsyncDispatcher
from crhelper.local.fc_auth import MAX_CLOCK_SKEW_SECONDS, AccessKey, verify_request
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
from crhelper.local.fc_registry import FunctionRegistry
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
                 account_id: str, region: str, endpoint: str,
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
        self._pending: dict[str, InvocationRequest] = {}
        self._dispatcher = AsyncDispatcher(self._run_async_attempt, self._settle_async,
                                           workers=async_settings.workers,
                                           max_retries=async_settings.max_retries,
                                           retry_delay=async_settings.retry_delay)

    def start(self) -> None:
        self._dispatcher.start()

    def stop(self) -> None:
        """Kill running workers, stop the queue and mark never-finished async requests dropped."""
        self._runner.kill_all()
        for request_id in self._dispatcher.stop():
            self._journal.settle(request_id, DROPPED)

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self._dispatcher.wait_idle(timeout)

    def handle(self, method: str, raw_path: str, headers: Mapping[str, str],
               body: bytes) -> ApiResponse:
        """`headers` must have lower-cased names."""
        request_id = str(uuid.uuid4())
        try:
            return self._handle(request_id, method, raw_path, headers, body)
        except FcApiError as err:
            return ApiResponse(err.status, {HEADER_REQUEST_ID: request_id,
                                            "Content-Type": "application/json"}, err.body())

    def _handle(self, request_id: str, method: str, raw_path: str, headers: Mapping[str, str],
                body: bytes) -> ApiResponse:
        path = unquote(urlsplit(raw_path).path)
        verify_request(method, path, headers, self._keys, self._clock(), self._max_skew)
        target = parse_invocation_path(path)
        if method.upper() != "POST" or target is None:
            raise path_not_supported(method.upper(), path)
        spec = self._registry.lookup(target.service, target.function)
        invocation_type = parse_invocation_type(headers.get(HEADER_INVOCATION_TYPE))
        check_payload_size(len(body), invocation_type)
        request = InvocationRequest(request_id=request_id, spec=spec, qualifier=target.qualifier,
                                    payload=body, role=self._role, account_id=self._account_id,
                                    region=self._region, endpoint=self._endpoint)
        if invocation_type == "Async":
            return self._accept_async(request, parse_async_delay(headers.get(HEADER_ASYNC_DELAY)))
        return self._invoke_sync(request, wants_log_tail(headers.get(HEADER_LOG_TYPE)))

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
        self._dispatcher.submit(request.request_id, delay)
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
