"""``crhelper router serve --engine haproxy``: a real HAProxy as the data plane, programmed from
the same route store and service registry the built-in proxy follows.

HAProxy runs in master-worker mode (``-W``), started through a shim that arms the parent-death
signal first (``crhelper.local.processes``), so it ends with the command even on SIGKILL. A
follower thread polls the store's change counter and the registry file; HTTP changes go through
the runtime API (``set server``, ``prepare/add/commit map``) with no reload, so established
connections are untouched; new TCP ports, certificates, or more slots than declared are a
seamless reload (SIGUSR2 to the master: the listeners pass to the new worker, the old one
finishes its connections). The configuration it writes is in ``engine_haproxy_config``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

from crhelper.local.processes import python_env, signal_group, start_process
from crhelper.logs import get_logger
from crhelper.paths import write_atomically

from . import engine_haproxy_config as C
from .matching import NOT_FOUND_BODY, UNAVAILABLE_BODY, Backend
from .registry import ServiceRegistry
from .repository import RouteRepository

log = get_logger("routes.haproxy")

MIN_VERSION = (2, 5)  # set-var-fmt; the versioned map commands came in 2.4
#: Map payloads are sent in pieces below HAProxy's CLI buffer (tune.bufsize, 16 KiB by default).
PAYLOAD_BYTES = 8000
#: Arms PR_SET_PDEATHSIG, which survives exec, then becomes HAProxy's master.
_SHIM = ("import os, sys; from crhelper.local.processes import die_with_parent; die_with_parent(); "
         "os.execv(sys.argv[1], sys.argv[1:])")


RUNTIME_PREFIX = "crh-haproxy-"
OWNER_FILE = "owner.pid"


def remove_stale_runtime_dirs() -> None:
    """Remove the runtime directories (configuration, certificates, sockets) of engines whose
    process is gone: one killed by SIGKILL could not remove its own (HAProxy died with it)."""
    for path in Path(tempfile.gettempdir()).glob(RUNTIME_PREFIX + "*"):
        try:
            if path.stat().st_uid != os.getuid():
                continue
            os.kill(int((path / OWNER_FILE).read_text()), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (OSError, ValueError):  # not ours to judge (no owner file yet, no permission)
            continue


class HAProxyError(RuntimeError):
    """HAProxy is missing, too old, refused its configuration or did not come up."""


def find_haproxy(command: str = "haproxy") -> str:
    """The executable's path and a version check; the error says what to install."""
    path = shutil.which(command)
    if path is None:
        raise HAProxyError(f"{command!r} not found on PATH: install HAProxy {MIN_VERSION[0]}.{MIN_VERSION[1]} or later "
                           "(Debian/Ubuntu: apt-get install haproxy) or pass --haproxy PATH")
    out = subprocess.run([path, "-v"], capture_output=True, text=True, timeout=10).stdout
    found = re.search(r"version (\d+)\.(\d+)", out)
    if found is None or (int(found[1]), int(found[2])) < MIN_VERSION:
        raise HAProxyError(f"{path}: HAProxy {MIN_VERSION[0]}.{MIN_VERSION[1]} or later is needed, "
                           f"found {found[0] if found else 'an unknown version'}")
    return path


