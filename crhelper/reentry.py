"""How a long-running operation gets called again: an in-process timer, or a delayed async FC invocation.

Only a continuation id (and the step it was scheduled for) travels in a re-entry; the request and
its ResponseURLs stay in the store.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import os
import threading
import time
from typing import Any, Callable, Mapping, Protocol

from .logs import get_logger

#: The key of a re-entry payload naming the continuation.
CONTINUATION_FIELD = "crhelperContinuation"
#: Its optional second key: the step (`Continuation.attempt`) the re-entry was scheduled for, so a
#: duplicated re-entry of an earlier step is recognised and dropped (payloads without it still work).
STEP_FIELD = "crhelperStep"
#: FC 2.0 accepts x-fc-async-delay from 0 to 3,600 s.
MAX_FC_DELAY = 3600
#: How early a step's FC re-invocation is sent (lifecycle.EARLY_TOLERANCE must be at least this).
FC_LEAD = 1.0

_log = get_logger("reentry")


class Reentry(Protocol):
    """Something that calls the provider again with a continuation id after a delay."""

    name: str
    #: Why this path cannot continue an operation (None: it can); a long-running handler is told it.
    unavailable_reason: str | None

    def schedule(self, continuation_id: str, delay: float) -> None: ...


class ContinuationRef(str):
    """A continuation id as a re-entry carries it, with the step it was scheduled for (None: a
    payload of an earlier version). A `str`, so every `Reentry.schedule(continuation_id, delay)`
    passes it through unchanged, and `continuation_payload` writes its step."""

    step: int | None

    def __new__(cls, continuation_id: str, step: int | None = None) -> "ContinuationRef":
        ref = super().__new__(cls, continuation_id)
        ref.step = step
        return ref


def step_of(continuation_id: str) -> int | None:
    """The step a re-entry was scheduled for, when it says (a `ContinuationRef`)."""
    return getattr(continuation_id, "step", None)


def continuation_payload(continuation_id: str, step: int | None = None) -> bytes:
    """The re-entry event: the id, and the step (`step`, else the id's own) when known."""
    step = step_of(continuation_id) if step is None else step
    payload: dict[str, Any] = {CONTINUATION_FIELD: str(continuation_id)}
    if step is not None:
        payload[STEP_FIELD] = step
    return json.dumps(payload).encode("utf-8")


def continuation_id_of(raw: Mapping[str, Any]) -> ContinuationRef | None:
    """The continuation id (with its step, if the payload has one) if this decoded event is a
    re-entry, else None."""
    value = raw.get(CONTINUATION_FIELD)
    if not isinstance(value, str):
        return None
    if len(raw) == 1:
        return ContinuationRef(value)
    step = raw.get(STEP_FIELD)
    if len(raw) == 2 and isinstance(step, int) and not isinstance(step, bool) and step >= 0:
        return ContinuationRef(value, step)
    return None


class UnavailableReentry:
    """Stands where no re-entry is possible, carrying the reason a long-running handler will be told."""

    name = "unavailable"

    def __init__(self, reason: str) -> None:
        self.unavailable_reason: str | None = reason

    def schedule(self, continuation_id: str, delay: float) -> None:
        raise RuntimeError(self.unavailable_reason or "re-entry unavailable")


class LocalScheduler:
    """In-process re-entry for local runs and long-lived servers: a timer heap and a small worker pool.

    `resume(continuation_id)` is called when a timer fires; `recover()` every `recover_every` seconds
    picks up continuations whose process died (their step lease ran out).
    """

    name = "local"
    unavailable_reason: str | None = None

    def __init__(
        self,
        resume: Callable[[str], None],
        recover: Callable[[], None] | None = None,
        *,
        workers: int = 4,
        recover_every: float = 5.0,
    ) -> None:
        self._resume = resume
        self._recover = recover
        self._recover_every = recover_every
        self._heap: list[tuple[float, int, str]] = []
        self._counter = itertools.count()
        self._wake = threading.Condition()
        from concurrent.futures import ThreadPoolExecutor  # only servers and local runs pay for it

        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="crhelper-reentry")
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="crhelper-scheduler", daemon=True)
        self._thread.start()

    def schedule(self, continuation_id: str, delay: float) -> None:
        with self._wake:
            heapq.heappush(self._heap, (time.monotonic() + max(0.0, delay), next(self._counter), continuation_id))
            self._wake.notify()

    def pending(self) -> int:
        with self._wake:
            return len(self._heap)

    def _loop(self) -> None:
        next_recovery = time.monotonic() + (self._recover_every if self._recover else math.inf)
        while True:
            with self._wake:
                if self._stopped:
                    return
                now = time.monotonic()
                due_at = min(self._heap[0][0] if self._heap else math.inf, next_recovery)
                if due_at > now:
                    self._wake.wait(min(due_at - now, 1.0))
                    continue
                ready = []
                while self._heap and self._heap[0][0] <= now:
                    ready.append(heapq.heappop(self._heap)[2])
            try:
                for continuation_id in ready:
                    self._pool.submit(self._guarded, self._resume, continuation_id)
                if self._recover and time.monotonic() >= next_recovery:
                    next_recovery = time.monotonic() + self._recover_every
                    self._pool.submit(self._guarded, self._recover)
            except RuntimeError:  # the interpreter is exiting: the work stays in the store for recovery
                return

    @staticmethod
    def _guarded(func: Callable[..., None], *args: Any) -> None:
        try:
            func(*args)
        except Exception:
            _log.exception("re-entry failed")

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()
        self._thread.join(2)
        self._pool.shutdown(wait=True, cancel_futures=True)


