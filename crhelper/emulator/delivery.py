"""Delivery by ServiceToken: the Deliverer the stack emulator calls for every request.

One `StackDelivery` serves one stack operation (`with StackDelivery(bindings) as deliver:
emulator.create(..., deliver)`). Per request it

1. gives the request fresh public and intranet ResponseURLs on its own `ResponseServer`
   (with the ResponseURL faults planned for them);
2. routes it by ServiceToken:
   - FC 2.0 `services/S/functions/F` and FC 3.0 `functions/F` -> the bound provider as a function
     of a local Function Compute endpoint, invoked asynchronously with the real SDK of the token's
     version, `fc2` or `alibabacloud-fc20230330` (`delivery_fc`);
   - MNS `queues/Q` / `topics/T` -> sent / published through a local MNS endpoint and consumed
     by the project's `QueueWorker` running the provider (`delivery_mns`);
   - `web:` -> POSTed to the URL for real, `web[sync]:` -> the HTTP reply is the response
     (`delivery_web`), signed when the resource's HttpConfig has a SignKey;
   - with `mode: inprocess`, every bound FC/MNS token is handled in-process (fast, no processes);
3. waits for the answer at the ResponseURL up to the resource's Timeout (a provider returning
   `InProgress` answers from a later invocation: FC re-invocations through the local endpoint, the
   in-process scheduler, or the MNS queue), and fails the resource with the server's exact message
   if the answer broke a ROS rule.

With a `ProviderLogs` sink (`logs=`), the ResponseURLs it hands out are redacted from every line a
provider writes, FC workers stream their output to it, and it learns which resources a provider
of this operation serves (their polls are counted for the heartbeat); capturing in-process
output is the sink's own `capture()`, which the CLI wraps around the operation.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..invariants import body_violations
from ..loading import load_provider
from ..logs import redact_url, request_context
from ..local.response_server import Capture, ResponseServer
from ..servicetoken import FcFunctionToken, MnsQueueToken, MnsTopicToken, ServiceTokenError, WebToken, parse_service_token
from .delivery_bindings import Bindings, Faults
from .emulator import DEFAULT_ACCOUNT_ID, DEFAULT_REGION
from .protocol import RequestNotSent

if TYPE_CHECKING:  # each route loads its local endpoint (and SDK) only when a token needs it
    from .delivery_fc import FcRoute
    from .delivery_mns import MnsRoute
    from .provider_logs import ProviderLogs

#: After the first answer to a duplicated request, how long to wait for the second one.
DUPLICATE_GRACE = 5.0
_POLL = 0.01
#: How often a waiter re-checks why no answer may come (a settled FC invocation); answers wake it at once.
_GONE_POLL = 0.1
_IDENTITY_FIELDS = ("RequestType", "RequestId", "StackId", "LogicalResourceId", "ResourceType")

ROUTE_FC, ROUTE_INPROCESS, ROUTE_MNS, ROUTE_WEB, ROUTE_WEB_SYNC = "fc", "inprocess", "mns", "web", "web-sync"


class DeliveryError(RuntimeError):
    """A request could not be delivered or answered; the message becomes the resource's reason."""


class NotDelivered(DeliveryError, RequestNotSent):
    """The request never left: nothing is bound to its token (so a Create leaves nothing to delete)."""


class ProtocolViolation(DeliveryError):
    """The provider answered, but the answer broke a rule ROS enforces."""


@dataclass(frozen=True)
class Delivered:
    """One delivery, for tests and reports: how the request travelled and what came back."""

    route: str
    service_token: str
    request_type: str
    logical_id: str
    request_id: str
    status: str | None


def _url_token(url: str) -> str:
    return url.split("?", 1)[0].rsplit("/", 1)[-1]