class RuntimeAPI:
    """HAProxy's runtime API on its admin socket: one connection per exchange."""

    def __init__(self, path: str, timeout: float = 5.0) -> None:
        self.path, self.timeout = path, timeout

    def send(self, text: str) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.timeout)
            sock.connect(self.path)
            sock.sendall(text.encode() + (b"" if text.endswith("\n") else b"\n"))
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def commands(self, commands: Sequence[str]) -> list[str]:
        """Run commands (``;``-joined, in batches); the non-empty answers, which are errors here."""
        problems = []
        for start in range(0, len(commands), 50):
            answer = self.send(";".join(commands[start:start + 50]))
            problems += [line for line in answer.splitlines() if line.strip()]
        return problems

    def worker_pid(self) -> int | None:
        try:
            found = re.search(r"^Pid: (\d+)$", self.send("show info"), re.M)
        except OSError:
            return None
        return int(found[1]) if found else None

    def replace_map(self, path: str, entries: dict[str, str]) -> None:
        """Atomically swap a map's contents (prepare, add in pieces, commit)."""
        answer = self.send(f"prepare map {path}")
        found = re.search(r"New version created: (\d+)", answer)
        if found is None:
            raise HAProxyError(f"prepare map {os.path.basename(path)}: {answer.strip()}")
        version = found[1]
        lines = C.map_text(entries).splitlines(keepends=True)
        while lines:
            piece: list[str] = []
            while lines and sum(map(len, piece)) + len(lines[0]) < PAYLOAD_BYTES:
                piece.append(lines.pop(0))
            if not piece:  # a single line over the limit: cannot be a Host or path anyway
                lines.pop(0)
                continue
            answer = self.send(f"add map @{version} {path} <<\n" + "".join(piece) + "\n")
            if answer.strip():
                raise HAProxyError(f"add map {os.path.basename(path)}: {answer.strip()}")
        answer = self.send(f"commit map @{version} {path}")
        if answer.strip():
            raise HAProxyError(f"commit map {os.path.basename(path)}: {answer.strip()}")


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def can_listen(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def resolve(services: dict[str, list[Backend]]) -> dict[str, list[tuple[Backend, C.Addr]]]:
    """Backends with the IP address HAProxy's ``set server addr`` needs; a name that does not
    resolve is left out, with a warning."""
    out: dict[str, list[tuple[Backend, C.Addr]]] = {}
    for service, backends in services.items():
        for backend in backends:
            host, _, port = backend.addr.rpartition(":")
            host = host.strip("[]")
            try:
                info = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
            except (OSError, ValueError) as exc:
                log.warning("backend %s of %s not resolved: %s", backend.addr, service, type(exc).__name__)
                continue
            out.setdefault(service, []).append((backend, (str(info[0][4][0]), int(port))))
    return out


class HAProxyEngine:
    """One HAProxy (master and workers) following the route store; ``start``/``stop`` or ``with``."""

    def __init__(self, repo: RouteRepository, registry: ServiceRegistry, cookie_key: bytes, *,
                 host: str = "127.0.0.1", http_port: int = 0, https_port: int | None = None,
                 tcp_host: str = "127.0.0.1", poll_interval: float = 0.2, haproxy: str = "haproxy",
                 slots: int = 16, servers: int = 8, reload_timeout: float = 10.0) -> None:
        self.repo, self.registry = repo, registry
        self.host, self.tcp_host = host, tcp_host
        self._wanted_ports = (http_port, https_port)
        self.http_port, self.https_port = http_port, https_port
        self.poll_interval, self.reload_timeout = poll_interval, reload_timeout
        self._cookie_key = C.dynamic_cookie_key(cookie_key)
        self._command = self._binary = haproxy
        self.slots = C.SlotAllocator(per_kind=slots)
        self.per_backend = servers
        self.applied: C.Desired | None = None
        self.reloads = 0
        self._seen: tuple[int, object] | None = None
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir = ""
        self._api: RuntimeAPI | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Write the configuration, start HAProxy and wait until it answers; then follow the store.
        Call it from a thread that lives as long as the engine (the death signal is tied to it)."""
        binary = self._binary = find_haproxy(self._command)
        remove_stale_runtime_dirs()
        self._dir = tempfile.mkdtemp(prefix=RUNTIME_PREFIX)  # private (0700), short for the socket path
        Path(self._dir, OWNER_FILE).write_text(str(os.getpid()))
        self._api = RuntimeAPI(os.path.join(self._dir, "admin.sock"))
        http_port, https_port = self._wanted_ports
        self.http_port = http_port or free_port(self.host)
        if https_port is not None:
            self.https_port = https_port or free_port(self.host)
        for status, reason, body in ((404, "Not Found", NOT_FOUND_BODY),
                                     (503, "Service Unavailable", UNAVAILABLE_BODY)):
            Path(self._dir, f"{status}.http").write_text(C.error_response(status, reason, body))
        try:
            with self._lock:
                seen = (self.repo.version(), self.registry.load())  # read first: a later change is seen next poll
                desired = self._desired()
                self._write(desired)  # not checked first: HAProxy refuses a bad file itself (log_tail says why)
                log_file = open(os.path.join(self._dir, "haproxy.log"), "ab")
                with log_file:
                    self._proc = start_process([sys.executable, "-c", _SHIM, binary, "-W", "-f", self._config_path],
                                               env=python_env(os.environ), stdout=log_file, stderr=log_file,
                                               die_with_parent=True)
                self._wait_for_worker(None)
                self.applied, self._seen = desired, seen
        except BaseException:
            self.stop()
            raise
        self._thread = threading.Thread(target=self._follow, name="crhelper-haproxy", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop following, end HAProxy (its whole group), remove the runtime directory."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # the master stops its workers
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            signal_group(proc.pid, signal.SIGKILL)  # anything left in its group
            proc.wait()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = ""

    def __enter__(self) -> "HAProxyEngine":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def worker_pid(self) -> int | None:
        """The pid of the worker serving now (it changes with every reload)."""
        return self._api.worker_pid() if self._api is not None else None

    def log_tail(self, lines: int = 20) -> str:
        """The end of HAProxy's own output (alerts on a failed start or reload)."""
        try:
            text = Path(self._dir, "haproxy.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # --- following the store -----------------------------------------------------------------

    def _follow(self) -> None:
        while not self._stop.wait(self.poll_interval):
            try:
                self.refresh()
            except Exception:  # keep serving what was applied last
                log.exception("haproxy engine refresh failed")

    def refresh(self) -> None:
        """Apply the store's and the registry's changes now (the follower calls it every poll)."""
        with self._lock:
            if self._api is None or self._stop.is_set():
                return
            seen = (self.repo.version(), self.registry.load())
            if seen == self._seen:
                return
            desired = self._desired()
            applied = self.applied
            if applied is None or desired.shape() != applied.shape():
                self._write(desired)
                try:
                    self._reload()
                except HAProxyError as exc:  # the running worker keeps the last good state
                    log.error("haproxy reload failed, still serving the previous routes: %s", exc)
                    self._seen = seen  # not retried until the store or the registry changes again
                    return
            else:
                self._apply_live(applied, desired)
            self.applied = desired
            self._seen = seen

    def _desired(self) -> C.Desired:
        services = self.registry.load()
        routes = self.repo.list_routes()
        listening = set(self.applied.tcp_ports) if self.applied is not None else set()
        ports = [r.port for r in routes if r.type == "tcp" and r.port > 0]
        allowed = [p for p in ports if p in listening or self._port_free(p)]
        desired = C.plan(routes, resolve(services), self.slots, per_backend=self.per_backend,
                         tcp_ports=allowed, previous=self.applied)
        self.per_backend = desired.per_backend
        return desired

    def _port_free(self, port: int) -> bool:
        if port in (self.http_port, self.https_port) or not can_listen(self.tcp_host, port):
            log.error("tcp route port %d not served: the address is in use", port)
            return False
        return True

    def _apply_live(self, applied: C.Desired, desired: C.Desired) -> None:
        """Runtime API only: servers first (a new slot is ready before a map points at it), then
        the maps, paths before the host maps."""
        assert self._api is not None
        commands: list[str] = []
        for backend in sorted(set(applied.servers) | set(desired.servers)):
            commands += C.server_commands(backend, applied.servers.get(backend, []),
                                          desired.servers.get(backend, []), desired.per_backend)
        problems = self._api.commands(commands) if commands else []
        for problem in problems:
            log.warning("haproxy runtime API: %s", problem)
        if desired.paths != applied.paths:
            self._api.replace_map(self._path("paths.map"), desired.paths)
        if desired.wildcards != applied.wildcards:
            self._api.replace_map(self._path("wild.map"), desired.wildcards)
        if desired.hosts != applied.hosts:
            self._api.replace_map(self._path("hosts.map"), desired.hosts)
        self._write(desired)  # a later reload or restart starts from here

    def _reload(self) -> None:
        """Seamless reload: check the new files, SIGUSR2 the master, wait for the new worker."""
        assert self._proc is not None and self._api is not None
        self._check(self._binary)
        old = self._api.worker_pid()
        self._proc.send_signal(signal.SIGUSR2)
        self._wait_for_worker(old)
        self.reloads += 1

    # --- files and processes -----------------------------------------------------------------

    @property
    def _config_path(self) -> str:
        return self._path("haproxy.cfg")

    def _path(self, name: str) -> str:
        return os.path.join(self._dir, name)

    def _write(self, desired: C.Desired) -> None:
        listen = C.Listen(self._dir, self.host, self.http_port, self.https_port, self.tcp_host, self._cookie_key)
        cert_dir = self._path("certs")
        files = {"haproxy.cfg": C.render(desired, listen), "hosts.map": C.map_text(desired.hosts),
                 "wild.map": C.map_text(desired.wildcards),
                 "paths.map": C.map_text(desired.paths), "certs.list": C.crt_list(desired, cert_dir)}
        if desired.certificates:
            os.makedirs(cert_dir, mode=0o700, exist_ok=True)
            for cert in desired.certificates:
                _write_private(os.path.join(cert_dir, f"{cert.id}.pem"), cert.pem)
        for name, text in files.items():
            _write_private(self._path(name), text)

    def _check(self, binary: str) -> None:
        done = subprocess.run([binary, "-c", "-q", "-f", self._config_path], capture_output=True, text=True,
                              timeout=30)
        if done.returncode != 0:
            raise HAProxyError("haproxy refused the generated configuration: "
                               + (done.stderr or done.stdout).strip()[-2000:])

    def _wait_for_worker(self, old: int | None) -> None:
        assert self._api is not None and self._proc is not None
        deadline = time.monotonic() + self.reload_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise HAProxyError(f"haproxy exited ({self._proc.returncode}): {self.log_tail()}")
            pid = self._api.worker_pid()
            if pid is not None and pid != old:
                return
            time.sleep(0.02)
        raise HAProxyError(f"haproxy worker not ready after {self.reload_timeout:g} s: {self.log_tail()}")


def _write_private(path: str, text: str) -> None:
    """Write atomically, readable by this user only (certificate keys, the cookie key's hash)."""
    write_atomically(Path(path), text.encode("utf-8"))
