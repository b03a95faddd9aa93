"""Delayed, retried execution of async invocations (FC's at-least-once async queue).

The dispatcher only handles request ids and timing; what an attempt does is the `execute`
callback, and the final verdict goes to `settle`. Failed attempts are retried up to
`max_retries` times (FC's maxAsyncRetryAttempts, default 3; a function's async configuration may
set its own per request) with exponential back-off.

Waking is targeted: a job that is due wakes one idle worker (the others keep sleeping), and only the
worker waiting for the earliest delayed job sleeps with a timeout, so a burst of 50 invocations on 64
workers costs 50 wake-ups, not 50 x 64 (each worker re-taking the lock to find nothing to do).
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Callable

_log = logging.getLogger(__name__)


class AsyncDispatcher:
    def __init__(self, execute: Callable[[str, int], bool], settle: Callable[[str, bool], None], *,
                 workers: int = 2, max_retries: int = 3, retry_delay: float = 1.0) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        if max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        if retry_delay < 0:
            raise ValueError("retry_delay must be 0 or more seconds")
        self._execute = execute
        self._settle = settle
        self._max_retries = max_retries
        self._retry_delay = retry_delay
        lock = threading.RLock()
        self._cond = threading.Condition(lock)  # wait_idle's waiters (and the state's lock)
        self._work = threading.Condition(lock)  # idle workers
        self._timer_due: float | None = None  # the due time a worker sleeps until, if any
        self._heap: list[tuple[float, int, str, int]] = []  # (due, seq, request id, attempts done)
        self._seq = itertools.count()
        self._running = 0
        self._retries: dict[str, int] = {}  # request id -> its own maxAsyncRetryAttempts
        self._stopping = False
        self._threads = [threading.Thread(target=self._loop, name=f"fc-async-{i}", daemon=True)
                         for i in range(workers)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, request_id: str, delay: float, max_retries: int | None = None) -> None:
        if max_retries is not None:
            with self._cond:
                self._retries[request_id] = max_retries
        self._push(request_id, 0, delay)

    def _push(self, request_id: str, attempts_done: int, delay: float) -> None:
        with self._cond:
            self._push_locked(time.monotonic() + delay, request_id, attempts_done)

    def _push_locked(self, due: float, request_id: str, attempts_done: int) -> None:
        """Queue a job and wake one worker: it takes the job if due, else re-times its sleep."""
        heapq.heappush(self._heap, (due, next(self._seq), request_id, attempts_done))
        self._work.notify()

    def _next(self) -> tuple[str, int] | None:
        with self._cond:
            while not self._stopping:
                now = time.monotonic()
                if self._heap and self._heap[0][0] <= now:
                    _, _, request_id, attempts_done = heapq.heappop(self._heap)
                    self._running += 1
                    if self._heap:
                        self._work.notify()  # the next job may be due as well, or need a timer
                    return request_id, attempts_done
                due = self._heap[0][0] if self._heap else None
                if due is not None and (self._timer_due is None or due < self._timer_due):
                    self._timer_due = due  # this worker sleeps until the earliest due time
                    self._work.wait(due - now)
                    if self._timer_due == due:
                        self._timer_due = None
                else:
                    self._work.wait()  # woken by a push, by a worker taking a job, or by stop
            return None

    def _loop(self) -> None:
        while (job := self._next()) is not None:
            request_id, attempts_done = job
            try:
                ok = self._execute(request_id, attempts_done + 1)
            except Exception:  # noqa: BLE001 - a broken attempt must not kill the worker thread
                _log.exception("async attempt %d of %s crashed", attempts_done + 1, request_id)
                ok = False
            with self._cond:
                allowed = self._retries.get(request_id, self._max_retries)
            retry = not ok and attempts_done < allowed
            if not retry:
                with self._cond:
                    self._retries.pop(request_id, None)
                self._settle(request_id, ok)
            with self._cond:
                self._running -= 1
                if retry:
                    due = time.monotonic() + self._retry_delay * (2 ** attempts_done)
                    self._push_locked(due, request_id, attempts_done + 1)
                self._cond.notify_all()  # wait_idle's waiters only (workers wait on `_work`)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """True once nothing is queued or running; False if `timeout` passes first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._heap and self._running == 0, timeout)

    def stop(self, join_timeout: float = 10.0) -> list[str]:
        """Stop taking work, wait for running attempts, and return ids that never settled."""
        with self._cond:
            self._stopping = True
            self._work.notify_all()
            self._cond.notify_all()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(join_timeout)
        with self._cond:
            left = [request_id for _, _, request_id, _ in self._heap]
            self._heap.clear()
        return left