class StackDelivery:
    """A Deliverer for one stack operation; see the module docstring. Thread-safe."""

    def __init__(
        self,
        bindings: Bindings | None = None,
        *,
        region: str = DEFAULT_REGION,
        account_id: str = DEFAULT_ACCOUNT_ID,
        http_configs: Mapping[str, Mapping[str, Any]] | None = None,
        workers: int = 64,
        logs: "ProviderLogs | None" = None,
    ) -> None:
        self.bindings = bindings or Bindings()
        self.logs = logs
        self.faults: Faults = self.bindings.faults
        self.region = region
        self.account_id = account_id
        self.http_configs = dict(http_configs or {})
        self.workers = workers
        self.server = ResponseServer()
        self.delivered: list[Delivered] = []
        self._unanswered: dict[str, list[int]] = {}  # RequestId -> indexes in `delivered` still without a status
        self._index_lock = threading.Lock()
        self._by_token: dict[str, list[Capture]] = {}  # URL token -> its captures, in arrival order
        self._indexed = 0  # how many of the server's captures are in `_by_token`
        self._lock = threading.Lock()
        self._providers: dict[str, Any] = {}
        self._fc: FcRoute | None = None
        self._mns: MnsRoute | None = None
        self._started = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "StackDelivery":
        self.server.start()
        self._started = True
        return self

    def stop(self) -> None:
        """Stop the local endpoints started for this operation (workers still running are killed)."""
        with self._lock:
            routes = [r for r in (self._fc, self._mns) if r is not None]
            self._fc = self._mns = None
            providers = list(self._providers.values())
            self._providers.clear()
        for route in routes:
            route.stop()
        for provider in providers:  # their in-process schedulers; what is left stays in the store
            close = getattr(provider, "close", None)
            if callable(close):
                close()
        if self._started:
            self.server.stop()
            self._started = False

    def __enter__(self) -> "StackDelivery":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def fc(self) -> "FcRoute":
        """The FcRoute, started on first use of an FC token."""
        from .delivery_fc import FcRoute

        with self._lock:
            if self._fc is None:
                self._fc = FcRoute(self.region, self.account_id, workers=self.workers,
                                   kill_provider=self.faults.kill_provider,
                                   kill_after=self.faults.kill_provider_after,
                                   environment=self.bindings.environment, logs=self.logs).start()
            return self._fc

    @property
    def mns(self) -> "MnsRoute":
        """The MnsRoute, started on first use of an MNS token."""
        from .delivery_mns import MnsRoute

        with self._lock:
            if self._mns is None:
                self._mns = MnsRoute(self.region, self.account_id, self.provider).start()
            return self._mns

    def provider(self, spec: str) -> Any:
        """The provider object for a spec, loaded once per operation."""
        with self._lock:
            if spec not in self._providers:
                try:
                    self._providers[spec] = load_provider(spec)
                except Exception as exc:  # noqa: BLE001 - an import-time failure is the user's code: name it
                    raise DeliveryError(
                        f"provider {spec} could not be loaded: {type(exc).__name__}: {exc}; "
                        "fix it or bind another provider with -s TOKEN=MODULE:provider"
                    ) from None
            return self._providers[spec]

    # ------------------------------------------------------------------ the Deliverer

    def __call__(self, service_token: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        urls: list[str] = []
        # What this thread writes meanwhile (a provider module printing as it is imported) is the
        # request's output; the providers' own threads set their request context themselves.
        identity = {name: str(request.get(name) or "") for name in _IDENTITY_FIELDS}
        try:
            with request_context(identity) if self.logs is not None else contextlib.nullcontext():
                return self._deliver(service_token, request, timeout, urls)
        except Exception as exc:
            # The message becomes a stack event: a provider error quoting its event must not carry the
            # presigned ResponseURLs into events, describe output or logs.
            message = str(exc)
            for url in urls:
                message = message.replace(url, redact_url(url))
            if message == str(exc):
                raise
            raise (NotDelivered if isinstance(exc, RequestNotSent) else DeliveryError)(message) from None

    def _deliver(self, service_token: str, request: dict[str, Any], timeout: float, urls: list[str]) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        try:
            token = parse_service_token(service_token)
        except ServiceTokenError as exc:
            raise NotDelivered(str(exc).split(". Valid forms")[0]) from None
        request = copy.deepcopy(request)
        faults = self.faults
        request["ResponseURL"], request["IntranetResponseURL"] = self.server.new_urls(
            request, fail_first=faults.response_fail_first, fail_status=faults.response_fail_status, delay=faults.response_delay
        )
        urls.extend((request["ResponseURL"], request["IntranetResponseURL"]))
        if self.logs is not None:
            for url in urls:
                self.logs.protect(url)
        if isinstance(token, WebToken):
            return self._web(token, service_token, request, timeout, deadline)
        spec = self.bindings.provider_for(service_token)
        if spec is None:
            raise NotDelivered(
                f"no provider is bound to ServiceToken {service_token}; bind one with "
                f"-s '{service_token}=package.module:provider' or in a bindings file"
            )
        attempts = 2 if faults.duplicate else 1
        if self.logs is not None:
            self.logs.serving(str(request.get("LogicalResourceId") or ""))
        if isinstance(token, FcFunctionToken) and self.bindings.mode == "endpoints":
            fc = self.fc
            invocations = [fc.send(token, spec, request, timeout) for _ in range(attempts)]
            self._record(ROUTE_FC, service_token, request)
            return self._await(request, deadline, timeout, attempts, lambda: fc.failure(invocations[-1]),
                               lambda: fc.timeout_note(invocations[0]), settled=lambda: fc.settled(invocations))
        if isinstance(token, (MnsQueueToken, MnsTopicToken)) and self.bindings.mode == "endpoints":
            mns = self.mns
            sent = [mns.send(token, spec, request) for _ in range(attempts)]
            self._record(ROUTE_MNS, service_token, request)
            return self._await(request, deadline, timeout, attempts, None, settled=lambda: mns.consumed(sent))
        provider = self.provider(spec)
        continuing = [_handle_in_process(provider, copy.deepcopy(request)) for _ in range(attempts)][0]
        self._record(ROUTE_INPROCESS, service_token, request)
        if continuing:  # its in-process scheduler answers later
            return self._await(request, deadline, timeout, attempts, None,
                               lambda: " (the operation was still in progress: the provider returned InProgress)")
        return self._await(
            request, deadline, timeout, attempts,
            lambda: "the provider returned without an accepted response at the ResponseURL",
        )

    def _record(self, route: str, service_token: str, request: Mapping[str, Any], status: str | None = None) -> None:
        entry = Delivered(route, service_token, str(request.get("RequestType")), str(request.get("LogicalResourceId")),
                          str(request.get("RequestId")), status)
        with self._lock:
            if status is None:
                self._unanswered.setdefault(entry.request_id, []).append(len(self.delivered))
            self.delivered.append(entry)

    # ------------------------------------------------------------------ web

    def _web(self, token: WebToken, service_token: str, request: dict[str, Any], timeout: float, deadline: float) -> dict[str, Any]:
        from .delivery_web import WebDeliveryError, post

        config = self.http_configs.get(str(request.get("LogicalResourceId")), {})
        attempts = 2 if self.faults.duplicate else 1
        try:
            replies = [post(token, request, config, timeout) for _ in range(attempts)]
        except WebDeliveryError as exc:
            raise DeliveryError(str(exc)) from None
        if not token.sync:
            self._record(ROUTE_WEB, service_token, request)
            return self._await(request, deadline, timeout, attempts, None)
        raw = replies[0] or b""
        body, problems = body_violations(raw, request)
        if any(reply != raw for reply in replies[1:]):
            problems.append("a second, different response was sent for the same request")
        self._record(ROUTE_WEB_SYNC, service_token, request, (body or {}).get("Status"))
        if problems:
            raise ProtocolViolation(_violation_message(request, problems))
        assert body is not None
        return body

    # ------------------------------------------------------------------ waiting for the answer

    def _captures(self, url_token: str) -> list[Capture]:
        """The answers received on one URL so far. The server's capture list only grows: each capture
        is indexed once, so the waits of 200 requests in flight do not each rescan all of them."""
        with self._index_lock:
            captures = self.server.captures
            while self._indexed < len(captures):
                capture = captures[self._indexed]
                self._by_token.setdefault(capture.token, []).append(capture)
                self._indexed += 1
            return list(self._by_token.get(url_token, ()))

    def _await(
        self, request: dict[str, Any], deadline: float, timeout: float, expected: int, gone: Callable[[], str | None] | None,
        note: Callable[[], str] | None = None, settled: Callable[[], bool] | None = None,
    ) -> dict[str, Any]:
        """The first accepted answer at the request's ResponseURL, checked against ROS's rules.
        `gone` says why no answer can come any more; `note` what a timeout adds to its reason;
        `settled` whether every delivery was handled (a duplicate then needs no more grace)."""
        url_token = _url_token(request["ResponseURL"])
        grace_end: float | None = None
        while True:
            reason = gone() if gone is not None else None  # read before the captures: answers precede settling
            accepted = [c for c in self._captures(url_token) if c.status == 200]
            now = time.monotonic()
            if accepted and grace_end is None:
                grace_end = min(deadline, now + DUPLICATE_GRACE)
            if len(accepted) >= expected or (accepted and (reason is not None or now >= (grace_end or now))):
                break
            if accepted and settled is not None and settled():
                time.sleep(_POLL)  # a second answer sent just before its message was deleted
                accepted = [c for c in self._captures(url_token) if c.status == 200]
                break
            if reason is not None:
                raise DeliveryError(f"{reason}{_attempts_note(self._captures(url_token))}")
            if now >= deadline:
                raise TimeoutError(
                    f"timed out after {timeout:g} s without a response at the ResponseURL"
                    f"{note() if note is not None else ''}{_attempts_note(self._captures(url_token))}"
                )
            self._wait_answer(request["ResponseURL"], min(deadline, grace_end or deadline) - now)
        problems: list[str] = []
        for capture in self._captures(url_token):
            problems.extend(p for p in capture.violations if p not in problems)
        first = accepted[0]
        self._mark_status(request, (first.body or {}).get("Status"))
        if problems:
            raise ProtocolViolation(_violation_message(request, problems))
        assert first.body is not None
        return first.body

    def _wait_answer(self, url: str, left: float) -> None:
        """Until the next answer at `url` (woken by it), at most `_GONE_POLL` (`gone` and `settled` are
        re-read then) and never past `left`: 50 waiters no longer poll every 10 ms each."""
        self.server.wait_answer(url, min(_GONE_POLL, max(left, 0.0)))

    def _mark_status(self, request: Mapping[str, Any], status: str | None) -> None:
        with self._lock:  # O(1): 200 resources answering together must not scan every delivery each
            waiting = self._unanswered.get(str(request.get("RequestId")))
            if waiting:
                index = waiting.pop(0)
                entry = self.delivered[index]
                self.delivered[index] = Delivered(entry.route, entry.service_token, entry.request_type,
                                                  entry.logical_id, entry.request_id, status)


def _handle_in_process(provider: Any, request: dict[str, Any]) -> bool:
    """Hand the request to an in-process provider; True when it is continuing (nothing was due now:
    `InProgress`, or a duplicate of a request in flight), so its answer comes later."""
    process = getattr(provider, "process", None)
    if not callable(process):  # a plain object with handle(): it answers now or never
        provider.handle(request)
        return False
    outcome = process(request)
    return outcome.body is None and not outcome.error


def _attempts_note(captures: list[Capture]) -> str:
    refused = [c.status for c in captures if c.status != 200]
    if not refused:
        return ""
    return f" (the ResponseURL refused {len(refused)} attempt(s) with HTTP {refused[-1]})"


def _violation_message(request: Mapping[str, Any], problems: list[str]) -> str:
    return f"the {request.get('RequestType')} response broke the ROS protocol: " + "; ".join(problems)