class FunctionComputeReentry:
    """Re-invoke this very function asynchronously with `x-fc-async-delay` (FC 2.0, `fc2` SDK).

    Names and credentials come from the FC context (python3.12 drops `context.credentials`, so the
    environment is the fallback); the endpoint from CRHELPER_FC_ENDPOINT or the region's internal one.
    """

    name = "fc"
    unavailable_reason: str | None = None
    #: FC 2.0 functions live in a service; FC 3.0 ones (`reentry_fc3`) have none.
    needs_service = True

    def __init__(self, context: object, env: Mapping[str, str] | None = None) -> None:
        from .cloud.credentials import resolve as resolve_credentials  # only FC re-entry needs them

        env = os.environ if env is None else env
        function = getattr(context, "function", None)
        service = getattr(context, "service", None)
        self.function_name = getattr(function, "name", None) or env.get("FC_FUNCTION_NAME")
        self.service_name = getattr(service, "name", None) or env.get("FC_SERVICE_NAME")
        self.qualifier = getattr(service, "qualifier", None) or env.get("FC_QUALIFIER") or None
        region = getattr(context, "region", None) or env.get("FC_REGION") or ""
        account = getattr(context, "account_id", None) or env.get("FC_ACCOUNT_ID") or ""
        self.endpoint = env.get("CRHELPER_FC_ENDPOINT") or f"https://{account}.{region}-internal.fc.aliyuncs.com"
        self._credentials = resolve_credentials(context, env)
        self._lock = threading.Lock()
        self._fc_client: Any = None
        missing = [n for n, v in (("function name", self.function_name),
                                  ("service name", self.service_name or not self.needs_service),
                                  ("access key", self._credentials)) if not v]
        if missing:
            raise RuntimeError(f"cannot re-invoke on Function Compute: no {', '.join(missing)} in the context or environment")

    def prepare(self) -> None:
        """Import the SDK and build the client ahead of `schedule` (from a thread, while a step that
        will likely ask for another call waits or runs): 0.2-0.8 s off the gap between polls."""
        try:
            self._client()
        except Exception as exc:  # schedule will meet it again and report it
            _log.warning("could not prepare the FC client", extra={"fields": {"error": type(exc).__name__}})

    def _client(self) -> Any:
        with self._lock:
            if self._fc_client is None:
                import fc2  # lazy: only long-running operations on FC pay for the SDK

                credentials = self._credentials
                assert credentials is not None  # checked at construction
                self._fc_client = fc2.Client(
                    endpoint=self.endpoint, accessKeyID=credentials.access_key_id,
                    accessKeySecret=credentials.access_key_secret, securityToken=credentials.security_token, Timeout=10,
                )
            return self._fc_client

    def schedule(self, continuation_id: str, delay: float) -> None:
        """Re-invoke after `delay` seconds (rounded up: FC takes whole seconds), never earlier."""
        self._invoke(continuation_id, math.ceil(delay))

    def schedule_step(self, continuation_id: str, delay: float) -> None:
        """Re-invoke for the next step up to FC_LEAD seconds early: the call, the FC dispatch and a
        cold instance then overlap the delay, and the lifecycle waits out what is left of it."""
        self._invoke(continuation_id, math.ceil(delay - FC_LEAD))

    def _invoke(self, continuation_id: str, seconds: int) -> None:
        seconds = max(0, min(MAX_FC_DELAY, seconds))
        self._send(continuation_payload(continuation_id), seconds)
        _log.info("re-invocation scheduled", extra={"fields": {"delay": seconds, "via": self.name}})

    def _send(self, payload: bytes, seconds: int) -> None:
        """The one SDK call (an FC 3.0 variant overrides this and `_client`)."""
        self._client().invoke_function(
            self.service_name, self.function_name, payload=payload,
            headers={"x-fc-invocation-type": "Async", "x-fc-async-delay": str(seconds)}, qualifier=self.qualifier,
        )
