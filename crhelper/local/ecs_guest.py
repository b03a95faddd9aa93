"""What runs "inside" the local ECS instances: real process groups in a sandbox directory each.

When an instance reaches Running its UserData (a base64 shell script, as ECS takes it) runs with
`/bin/sh` in the instance's sandbox, with `ECS_INSTANCE_ID`, `ECS_PRIVATE_IP` and `HOST` (its
127.0.0.N address) in the environment; leaving Running (stop, reboot, delete) ends the instance's
process groups, its Cloud Assistant commands included: SIGTERM then SIGKILL after a grace, SIGKILL
at once when forced. What a command left running in the background (a daemon a service started,
in its own session even) goes too: every process carries its instance's `ECS_INSTANCE_ID`, and a
halt ends the live ones that do (`instance_processes`, read from /proc), as a real instance's
shutdown ends everything on it. Nothing outlives the endpoint: every process is started through a
one-line bootstrap that arms the parent-death signal (`processes.die_with_parent`), from one
long-lived thread (the kernel ties that signal to the thread that forked), and `stop` kills what is
left, the background ones included.
"""

from __future__ import annotations

import base64
import binascii
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, TypeVar

from crhelper.local.ecs_state import DELETED, RUNNING, Instance, Transition
from crhelper.local.processes import PACKAGE_ROOT, signal_group, start_process
from crhelper.logs import get_logger

T = TypeVar("T")
_log = get_logger("local.ecs")

SHELL = "/bin/sh"
USER_DATA_FILE = "user-data.sh"
USER_DATA_LOG = "user-data.log"
#: Arms the parent-death signal, then becomes the command: argv = [root, program, args...].
_BOOTSTRAP = ("import os, sys; sys.path.insert(0, sys.argv[1]); "
              "from crhelper.local.processes import die_with_parent; die_with_parent(); "
              "os.execv(sys.argv[2], sys.argv[2:])")


