"""Helpers of the process supervisor tests: child programs, 127.0.0.N addresses, daemon lookup."""

from __future__ import annotations

import os
import random
import socket
import sys
from pathlib import Path

from crhelper.local.supervisor import process_alive

#: A child that ignores SIGTERM, says so, and waits to be killed.
IGNORES_TERM = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('ignoring TERM', flush=True); time.sleep(60)")
#: A child that starts a grandchild in its own process group, prints the grandchild's pid, and waits.
WITH_GRANDCHILD = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                   "print(p.pid, flush=True); time.sleep(60)")
SLEEPS = "import time; time.sleep(60)"


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-u", "-c", code, *args]


def free_address() -> tuple[str, int]:
    """A 127.0.0.N other than .1 and a port free on it (every 127/8 address routes to lo)."""
    host = f"127.0.0.{random.randint(2, 250)}"
    with socket.socket() as probe:
        probe.bind((host, 0))
        return host, int(probe.getsockname()[1])


def daemon_pids(home: Path) -> list[int]:
    """Live supervisor daemons of `home`, found by their command line (not by asking them)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"crhelper.local.supervisor_daemon" in argv and os.fsencode(str(home)) in argv and process_alive(int(entry)):
            found.append(int(entry))
    return found
