"""The local backend's checks for real: Ping's fallback order as a non-root uid (a forked child in a
network namespace of its own, so its ping_group_range is its own), a watched PortCheck seeing a port
the moment it opens, Ping on loopback saying it tells little, and a crashed instance's exit named in
the start's reason (real processes under the supervisor daemon)."""

from __future__ import annotations

import codecs
import ctypes
import fcntl
import multiprocessing
import os
import pwd
import socket
import struct
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Iterator

import pytest

from bootgroup_fakes import members_of
from crhelper.local.supervisor import SupervisorClient
from crhelper.operations import Budget, Memory
from crhelper.operations.budget import SYSTEM_CLOCK
from handlers.bootgroups import engine, probes
from handlers.bootgroups.backend_local import LOOPBACK_PING, LocalBackend
from handlers.bootgroups.model import ERROR, READY
from handlers.bootgroups.settings import GroupSettings
from handlers.bootgroups.state import InstanceRecord, SqliteGroupStore, default_path

CLONE_NEWNET = 0x40000000
SIOCSIFFLAGS, IFF_UP = 0x8914, 0x1
PR_SET_KEEPCAPS, CAP_NET_RAW, CAPS_V3 = 8, 13, 0x20080522
DGRAM, RAW, TCP = "unprivileged ICMP socket", "raw ICMP socket", "TCP fallback"

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def _as_nobody(ping_range: str, net_raw: bool) -> dict[str, Any]:
    """In the forked child: a network namespace of its own (loopback up, `ping_range` as its
    net.ipv4.ping_group_range), uid/gid nobody, CAP_NET_RAW kept or not; then one ping."""
    codecs.lookup("idna")  # socket's host names need it loaded: nobody may not read this Python's files
    _check(_libc.unshare(CLONE_NEWNET) == 0, "unshare(CLONE_NEWNET)")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", IFF_UP))
    nobody = pwd.getpwnam("nobody")
    with open("/proc/sys/net/ipv4/ping_group_range", "w") as sysctl:
        sysctl.write(ping_range.replace("{gid}", str(nobody.pw_gid)))
    if net_raw:
        _check(_libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) == 0, "prctl(PR_SET_KEEPCAPS)")
    os.setgroups([])
    os.setgid(nobody.pw_gid)
    os.setuid(nobody.pw_uid)
    if net_raw:
        data = (_CapData * 2)()
        data[0].effective = data[0].permitted = 1 << CAP_NET_RAW
        _check(_libc.capset(ctypes.byref(_CapHeader(CAPS_V3, 0)), data) == 0, "capset(CAP_NET_RAW)")
    result = probes.ping("127.0.0.1", 2.0)
    return {"uid": os.getuid(), "gid": os.getgid(), "status": result.status, "message": result.message}