def decode_user_data(user_data: str) -> bytes:
    """The script in RunInstances' base64 `UserData`; ValueError when it is not base64."""
    try:
        return base64.b64decode(user_data.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError("UserData must be base64") from None


def _carries(pid: int, instance_id: str) -> bool:
    """Whether process `pid` lives and its environment holds the instance's ECS_INSTANCE_ID (a
    zombie's environment reads empty)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return f"ECS_INSTANCE_ID={instance_id}".encode() in environ.read().split(b"\0")
    except OSError:  # gone, or not ours to read
        return False


def instance_processes(instance_id: str) -> list[int]:
    """The live processes (not this one) that carry the instance's ECS_INSTANCE_ID, from /proc
    ([] where there is none)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    return [int(name) for name in entries
            if name.isdigit() and int(name) != os.getpid() and _carries(int(name), instance_id)]


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def guest_env(instance: Instance, sandbox: Path) -> dict[str, str]:
    """A small, clean environment (none of the endpoint's credentials), with this Python on PATH."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)])
    return {"PATH": path, "HOME": str(sandbox), "LANG": os.environ.get("LANG", "C.UTF-8"),
            "ECS_INSTANCE_ID": instance.instance_id, "ECS_PRIVATE_IP": instance.private_ip,
            "HOST": instance.private_ip}


class _Spawner:
    """One long-lived thread that runs every fork, in submission order."""

    def __init__(self) -> None:
        self._jobs: "queue.Queue[tuple[Callable[[], Any], Future[Any]] | None]" = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="ecs-guest-spawner", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            work, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(work())
            except BaseException as exc:  # handed to the waiter
                future.set_exception(exc)

    def submit(self, work: Callable[[], T]) -> "Future[T]":
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the local ECS endpoint is stopping")
            self._jobs.put((work, future))
        return future

    def close(self) -> None:
        """Run what was submitted, then end the thread."""
        with self._lock:
            self._closed = True
            self._jobs.put(None)
        self._thread.join(10.0)


class GuestHost:
    """The instances' processes and sandboxes. `apply` takes the fleet's transitions in order."""

    def __init__(self, root: str | os.PathLike[str] | None = None, *, kill_grace: float = 1.0) -> None:
        self._owned = root is None
        self._root = None if root is None else Path(root)
        self.kill_grace = kill_grace
        self._spawner: _Spawner | None = None
        self._lock = threading.Lock()
        #: instance id -> {"boot" or an invoke id: the process group's leader}
        self._groups: dict[str, dict[str, "subprocess.Popen[bytes]"]] = {}
        #: Every instance a process was started for (whose background processes `stop` ends)
        self._started_for: set[str] = set()
        self._halted: set[int] = set()
        self._reapers: list[threading.Thread] = []

    @property
    def root(self) -> Path:
        """Where the sandboxes live: the given folder, or a temporary one made by `start`."""
        if self._root is None:
            raise RuntimeError("GuestHost is not started")
        return self._root

    def start(self) -> "GuestHost":
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="crhelper-ecs-"))
        self._root.mkdir(parents=True, exist_ok=True)
        self._spawner = _Spawner()
        return self

    def stop(self) -> None:
        """Kill every process group at once and wait for them; remove a sandbox root we made."""
        if self._spawner is not None:
            self._spawner.close()
            self._spawner = None
        with self._lock:
            groups = [proc for procs in self._groups.values() for proc in procs.values()]
            self._groups.clear()
        for proc in groups:
            self._halted.add(proc.pid)
            signal_group(proc.pid, signal.SIGKILL)
        for instance_id in sorted(self._started_for):
            _signal_all(instance_processes(instance_id), signal.SIGKILL)
        for proc in groups:
            _reap(proc, 5.0)
        for reaper in list(self._reapers):
            reaper.join(self.kill_grace + 5.0)
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)

    def sandbox(self, instance_id: str) -> Path:
        path = self.root / instance_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    # ------------------------------------------------------------------ processes
    def spawn(self, instance: Instance, key: str, argv: list[str], *, cwd: Path,
              stdout: Any) -> "subprocess.Popen[bytes]":
        """Start `argv` as a process group of `instance`, from the spawner thread, and track it."""
        return self._spawner_or_fail().submit(lambda: self._fork(instance, key, argv, cwd, stdout)).result()

    def _spawner_or_fail(self) -> _Spawner:
        if self._spawner is None:
            raise RuntimeError("GuestHost is not started")
        return self._spawner

    def _fork(self, instance: Instance, key: str, argv: list[str], cwd: Path, stdout: Any) -> "subprocess.Popen[bytes]":
        """On the spawner thread only."""
        env = guest_env(instance, self.sandbox(instance.instance_id))
        command = [sys.executable, "-I", "-S", "-c", _BOOTSTRAP, PACKAGE_ROOT, *argv]
        proc = start_process(command, cwd=str(cwd), env=env, stdout=stdout,
                             stderr=subprocess.STDOUT, die_with_parent=True)
        with self._lock:
            self._groups.setdefault(instance.instance_id, {})[key] = proc
            self._started_for.add(instance.instance_id)
        return proc

    def forget(self, instance_id: str, key: str) -> None:
        with self._lock:
            self._groups.get(instance_id, {}).pop(key, None)

    def was_halted(self, proc: "subprocess.Popen[bytes]") -> bool:
        """True when the group was ended by a stop, reboot, delete or `stop`, not by itself."""
        return proc.pid in self._halted

    def boot_process(self, instance_id: str) -> "subprocess.Popen[bytes] | None":
        with self._lock:
            return self._groups.get(instance_id, {}).get("boot")

    # ------------------------------------------------------------------ transitions
    def apply(self, transition: Transition) -> None:
        """Boot on reaching Running; halt on leaving it (or on release). Queued in order; returns at once."""
        self._spawner_or_fail().submit(lambda: self._apply_now(transition))

    def _apply_now(self, transition: Transition) -> None:
        if transition.new == RUNNING:
            self._boot(transition.instance)
        elif transition.old == RUNNING or transition.new == DELETED:
            self._halt(transition.instance.instance_id, transition.forced)

    def _boot(self, instance: Instance) -> None:
        if not instance.user_data:
            return
        sandbox = self.sandbox(instance.instance_id)
        try:
            script = decode_user_data(instance.user_data)
        except ValueError:  # the API refuses it; a test helper may not have
            _log.warning("instance %s: UserData is not base64; nothing runs", instance.instance_id)
            return
        (sandbox / USER_DATA_FILE).write_bytes(script)
        with open(sandbox / USER_DATA_LOG, "ab") as log:
            self._fork(instance, "boot", [SHELL, USER_DATA_FILE], sandbox, log)

    def _halt(self, instance_id: str, forced: bool) -> None:
        """Signal the instance's groups, then whatever else carries its ECS_INSTANCE_ID; after the
        grace, SIGKILL what is left of both (only the processes seen now: a reboot's new boot is not
        touched)."""
        with self._lock:
            procs = list(self._groups.pop(instance_id, {}).values())
        sig = signal.SIGKILL if forced else signal.SIGTERM
        for proc in procs:
            self._halted.add(proc.pid)
            signal_group(proc.pid, sig)
        background = instance_processes(instance_id)
        _signal_all(background, sig)
        if procs or background:
            reaper = threading.Thread(target=self._finish, args=(instance_id, procs, background),
                                      name="ecs-guest-reaper", daemon=True)
            self._reapers = [r for r in self._reapers if r.is_alive()] + [reaper]
            reaper.start()

    def _finish(self, instance_id: str, procs: list["subprocess.Popen[bytes]"], background: list[int]) -> None:
        """After the grace, SIGKILL whatever of the groups and of `background` is left; reap the leaders."""
        deadline = time.monotonic() + self.kill_grace

        def left() -> list[int]:
            return [pid for pid in background if _carries(pid, instance_id)]

        while time.monotonic() < deadline and (any(_group_alive(p) for p in procs) or left()):
            time.sleep(0.02)
        for proc in procs:
            signal_group(proc.pid, signal.SIGKILL)
        _signal_all(left(), signal.SIGKILL)
        for proc in procs:
            _reap(proc, 5.0)


def _group_alive(proc: "subprocess.Popen[bytes]") -> bool:
    """Whether the group still has a live member (the leader is polled so it does not linger as a zombie)."""
    proc.poll()
    return signal_group(proc.pid, 0)


def _reap(proc: "subprocess.Popen[bytes]", timeout: float) -> None:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        _log.warning("guest process %d did not exit after SIGKILL", proc.pid)


__all__ = ["GuestHost", "decode_user_data", "guest_env", "instance_processes", "SHELL"]
