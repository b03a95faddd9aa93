"""A tiny guest agent for `Custom::LocalInstance`s with `GuestAgent: true`, in the part of
qemu-guest-agent that GuestAgentLiveness uses: `{"execute": "guest-ping"}` answered `{"return": {}}`.

`python -m handlers.bootgroups.guest_agent --address NAME -- COMMAND...` runs the instance's
command as its child and answers on the abstract Unix socket NAME while the child lives; it ends
with the child's exit status, and passes SIGTERM/SIGINT on to it. Like the agent inside a VM, it
says the guest is alive, not that its application is ready. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import Sequence

PING = {"execute": "guest-ping"}


def abstract(address: str) -> str:
    """The socket address of an agent name: Linux's abstract namespace (no file, no path limit)."""
    return "\0" + address


def ping(address: str, timeout: float) -> tuple[bool, str]:
    """guest-ping the agent at `address` within `timeout` s: (alive, what was seen)."""
    if timeout <= 0:
        return False, "no time left in this attempt's budget to ping the guest agent"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(abstract(address))
            sock.sendall(json.dumps(PING).encode() + b"\n")
            reply = sock.makefile("rb").readline()
    except socket.timeout:
        return False, f"the guest agent did not answer guest-ping within {timeout:.2g} s"
    except OSError as exc:
        return False, f"no guest agent answers ({exc.strerror or exc})"
    try:
        answer = json.loads(reply)
    except ValueError:
        return False, f"the guest agent answered guest-ping with {reply[:60]!r}, not JSON"
    if isinstance(answer, dict) and answer.get("return") == {}:
        return True, "the guest agent answered guest-ping"
    return False, f"the guest agent answered guest-ping with {answer!r}"[:200]


def _serve(server: socket.socket) -> None:
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(2.0)
            try:
                line = conn.makefile("rb").readline()
                request = json.loads(line or b"null")
                if request == PING:
                    reply: dict[str, object] = {"return": {}}
                else:
                    reply = {"error": {"class": "CommandNotFound", "desc": "only guest-ping is supported"}}
                conn.sendall(json.dumps(reply).encode() + b"\n")
            except (OSError, ValueError):
                continue


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m handlers.bootgroups.guest_agent",
                                     description="run COMMAND and answer guest-ping while it lives")
    parser.add_argument("--address", required=True, help="abstract Unix socket name to answer on")
    parser.add_argument("--shell", action="store_true", help="run COMMAND (one string) with /bin/sh -c")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = list(args.command[1:] if args.command[:1] == ["--"] else args.command)
    if not command:
        parser.error("COMMAND is required")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(abstract(args.address))
    server.listen(16)
    threading.Thread(target=_serve, args=(server,), daemon=True).start()
    child = subprocess.Popen(["/bin/sh", "-c", command[0]] if args.shell else command)

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = child.wait()
    server.close()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
