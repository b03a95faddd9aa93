"""Function Compute instances as FC keeps them: a warm instance serves the next invocation.

An instance is one worker process (`crhelper.local.fc_worker`) for one function version (one
`FunctionSpec` and qualifier). It serves one invocation at a time (FC's default instance
concurrency); a cold start happens only when no instance of that version is idle; an idle instance
expires after `idle_seconds`. A timeout or a crash ends the instance (its whole process group), so
the next invocation starts cold; an instance of a replaced spec is never reused; `close` ends all.

Each invocation's part of the instance's log stream ends with a marker line the worker writes after
the job (a random token per job), so the lines of one invocation are told from the next one's.
"""
from __future__ import annotations

import json
import queue
import secrets
import threading
import time
from dataclasses import dataclass
from typing import IO, Any, Callable, Protocol

from crhelper.local.fc_registry import FunctionSpec

#: Seconds to wait for the rest of a log stream once the outcome is in (or the instance is dead).
DRAIN_SECONDS = 5.0
_MARKER_PREFIX = "\x1ecrhelper-fc-invoke-end "


class WorkerProcess(Protocol):
    """A started worker: its pipes, its process group, its exit code."""

    pid: int
    job: IO[bytes]
    result: IO[bytes]
    log: IO[bytes]

    def kill(self) -> None:
        """SIGKILL the worker's process group."""

    def exit_code(self, timeout: float) -> int | None:
        """The exit code once it has ended (reaped), or None if not within `timeout`."""


class PoolClosed(RuntimeError):
    """The endpoint is stopping: no instance starts any more."""


@dataclass
class InstanceOutcome:
    """What one invocation on an instance produced: `raw` is the worker's outcome line (None: the
    instance died or timed out first), `log` its part of the log stream."""

    raw: bytes | None
    log: bytes
    timed_out: bool
    exit_code: int | None


class _Sink:
    def __init__(self, marker: bytes, emit: Callable[[bytes], None] | None) -> None:
        self.marker = marker
        self.emit = emit
        self.lines: list[bytes] = []
        self.done = threading.Event()

    def add(self, line: bytes) -> None:
        self.lines.append(line)
        if self.emit is not None:
            self.emit(line)


class Instance:
    """One live worker process serving invocations of one function version, one at a time."""

    def __init__(self, process: WorkerProcess, spec: FunctionSpec, qualifier: str | None) -> None:
        self.process = process
        self.spec = spec
        self.qualifier = qualifier
        self.invocations = 0
        self.last_used = time.monotonic()
        self._alive = True
        self._lock = threading.Lock()
        self._sink: _Sink | None = None
        self._results: "queue.Queue[bytes | None]" = queue.Queue()
        threading.Thread(target=self._read_results, name=f"fc-instance-{process.pid}-result", daemon=True).start()
        threading.Thread(target=self._read_log, name=f"fc-instance-{process.pid}-log", daemon=True).start()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self._alive

    def _read_results(self) -> None:
        with self.process.result as stream:
            for line in iter(stream.readline, b""):
                self._results.put(line)
        self._alive = False  # ended (a crash between invocations too): never handed out again
        self._results.put(None)
        self.process.exit_code(DRAIN_SECONDS)  # reaped: no zombie left behind by an expired instance

    def _read_log(self) -> None:
        with self.process.log as stream:
            for line in iter(stream.readline, b""):
                with self._lock:
                    sink = self._sink
                if sink is None:
                    continue  # written between invocations (a handler's leftover thread): FC drops it too
                if line.endswith(sink.marker):
                    head = line[:-len(sink.marker)]
                    if head:
                        sink.add(head)
                    sink.done.set()
                else:
                    sink.add(line)
        with self._lock:
            self._alive = False
            sink = self._sink
        if sink is not None:
            sink.done.set()

    def invoke(self, job: dict[str, Any], deadline: float, emit: Callable[[bytes], None] | None) -> InstanceOutcome:
        """Run one job; at `deadline` (epoch seconds) the instance is killed. Not re-entrant."""
        marker = _MARKER_PREFIX + secrets.token_hex(12)
        sink = _Sink(marker.encode("utf-8") + b"\n", emit)
        with self._lock:
            self._sink = sink
        self.invocations += 1
        try:
            self.process.job.write(json.dumps({**job, "log_marker": marker}).encode("utf-8") + b"\n")
            self.process.job.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # it died before reading its job: the result pipe's end says so
        raw: bytes | None = None
        timed_out = False
        try:
            raw = self._results.get(timeout=max(0.0, deadline - time.time()))
        except queue.Empty:
            timed_out = True
        exit_code = None
        if raw is None:  # timed out or died: the instance ends, with everything it spawned
            self.kill()
            exit_code = self.process.exit_code(DRAIN_SECONDS)
        sink.done.wait(DRAIN_SECONDS)  # after a death, a descendant that left the group may hold the pipe
        with self._lock:
            self._sink = None
        self.last_used = time.monotonic()
        return InstanceOutcome(raw, b"".join(list(sink.lines)), timed_out, exit_code)

    def kill(self) -> None:
        self._alive = False
        self.process.kill()
        try:
            self.process.job.close()
        except OSError:
            pass


