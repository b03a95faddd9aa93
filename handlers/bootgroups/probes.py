"""Reachability probes every backend whose checks run from the provider's own host shares: a TCP
connect (PortCheck) and a ping that needs no privileges.

Ping (`cloud-apis.md` §4): ICMP needs a raw socket (root or CAP_NET_RAW) or a datagram ICMP socket
for a gid inside `net.ipv4.ping_group_range` (disabled, `1 0`, on most hosts and in containers).
So `ping` tries, in order: an unprivileged ICMP datagram socket, a raw ICMP socket, and then TCP
connects to the given ports and port 7, where a connection refused (a TCP RST) proves the host
answered as well as an accepted one. It never runs a system `ping` binary. The result's message
says which mechanism ran. Stdlib only, blocking, bounded by the timeout given. On a loopback address
(the local backend's instances) a ping always answers: see `backend_local`.

`watch` repeats a probe within a window (the poll interval a check would otherwise sleep), so a
port is seen the moment it opens rather than at the next poll.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from typing import Callable, Iterable

from .backends import CheckResult
from .model import ERROR, READY

#: The TCP port a ping falls back to when no other is given (echo: usually closed, so a RST answers).
ECHO_PORT = 7
_ICMP_ECHO_REQUEST, _ICMP_ECHO_REPLY = 8, 0
#: errnos that mean "the host did not answer" rather than "it answered with a refusal".
_UNREACHABLE = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ETIMEDOUT}


def tcp_probe(host: str, port: int, timeout: float) -> CheckResult:
    """Ready when `host:port` accepts a TCP connection within `timeout` seconds; Error otherwise,
    naming what was seen (refused, no answer, unreachable)."""
    if timeout <= 0:
        return CheckResult(ERROR, f"TCP connect to {host}:{port} not tried: no time left in the attempt's budget")
    began = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except ConnectionRefusedError:
        return CheckResult(ERROR, f"connection refused by {host}:{port}")
    except socket.timeout:
        return CheckResult(ERROR, f"no answer from {host}:{port} within {timeout:g} s")
    except OSError as exc:
        return CheckResult(ERROR, f"TCP connect to {host}:{port} failed: {exc.strerror or exc}")
    return CheckResult(READY, f"TCP connect to {host}:{port} accepted in {_ms(began)} ms")


def ping(host: str, timeout: float, ports: Iterable[int] = ()) -> CheckResult:
    """Ready when `host` answers within `timeout` seconds: an ICMP echo reply where this process may
    send ICMP, else a TCP answer (accepted or refused) on one of `ports`, then port 7."""
    if timeout <= 0:
        return CheckResult(ERROR, f"ping of {host} not tried: no time left in the attempt's budget")
    deadline = time.monotonic() + timeout
    refused: list[str] = []
    for kind, label in ((socket.SOCK_DGRAM, "unprivileged ICMP socket"), (socket.SOCK_RAW, "raw ICMP socket")):
        try:
            sock = socket.socket(socket.AF_INET, kind, socket.IPPROTO_ICMP)
        except OSError as exc:  # EACCES/EPERM: not allowed for this uid/gid
            refused.append(f"{label}: {exc.strerror or exc}")
            continue
        with sock:
            return _icmp_echo(sock, host, timeout, deadline, raw=kind == socket.SOCK_RAW, label=label)
    return _tcp_reachability(host, [*ports, ECHO_PORT], deadline, "; ".join(refused))


def _icmp_echo(sock: socket.socket, host: str, timeout: float, deadline: float, *, raw: bool,
               label: str) -> CheckResult:
    ident, began = os.getpid() & 0xFFFF, time.monotonic()
    payload = struct.pack("!d", began)
    header = struct.pack("!BBHHH", _ICMP_ECHO_REQUEST, 0, 0, ident, 1)
    packet = struct.pack("!BBHHH", _ICMP_ECHO_REQUEST, 0, _checksum(header + payload), ident, 1) + payload
    try:
        sock.sendto(packet, (host, 0))
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            data, source = sock.recvfrom(1024)
            if raw:  # a raw socket sees the IP header and every ICMP packet the host receives
                data = data[(data[0] & 0x0F) * 4:]
                if source[0] != host or data[4:6] != packet[4:6]:
                    continue
            if data[:1] == bytes([_ICMP_ECHO_REPLY]) and data[8:] == payload:
                return CheckResult(READY, f"ICMP echo reply from {host} in {_ms(began)} ms ({label})")
    except socket.timeout:
        pass
    except OSError as exc:
        return CheckResult(ERROR, f"ping of {host} failed ({label}): {exc.strerror or exc}")
    return CheckResult(ERROR, f"no ICMP echo reply from {host} within {timeout:g} s ({label})")


def _tcp_reachability(host: str, ports: list[int], deadline: float, why: str) -> CheckResult:
    """A TCP answer, accepted or refused, proves the host is up; silence or unreachable does not."""
    seen: list[str] = []
    for port in dict.fromkeys(ports):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        began = time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=left):
                answer = "accepted"
        except ConnectionRefusedError:
            answer = "refused (RST)"
        except socket.timeout:
            seen.append(f"port {port}: no answer")
            continue
        except OSError as exc:
            seen.append(f"port {port}: {exc.strerror or exc}")
            if exc.errno in _UNREACHABLE:
                break
            continue
        return CheckResult(READY, f"{host} is reachable: TCP port {port} {answer} in {_ms(began)} ms "
                                  f"(TCP fallback; ICMP not permitted here: {why})")
    return CheckResult(ERROR, f"{host} did not answer within the budget: {'; '.join(seen) or 'no time left'} "
                              f"(TCP fallback; ICMP not permitted here: {why})")


def watch(attempt: Callable[[float], CheckResult], timeout: float, window: float, every: float) -> CheckResult:
    """`attempt(seconds left of timeout)` until it answers Ready, again every `every` s for up to
    `window` s (at most `timeout`): a port that opens within the window is seen the moment it does,
    not at the next poll. The last answer when none was Ready. One evaluation, however many tries."""
    began = time.monotonic()
    window = min(window, timeout)
    while True:
        result = attempt(max(0.0, timeout - (time.monotonic() - began)))
        if result.status == READY:
            return result
        left = window - (time.monotonic() - began)
        if left <= 0:
            return result
        time.sleep(min(every, left))


def _checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of an ICMP message."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _ms(began: float) -> str:
    return f"{(time.monotonic() - began) * 1000:.1f}"
