"""Who holds a claim: an identity for this process that another process can test for death.

A claim whose holder died must not block its redelivery until a lease lapses. The identity names
the machine (host name and kernel boot id), the pid namespace, the pid and the process start time,
so a process on the same machine and namespace can tell at once that a holder is gone, even when
its pid was reused. Holders elsewhere (another FC instance, another host) are never declared dead
here: for them only the lease decides.
"""

from __future__ import annotations

import os
import socket
from typing import Callable

_cached: tuple[int, str] | None = None


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat from field 3 on (state, ppid, ...); [] where unknown."""
    stat = _read(f"/proc/{pid}/stat")
    # The command name (field 2) is in parentheses and may contain spaces: split after the last ')'.
    return stat.rpartition(")")[2].split() if stat else []


def start_ticks(pid: int) -> str:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); "" where unknown."""
    fields = stat_fields(pid)
    return fields[19] if len(fields) > 19 else ""


def process_alive(pid: int, ticks: str = "") -> bool:
    """Whether `pid` runs (a zombie counts as gone) and, given `ticks` (its start time), is still that process."""
    fields_ = stat_fields(pid)
    if fields_:
        if fields_[0] in ("Z", "X"):
            return False
        return not ticks or len(fields_) < 20 or fields_[19] == ticks
    return not os.path.isdir("/proc/self") and signal_reaches(os.kill, pid)


def signal_reaches(probe: Callable[[int, int], None], target: int) -> bool:
    """Where there is no /proc: signal 0 (`os.kill`, `os.killpg`) tells whether the target exists."""
    try:
        probe(target, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _machine() -> str:
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = ""
    return f"{socket.gethostname()}/{boot}/{pidns}"


def current() -> str:
    """This process's identity, `<machine>|<pid>|<start ticks>`; recomputed after a fork."""
    global _cached
    pid = os.getpid()
    if _cached is None or _cached[0] != pid:
        _cached = (pid, f"{_machine()}|{pid}|{start_ticks(pid)}")
    return _cached[1]


def is_dead(identity: str) -> bool:
    """True only when `identity` is provably a process of this machine and namespace that is gone."""
    machine, sep, rest = identity.rpartition("|")
    machine, sep2, pid_text = machine.rpartition("|")
    if not sep or not sep2 or not pid_text.isdigit():
        return False
    if machine != current().rsplit("|", 2)[0]:
        return False  # another machine or namespace: only its lease can tell
    pid = int(pid_text)
    if pid == os.getpid():
        return rest != start_ticks(pid)
    if os.path.isdir("/proc/self"):
        fields = stat_fields(pid)
        if not fields or fields[0] in ("Z", "X"):
            return True  # gone, or a zombie its parent has not reaped yet
        started = fields[19] if len(fields) > 19 else ""
        return bool(rest) and bool(started) and started != rest  # the pid now belongs to a later process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by someone else
        return False
    return False
