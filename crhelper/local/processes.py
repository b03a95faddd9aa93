"""One-invocation processes: started in a session of their own, ended with their group, and
dying with the process that started them (FC workers; `cloud-apis.md` §4).

`start_process(..., die_with_parent=True)` in the parent, `die_with_parent()` first thing in the
child. Apart from `crhelper.local.supervisor` (resource processes under a daemon) because every FC
instance imports this as it starts: standard library only, no dataclasses, no pathlib. `find_python`
is the one home of "which interpreter is Python 3.x here" (PATH, pyenv, pyenv's versions folder).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Mapping, MutableMapping, Optional, Sequence

#: The pid of the process a one-invocation child must not outlive (set by `start_process`).
PARENT_PID_ENV = "CRHELPER_PARENT_PID"
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_ORPHAN_POLL_SECONDS = 0.5
#: The checkout (or site-packages) this crhelper was imported from.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))

_File = Optional[Any]  # what subprocess accepts for stdin/stdout/stderr: PIPE, DEVNULL, an fd, a file


def python_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with this crhelper first on PYTHONPATH, so a `python -m crhelper...` child imports the same one."""
    result = dict(env)
    result["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    return result


def start_process(argv: Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None,
                  stdin: _File = subprocess.DEVNULL, stdout: _File = None, stderr: _File = None,
                  die_with_parent: bool = False) -> "subprocess.Popen[bytes]":
    """Start `argv` (no shell) as the leader of a new session and process group, so
    `signal_group(proc.pid, ...)` reaches everything it spawns. With `die_with_parent` the child
    is told this process's pid and, calling `die_with_parent()`, does not outlive it."""
    child_env = dict(os.environ if env is None else env)
    if die_with_parent:
        child_env[PARENT_PID_ENV] = str(os.getpid())
    return subprocess.Popen(list(argv), cwd=cwd, env=child_env, stdin=stdin, stdout=stdout, stderr=stderr,
                            start_new_session=True, close_fds=True)


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to every process of group `pgid`; False when the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _prctl(option: int, value: int) -> bool:
    """Linux `prctl(option, value)`; False where unsupported or refused."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # only on the platform that has prctl

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _set_parent_death_signal() -> bool:
    """Linux: have the kernel SIGKILL this process when its parent dies; False where unsupported."""
    return _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


def become_subreaper() -> bool:
    """Linux: orphaned descendants of this process's children are reparented here (not to PID 1,
    which in a container may never reap them), so the caller can reap them; False where unsupported."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def _watch_parent(parent: int) -> None:
    """Fallback without prctl: poll the parent pid and kill this process's group when orphaned."""
    while os.getppid() == parent:
        time.sleep(_ORPHAN_POLL_SECONDS)
    if os.getpgrp() == os.getpid():  # our own group (start_process starts a session): take our children too
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def die_with_parent(env: MutableMapping[str, str] | None = None) -> None:
    """End this process as soon as the one that started it (`start_process(die_with_parent=True)`)
    is gone, even by SIGKILL: in its own session, nothing else would end it.

    The death signal is set in the child itself (no preexec_fn: unsafe with threads); checking the
    parent pid afterwards closes the race where the parent died before the prctl call. Started any
    other way (by hand: no PARENT_PID_ENV), it leaves the process alone.
    """
    expected = (os.environ if env is None else env).pop(PARENT_PID_ENV, "")
    if not expected.isdigit():
        return
    parent = int(expected)
    armed = _set_parent_death_signal()
    if os.getppid() != parent:  # orphaned already: the signal was armed too late to fire
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), name="orphan-watch", daemon=True).start()


_PROBE = "import sys; print(sys.executable)"


def _real_interpreter(candidate: str) -> str | None:
    """The interpreter `candidate` really runs (a pyenv shim resolves to its version's binary),
    or None when it does not run (a shim for a version that is not active)."""
    try:
        probe = subprocess.run([candidate, "-c", _PROBE], stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    found = probe.stdout.decode("utf-8", "replace").strip()
    return found if probe.returncode == 0 and found and os.path.isfile(found) else None


@functools.lru_cache(maxsize=None)
def find_python(version: str) -> str | None:
    """The interpreter for Python `version` ("3.10"), found the usual ways, in `.ci/run`'s order:
    `python3.10` on PATH, `pyenv which python3.10`, then pyenv's versions folder; None when absent.
    Cached per process: the answer only changes when someone installs a Python."""
    import glob  # here, not at the top: every worker imports this module
    import shutil

    name = f"python{version}"
    on_path = shutil.which(name)
    if on_path is not None:
        found = _real_interpreter(on_path)
        if found is not None:
            return found
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        try:
            which = subprocess.run([pyenv, "which", name], stdin=subprocess.DEVNULL, capture_output=True,
                                   timeout=30, check=False)
        except (OSError, subprocess.SubprocessError):
            which = None
        if which is not None and which.returncode == 0:
            found = _real_interpreter(which.stdout.decode("utf-8", "replace").strip())
            if found is not None:
                return found
    root = os.environ.get("PYENV_ROOT") or os.path.join(os.path.expanduser("~"), ".pyenv")
    for candidate in sorted(glob.glob(os.path.join(glob.escape(root), "versions", f"{glob.escape(version)}.*", "bin", name))):
        if os.access(candidate, os.X_OK):
            return candidate
    return None