def ping_in_child(ping_range: str, net_raw: bool) -> dict[str, Any]:
    """`_as_nobody` in a forked child of its own (a fork: root's interpreter may not be readable by
    nobody); what it saw, or {"error": ...} naming what could not be arranged."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as child:
        try:
            return child.submit(_as_nobody, ping_range, net_raw).result(timeout=30)
        except OSError as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="network namespaces and ping_group_range are Linux's")
@pytest.mark.parametrize(("ping_range", "net_raw", "mechanism"), [
    ("{gid} {gid}", False, DGRAM),   # the gid may open ICMP datagram sockets: first in the order
    ("{gid} {gid}", True, DGRAM),    # ... even when a raw socket would also be allowed
    ("1 0", True, RAW),              # datagram sockets disabled, CAP_NET_RAW kept: the raw socket
    ("1 0", False, TCP),             # neither: a TCP answer (port 7 refuses: a RST proves the host is up)
], ids=["dgram-allowed", "dgram-before-raw", "raw-with-cap-net-raw", "tcp-answer"])
def test_ping_tries_icmp_datagram_then_raw_then_a_tcp_answer_as_a_non_root_uid(
        ping_range: str, net_raw: bool, mechanism: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: the child drops to uid/gid nobody in a network namespace of its own")
    seen = ping_in_child(ping_range, net_raw)
    if "error" in seen:
        if "unshare" in seen["error"] or "capset" in seen["error"] or "ping_group_range" in seen["error"]:
            pytest.skip(f"cannot arrange this setting here: {seen['error']}")
        raise AssertionError(seen["error"])
    nobody = pwd.getpwnam("nobody")
    assert (seen["uid"], seen["gid"]) == (nobody.pw_uid, nobody.pw_gid) != (0, 0)
    assert seen["status"] == READY and mechanism in seen["message"], seen
    if mechanism == TCP:  # it names why ICMP was not used, in the order tried
        assert "TCP port 7 refused (RST)" in seen["message"]
        assert seen["message"].index(DGRAM) < seen["message"].index(RAW), seen["message"]
    else:
        assert seen["message"].startswith("ICMP echo reply from 127.0.0.1"), seen


# --- watched checks --------------------------------------------------------------------------------


def _listen_later(host: str, port: int, after: float, opened: list[float]) -> threading.Thread:
    def serve() -> None:
        time.sleep(after)
        server = socket.create_server((host, port))
        opened.append(time.monotonic())
        time.sleep(0.2)
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_watched_port_check_answers_the_moment_the_port_opens() -> None:
    port, opened = _free_port(), list[float]()
    thread = _listen_later("127.0.0.1", port, 0.15, opened)
    began = time.monotonic()
    result = probes.watch(lambda left: probes.tcp_probe("127.0.0.1", port, left), 5.0, 2.0, 0.005)
    seen = time.monotonic()
    thread.join()
    assert result.status == READY and opened, result
    assert seen - opened[0] < 0.05 and seen - began < 1.0  # not at the end of the 2 s window


def test_a_watch_gives_the_last_refusal_once_its_window_is_over() -> None:
    port = _free_port()
    tries: list[float] = []

    def attempt(left: float) -> Any:
        tries.append(left)
        return probes.tcp_probe("127.0.0.1", port, left)

    began = time.monotonic()
    result = probes.watch(attempt, 5.0, 0.1, 0.01)
    took = time.monotonic() - began
    assert result.status == ERROR and result.message == f"connection refused by 127.0.0.1:{port}"
    assert 0.1 <= took < 0.5 and 5 <= len(tries) <= 12 and 4.9 < tries[0] <= 5.0 and tries[-1] < tries[0]
    # the window never outlasts the attempt's budget
    began = time.monotonic()
    assert probes.watch(attempt, 0.05, 10.0, 0.01).status == ERROR and time.monotonic() - began < 0.5


@pytest.fixture
def store() -> SqliteGroupStore:
    return SqliteGroupStore(default_path())


def test_the_local_backend_watches_port_checks_and_says_a_loopback_ping_tells_little(store: SqliteGroupStore) -> None:
    port, opened = _free_port(), list[float]()
    store.put_instance(InstanceRecord("i-w", ["true"], host="127.0.0.1", ports=[port]))
    backend = LocalBackend(store)
    thread = _listen_later("127.0.0.1", port, 0.1, opened)
    result = backend.watch_check("PortCheck", "i-w", {"port": str(port)}, 5.0, 3.0)
    seen = time.monotonic()
    assert result.status == READY and seen - opened[0] < 0.05, result
    pinged = backend.check("Ping", "i-w", {}, 1.0)
    assert pinged.status == READY and pinged.message.endswith(LOOPBACK_PING)
    thread.join()
    # what cannot change is answered at once, not watched
    began = time.monotonic()
    no_agent = backend.watch_check("GuestAgentLiveness", "i-w", {}, 5.0, 3.0)
    assert no_agent.status == ERROR and "runs no guest agent" in no_agent.message and time.monotonic() - began < 0.5


# --- a crash during a start ----------------------------------------------------------------------


@pytest.fixture
def local(store: SqliteGroupStore) -> Iterator[LocalBackend]:
    env = {"CRHELPER_SUPERVISOR_GRACE": "0.5", "CRHELPER_SUPERVISOR_LINGER": "0.5", "CRHELPER_SUPERVISOR_POLL": "0.05"}
    client = SupervisorClient(env={**os.environ, **env})
    yield LocalBackend(store, client)
    client.stop_all(grace=0.2)


def _start(local: LocalBackend, members: Any, settings: GroupSettings) -> engine.StepOutcome:
    run = engine.begin("start", "g", members, settings=settings, now=SYSTEM_CLOCK.now(), poll_interval=0.1)
    now = SYSTEM_CLOCK.now()
    step = Budget(clock=SYSTEM_CLOCK, step_started=now, step_seconds=30.0, deadline=now + 60,
                  memory=Memory(), invocation_left=lambda: 60.0)
    return engine.advance(run, local, step)


@pytest.mark.slow
def test_an_instance_whose_process_exits_during_the_start_is_named_with_its_exit(local: LocalBackend) -> None:
    port = _free_port()
    local.store.put_instance(InstanceRecord("i-crash", ["sleep 0.3; exit 3"], shell=True, host="127.0.0.1", ports=[port]))
    local.store.put_instance(InstanceRecord("i-killed", ["kill -9 $$"], shell=True, host="127.0.0.1", ports=[port]))
    settings = GroupSettings(initial_delay=0, timeout=1, max_retries=4)
    rule = {"Type": "PortCheck", "Details": {"port": port}}
    outcome = _start(local, members_of({"Members": [{"Instance": "i-crash", "BootOrder": 0, "ReadinessRules": [rule]}]}),
                     settings)
    reason = outcome.reason or ""
    assert outcome.finished and not outcome.ok
    assert "Instance 'i-crash' is not Ready after 5 attempt(s): instance 'i-crash' is Stopped, not Running" in reason
    assert "its process exited with code 3; its log: " in reason and "i-crash" in reason.rpartition("log: ")[2]
    # inside an Instance Group: the group's reason names the instance that gave up and how it ended
    group = {"InstanceGroup": {"Name": "app", "Instances": ["i-killed"]}, "BootOrder": 0, "ReadinessRules": [rule]}
    outcome = _start(local, members_of({"Members": [group]}), settings)
    assert not outcome.ok and "instance 'i-killed' gave up: instance 'i-killed' is Stopped" in (outcome.reason or "")
    assert "its process was killed by signal 9; its log: " in (outcome.reason or "")