#: Starts a worker process for an invocation's function version (a cold start).
StartInstance = Callable[[Any], Instance]


class InstancePool:
    """Idle instances per function version, handed out one invocation at a time."""

    def __init__(self, start: StartInstance, idle_seconds: float) -> None:
        self._start = start
        self._idle_seconds = idle_seconds
        self._lock = threading.Condition()
        self._idle: dict[tuple[str, str, str | None], list[Instance]] = {}
        self._busy: set[Instance] = set()
        self._current: dict[tuple[str, str, str | None], FunctionSpec] = {}
        self._closed = False
        self._sweeper: threading.Thread | None = None
        self.cold_starts = 0

    @staticmethod
    def _key(spec: FunctionSpec, qualifier: str | None) -> tuple[str, str, str | None]:
        return (spec.service, spec.function, qualifier or None)

    def acquire(self, request: Any) -> tuple[Instance, bool]:
        """(an instance for `request.spec` and `request.qualifier`, whether it was a cold start)."""
        spec: FunctionSpec = request.spec
        key = self._key(spec, request.qualifier)
        stale: list[Instance] = []
        with self._lock:
            if self._closed:
                raise PoolClosed("the endpoint is stopping")
            if self._current.get(key) != spec:  # a new version: its predecessors' idle instances go
                self._current[key] = spec
                stale = [i for i in self._idle.get(key, []) if i.spec != spec]
                self._idle[key] = [i for i in self._idle.get(key, []) if i.spec == spec]
            idle = self._idle.get(key, [])
            while idle:
                instance = idle.pop()  # the most recently used: the others may expire
                if instance.alive:
                    self._busy.add(instance)
                    break
                stale.append(instance)
            else:
                instance = None
        for old in stale:
            old.kill()
        if instance is not None:
            return instance, False
        instance = self._start(request)
        with self._lock:
            closed = self._closed
            if not closed:
                self._busy.add(instance)
                self.cold_starts += 1
        if closed:
            instance.kill()
            raise PoolClosed("the endpoint is stopping")
        return instance, True

    def release(self, instance: Instance) -> None:
        """Back to the idle list when it may serve again, else ended."""
        key = self._key(instance.spec, instance.qualifier)
        with self._lock:
            self._busy.discard(instance)
            keep = instance.alive and not self._closed and self._current.get(key) == instance.spec
            if keep:
                instance.last_used = time.monotonic()
                self._idle.setdefault(key, []).append(instance)
                if self._sweeper is None:
                    self._sweeper = threading.Thread(target=self._sweep, name="fc-instance-expiry", daemon=True)
                    self._sweeper.start()
                self._lock.notify_all()
        if not keep:
            instance.kill()

    def _sweep(self) -> None:
        """End instances idle for `idle_seconds`, checking as the earliest one comes due."""
        with self._lock:
            while not self._closed:
                now = time.monotonic()
                expired = [i for idle in self._idle.values() for i in idle
                           if now - i.last_used >= self._idle_seconds or not i.alive]
                for key, idle in self._idle.items():
                    self._idle[key] = [i for i in idle if i not in expired]
                if expired:
                    self._lock.release()
                    try:
                        for instance in expired:
                            instance.kill()
                    finally:
                        self._lock.acquire()
                    continue
                due = [i.last_used + self._idle_seconds for idle in self._idle.values() for i in idle]
                self._lock.wait(max(0.05, min(due) - now) if due else None)

    def idle_count(self) -> int:
        with self._lock:
            return sum(len(idle) for idle in self._idle.values())

    def close(self) -> None:
        """Refuse new instances and end every instance, idle or busy."""
        with self._lock:
            self._closed = True
            instances = [i for idle in self._idle.values() for i in idle] + list(self._busy)
            self._idle.clear()
            self._lock.notify_all()
        for instance in instances:
            instance.kill()
