"""Cloud Assistant for the local ECS instances: RunCommand really runs the command.

Each (invocation, instance) runs its script with `/bin/sh` as a process group of that instance
(`ecs_guest`), in `WorkingDir` (relative to the instance's sandbox; the sandbox when empty):
Pending → Running → Success (exit 0), Failed (`ExitCodeNonzero`), Timeout (`ExecutionTimeout`:
the group is killed), Terminated (the instance stopped under it). Output is stdout and stderr
together; the first 24 KB are kept and `Dropped` counts the rest.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from pathlib import Path

from crhelper.local.ecs_guest import SHELL, GuestHost
from crhelper.local.ecs_state import (
    INV_FAILED, INV_RUNNING, INV_SUCCESS, INV_TERMINATED, INV_TIMEOUT, MAX_OUTPUT_BYTES, Fleet,
    Invocation, InvocationTarget,
)
from crhelper.local.processes import signal_group

#: How long the output is still read after the shell exits (a background child may hold the pipe).
_DRAIN_SECONDS = 0.05


def resolve_working_dir(sandbox: Path, working_dir: str) -> Path:
    """`WorkingDir` inside the instance: relative to its sandbox, which is also the default."""
    return sandbox / working_dir if working_dir else sandbox


class _Output:
    """The first MAX_OUTPUT_BYTES of a stream and the count of the rest."""

    def __init__(self) -> None:
        self.kept = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = MAX_OUTPUT_BYTES - len(self.kept)
        self.kept += chunk[:max(room, 0)]
        self.dropped += max(0, len(chunk) - max(room, 0))


def _collect(proc: "subprocess.Popen[bytes]", deadline: float, output: _Output) -> bool:
    """Read the output until the shell exits (then what is already there) or the deadline passes.
    True when the deadline passed first."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    exited_at: float | None = None
    while True:
        now = time.monotonic()
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > _DRAIN_SECONDS:
            return False
        if exited_at is None and now >= deadline:
            return True
        ready, _, _ = select.select([fd], [], [], min(max(deadline - now, 0.0), 0.05))
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:  # every writer closed: only the exit is left to wait for
                try:
                    proc.wait(max(deadline - time.monotonic(), 0.0))
                except subprocess.TimeoutExpired:
                    return True
                return False
            output.add(chunk)


class CommandRunner:
    """Runs each target of an invocation on a thread of its own; `wait_idle` for tests and `stop`."""

    def __init__(self, fleet: Fleet, guest: GuestHost) -> None:
        self._fleet = fleet
        self._guest = guest
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def launch(self, invocation: Invocation, targets: list[InvocationTarget]) -> None:
        for target in targets:
            thread = threading.Thread(target=self._run, args=(invocation, target), daemon=True,
                                      name=f"ecs-command-{invocation.invoke_id}-{target.instance_id}")
            with self._lock:
                self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()

    def wait_idle(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in threads)

    def _finish(self, target: InvocationTarget, status: str, exit_code: int | None, output: _Output,
                error_code: str = "", error_info: str = "") -> None:
        with self._fleet.lock:
            target.status, target.exit_code = status, exit_code
            target.output, target.dropped = bytes(output.kept), output.dropped
            target.error_code, target.error_info = error_code, error_info
            target.finish_time = self._fleet.clock()

    def _run(self, invocation: Invocation, target: InvocationTarget) -> None:
        output = _Output()
        key = f"{invocation.invoke_id}"
        with self._fleet.lock:
            instance = self._fleet.find(target.instance_id)
            if instance is None:
                self._finish(target, INV_TERMINATED, None, output, "InstanceReleased", "the instance was deleted")
                return
        sandbox = self._guest.sandbox(instance.instance_id)
        cwd = resolve_working_dir(sandbox, invocation.working_dir)
        if not cwd.is_dir():
            self._finish(target, INV_FAILED, None, output, "InvalidWorkingDirectory",
                         f"WorkingDir {invocation.working_dir!r} does not exist on the instance")
            return
        script = sandbox / "commands" / f"{invocation.invoke_id}.sh"
        script.parent.mkdir(exist_ok=True)
        script.write_text(target.script, encoding="utf-8")
        try:
            proc = self._guest.spawn(instance, key, [SHELL, str(script)], cwd=cwd, stdout=subprocess.PIPE)
        except (OSError, RuntimeError) as exc:
            self._finish(target, INV_FAILED, None, output, "ClientNotResponse", f"the command could not start: {exc}")
            return
        with self._fleet.lock:
            target.status, target.start_time = INV_RUNNING, self._fleet.clock()
        try:
            timed_out = _collect(proc, time.monotonic() + invocation.timeout, output)
            if timed_out:
                signal_group(proc.pid, signal.SIGKILL)
            code = proc.wait()
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
            self._guest.forget(instance.instance_id, key)
        if timed_out:
            self._finish(target, INV_TIMEOUT, code, output, "ExecutionTimeout",
                         f"the command ran longer than Timeout={invocation.timeout} s and was killed")
        elif self._guest.was_halted(proc):
            self._finish(target, INV_TERMINATED, code, output, "InstanceRestarted",
                         "the instance stopped while the command ran")
        elif code == 0:
            self._finish(target, INV_SUCCESS, 0, output)
        else:
            self._finish(target, INV_FAILED, code, output, "ExitCodeNonzero",
                         f"the command exited with code {code}")


__all__ = ["CommandRunner", "resolve_working_dir"]
