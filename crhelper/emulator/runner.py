"""Runs resource requests concurrently in dependency order, enforcing each one's Timeout.

Each delivery runs on its own daemon thread so a provider that never answers cannot hold the
stack (or the process) hostage: the scheduler stops waiting at the deadline and ignores a late
answer. Only the scheduler's thread calls `launch` and `finish`, so they need no locking.

How many requests are in flight at once is the stack's `parallelism` (ROS CreateStack/UpdateStack
`Parallelism`): 0 or None, the ROS default, means no limit.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .graph import DependencyGraph
from .protocol import Deliverer, Outcome, RequestNotSent, describe_exception, failure, interpret_response


@dataclass(frozen=True)
class Call:
    """A request to deliver: the scheduler sends it and waits at most `timeout` seconds."""

    service_token: str
    request: dict[str, Any]
    timeout: float


#: launch(node) returns a Call to deliver, or an Outcome when nothing needs to be sent.
Launch = Callable[[str], "Call | Outcome"]
#: finish(node, outcome) records the result and says whether the node counts as succeeded.
Finish = Callable[[str, Outcome], bool]


@dataclass
class RunResult:
    succeeded: set[str]
    failed: set[str]
    not_started: set[str]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.not_started


#: How long past a request's Timeout the scheduler still waits for its deliverer, whose own timeout
#: reason says more (an operation still in progress, refused attempts) than the scheduler can.
DELIVERER_GRACE = 1.0


def _timeout_reason(seconds: float) -> str:
    return f"timed out after {seconds:g} s without a response from the provider"


def check_parallelism(value: object) -> int:
    """A stack's Parallelism as ROS takes it: a whole number >= 0, 0 meaning no limit (pure)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"Parallelism: must be a whole number >= 0 (0 means no limit), got {value!r}")
    return value


class Runner:
    """Schedules nodes of a graph: a node starts once all its dependencies succeeded, at most
    `parallelism` at a time (0 or None: no limit)."""

    def __init__(self, deliver: Deliverer, parallelism: int | None = None) -> None:
        self._deliver = deliver
        self._limit = check_parallelism(parallelism or 0) or None

    def run(self, graph: DependencyGraph, launch: Launch, finish: Finish, stop_on_failure: bool = True) -> RunResult:
        results: queue.Queue[tuple[str, int, Any, BaseException | None]] = queue.Queue()
        started: set[str] = set()
        succeeded: set[str] = set()
        failed: set[str] = set()
        inflight: dict[str, tuple[int, float, Call]] = {}
        ticket = 0

        def settle(node: str, outcome: Outcome) -> None:
            if finish(node, outcome):
                succeeded.add(node)
            else:
                failed.add(node)

        while True:
            progressed = True
            while progressed and not (stop_on_failure and failed):
                progressed = False
                for node in graph.ready(succeeded, started):
                    if (self._limit is not None and len(inflight) >= self._limit) or (stop_on_failure and failed):
                        break
                    started.add(node)
                    progressed = True
                    action = launch(node)
                    if isinstance(action, Outcome):
                        settle(node, action)
                        continue
                    ticket += 1
                    inflight[node] = (ticket, time.monotonic() + action.timeout, action)
                    threading.Thread(
                        target=self._deliver_one,
                        args=(node, ticket, action, results),
                        name=f"ros-emulator-{node}",
                        daemon=True,
                    ).start()
            if not inflight:
                break
            next_deadline = min(deadline for _, deadline, _ in inflight.values()) + DELIVERER_GRACE
            try:
                node, number, body, error = results.get(timeout=max(0.0, next_deadline - time.monotonic()))
            except queue.Empty:
                now = time.monotonic()
                for late in [n for n, (_, deadline, _) in inflight.items() if deadline + DELIVERER_GRACE <= now]:
                    _, _, call = inflight.pop(late)
                    settle(late, failure(_timeout_reason(call.timeout)))
                continue
            if node not in inflight or inflight[node][0] != number:
                continue
            _, deadline, call = inflight.pop(node)
            if error is None and time.monotonic() > deadline:
                outcome = failure(_timeout_reason(call.timeout))
            elif error is not None:
                outcome = failure(describe_exception(error), sent=not isinstance(error, RequestNotSent))
            else:
                outcome = interpret_response(call.request, body)
            settle(node, outcome)
        return RunResult(succeeded, failed, set(graph.nodes) - started)

    def _deliver_one(self, node: str, number: int, call: Call, results: "queue.Queue[Any]") -> None:
        try:
            body = self._deliver(call.service_token, call.request, call.timeout)
        except BaseException as exc:  # noqa: BLE001 - every provider failure must fail the resource
            results.put((node, number, None, exc))
            return
        results.put((node, number, body, None))
